//! A minimal ONNX writer for test models: the protobuf encoding of the few
//! messages a one-input, one-output float graph needs (nodes with int,
//! float, ints and string attributes; float and int64 initializers; value infos
//! whose first dimension is the symbolic `batch`), at a chosen opset.

fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn key(buf: &mut Vec<u8>, field: u32, wire: u32) {
    varint(buf, u64::from(field << 3 | wire));
}

fn int(buf: &mut Vec<u8>, field: u32, v: i64) {
    key(buf, field, 0);
    varint(buf, v as u64);
}

fn bytes(buf: &mut Vec<u8>, field: u32, v: &[u8]) {
    key(buf, field, 2);
    varint(buf, v.len() as u64);
    buf.extend_from_slice(v);
}

fn string(buf: &mut Vec<u8>, field: u32, v: &str) {
    bytes(buf, field, v.as_bytes());
}

/// An `AttributeProto` value.
#[derive(Debug, Clone)]
pub enum Attr {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
    Str(&'static str),
}

fn attribute(name: &str, value: &Attr) -> Vec<u8> {
    let mut a = Vec::new();
    string(&mut a, 1, name);
    match value {
        Attr::Float(f) => {
            key(&mut a, 2, 5);
            a.extend_from_slice(&f.to_le_bytes());
            int(&mut a, 20, 1);
        }
        Attr::Int(i) => {
            int(&mut a, 3, *i);
            int(&mut a, 20, 2);
        }
        Attr::Ints(v) => {
            for &i in v {
                int(&mut a, 8, i);
            }
            int(&mut a, 20, 7);
        }
        Attr::Str(text) => {
            bytes(&mut a, 4, text.as_bytes());
            int(&mut a, 20, 3);
        }
    }
    a
}

/// A `NodeProto`.
pub fn node(
    op: &str,
    name: &str,
    inputs: &[&str],
    output: &str,
    attrs: &[(&str, Attr)],
) -> Vec<u8> {
    let mut n = Vec::new();
    for i in inputs {
        string(&mut n, 1, i);
    }
    string(&mut n, 2, output);
    string(&mut n, 3, name);
    string(&mut n, 4, op);
    for (k, v) in attrs {
        bytes(&mut n, 5, &attribute(k, v));
    }
    n
}

/// A float `TensorProto` with `raw_data`.
pub fn tensor(name: &str, dims: &[usize], values: &[f32]) -> Vec<u8> {
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    tensor_raw(name, dims, 1, &raw)
}

/// An int64 `TensorProto` with `raw_data` (axes inputs).
pub fn tensor_i64(name: &str, dims: &[usize], values: &[i64]) -> Vec<u8> {
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    tensor_raw(name, dims, 7, &raw)
}

/// A `TensorProto` with `raw_data` of ONNX type `data_type` (1 FLOAT, 7 INT64).
pub fn tensor_raw(name: &str, dims: &[usize], data_type: i64, raw: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    for &d in dims {
        int(&mut t, 1, d as i64);
    }
    int(&mut t, 2, data_type);
    string(&mut t, 8, name);
    bytes(&mut t, 9, raw);
    t
}

/// A float `ValueInfoProto`; dimension 0 is the symbolic `batch`.
pub fn value_info(name: &str, dims_after_batch: &[usize]) -> Vec<u8> {
    float_value_info(name, Some("batch"), dims_after_batch)
}

/// A float `ValueInfoProto` of fixed dimensions.
pub fn value_info_fixed(name: &str, dims: &[usize]) -> Vec<u8> {
    float_value_info(name, None, dims)
}

/// A float `ValueInfoProto`: the symbolic dimension `batch` (when given), then `dims`.
fn float_value_info(name: &str, batch: Option<&str>, dims: &[usize]) -> Vec<u8> {
    let mut shape = Vec::new();
    if let Some(symbol) = batch {
        let mut dim = Vec::new();
        string(&mut dim, 2, symbol);
        bytes(&mut shape, 1, &dim);
    }
    for &d in dims {
        let mut dim = Vec::new();
        int(&mut dim, 1, d as i64);
        bytes(&mut shape, 1, &dim);
    }
    let mut tensor = Vec::new();
    int(&mut tensor, 1, 1);
    bytes(&mut tensor, 2, &shape);
    let mut ty = Vec::new();
    bytes(&mut ty, 1, &tensor);
    let mut v = Vec::new();
    string(&mut v, 1, name);
    bytes(&mut v, 2, &ty);
    v
}

/// A `ModelProto` (IR 9, the default domain at `opset`) around one graph.
pub fn model(
    name: &str,
    opset: i64,
    nodes: &[Vec<u8>],
    initializers: &[Vec<u8>],
    input: &[u8],
    output: &[u8],
) -> Vec<u8> {
    let mut g = Vec::new();
    for n in nodes {
        bytes(&mut g, 1, n);
    }
    string(&mut g, 2, name);
    for t in initializers {
        bytes(&mut g, 5, t);
    }
    bytes(&mut g, 11, input);
    bytes(&mut g, 12, output);
    let mut set = Vec::new();
    string(&mut set, 1, "");
    int(&mut set, 2, opset);
    let mut m = Vec::new();
    int(&mut m, 1, 9);
    string(&mut m, 2, "aotune-test");
    bytes(&mut m, 7, &g);
    bytes(&mut m, 8, &set);
    m
}
