//! onnx-ir graph → aotune [`Graph`].
//!
//! Walks onnx-ir's nodes in order, turns constant arguments into constant
//! values, hands each node to its op's converter in the registry
//! ([`crate::ops`]) and derives every output shape with [`ir::infer_shape`].
//! Names are only for messages: values are keyed by onnx-ir's argument
//! names within this walk, never later.

use super::error::ImportError;
use super::node_import::NodeImport;
use crate::ir::{self, Graph, Node, Precision, Value, ValueId, ValueKind};
use onnx_ir::{ArgType, Argument, OnnxGraph};
use std::collections::HashMap;

/// Builder state while walking the onnx-ir graph.
pub struct GraphBuilder {
    pub graph: Graph,
    by_name: HashMap<String, ValueId>,
    constants: usize,
}

impl GraphBuilder {
    fn new() -> Self {
        GraphBuilder {
            graph: Graph {
                values: Vec::new(),
                nodes: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                precision: Precision::Fp32,
            },
            by_name: HashMap::new(),
            constants: 0,
        }
    }

    /// The value an onnx-ir argument refers to: a constant (created on first
    /// use) or an earlier graph input or node output.
    pub fn value_of(
        &mut self,
        arg: &Argument,
        node: &str,
        op: &str,
    ) -> Result<ValueId, ImportError> {
        let bad = |message: String| ImportError::BadNodeInput {
            node: node.to_string(),
            op: op.to_string(),
            input: if arg.name.is_empty() {
                "(constant)".into()
            } else {
                format!("'{}'", arg.name)
            },
            message,
        };
        if let Some(data) = arg.value() {
            let shape: Vec<usize> = data.shape().iter().copied().collect();
            // Any numeric or bool type (bool as 1.0 / 0.0).
            let values = data
                .try_to_vec_as::<f32>()
                .map_err(|e| bad(format!("constant cannot be read as numbers: {e:?}")))?;
            if values.len() != ir::numel(&shape) {
                return Err(bad(format!(
                    "constant has {} elements for shape {shape:?}",
                    values.len()
                )));
            }
            self.constants += 1;
            let name = if arg.name.is_empty() {
                format!("const{}", self.constants)
            } else {
                arg.name.clone()
            };
            return Ok(self.graph.add_value(Value::constant(name, shape, values)));
        }
        self.by_name.get(&arg.name).copied().ok_or_else(|| {
            bad(
                "is neither a graph input, an initializer, nor the output of an earlier node \
                 (missing initializer or graph not topologically sorted)"
                    .into(),
            )
        })
    }

    /// Logical shape of a value already in the graph.
    pub fn shape(&self, id: ValueId) -> &[usize] {
        &self.graph.value(id).shape
    }

    /// Constant data of a value, if it is one.
    pub fn constant(&self, id: ValueId) -> Option<&[f32]> {
        self.graph.value(id).constant_data().map(|d| d.as_slice())
    }

    /// Adds a node computing `op` on `inputs`, inferring its output shape.
    pub fn push(
        &mut self,
        name: &str,
        op: ir::Op,
        inputs: Vec<ValueId>,
        output_name: &str,
    ) -> Result<ValueId, ImportError> {
        let shapes: Vec<&[usize]> = inputs.iter().map(|&v| self.shape(v)).collect();
        let shape = ir::infer_shape(&op, &shapes).map_err(|message| ImportError::Shape {
            node: name.to_string(),
            op: op.kind().to_string(),
            message,
        })?;
        let output = self.graph.add_value(Value::activation(output_name, shape));
        self.graph.nodes.push(Node {
            name: name.to_string(),
            op,
            inputs,
            output,
        });
        Ok(output)
    }

    /// [`GraphBuilder::push`], then constant folding: when every input is a
    /// constant the node is evaluated now on the CPU reference and its output
    /// becomes a constant value (the node is dropped). This is how shape
    /// arithmetic and weight preprocessing that onnx-ir leaves in the graph
    /// disappear before any pass runs.
    pub fn push_folding(
        &mut self,
        name: &str,
        op: ir::Op,
        inputs: Vec<ValueId>,
        output_name: &str,
    ) -> Result<ValueId, ImportError> {
        let foldable = !inputs.is_empty() && inputs.iter().all(|&v| self.constant(v).is_some());
        let output = self.push(name, op, inputs, output_name)?;
        if foldable {
            let node = self.graph.nodes.pop().expect("the node just pushed");
            let data =
                super::fold::evaluate(&self.graph, &node).map_err(|message| ImportError::Fold {
                    node: node.name.clone(),
                    op: node.op.kind().to_string(),
                    message,
                })?;
            self.graph.value_mut(output).kind = ValueKind::Constant(std::sync::Arc::new(data));
        }
        Ok(output)
    }

    /// Makes `id` known under an onnx-ir argument name.
    pub fn bind(&mut self, name: &str, id: ValueId) {
        self.by_name.insert(name.to_string(), id);
    }
}

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
