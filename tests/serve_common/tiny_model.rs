//! A tiny image classifier as ONNX, for fast server tests: input `x`
//! `[batch, 3, 8, 8]` → Conv 3→4 (3×3, pad 1, bias) → Relu →
//! GlobalAveragePool → Flatten → Gemm 4→10 (`transB`) → output `y`
//! `[batch, 10]`. Weights are a fixed pseudo-random fill.

use onnx_ir::{
    AttributeProto, AttributeType, GraphProto, Message, ModelProto, NodeProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};

const ONNX_FLOAT: i32 = 1;

fn value_info(name: &str, dims: &[Option<i64>]) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    for dim in dims {
        shape.dim.push(Default::default());
        let d = shape.dim.last_mut().unwrap();
        match dim {
            Some(v) => d.set_dim_value(*v),
            None => d.set_dim_param("batch".into()),
        }
    }
    let mut ty = TypeProto::new();
    let tensor = ty.mut_tensor_type();
    tensor.elem_type = ONNX_FLOAT;
    tensor.shape = Some(shape).into();
    let mut info = ValueInfoProto::new();
    info.name = name.into();
    info.type_ = Some(ty).into();
    info
}

fn initializer(name: &str, dims: &[i64], seed: u64) -> TensorProto {
    let n: i64 = dims.iter().product();
    let values = aotune_compiler::zoo::fill(seed, 0.0, 0.5, n as usize);
    let mut t = TensorProto::new();
    t.name = name.into();
    t.data_type = ONNX_FLOAT;
    t.dims = dims.to_vec();
    t.raw_data = values
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect::<Vec<u8>>()
        .into();
    t
}

fn ints(name: &str, values: &[i64]) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.into();
    a.type_ = AttributeType::INTS.into();
    a.ints = values.to_vec();
    a
}

fn int(name: &str, value: i64) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.into();
    a.type_ = AttributeType::INT.into();
    a.i = value;
    a
}

fn node(op: &str, inputs: &[&str], output: &str, attributes: Vec<AttributeProto>) -> NodeProto {
    let mut n = NodeProto::new();
    n.op_type = op.into();
    n.name = output.into();
    n.input = inputs.iter().map(|s| s.to_string()).collect();
    n.output = vec![output.into()];
    n.attribute = attributes;
    n
}

/// The model's bytes.
pub fn tiny_model() -> Vec<u8> {
    let mut g = GraphProto::new();
    g.name = "tiny".into();
    g.input
        .push(value_info("x", &[None, Some(3), Some(8), Some(8)]));
    g.output.push(value_info("y", &[None, Some(10)]));
    g.initializer.push(initializer("conv_w", &[4, 3, 3, 3], 1));
    g.initializer.push(initializer("conv_b", &[4], 2));
    g.initializer.push(initializer("fc_w", &[10, 4], 3));
    g.initializer.push(initializer("fc_b", &[10], 4));
    g.node.push(node(
        "Conv",
        &["x", "conv_w", "conv_b"],
        "conv",
        vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1, 1, 1, 1])],
    ));
    g.node.push(node("Relu", &["conv"], "relu", vec![]));
    g.node
        .push(node("GlobalAveragePool", &["relu"], "pool", vec![]));
    g.node
        .push(node("Flatten", &["pool"], "flat", vec![int("axis", 1)]));
    g.node.push(node(
        "Gemm",
        &["flat", "fc_w", "fc_b"],
        "y",
        vec![int("transB", 1)],
    ));
    let mut m = ModelProto::new();
    m.ir_version = 8;
    m.opset_import.push(Default::default());
    m.opset_import.last_mut().unwrap().version = 13;
    m.producer_name = "aotune-serve-tests".into();
    m.graph = Some(g).into();
    m.write_to_bytes().unwrap()
}

/// The CPU reference's output of the tiny model at batch `rows` (what the
/// server must answer), compiled as the server compiles it.
pub fn reference(model: &std::path::Path, rows: usize, x: &[f32]) -> Vec<f32> {
    let options = aotune_compiler::CompileOptions {
        batch: Some(rows),
        ..Default::default()
    };
    let compiled = aotune_compiler::compile_file(model, &options).unwrap();
    let out = aotune_compiler::reference::run_planned(
        &compiled.graph,
        &compiled.plan,
        &[x],
        &Default::default(),
    )
    .unwrap();
    out.into_iter().next().unwrap()
}
