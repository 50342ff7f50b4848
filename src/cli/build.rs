//! `aotune build`: run the build step by hand — kernels.cu, kernels.fatbin,
//! weights, manifest.json, executor.rs, plan.txt, tasks.txt.

use super::model_args::ModelArgs;
use anyhow::Context;
use aotune_compiler::{Build, WeightsMode};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct BuildArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Output root; files go to OUT/aotune/<name>/.
    #[arg(long, default_value = "target/aotune-build")]
    pub out: PathBuf,
    /// Module name (default: the model file's stem).
    #[arg(long)]
    pub name: Option<String>,
    /// Tuning log (`*.best.json`).
    #[arg(long)]
    pub tuning: Option<PathBuf>,
    /// Render sources only; do not run nvcc.
    #[arg(long)]
    pub no_nvcc: bool,
    /// Have executor.rs read the weights from a file at load instead of embedding them.
    #[arg(long)]
    pub weights_file: bool,
}

pub fn build(args: BuildArgs) -> anyhow::Result<()> {
    let mut b = Build::new(&args.model.model)
        .precision(args.model.precision)
        .input_dtype(args.model.input_dtype)
        .fuse_depthwise_norm(args.model.fuse_depthwise_norm)
        .fuse_dense_norm(args.model.fuse_dense_norm)
        .dense_cublaslt(args.model.dense_cublaslt)
        .out_dir(&args.out)
        .skip_nvcc(args.no_nvcc)
        .weights(if args.weights_file {
            WeightsMode::File
        } else {
            WeightsMode::Embedded
        });
    if let Some(batch) = args.model.batch {
        b = b.batch(batch);
    }
    if let Some(t) = &args.tuning {
        b = b.tuning(t);
    }
    if let Some(n) = &args.name {
        b = b.name(n);
    }
    let started = std::time::Instant::now();
    for built in b
        .compile()
        .with_context(|| format!("building '{}'", args.model.model.display()))?
    {
        for note in built.notes.iter().chain(&built.info) {
            eprintln!("note: {note}");
        }
        println!(
            "built {} (batch {}, {}): {} kernels, {} launches, arena {} B, weights {} B -> {} ({:.1} s)",
            built.spec.name,
            built.spec.batch,
            built.spec.precision,
            built.spec.kernels.len(),
            built.spec.launches.len(),
            built.spec.arena_bytes,
            built.spec.weights.bytes,
            built.dir.display(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
