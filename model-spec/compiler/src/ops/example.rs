//! Tiny single-node ONNX models, written by each op module as
//! [`OpDef::examples`](super::OpDef::examples) (one per ONNX spelling or
//! attribute form it imports) and imported by the registry's tests.

use onnx_ir::{
    AttributeProto, AttributeType, Message, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};

/// One node of `op_type` at `opset`, its inputs in order, its attributes,
/// the output shape the importer must infer and the IR nodes it must
/// import as (their [`Op::kind`](crate::ir::Op::kind)s, in order).
pub(crate) struct Example {
    pub op_type: &'static str,
    pub opset: i64,
    pub inputs: &'static [Input],
    pub attrs: &'static [Attr],
    pub output: &'static [usize],
    pub ir: &'static [&'static str],
}

/// One node input.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Input {
    /// A float32 graph input of this shape.
    Data(&'static [usize]),
    /// A float32 initializer of this shape (values 0.1 to 0.7, never 0).
    Weight(&'static [usize]),
    /// A rank-0 float32 initializer (e.g. a Clip bound from opset 11).
    Scalar(f32),
    /// A 1-D int64 initializer (e.g. Reshape's shape, ReduceMean's axes).
    Int64s(&'static [i64]),
    /// A 1-D bool initializer (e.g. Where's condition).
    Bools(&'static [bool]),
    /// A 1-D float32 initializer of these values (e.g. Resize's scales).
    Floats(&'static [f32]),
    /// An omitted optional input (an empty name).
    Omitted,
}

/// One node attribute.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Attr {
    Int(&'static str, i64),
    Ints(&'static str, &'static [i64]),
    Float(&'static str, f32),
    Str(&'static str, &'static str),
    /// Not an ONNX attribute: the node declares this many outputs (`y`,
    /// `y1`, `y2`, …), of which only `y` is a graph output (Split).
    Outputs(usize),
}

const ONNX_FLOAT: i32 = 1;
const ONNX_INT64: i32 = 7;
const ONNX_BOOL: i32 = 9;

fn value_info(name: &str, shape: &[usize]) -> ValueInfoProto {
    let mut info = ValueInfoProto {
        name: name.into(),
        ..Default::default()
    };
    let tensor = info.type_.mut_or_insert_default().mut_tensor_type();
    tensor.elem_type = ONNX_FLOAT;
    let dims = &mut tensor.shape.mut_or_insert_default().dim;
    for &d in shape {
        dims.push(Default::default());
        if let Some(dim) = dims.last_mut() {
            dim.set_dim_value(d as i64);
        }
    }
    info
}

fn float_tensor(name: &str, shape: &[usize], values: impl Iterator<Item = f32>) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: shape.iter().map(|&d| d as i64).collect(),
        data_type: ONNX_FLOAT,
        raw_data: values
            .flat_map(f32::to_le_bytes)
            .collect::<Vec<u8>>()
            .into(),
        ..Default::default()
    }
}

fn attribute(attr: &Attr) -> Option<AttributeProto> {
    let (name, mut a) = match *attr {
        Attr::Outputs(_) => return None,
        Attr::Int(name, i) => (
            name,
            AttributeProto {
                type_: AttributeType::INT.into(),
                i,
                ..Default::default()
            },
        ),
        Attr::Ints(name, ints) => (
            name,
            AttributeProto {
                type_: AttributeType::INTS.into(),
                ints: ints.to_vec(),
                ..Default::default()
            },
        ),
        Attr::Float(name, f) => (
            name,
            AttributeProto {
                type_: AttributeType::FLOAT.into(),
                f,
                ..Default::default()
            },
        ),
        Attr::Str(name, s) => (
            name,
            AttributeProto {
                type_: AttributeType::STRING.into(),
                s: s.as_bytes().to_vec().into(),
                ..Default::default()
            },
        ),
    };
    a.name = name.into();
    Some(a)
}

impl Example {
    /// The serialized model: graph inputs `x0`, `x1`, … for the data
    /// inputs, initializers `c0`, `c1`, … for the others, output `y`.
    pub fn model(&self) -> Vec<u8> {
        let mut model = ModelProto {
            ir_version: 8,
            ..Default::default()
        };
        model.opset_import.push(Default::default());
        if let Some(opset) = model.opset_import.last_mut() {
            opset.version = self.opset;
        }
        let graph = model.graph.mut_or_insert_default();
        graph.name = format!("{}_example", self.op_type);
        let mut names = Vec::new();
        for (i, input) in self.inputs.iter().enumerate() {
            let name = match input {
                Input::Data(_) => format!("x{i}"),
                Input::Omitted => String::new(),
                _ => format!("c{i}"),
            };
            match *input {
                Input::Data(shape) => graph.input.push(value_info(&name, shape)),
                Input::Weight(shape) => graph.initializer.push(float_tensor(
                    &name,
                    shape,
                    (0..shape.iter().product()).map(|k: usize| (k % 7 + 1) as f32 * 0.1),
                )),
                Input::Scalar(v) => {
                    graph
                        .initializer
                        .push(float_tensor(&name, &[], std::iter::once(v)))
                }
                Input::Int64s(values) => graph.initializer.push(TensorProto {
                    name: name.clone(),
                    dims: vec![values.len() as i64],
                    data_type: ONNX_INT64,
                    int64_data: values.to_vec(),
                    ..Default::default()
                }),
                Input::Bools(values) => graph.initializer.push(TensorProto {
                    name: name.clone(),
                    dims: vec![values.len() as i64],
                    data_type: ONNX_BOOL,
                    int32_data: values.iter().map(|&b| b as i32).collect(),
                    ..Default::default()
                }),
                Input::Floats(values) => graph.initializer.push(float_tensor(
                    &name,
                    &[values.len()],
                    values.iter().copied(),
                )),
                Input::Omitted => {}
            }
            names.push(name);
        }
        let outputs = self
            .attrs
            .iter()
            .find_map(|a| match *a {
                Attr::Outputs(n) => Some(n),
                _ => None,
            })
            .unwrap_or(1);
        graph.node.push(NodeProto {
            op_type: self.op_type.into(),
            name: format!("{}_node", self.op_type.to_lowercase()),
            input: names,
            output: (0..outputs)
                .map(|k| if k == 0 { "y".into() } else { format!("y{k}") })
                .collect(),
            attribute: self.attrs.iter().filter_map(attribute).collect(),
            ..Default::default()
        });
        graph.output.push(value_info("y", self.output));
        model.write_to_bytes().expect("an example model serializes")
    }
}
