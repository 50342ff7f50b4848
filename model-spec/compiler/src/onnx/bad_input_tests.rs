//! Bad models: each gives a typed error naming what is wrong, never a panic.

use super::{import_bytes, ImportError, ImportOptions};
use onnx_ir::{
    AttributeProto, AttributeType, Message, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};

pub(super) enum Dim {
    Fixed(i64),
    Symbolic(&'static str),
}

pub(super) fn value_info(name: &str, dims: &[Dim]) -> ValueInfoProto {
    let mut vi = ValueInfoProto {
        name: name.into(),
        ..Default::default()
    };
    let tensor = vi.type_.mut_or_insert_default().mut_tensor_type();
    tensor.elem_type = 1;
    let shape = tensor.shape.mut_or_insert_default();
    for d in dims {
        shape.dim.push(Default::default());
        let dim = shape.dim.last_mut().unwrap();
        match d {
            Dim::Fixed(v) => dim.set_dim_value(*v),
            Dim::Symbolic(p) => dim.set_dim_param((*p).into()),
        }
    }
    vi
}

fn ints(name: &str, values: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        type_: AttributeType::INTS.into(),
        ints: values.to_vec(),
        ..Default::default()
    }
}

pub(super) fn node(
    op: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: name.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

pub(super) fn weight(name: &str, dims: &[i64]) -> TensorProto {
    let n: i64 = dims.iter().product();
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 1,
        raw_data: (0..n)
            .flat_map(|i| ((i % 7) as f32 * 0.1).to_le_bytes())
            .collect::<Vec<u8>>()
            .into(),
        ..Default::default()
    }
}

/// x [batch,3,8,8] → Conv(3→4, 3×3, pad 1) → Relu → y.
pub(super) fn tiny_model(
    input_dims: &[Dim],
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
) -> Vec<u8> {
    let mut model = ModelProto {
        ir_version: 8,
        ..Default::default()
    };
    model.opset_import.push(Default::default());
    model.opset_import[0].version = 17;
    let graph = model.graph.mut_or_insert_default();
    graph.name = "tiny".into();
    graph.input.push(value_info("x", input_dims));
    graph.output.push(value_info("y", &[]));
    graph.node = nodes;
    graph.initializer = initializers;
    model.write_to_bytes().unwrap()
}

fn conv_relu(input: &[Dim]) -> Vec<u8> {
    tiny_model(
        input,
        vec![
            node(
                "Conv",
                "conv",
                &["x", "w"],
                &["c"],
                vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1, 1, 1, 1])],
            ),
            node("Relu", "relu", &["c"], &["y"], vec![]),
        ],
        vec![weight("w", &[4, 3, 3, 3])],
    )
}

fn import(bytes: &[u8], batch: Option<usize>) -> Result<super::Imported, ImportError> {
    import_bytes(
        bytes,
        "test.onnx",
        &ImportOptions {
            batch,
            constant_inputs: Vec::new(),
        },
    )
}

use Dim::{Fixed, Symbolic};

#[test]
fn a_good_tiny_model_imports_with_its_batch() {
    let bytes = conv_relu(&[Symbolic("batch"), Fixed(3), Fixed(8), Fixed(8)]);
    let imported = import(&bytes, Some(2)).expect("valid model");
    assert_eq!(imported.batch, Some(2));
    let y = imported.graph.outputs[0];
    assert_eq!(imported.graph.value(y).shape, vec![2, 4, 8, 8]);
}

#[test]
fn empty_file() {
    let err = import(&[], None).unwrap_err();
    assert!(matches!(err, ImportError::Empty { .. }), "{err}");
}

#[test]
fn truncated_file() {
    let bytes = conv_relu(&[Fixed(1), Fixed(3), Fixed(8), Fixed(8)]);
    for cut in [1, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
        let err = import(&bytes[..cut], None).unwrap_err();
        assert!(
            matches!(
                err,
                ImportError::Malformed { .. } | ImportError::BadNodeInput { .. }
            ),
            "cut {cut}: {err}"
        );
    }
}

#[test]
fn random_bytes() {
    let bytes: Vec<u8> = (0..4096u64)
        .map(|i| (crate::zoo::splitmix64(i) >> 13) as u8)
        .collect();
    let err = import(&bytes, None).unwrap_err();
    assert!(matches!(err, ImportError::Malformed { .. }), "{err}");
}

#[test]
fn every_unsupported_op_is_listed_with_its_count_and_first_node() {
    let bytes = tiny_model(
        &[Fixed(1), Fixed(3), Fixed(8), Fixed(8)],
        vec![
            node("TfIdfVectorizer", "first_tfidf", &["x"], &["a"], vec![]),
            node("Relu", "relu", &["a"], &["b"], vec![]),
            node("TfIdfVectorizer", "second_tfidf", &["b"], &["c"], vec![]),
            NodeProto {
                domain: "com.example".into(),
                ..node("Frob", "frob", &["c"], &["y"], vec![])
            },
        ],
        vec![],
    );
    let err = import(&bytes, None).unwrap_err();
    let text = err.to_string();
    let ImportError::UnsupportedOps { ops, .. } = &err else {
        panic!("expected UnsupportedOps, got {text}");
    };
    assert_eq!(ops.len(), 2, "{text}");
    assert_eq!(
        (ops[0].op.as_str(), ops[0].count, ops[0].first_node.as_str()),
        ("TfIdfVectorizer", 2, "first_tfidf"),
        "{text}"
    );
    assert!(
        text.starts_with("the model uses 2 unsupported operators: "),
        "{text}"
    );
    assert!(
        text.contains("TfIdfVectorizer (2 nodes, first 'first_tfidf'); com.example::Frob (1 node, first 'frob')"),
        "{text}"
    );
}

