//! aotune: the runtime of compiled models, and the `include_model!` macro.
//!
//! A build script compiles a model with [`aotune_spec::Build`]; the user's
//! code embeds it with [`include_model!`] and runs it through
//! [`runtime::Model`]. The CLI binary `aotune` lives beside this library.

// Generated executors name `::aotune::…`, also inside this crate.
extern crate self as aotune;

pub mod runtime;
pub mod tune;

pub use aotune_macros::include_model;
/// The launch table and tensor slots a build hands the runtime.
pub use aotune_spec::artifact;
