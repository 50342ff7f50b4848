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
