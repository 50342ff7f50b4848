//! Memory-bound op kernels: elementwise and broadcast arithmetic, pools,
//! reductions, and the layout conversions at the model's edges. Each
//! config implements [`super::KernelConfig`].

// The layer below (config, rendering) and the module's shared types, as
// `super::…` for the files here.
#[allow(unused_imports)]
use super::*;

pub mod elementwise;
pub mod global_pool;
pub mod pool;
pub mod reduce;
pub mod space_to_depth;
pub mod to_nhwc;
