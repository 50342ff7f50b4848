//! The op registry: each ONNX op aotune supports, or family of ops, lives
//! in one module here, described by one `OpDef` (`def.rs`) and registered
//! once in `REGISTRY`.
//!
//! An op's module holds everything about it that is not GPU code: its
//! import (both exporters' spellings and attribute forms, every attribute
//! checked, typed errors naming node, op and attribute), the shape
//! inference of the IR op it produces and the dispatch to its CPU
//! reference kernel, and examples its tests import. The importer finds the
//! converter through the registry, and the lists of supported ops (the
//! importer's first check and its "unsupported operator" error,
//! [`supported_onnx_ops`], [`supported_ops_markdown`]) are derived from it.
//!
//! The IR's [`Op`](crate::ir::Op) enum stays the one set of ops the passes
//! and codegen match on; [`crate::ir::infer_shape`] and the reference
//! executor dispatch on it to the `infer_shape` and `reference` functions
//! here. Ops that only passes create (`FusedConv`, `Dense`, `Convert`,
//! `PadChannels`, `SpaceToDepth`) have no ONNX import and stay in `ir/` and
//! `reference/`. See `docs/adding-an-op.md`.

pub(crate) mod activation;
pub(crate) mod arithmetic;
pub(crate) mod attention;
pub(crate) mod batch_norm;
pub(crate) mod cast;
pub(crate) mod comparison;
pub(crate) mod concat;
pub(crate) mod conv;
mod def;
pub(crate) mod flatten;
pub(crate) mod gelu;
pub(crate) mod gemm;
pub(crate) mod global_pool;
pub(crate) mod identity;
pub(crate) mod logical;
mod markdown;
pub(crate) mod math_unary;
pub(crate) mod pool;
pub(crate) mod prelu;
pub(crate) mod reduce;
pub(crate) mod reshape;
pub(crate) mod softmax;
pub(crate) mod where_op;
// Normalizations and Einsum (reductions and softmax above).
pub(crate) mod einsum;
pub(crate) mod group_norm;
pub(crate) mod layer_norm;
pub(crate) mod lp_norm;
mod window;
// Data movement and shape ops.
mod const_input;
pub(crate) mod depth_to_space;
pub(crate) mod dropout;
pub(crate) mod expand;
pub(crate) mod gather;
pub(crate) mod gather_nd;
pub(crate) mod pad;
pub(crate) mod resize;
pub(crate) mod scatter_nd;
pub(crate) mod shape_consts;
pub(crate) mod slice;
pub(crate) mod split;
pub(crate) mod squeeze;
pub(crate) mod tile;
pub(crate) mod transpose;

#[cfg(test)]
mod example;
#[cfg(test)]
mod registry_tests;

pub(crate) use def::OpDef;
pub use markdown::supported_ops_markdown;

use onnx_ir::NodeType;
use std::sync::OnceLock;

/// Every supported ONNX op: one line per op module, in the order the
/// supported-op list gives them.
pub(crate) static REGISTRY: &[OpDef] = &[
    conv::DEF,
    batch_norm::DEF,
    activation::DEF,
    arithmetic::DEF,
    pool::DEF,
    global_pool::DEF,
    reduce::DEF,
    flatten::DEF,
    reshape::DEF,
    gemm::DEF,
    identity::DEF,
    concat::DEF,
    softmax::DEF,
    attention::DEF,
    math_unary::DEF,
    gelu::DEF,
    prelu::DEF,
    comparison::DEF,
    logical::DEF,
    where_op::DEF,
    cast::DEF,
    // Data movement and shape ops.
    transpose::DEF,
    slice::DEF,
    split::DEF,
    gather::DEF,
    squeeze::DEF,
    expand::DEF,
    tile::DEF,
    pad::DEF,
    resize::DEF,
    scatter_nd::DEF,
    gather_nd::DEF,
    depth_to_space::DEF,
    dropout::DEF,
    shape_consts::DEF,
    layer_norm::DEF,
    group_norm::DEF,
    lp_norm::DEF,
    einsum::DEF,
];

/// ONNX ops the importer's first check lets through though no entry
/// converts them: `Constant` nodes become values. Never listed as supported.
const FOLDED_BY_ONNX_IR: &[&str] = &["Constant"];

/// The ONNX ops aotune imports (default domain), sorted.
pub fn supported_onnx_ops() -> Vec<&'static str> {
    let mut ops: Vec<&'static str> = REGISTRY
        .iter()
        .flat_map(|def| def.onnx.iter().copied())
        .collect();
    ops.sort_unstable();
    ops
}

/// [`supported_onnx_ops`] joined, as the "unsupported operator" error
/// quotes it.
pub(crate) fn supported_list() -> &'static str {
    static LIST: OnceLock<String> = OnceLock::new();
    LIST.get_or_init(|| supported_onnx_ops().join(", "))
}

/// The entry converting onnx-ir nodes of type `node_type`.
pub(crate) fn for_node_type(node_type: &NodeType) -> Option<&'static OpDef> {
    REGISTRY
        .iter()
        .find(|def| def.node_types.contains(node_type))
}

/// The entry importing the ONNX `op_type` (default domain).
pub(crate) fn for_onnx_op(op_type: &str) -> Option<&'static OpDef> {
    REGISTRY.iter().find(|def| def.onnx.contains(&op_type))
}

/// Whether the importer's first check lets a default-domain node of
/// `op_type` through: a registered op, or one onnx-ir folds away.
pub(crate) fn accepts_onnx_op(op_type: &str) -> bool {
    for_onnx_op(op_type).is_some() || FOLDED_BY_ONNX_IR.contains(&op_type)
}
