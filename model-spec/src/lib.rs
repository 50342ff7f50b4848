//! aotune's compiler. No GPU needed.
//!
//! The stages, in the order [`compile`] calls them: ONNX import ([`onnx`]),
//! IR ([`ir`]), passes ([`passes`]), memory plan ([`plan`]), tasks
//! ([`schedule`]). [`reference`] executes graphs on the CPU; [`zoo`] writes
//! ResNet models as ONNX.

pub mod artifact;
pub mod build;
pub mod codegen;
pub mod default_model;
pub mod ir;
pub mod onnx;
pub mod passes;
mod pipeline;
pub mod plan;
pub mod reference;
pub mod schedule;
pub mod tune;
pub mod zoo;

pub use build::{Build, BuildError, Built, WeightsMode};
pub use pipeline::{compile_bytes, compile_file, CompileError, CompileOptions, Compiled};
