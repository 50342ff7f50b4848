//! A minimal ONNX model writer over onnx-ir's re-exported protobuf messages.
//!
//! [`GraphWriter`] appends nodes, f32 initializers (stored as little-endian
//! `raw_data`) and f32 graph inputs/outputs in call order, and [`GraphWriter::finish`]
//! wraps the graph into a `ModelProto` with one opset import for the default
//! domain. Nothing here iterates a hash map and protobuf serializes fields in
//! field-number order, so the same calls always give the same bytes.

use onnx_ir::{AttributeProto, AttributeType, GraphProto, ModelProto, NodeProto, TensorProto};
use onnx_ir::{TensorShapeProto, TypeProto, ValueInfoProto};

/// `TensorProto.DataType.FLOAT`.
const ONNX_FLOAT: i32 = 1;

/// One dimension of a graph input or output.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dim {
    /// A symbolic dimension (`dim_param`), e.g. the batch.
    Param(&'static str),
    /// A fixed size (`dim_value`).
    Value(i64),
}

/// The model-level fields that [`GraphWriter::finish`] sets.
#[derive(Debug, Clone)]
pub(crate) struct ModelHeader {
    pub ir_version: i64,
    pub opset: i64,
    pub producer_name: String,
    pub producer_version: String,
    pub doc_string: String,
    /// `metadata_props`, written in this order.
    pub metadata: Vec<(String, String)>,
}

/// Builds one `GraphProto`, in call order.
#[derive(Debug)]
pub(crate) struct GraphWriter {
    graph: GraphProto,
}

impl GraphWriter {
    pub fn new(name: &str) -> Self {
        let mut graph = GraphProto::new();
        graph.name = name.to_string();
        Self { graph }
    }

    /// Declares an f32 graph input.
    pub fn input_f32(&mut self, name: &str, dims: &[Dim]) {
        self.graph.input.push(value_info_f32(name, dims));
    }

    /// Declares an f32 graph output.
    pub fn output_f32(&mut self, name: &str, dims: &[Dim]) {
        self.graph.output.push(value_info_f32(name, dims));
    }

    /// Adds an f32 initializer; `values.len()` must be the product of `dims`.
    pub fn initializer_f32(&mut self, name: &str, dims: &[usize], values: &[f32]) {
        debug_assert_eq!(dims.iter().product::<usize>(), values.len(), "{name}");
        let mut tensor = TensorProto::new();
        tensor.name = name.to_string();
        tensor.data_type = ONNX_FLOAT;
        tensor.dims = dims.iter().map(|&d| d as i64).collect();
        let mut raw = Vec::with_capacity(values.len() * 4);
        for v in values {
            raw.extend_from_slice(&v.to_le_bytes());
        }
        tensor.raw_data = raw.into();
        self.graph.initializer.push(tensor);
    }

    /// Adds a node of the default domain.
    pub fn node(
        &mut self,
        op_type: &str,
        name: &str,
        inputs: &[&str],
        outputs: &[&str],
        attributes: Vec<AttributeProto>,
    ) {
        let mut node = NodeProto::new();
        node.op_type = op_type.to_string();
        node.name = name.to_string();
        node.input = inputs.iter().map(|s| s.to_string()).collect();
        node.output = outputs.iter().map(|s| s.to_string()).collect();
        node.attribute = attributes;
        self.graph.node.push(node);
    }

    /// Wraps the graph into a model importing the default domain at `header.opset`.
    pub fn finish(self, header: ModelHeader) -> ModelProto {
        let mut model = ModelProto::new();
        model.ir_version = header.ir_version;
        model.opset_import.push(Default::default());
        if let Some(opset) = model.opset_import.last_mut() {
            opset.domain = String::new();
            opset.version = header.opset;
        }
        model.producer_name = header.producer_name;
        model.producer_version = header.producer_version;
        model.doc_string = header.doc_string;
        for (key, value) in header.metadata {
            model.metadata_props.push(Default::default());
            if let Some(entry) = model.metadata_props.last_mut() {
                entry.key = key;
                entry.value = value;
            }
        }
        model.graph = Some(self.graph).into();
        model
    }
}

fn value_info_f32(name: &str, dims: &[Dim]) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    for dim in dims {
        shape.dim.push(Default::default());
        if let Some(d) = shape.dim.last_mut() {
            match *dim {
                Dim::Param(p) => d.set_dim_param(p.to_string()),
                Dim::Value(v) => d.set_dim_value(v),
            }
        }
    }
    let mut ty = TypeProto::new();
    let tensor = ty.mut_tensor_type();
    tensor.elem_type = ONNX_FLOAT;
    tensor.shape = Some(shape).into();
    let mut info = ValueInfoProto::new();
    info.name = name.to_string();
    info.type_ = Some(ty).into();
    info
}

/// An `INT` attribute.
pub(crate) fn attr_int(name: &str, value: i64) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = AttributeType::INT.into();
    a.i = value;
    a
}

/// An `INTS` attribute.
pub(crate) fn attr_ints(name: &str, values: &[i64]) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = AttributeType::INTS.into();
    a.ints = values.to_vec();
    a
}

/// A `FLOAT` attribute.
pub(crate) fn attr_float(name: &str, value: f32) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = AttributeType::FLOAT.into();
    a.f = value;
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_ir::Message;

    fn tiny_model() -> ModelProto {
        let mut w = GraphWriter::new("tiny");
        w.input_f32("x", &[Dim::Param("batch"), Dim::Value(2)]);
        w.initializer_f32("w", &[2], &[1.5, -2.0]);
        w.node(
            "Mul",
            "mul",
            &["x", "w"],
            &["y"],
            vec![attr_int("unused", 3)],
        );
        w.output_f32("y", &[Dim::Param("batch"), Dim::Value(2)]);
        w.finish(ModelHeader {
            ir_version: 8,
            opset: 17,
            producer_name: "test".into(),
            producer_version: "1".into(),
            doc_string: String::new(),
            metadata: vec![("k".into(), "v".into())],
        })
    }

    #[test]
    fn writer_round_trips_through_protobuf() {
        let bytes = tiny_model().write_to_bytes().expect("serialize");
        let model = ModelProto::parse_from_bytes(&bytes).expect("parse");
        assert_eq!(model.ir_version, 8);
        assert_eq!(model.opset_import.len(), 1);
        assert_eq!(model.opset_import[0].version, 17);
        assert_eq!(model.opset_import[0].domain, "");
        assert_eq!(model.metadata_props[0].key, "k");
        let graph = model.graph.as_ref().expect("graph");
        assert_eq!(graph.initializer[0].raw_data.as_ref(), {
            let mut v = 1.5f32.to_le_bytes().to_vec();
            v.extend_from_slice(&(-2.0f32).to_le_bytes());
            v
        });
        let dims = &graph.input[0].type_.tensor_type().shape.dim;
        assert_eq!(dims[0].dim_param(), "batch");
        assert_eq!(dims[1].dim_value(), 2);
        assert_eq!(graph.node[0].attribute[0].i, 3);
    }
}
