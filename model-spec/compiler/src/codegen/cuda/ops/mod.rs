//! Memory-bound op kernels: elementwise and broadcast arithmetic, pools,
//! reductions and normalizations, and the layout conversions at the
//! model's edges. Each config implements [`super::KernelConfig`].

// The layer below (config, rendering) and the module's shared types, as
// `super::…` for the files here.
#[allow(unused_imports)]
use super::*;

pub mod attention;
#[cfg(test)]
mod attention_tests;
pub mod elementwise;
pub mod global_pool;
pub mod movement;
pub mod movement_map;
pub mod norm;
#[cfg(test)]
mod norm_tests;
pub mod pool;
pub mod reduce;
pub mod rows;
pub mod space_to_depth;
pub mod to_nhwc;
