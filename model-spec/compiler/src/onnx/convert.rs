//! onnx-ir graph → aotune [`Graph`].
//!
//! Walks onnx-ir's nodes in order, turns constant arguments into constant
//! values, hands each node to its op's converter in the registry
//! ([`crate::ops`]) and derives every output shape with [`ir::infer_shape`].
//! Names are only for messages: values are keyed by onnx-ir's argument
//! names within this walk, never later.

use super::error::ImportError;
use super::graph_builder::GraphBuilder;
use super::node_import::NodeImport;
use crate::ir::{self, Graph, Value, ValueId, ValueKind};
use onnx_ir::{ArgType, Argument, OnnxGraph};

/// Converts one onnx-ir node through the registry, appending to the
/// builder. Returns each used output's name with its value; none for a
/// `Constant` node (its users read the value directly).
fn convert_node(
    b: &mut GraphBuilder,
    node: &onnx_ir::Node,
    opset: i64,
) -> Result<Vec<(String, ValueId)>, ImportError> {
    if let onnx_ir::Node::Constant(_) = node {
        return Ok(Vec::new());
    }
    let used = used_outputs(node)?;
    let unsupported = |op: String| ImportError::UnsupportedOp {
        node: node.name().to_string(),
        op,
        supported: crate::ops::supported_list(),
    };
    if let onnx_ir::Node::Custom(c) = node {
        return Err(unsupported(format!("{}::{}", c.domain, c.op_type)));
    }
    let def = crate::ops::for_node_type(&node.node_type())
        .ok_or_else(|| unsupported(node.node_type().to_string()))?;
    let (first, first_name) = used[0].clone();
    let mut cx = NodeImport::new(b, node, opset, first_name.clone());
    let id = (def.import)(&mut cx)?;
    let bound = cx.into_bound();
    let mut outputs = vec![(first_name, id)];
    let mut unbound = Vec::new();
    for (k, name) in used.into_iter().filter(|&(k, _)| k != first) {
        match bound.iter().find(|&&(j, _)| j == k) {
            Some(&(_, value)) => outputs.push((name, value)),
            None => unbound.push(name),
        }
    }
    if !unbound.is_empty() {
        return Err(ImportError::UnsupportedAttribute {
            node: node.name().to_string(),
            op: node.node_type().to_string(),
            attribute: "outputs".into(),
            value: format!("{unbound:?}"),
            reason: "only the first output is supported (e.g. MaxPool Indices, \
                     BatchNormalization training outputs)"
                .into(),
        });
    }
    Ok(outputs)
}

/// A node's used outputs (those with a name): their index as onnx-ir lists
/// them and their name. At least one.
fn used_outputs(node: &onnx_ir::Node) -> Result<Vec<(usize, String)>, ImportError> {
    let used: Vec<(usize, String)> = node
        .outputs()
        .iter()
        .enumerate()
        .filter(|(_, a)| !a.name.is_empty())
        .map(|(k, a)| (k, a.name.clone()))
        .collect();
    if used.is_empty() {
        return Err(ImportError::BadNodeInput {
            node: node.name().to_string(),
            op: node.node_type().to_string(),
            input: "(outputs)".into(),
            message: "node has no output".into(),
        });
    }
    Ok(used)
}

fn tensor_shape(arg: &Argument) -> Result<Vec<usize>, String> {
    match &arg.ty {
        ArgType::Tensor(t) => t.static_shape_known().ok_or_else(|| {
            format!("has a symbolic shape {t} after batch resolution; export with static shapes")
        }),
        // A rank-0 float tensor (onnx-ir calls it a native scalar).
        ArgType::ScalarNative(_) => Ok(Vec::new()),
        ArgType::ScalarTensor(_) => Ok(vec![1]),
        ArgType::Shape(_) => Err("is a shape value, not a float tensor".into()),
    }
}

/// Converts a parsed onnx-ir graph. `opset` is the default-domain opset.
/// `output_names` are the model's own graph-output names, given to the
/// output values in order (onnx-ir renames them).
pub fn convert_graph(
    onnx: &OnnxGraph,
    opset: i64,
    output_names: &[String],
) -> Result<Graph, ImportError> {
    let mut b = GraphBuilder::new();
    for input in &onnx.inputs {
        let bad = |message: String| ImportError::BadInput {
            input: input.name.clone(),
            message,
        };
        let shape = tensor_shape(input).map_err(bad)?;
        if input.ty.elem_type() != onnx_ir::DType::F32 {
            return Err(bad(format!(
                "has dtype {:?}; aotune accepts float32 inputs",
                input.ty.elem_type()
            )));
        }
        let id = b.graph.add_value(Value {
            kind: ValueKind::Input,
            ..Value::activation(input.name.clone(), shape)
        });
        b.graph.inputs.push(id);
        b.bind(&input.name, id);
    }
    for node in &onnx.nodes {
        for (name, id) in convert_node(&mut b, node, opset)? {
            b.bind(&name, id);
        }
    }
    for output in &onnx.outputs {
        let id = if let Some(&id) = b.by_name.get(&output.name) {
            id
        } else {
            // A graph output that is a constant (folded by onnx-ir) or unknown.
            b.value_of(output, "(graph outputs)", "output")?
        };
        let id = if b.graph.value(id).kind != ValueKind::Activation {
            // Outputs must be produced by a node: copy inputs/constants through Identity.
            let name = format!("{}_copy", output.name);
            b.push(&name, ir::Op::Identity, vec![id], &output.name)?
        } else {
            id
        };
        b.graph.outputs.push(id);
    }
    if output_names.len() == b.graph.outputs.len() {
        for (id, name) in b.graph.outputs.clone().into_iter().zip(output_names) {
            b.graph.value_mut(id).name = name.clone();
        }
    }
    Ok(b.graph)
}
