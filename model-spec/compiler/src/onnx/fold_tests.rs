//! Constant folding at import: a node whose inputs are all constants
//! becomes a constant holding its output.

use super::bad_input_tests::{node, tiny_model, weight, Dim::Fixed};
use super::{import_bytes, ImportOptions};
use crate::ir::ValueKind;

#[test]
fn a_node_of_constants_becomes_a_constant() {
    // y = x * sigmoid(w): the Sigmoid of an initializer is evaluated at import.
    let bytes = tiny_model(
        &[Fixed(1), Fixed(4)],
        vec![
            node("Sigmoid", "gate", &["w"], &["s"], vec![]),
            node("Mul", "scale", &["x", "s"], &["y"], vec![]),
        ],
        vec![weight("w", &[1, 4])],
    );
    let imported = import_bytes(&bytes, "fold.onnx", &ImportOptions::default()).unwrap();
    let graph = &imported.graph;
    let kinds: Vec<&str> = graph.nodes.iter().map(|n| n.op.kind()).collect();
    assert_eq!(kinds, ["Mul"], "{kinds:?}");
    let gate = graph.nodes[0]
        .inputs
        .iter()
        .map(|&v| graph.value(v))
        .find(|v| v.is_constant())
        .expect("the folded gate is a constant input of the Mul");
    let ValueKind::Constant(data) = &gate.kind else {
        unreachable!()
    };
    // weight() fills element i with (i % 7) * 0.1.
    let want: Vec<f32> = (0..4)
        .map(|i| 1.0 / (1.0 + (-(i as f32) * 0.1).exp()))
        .collect();
    assert_eq!(gate.shape, [1, 4]);
    for (g, w) in data.iter().zip(&want) {
        assert!((g - w).abs() < 1e-6, "{data:?} vs {want:?}");
    }
}

/// The dynamo exporter's size arithmetic on a dynamic batch: `Shape(src)[0:1]
/// → Squeeze → Mul 3 → Reshape [-1] → Concat [16]` as the target of a Reshape
/// of x `[batch, 3, 4, 4]`. With `src` the graph input it folds at the
/// protobuf level once the batch is known; with `src` an activation (Relu of
/// x) onnx-ir folds it but drops the scalar's Reshape to [-1], and Concat
/// takes the scalar as a one-element vector.
#[test]
fn sizes_computed_from_a_dynamic_batch_fold_for_the_batch() {
    use super::bad_input_tests::Dim::Symbolic;
    use onnx_ir::{AttributeProto, AttributeType};
    let int64s = |name: &str, dims: &[i64], values: &[i64]| onnx_ir::TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 7,
        int64_data: values.to_vec(),
        ..Default::default()
    };
    let int = |name: &str, i: i64| AttributeProto {
        name: name.into(),
        type_: AttributeType::INT.into(),
        i,
        ..Default::default()
    };
    for src in ["x", "r"] {
        let bytes = tiny_model(
            &[Symbolic("batch"), Fixed(3), Fixed(4), Fixed(4)],
            vec![
                node("Relu", "relu", &["x"], &["r"], vec![]),
                node(
                    "Shape",
                    "size",
                    &[src],
                    &["s"],
                    vec![int("start", 0), int("end", 1)],
                ),
                node("Squeeze", "scalar", &["s"], &["n"], vec![]),
                node("Mul", "rows", &["n", "three"], &["m"], vec![]),
                node("Reshape", "vector", &["m", "minus_one"], &["v"], vec![]),
                node(
                    "Concat",
                    "target",
                    &["v", "sixteen"],
                    &["t"],
                    vec![int("axis", 0)],
                ),
                node("Reshape", "flat", &["r", "t"], &["y"], vec![]),
            ],
            vec![
                int64s("three", &[], &[3]),
                int64s("minus_one", &[1], &[-1]),
                int64s("sixteen", &[1], &[16]),
            ],
        );
        let options = ImportOptions {
            batch: Some(2),
            ..Default::default()
        };
        let imported = import_bytes(&bytes, "sizes.onnx", &options)
            .unwrap_or_else(|e| panic!("sizes from {src}: {e}"));
        let graph = &imported.graph;
        assert_eq!(
            graph.value(graph.outputs[0]).shape,
            [6, 16],
            "sizes from {src}"
        );
    }
}
