//! aotune's compiler. No GPU needed. It writes what `aotune-spec` describes
//! (re-exported here as [`artifact`]); the runtime reads it.
//!
//! The stages, in the order [`compile`] calls them: ONNX import ([`onnx`]),
//! IR ([`ir`]), passes ([`passes`]), memory plan ([`plan`]), tasks
//! ([`schedule`]). [`reference`] executes graphs on the CPU; [`zoo`] writes
//! ResNet models as ONNX. [`ops`] is the registry of supported ONNX ops: one
//! module per op holds its import, shape inference and reference dispatch.

pub mod build;
pub mod codegen;
pub mod default_model;
pub mod ir;
pub mod onnx;
pub mod ops;
pub mod passes;
mod pipeline;
pub mod plan;
pub mod reference;
pub mod schedule;
pub mod skip;
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod test_graphs;
pub mod toolchain;
pub mod tune;
pub mod zoo;

/// The launch table and tensor slots a build hands the runtime.
pub use aotune_spec::artifact;
pub use build::{Build, BuildError, Built, WeightsMode};
pub use pipeline::{compile_bytes, compile_file, CompileError, CompileOptions, Compiled};
