//! What a build hands the runtime: the launch table, tensor slots and
//! weights description of one compiled model (the cubin and the weight blob
//! travel beside it as bytes).
//!
//! The same [`ModelSpec`] is written as `manifest.json` (for loaders that
//! read a build directory, the tuner and `include_model!`'s staleness check)
//! and emitted as Rust in `executor.rs` (for binaries that embed the model).
//! Every pointer a kernel takes is an offset into the arena or the weights.
//! Strings and lists are `Cow`s so `executor.rs` can build a `static`
//! [`ModelSpec`] with no allocation, while JSON loads into owned data.

pub use crate::types::{DType, Layout, Precision};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// Text that is `&'static` in generated code and owned when read from JSON.
pub type Text = Cow<'static, str>;
/// A list that is `&'static` in generated code and owned when read from JSON.
pub type List<T> = Cow<'static, [T]>;

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
    pub node: Text,
    /// Index into [`ModelSpec::kernels`].
    pub kernel: u32,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory.
    pub smem_bytes: u32,
    /// Pointer arguments, in the kernel's parameter order.
    pub args: List<Arg>,
    /// Index into [`ModelSpec::values`] of the tensor this launch writes.
    pub output: u32,
    /// When set, this launch is a cuBLASLt matmul, not a kernel: `kernel`,
    /// `grid`, `block` and `smem_bytes` are unused (zero) and `args` are the
    /// Dense node's operands (see [`LibraryMatmul`]). A runtime that predates
    /// the field refuses such a launch (its grid is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matmul: Option<LibraryMatmul>,
}

/// A Dense node `y[M,N] = act(x[M,K] · w[N,K]ᵀ + bias + residual)` run by
/// `cublasLtMatmul` (docs/design/cublaslt-dense.md). The launch's args are
/// `x, w`, then `bias` (f32 `[N]`, in the weights) when `bias`, then the
/// residual (`[M,N]`, `dtype`) when `residual`, then `y`; every tensor is
/// row-major and of `dtype` (f16 or bf16) but the bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryMatmul {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub dtype: DType,
    pub bias: bool,
    pub residual: bool,
    pub activation: MatmulActivation,
    /// Which of cuBLASLt's heuristic candidates to run, by rank (0: its
    /// first); a rank the heuristic no longer returns falls back to 0.
    pub algo: u32,
}

impl LibraryMatmul {
    /// How many args the launch has.
    pub fn arg_count(&self) -> usize {
        3 + usize::from(self.bias) + usize::from(self.residual)
    }
}

/// The activation of a [`LibraryMatmul`]'s epilogue. cuBLASLt's GELU is the
/// tanh approximation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MatmulActivation {
    None,
    Relu,
    Gelu,
}

/// A tensor in the arena.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorSlot {
    pub name: Text,
    /// Logical (ONNX-order) shape.
    pub shape: List<usize>,
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
    pub file_name: Text,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    pub format_version: u32,
    /// Module name of the model (the ONNX file's stem, sanitized).
    pub name: Text,
    /// Hash over everything the build depended on (model bytes, batch,
    /// precision, tuning log, compiler version): equal keys, equal builds.
    pub build_key: Text,
    pub batch: usize,
    pub precision: Precision,
    pub arena_bytes: u64,
    pub weights: WeightsInfo,
    /// Kernel symbols in the cubin, referenced by index from launches.
    pub kernels: List<Text>,
    pub launches: List<Launch>,
    /// Graph inputs (f32, row-major) and outputs (f32, row-major).
    pub inputs: List<TensorSlot>,
    pub outputs: List<TensorSlot>,
    /// Every tensor a launch writes, for per-layer checks.
    pub values: List<TensorSlot>,
    /// GPUs the applied tuning records were measured on, as `name|sm` (e.g.
    /// `NVIDIA H200|sm_90`); empty without a tuning log. The runtime warns
    /// at load when it runs on another GPU.
    #[serde(default)]
    pub tuned_on: List<Text>,
}
