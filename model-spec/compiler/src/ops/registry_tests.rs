//! The registry keeps its promises: every op it claims is accepted by the
//! importer (each example imports to the declared shape and runs on the CPU
//! reference), every onnx-ir node type and ONNX op belongs to one entry,
//! and the lists derived from it agree.

use super::{for_node_type, for_onnx_op, supported_list, supported_onnx_ops, REGISTRY};
use crate::onnx::{import_bytes, ImportError, ImportOptions};
use crate::reference::{run, RunOptions};

#[test]
fn every_claimed_op_has_an_example() {
    for op in supported_onnx_ops() {
        let def = for_onnx_op(op).unwrap_or_else(|| panic!("no entry imports {op}"));
        assert!(
            def.examples.iter().any(|e| e.op_type == op),
            "{op}: its module has no example of it"
        );
    }
    for def in REGISTRY {
        for example in def.examples {
            assert!(
                def.onnx.contains(&example.op_type),
                "an example of {} sits in the entry for {:?}",
                example.op_type,
                def.onnx
            );
        }
    }
}

#[test]
fn every_example_imports_to_its_shape_and_runs() {
    for def in REGISTRY {
        for (i, example) in def.examples.iter().enumerate() {
            let label = format!("{} example {i} (opset {})", example.op_type, example.opset);
            let imported = import_bytes(&example.model(), &label, &ImportOptions::default())
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            let graph = &imported.graph;
            let kinds: Vec<&str> = graph.nodes.iter().map(|n| n.op.kind()).collect();
            assert_eq!(kinds, example.ir, "{label}");
            assert_eq!(graph.outputs.len(), 1, "{label}");
            assert_eq!(
                graph.value(graph.outputs[0]).shape,
                example.output,
                "{label}"
            );
            let inputs: Vec<Vec<f32>> = graph
                .inputs
                .iter()
                .map(|&id| {
                    (0..graph.value(id).numel())
                        .map(|k| (k % 13) as f32 * 0.25 - 1.5)
                        .collect()
                })
                .collect();
            let feeds: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
            let outputs = run(graph, &feeds, &RunOptions::default())
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(
                outputs[0].len(),
                example.output.iter().product::<usize>(),
                "{label}"
            );
        }
    }
}

#[test]
fn each_node_type_and_onnx_op_belongs_to_one_entry() {
    let mut node_types = Vec::new();
    let mut ops = Vec::new();
    for def in REGISTRY {
        for t in def.node_types {
            assert!(!node_types.contains(t), "{t} is registered twice");
            node_types.push(t.clone());
            assert_eq!(for_node_type(t).map(|d| d.onnx), Some(def.onnx), "{t}");
        }
        for op in def.onnx {
            assert!(!ops.contains(op), "{op} is registered twice");
            assert!(
                !super::FOLDED_BY_ONNX_IR.contains(op),
                "{op} is also folded"
            );
            ops.push(*op);
        }
    }
}

#[test]
fn the_supported_list_is_the_registrys() {
    let ops = supported_onnx_ops();
    assert_eq!(
        ops,
        [
            "Abs",
            "Add",
            "And",
            "Attention",
            "AveragePool",
            "BatchNormalization",
            "Cast",
            "Ceil",
            "Clip",
            "Concat",
            "ConstantOfShape",
            "Conv",
            "Cos",
            "DepthToSpace",
            "Div",
            "Dropout",
            "Einsum",
            "Elu",
            "Equal",
            "Erf",
            "Exp",
            "Expand",
            "Flatten",
            "Floor",
            "Gather",
            "GatherND",
            "Gelu",
            "Gemm",
            "GlobalAveragePool",
            "GlobalMaxPool",
            "Greater",
            "GreaterOrEqual",
            "GroupNormalization",
            "HardSigmoid",
            "HardSwish",
            "Hardmax",
            "Identity",
            "InstanceNormalization",
            "LayerNormalization",
            "LeakyRelu",
            "Less",
            "LessOrEqual",
            "Log",
            "LogSoftmax",
            "LpNormalization",
            "MatMul",
            "Max",
            "MaxPool",
            "MeanVarianceNormalization",
            "Min",
            "Mish",
            "Mod",
            "Mul",
            "Neg",
            "Not",
            "Or",
            "PRelu",
            "Pad",
            "Pow",
            "Range",
            "Reciprocal",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceMax",
            "ReduceMean",
            "ReduceMin",
            "ReduceProd",
            "ReduceSum",
            "ReduceSumSquare",
            "Relu",
            "Reshape",
            "Resize",
            "ScatterND",
            "Selu",
            "Shape",
            "Sigmoid",
            "Sign",
            "Sin",
            "Size",
            "Slice",
            "Softmax",
            "Softplus",
            "Softsign",
            "Split",
            "Sqrt",
            "Squeeze",
            "Sub",
            "Sum",
            "Tanh",
            "Tile",
            "Transpose",
            "Unsqueeze",
            "Where",
            "Xor",
        ]
    );
    assert_eq!(supported_list(), ops.join(", "));
    for op in &ops {
        assert!(super::accepts_onnx_op(op), "{op}");
    }
    assert!(!super::accepts_onnx_op("Acosh"));
}

#[test]
fn an_unsupported_op_error_lists_the_registry() {
    let unsupported = super::example::Example {
        op_type: "TfIdfVectorizer",
        opset: 13,
        inputs: &[super::example::Input::Data(&[2])],
        attrs: &[],
        output: &[2],
        ir: &[],
    };
    let err = import_bytes(
        &unsupported.model(),
        "tfidf.onnx",
        &ImportOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, ImportError::UnsupportedOps { .. }), "{err}");
    assert!(err.to_string().ends_with(supported_list()), "{err}");
}
