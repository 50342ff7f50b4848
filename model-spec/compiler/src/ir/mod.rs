//! aotune's intermediate representation: typed values and ops, a verifier,
//! shape inference and a stable printer.

mod graph;
mod movement;
mod op;
mod print;
mod shape;
mod types;
mod verify;
mod view;

pub use graph::{Graph, Node, NodeId, Patch, Value, ValueId, ValueKind};
pub use movement::{CoordinateMode, NearestMode, PadMode, Resize, ResizeMode};
pub use op::{
    Activation, BinaryOp, CastTarget, ChannelNorm, Conv2d, Epilogue, GlobalPool, Op, Pool2d,
    ReduceKind, RowNorm, ScatterReduction, Shortcut, UnaryOp,
};
pub use print::print_graph;
pub(crate) use shape::{arity, rank4};
pub use shape::{broadcast, infer_shape, MAX_ELEMENTS};
pub use types::{numel, round_tf32, DType, Layout, Precision};
pub use verify::{debug_verify, is_byte_view, is_row_major_bytes, verify, VerifyError};
pub use view::{AttentionViews, StridedView};

#[cfg(test)]
mod verify_tests;
