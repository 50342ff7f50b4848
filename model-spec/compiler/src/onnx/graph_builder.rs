//! The graph being built while the onnx-ir nodes are converted: values by
//! onnx-ir argument name, constants, and nodes pushed with their shapes
//! inferred (folded at once when every input is a constant).

use super::error::ImportError;
use crate::ir::{self, Graph, Node, Precision, Value, ValueId, ValueKind};
use onnx_ir::Argument;
use std::collections::HashMap;

/// Builder state while walking the onnx-ir graph.
pub struct GraphBuilder {
    pub graph: Graph,
    pub(super) by_name: HashMap<String, ValueId>,
    constants: usize,
}

impl GraphBuilder {
    pub(crate) fn new() -> Self {
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
