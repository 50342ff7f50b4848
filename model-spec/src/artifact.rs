//! What a build hands the runtime: the launch table, tensor slots and
//! weights description of one compiled model (the cubin and the weight blob
//! travel beside it as bytes).
//!
//! The same [`ModelSpec`] is written as `manifest.json` (for loaders that
//! read a build directory, the tuner and `include_model!`'s staleness check)
//! and emitted as Rust in `executor.rs` (for binaries that embed the model).
//! Every pointer a kernel takes is an offset into the arena or the weights.

use crate::ir::{DType, Layout, Precision};
use serde::{Deserialize, Serialize};

/// Bumped whenever the meaning of a field changes.
pub const FORMAT_VERSION: u32 = 1;

/// One kernel argument: a device pointer at a byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Arg {
    /// Into the activation arena.
    Arena(u64),
    /// Into the uploaded weight blob.
    Weights(u64),
}

/// One kernel launch of the forward pass, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// The IR node it computes (for messages and per-layer checks).
    pub node: String,
    /// Index into [`ModelSpec::kernels`].
    pub kernel: u32,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory.
    pub smem_bytes: u32,
    /// Pointer arguments, in the kernel's parameter order.
    pub args: Vec<Arg>,
    /// Index into [`ModelSpec::values`] of the tensor this launch writes.
    pub output: u32,
}

/// A tensor in the arena.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorSlot {
    pub name: String,
    /// Logical (ONNX-order) shape.
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub layout: Layout,
    /// Byte offset in the arena.
    pub offset: u64,
    pub bytes: u64,
}

impl TensorSlot {
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }
}

/// The weight blob: every constant, pre-packed and converted, aligned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightsInfo {
    pub bytes: u64,
    /// FNV-1a 64 of the blob, checked when it is read from a file.
    pub fnv1a64: u64,
    /// File name of the blob beside the binary (when not embedded).
    pub file_name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    pub format_version: u32,
    /// Module name of the model (the ONNX file's stem, sanitized).
    pub name: String,
    /// Hash over everything the build depended on (model bytes, batch,
    /// precision, tuning log, compiler version): equal keys, equal builds.
    pub build_key: String,
    pub batch: usize,
    pub precision: Precision,
    pub arena_bytes: u64,
    pub weights: WeightsInfo,
    /// Kernel symbols in the cubin, referenced by index from launches.
    pub kernels: Vec<String>,
    pub launches: Vec<Launch>,
    /// Graph inputs (f32, row-major) and outputs (f32, row-major).
    pub inputs: Vec<TensorSlot>,
    pub outputs: Vec<TensorSlot>,
    /// Every tensor a launch writes, for per-layer checks.
    pub values: Vec<TensorSlot>,
}
