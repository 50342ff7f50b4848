//! What an op's converter sees of one onnx-ir node: [`NodeImport`].
//!
//! The converters in [`crate::ops`] read their node's typed onnx-ir config,
//! resolve its inputs to values, reject what aotune cannot honour and
//! [`push`](NodeImport::push) the IR node(s) computing the output. Every
//! error they build through [`NodeImport`] names the node and op.

use super::error::ImportError;
use super::graph_builder::GraphBuilder;
use crate::ir::{Op, Value, ValueId};
use onnx_ir::{Argument, Node};
use std::ops::RangeInclusive;

/// One node being imported: the graph built so far, the onnx-ir node, its
/// name and op for messages, and the name of its (first used) output.
///
/// Multiple outputs: a converter returns the value of the node's first
/// used output; an op with several outputs (Split) also binds each other
/// used output `k` with [`NodeImport::bind_output`]. The importer rejects
/// a node one of whose used outputs stays unbound (e.g. MaxPool's
/// `Indices`).
pub(crate) struct NodeImport<'a> {
    builder: &'a mut GraphBuilder,
    /// The onnx-ir node (its variant is one of the converter's
    /// [`OpDef::node_types`](crate::ops::OpDef::node_types)).
    pub node: &'a Node,
    /// onnx-ir's name for the op (e.g. `Conv2d`, `Linear`), as errors give it.
    pub op: String,
    /// Default-domain opset of the model.
    pub opset: i64,
    output: String,
    /// Outputs other than the first used one, bound by the converter.
    bound: Vec<(usize, ValueId)>,
}

impl<'a> NodeImport<'a> {
    /// Wraps `node`, whose first used output is named `output`.
    pub(crate) fn new(
        builder: &'a mut GraphBuilder,
        node: &'a Node,
        opset: i64,
        output: String,
    ) -> Self {
        NodeImport {
            builder,
            node,
            op: node.node_type().to_string(),
            opset,
            output,
            bound: Vec::new(),
        }
    }

    /// The outputs the converter bound with [`NodeImport::bind_output`].
    pub(crate) fn into_bound(self) -> Vec<(usize, ValueId)> {
        self.bound
    }

    /// The node's name, as errors give it.
    pub fn name(&self) -> &'a str {
        self.node.name()
    }

    /// The name the node's output value gets.
    pub fn output_name(&self) -> &str {
        &self.output
    }

    /// The node's outputs as onnx-ir lists them, by name; an unused
    /// (optional, omitted) output has an empty name.
    pub fn output_names(&self) -> Vec<&'a str> {
        self.node
            .outputs()
            .iter()
            .map(|a| a.name.as_str())
            .collect()
    }

    /// Makes `id` the value of the node's `k`-th output (as onnx-ir lists
    /// them), for ops with several outputs.
    pub fn bind_output(&mut self, k: usize, id: ValueId) {
        self.bound.push((k, id));
    }

    /// An [`ImportError::UnsupportedAttribute`] on this node.
    pub fn attr_error(
        &self,
        attribute: &str,
        value: impl std::fmt::Debug,
        reason: &str,
    ) -> ImportError {
        ImportError::UnsupportedAttribute {
            node: self.name().to_string(),
            op: self.op.clone(),
            attribute: attribute.to_string(),
            value: format!("{value:?}"),
            reason: reason.to_string(),
        }
    }

    /// An [`ImportError::BadNodeInput`] on this node's `input`.
    pub fn input_error(&self, input: &str, message: impl Into<String>) -> ImportError {
        ImportError::BadNodeInput {
            node: self.name().to_string(),
            op: self.op.clone(),
            input: input.to_string(),
            message: message.into(),
        }
    }

    /// An [`ImportError::UnsupportedOp`] for this node: what a converter
    /// returns for a node type it does not handle.
    pub fn unsupported(&self) -> ImportError {
        ImportError::UnsupportedOp {
            node: self.name().to_string(),
            op: self.op.clone(),
            supported: crate::ops::supported_list(),
        }
    }

    /// The node's present inputs (optional ones dropped) as values; their
    /// count must lie in `count`.
    pub fn inputs(&mut self, count: RangeInclusive<usize>) -> Result<Vec<ValueId>, ImportError> {
        let args = self.node.inputs();
        let present: Vec<&Argument> = args.iter().filter(|a| !a.is_optional()).collect();
        if !count.contains(&present.len()) {
            return Err(self.input_error(
                "(count)",
                format!("expects {count:?} inputs, got {}", present.len()),
            ));
        }
        let (node, op) = (self.node.name(), self.op.as_str());
        present
            .into_iter()
            .map(|a| self.builder.value_of(a, node, op))
            .collect()
    }

    /// The node's `index`-th input (as onnx-ir lists them) as a value.
    pub fn input(&mut self, index: usize) -> Result<ValueId, ImportError> {
        let arg = self.node.inputs().get(index).ok_or_else(|| {
            self.input_error(
                "(count)",
                format!("has no input {index} ({} given)", self.node.inputs().len()),
            )
        })?;
        self.builder.value_of(arg, self.node.name(), &self.op)
    }

    /// Logical shape of a value already in the graph.
    pub fn shape(&self, id: ValueId) -> &[usize] {
        self.builder.shape(id)
    }

    /// Constant data of a value, if it is one.
    pub fn constant(&self, id: ValueId) -> Option<&[f32]> {
        self.builder.constant(id)
    }

    /// Adds a constant value computed at import (e.g. a transposed weight).
    pub fn add_constant(&mut self, name: String, shape: Vec<usize>, data: Vec<f32>) -> ValueId {
        self.builder
            .graph
            .add_value(Value::constant(name, shape, data))
    }

    /// Adds the node computing `op` on `inputs` as this node's output,
    /// inferring its shape; a node whose inputs are all constants is
    /// evaluated now and becomes a constant ([`GraphBuilder::push_folding`]).
    pub fn push(&mut self, op: Op, inputs: Vec<ValueId>) -> Result<ValueId, ImportError> {
        let (name, output) = (self.name(), self.output.clone());
        self.builder.push_folding(name, op, inputs, &output)
    }

    /// Adds a node named `name` computing `op` into a value named `output`:
    /// for converters that emit more than one IR node.
    pub fn push_named(
        &mut self,
        name: &str,
        op: Op,
        inputs: Vec<ValueId>,
        output: &str,
    ) -> Result<ValueId, ImportError> {
        self.builder.push_folding(name, op, inputs, output)
    }
}
