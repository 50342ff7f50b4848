//! Arguments every model-compiling subcommand shares.

use anyhow::Context;
use aotune_compiler::ir::{DType, Precision};
use aotune_compiler::{compile_file, CompileOptions, Compiled};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ModelArgs {
    /// The ONNX model (the default one is written by `make model`).
    #[arg(default_value = "models/resnet50.onnx")]
    pub model: PathBuf,
    /// Batch size for a symbolic batch dimension [default: 1, or the exported batch].
    #[arg(long)]
    pub batch: Option<usize>,
    /// Numeric mode: fp32 (strict), tf32, fp16 or bf16 (f32 accumulation, f32 output).
    #[arg(long, default_value = "fp32")]
    pub precision: Precision,
    /// Keep activations in ONNX's NCHW layout instead of NHWC.
    #[arg(long)]
    pub no_channels_last: bool,
    /// The model input's dtype: f32, or f16 at fp16 (bf16 at bf16), which
    /// halves the bytes copied to the device. Callers still pass f32; the
    /// runtime rounds it.
    #[arg(long, default_value = "f32")]
    pub input_dtype: DType,
    /// Fuse each LayerNorm over channels into the depthwise conv before it
    /// (ConvNeXt's blocks): one kernel instead of two, with its own tuning
    /// tasks. Experimental: its default config measured slower than the
    /// tuned unfused pair.
    #[arg(long)]
    pub fuse_depthwise_norm: bool,
    /// Fold each LayerNorm over the last axis into the Dense layers that
    /// read it (ViT's block norms), at fp16 and bf16: the GEMM computes the
    /// row statistics and finishes the norm in its epilogue. Experimental:
    /// measured slower than the unfused graph on ViT-B/16 (b1 and b64, H100).
    #[arg(long)]
    pub fuse_dense_norm: bool,
    /// Run every Dense layer cuBLASLt can run (fp16/bf16; no folded
    /// LayerNorm, no residual together with an activation) through
    /// cuBLASLt instead of a generated kernel, over the tuning log. The
    /// model then needs libcublasLt on the machine that runs it.
    #[arg(long)]
    pub dense_cublaslt: bool,
}

impl ModelArgs {
    pub fn compile(&self) -> anyhow::Result<Compiled> {
        if !self.model.exists() {
            anyhow::bail!(
                "model '{}' does not exist (make the default one with `make model` or \
                 `cargo run --release -p aotune-compiler --bin aotune-zoo -- resnet50 -o models/resnet50.onnx`)",
                self.model.display()
            );
        }
        let options = CompileOptions {
            batch: self.batch,
            precision: self.precision,
            channels_last: !self.no_channels_last,
            input_dtype: self.input_dtype,
            fuse_depthwise_norm: self.fuse_depthwise_norm,
            fuse_dense_norm: self.fuse_dense_norm,
        };
        compile_file(&self.model, &options)
            .with_context(|| format!("compiling '{}'", self.model.display()))
    }
}

/// `--launch`: how `bench` and `verify` launch the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LaunchArg {
    /// Programmatic dependent launches up to batch 8, plain above (the
    /// runtime's default).
    Auto,
    /// Programmatic dependent launches (sm_90) at every batch.
    Pdl,
    /// Plain launches.
    Plain,
}

impl LaunchArg {
    pub fn mode(self) -> aotune::runtime::LaunchMode {
        use aotune::runtime::LaunchMode;
        match self {
            LaunchArg::Auto => LaunchMode::Auto,
            LaunchArg::Pdl => LaunchMode::Programmatic,
            LaunchArg::Plain => LaunchMode::Plain,
        }
    }
}
