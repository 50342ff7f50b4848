//! aotune's runtime: runs models compiled ahead of time by aotune's compiler.
//!
//! A build script compiles a model with `aotune_compiler::Build` (a
//! build-dependency); the application embeds it with [`include_model!`] and
//! runs it through [`runtime::Model`]: allocation at load, none per
//! inference. This crate depends on the driver bindings and the model's spec
//! (`aotune-spec`), not on the compiler.
//!
//! With the `cli` feature it also holds the GPU side of the tuner
//! ([`tune`]) for the `aotune` binary.

// Generated executors name `::aotune::…`, also inside this crate.
extern crate self as aotune;

pub mod runtime;
#[cfg(feature = "cli")]
pub mod tune;

pub use aotune_macros::include_model;
/// The launch table and tensor slots a build hands the runtime.
pub use aotune_spec::artifact;
