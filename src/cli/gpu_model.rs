//! Building a model for the GPU at run time (nvcc, cached by build key) and
//! loading it, for `bench` and `verify`.

use super::model_args::ModelArgs;
use anyhow::Context;
use aotune::runtime::{LoadOptions, Model, ModelFiles};
use aotune_compiler::{Build, Built};
use std::path::PathBuf;

/// Where run-time builds go: `$AOTUNE_CACHE`, else `target/aotune-cache`.
fn cache_dir() -> PathBuf {
    std::env::var_os("AOTUNE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/aotune-cache"))
}

/// A model built and loaded on the GPU, with what the compiler derived.
pub struct GpuModel {
    pub built: Built,
    pub model: Model,
}

/// Compiles `args` (kernels with nvcc, reusing an up-to-date build) and loads it.
pub fn build(args: &ModelArgs, tuning: Option<&PathBuf>) -> anyhow::Result<Built> {
    if args.no_channels_last {
        anyhow::bail!(
            "the GPU path needs channels-last (NHWC) activations: drop --no-channels-last"
        );
    }
    let mut build = Build::new(&args.model)
        .precision(args.precision)
        .input_dtype(args.input_dtype)
        .fuse_depthwise_norm(args.fuse_depthwise_norm)
        .fuse_dense_norm(args.fuse_dense_norm)
        .dense_cublaslt(args.dense_cublaslt)
        .out_dir(cache_dir());
    if let Some(b) = args.batch {
        build = build.batch(b);
    }
    if let Some(t) = tuning {
        build = build.tuning(t);
    }
    let mut tag = format!(
        "{}_b{}_{}",
        aotune_compiler::build::model_name(&args.model),
        args.batch.unwrap_or(1),
        args.precision
    );
    if args.input_dtype != aotune_compiler::ir::DType::F32 {
        tag.push_str(&format!("_{}in", args.input_dtype));
    }
    if args.fuse_depthwise_norm {
        tag.push_str("_dwnorm");
    }
    if args.fuse_dense_norm {
        tag.push_str("_dnorm");
    }
    if args.dense_cublaslt {
        tag.push_str("_lt");
    }
    let mut built = build
        .name(tag)
        .compile()
        .with_context(|| format!("building '{}' for the GPU", args.model.display()))?;
    let built = built.remove(0);
    for note in built.notes.iter().chain(&built.info) {
        tracing::info!("{note}");
    }
    Ok(built)
}

pub fn load(args: &ModelArgs, tuning: Option<&PathBuf>) -> anyhow::Result<GpuModel> {
    load_with(args, tuning, &LoadOptions::default())
}

/// [`load`] with explicit load options.
pub fn load_with(
    args: &ModelArgs,
    tuning: Option<&PathBuf>,
    options: &LoadOptions,
) -> anyhow::Result<GpuModel> {
    let built = build(args, tuning)?;
    let files = ModelFiles::read_dir(&built.dir)?;
    let model = files.load(options)?;
    Ok(GpuModel { built, model })
}
