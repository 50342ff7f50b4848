//! The model's spec: the artifact types aotune's compiler writes and its
//! runtime reads. Applications that embed a model compile this crate and the
//! runtime, never the compiler.
//!
//! - [`artifact`]: the launch table, tensor slots and weights of one build
//!   ([`ModelSpec`], written as `manifest.json` and as `executor.rs`).
//! - [`types`]: element types, layouts and precisions.
//! - [`target`]: the GPU a tuning record was measured on.
//! - [`hash`]: the weight blob's checksum.
//! - [`launch`]: limits the kernels and the runtime agree on.
//! - [`stats`]: relative L2 error and median, as both sides report them.

pub mod artifact;
pub mod hash;
pub mod launch;
pub mod stats;
pub mod target;
pub mod types;

pub use artifact::ModelSpec;
pub use target::Target;
pub use types::{DType, Layout, Precision};