#[test]
fn missing_initializer_is_named() {
    let bytes = tiny_model(
        &[Fixed(1), Fixed(3), Fixed(8), Fixed(8)],
        vec![node(
            "Conv",
            "conv",
            &["x", "w_missing"],
            &["y"],
            vec![ints("kernel_shape", &[3, 3])],
        )],
        vec![],
    );
    let err = import(&bytes, None).unwrap_err();
    assert!(matches!(err, ImportError::BadNodeInput { .. }), "{err}");
    assert!(
        err.to_string().contains("'w_missing'") && err.to_string().contains("'conv'"),
        "{err}"
    );
}

#[test]
fn wrong_input_rank() {
    let bytes = conv_relu(&[Fixed(1), Fixed(3), Fixed(8)]);
    let err = import(&bytes, None).unwrap_err();
    assert!(
        err.to_string().contains("rank 4") && err.to_string().contains("got rank 3"),
        "{err}"
    );
}

#[test]
fn zero_and_negative_dims() {
    for d in [0, -3] {
        let bytes = conv_relu(&[Fixed(1), Fixed(3), Fixed(d), Fixed(8)]);
        let err = import(&bytes, None).unwrap_err();
        assert!(matches!(err, ImportError::BadInput { .. }), "{err}");
        assert!(err.to_string().contains("dimension 2"), "{err}");
    }
}

#[test]
fn absurdly_large_dims() {
    let bytes = conv_relu(&[Fixed(1), Fixed(3), Fixed(1 << 40), Fixed(1 << 40)]);
    let err = import(&bytes, None).unwrap_err();
    assert!(matches!(err, ImportError::BadInput { .. }), "{err}");
    let big_weight = tiny_model(
        &[Fixed(1), Fixed(3), Fixed(8), Fixed(8)],
        vec![node(
            "Conv",
            "conv",
            &["x", "w"],
            &["y"],
            vec![ints("kernel_shape", &[3, 3])],
        )],
        vec![TensorProto {
            name: "w".into(),
            dims: vec![1 << 31, 1 << 31, 3, 3],
            data_type: 1,
            ..Default::default()
        }],
    );
    let err = import(&big_weight, None).unwrap_err();
    assert!(matches!(err, ImportError::BadInitializer { .. }), "{err}");
}

#[test]
fn cycle() {
    let bytes = tiny_model(
        &[Fixed(1), Fixed(3), Fixed(8), Fixed(8)],
        vec![
            node("Add", "a", &["x", "b_out"], &["a_out"], vec![]),
            node("Relu", "b", &["a_out"], &["b_out"], vec![]),
            node("Relu", "c", &["b_out"], &["y"], vec![]),
        ],
        vec![],
    );
    let err = import(&bytes, None).unwrap_err();
    assert!(matches!(err, ImportError::Malformed { .. }), "{err}");
    assert!(err.to_string().contains("topologically sorted"), "{err}");
}

#[test]
fn batch_override_without_symbolic_batch() {
    let bytes = conv_relu(&[Fixed(1), Fixed(3), Fixed(8), Fixed(8)]);
    let err = import(&bytes, Some(8)).unwrap_err();
    assert!(
        matches!(err, ImportError::BatchNotSymbolic { requested: 8, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("x [1, 3, 8, 8]"), "{err}");
    // Asking for the batch the model already has is not an error.
    assert!(import(&bytes, Some(1)).is_ok());
}

#[test]
fn symbolic_non_batch_dim() {
    let bytes = conv_relu(&[Fixed(1), Fixed(3), Symbolic("height"), Fixed(8)]);
    let err = import(&bytes, None).unwrap_err();
    assert!(err.to_string().contains("height"), "{err}");
}

#[test]
fn integer_input() {
    let mut model =
        ModelProto::parse_from_bytes(&conv_relu(&[Fixed(1), Fixed(3), Fixed(8), Fixed(8)]))
            .unwrap();
    model.graph.mut_or_insert_default().input[0]
        .type_
        .mut_or_insert_default()
        .mut_tensor_type()
        .elem_type = 7;
    let err = import(&model.write_to_bytes().unwrap(), None).unwrap_err();
    assert!(matches!(err, ImportError::BadInput { .. }), "{err}");
}

#[test]
fn unsupported_attribute_is_named() {
    let mut model = ModelProto::parse_from_bytes(&tiny_model(
        &[Fixed(1), Fixed(3), Fixed(8), Fixed(8)],
        vec![node("Clip", "clip", &["x", "lo"], &["y"], vec![])],
        vec![],
    ))
    .unwrap();
    // `lo` is a run-time input: Clip bounds must be constants.
    model
        .graph
        .mut_or_insert_default()
        .input
        .push(value_info("lo", &[]));
    let err = import(&model.write_to_bytes().unwrap(), None).unwrap_err();
    assert!(
        matches!(err, ImportError::UnsupportedAttribute { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("min") && err.to_string().contains("constant"),
        "{err}"
    );
}
