//! The GEMM-family templates: convolutions as implicit GEMMs (SIMT,
//! mma.sync and Hopper's wgmma), dense layers and matrix products.
//! `conv_shape.rs` is their shared workload and limits; each template's
//! config implements [`super::KernelConfig`].

// The layer below (config, rendering) and the module's shared types, as
// `super::…` for the files here.
#[allow(unused_imports)]
use super::*;

pub mod conv;
pub mod conv_shape;
pub mod cost_model;
pub mod dense;
pub mod depthwise_config;
pub mod depthwise_norm;
pub mod depthwise_norm_config;
pub mod implicit_gemm;
pub mod matmul;
pub mod mma_config;
pub mod wgmma_config;
