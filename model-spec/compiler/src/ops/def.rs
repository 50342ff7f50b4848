//! [`OpDef`]: what one op module tells the rest of the compiler about the
//! ONNX op (or family of ops) it owns.

use crate::ir::ValueId;
use crate::onnx::{ImportError, NodeImport};
use onnx_ir::{NodeProto, NodeType};

/// Converts one onnx-ir node to IR node(s) and returns the value that
/// stands for the node's output. It receives only nodes whose type is in
/// its [`OpDef::node_types`]; it reads the node's typed config, keeps every
/// attribute, and rejects what aotune cannot honour with an error built by
/// the [`NodeImport`] (which names the node, op and attribute or input).
pub(crate) type ImportFn = fn(&mut NodeImport<'_>) -> Result<ValueId, ImportError>;

/// Rewrites a node at the protobuf level before onnx-ir parses it, for
/// attribute forms onnx-ir reads differently from the ONNX spec.
pub(crate) type FixProtoFn = fn(&mut NodeProto);

/// One registry entry: an ONNX op or op family, registered once in
/// [`super::REGISTRY`].
///
/// Shape inference and the CPU reference of the IR op(s) it produces sit
/// in the same module, as `infer_shape` and `reference` functions that
/// [`crate::ir::infer_shape`] and the reference executor call from their
/// `match` on [`crate::ir::Op`].
pub(crate) struct OpDef {
    /// ONNX `op_type`s (default domain) this entry imports, as models spell
    /// them. They are what [`super::supported_onnx_ops`] lists and what the
    /// importer's first check accepts.
    pub onnx: &'static [&'static str],
    /// The supported-op line (markdown): the ops, then in parentheses the
    /// attributes and limits worth saying. Names every op of `onnx`.
    pub summary: &'static str,
    /// The onnx-ir node types [`OpDef::import`] receives. onnx-ir renames
    /// some ops: `Conv` becomes `Conv1d`/`Conv2d`/`Conv3d` by kernel rank,
    /// `Gemm` (alpha = beta = 1, transB) and `MatMul` (+ `Add`) by a 2-D
    /// constant weight become `Linear`. A node type belongs to one entry.
    pub node_types: &'static [NodeType],
    pub import: ImportFn,
    /// Protobuf-level fix-up, run on every node of this entry's `onnx`
    /// types before onnx-ir parses the model.
    pub fix_proto: Option<FixProtoFn>,
    /// Tiny single-node models of each ONNX spelling and attribute form,
    /// imported and run by the registry's tests.
    #[cfg(test)]
    pub examples: &'static [super::example::Example],
}
