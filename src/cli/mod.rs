//! Command-line interface: argument definitions and dispatch.

mod bench;
mod build;
mod classify;
mod dump;
mod embedded;
mod gpu_model;
mod model_args;
mod profile;
mod prune;
mod refine;
mod run;
#[cfg(feature = "serve")]
mod serve;
mod tune;
mod tune_progress;
mod verify;
mod zoo;

use clap::{Parser, Subcommand};

/// aotune: an ahead-of-time compiler from ONNX to specialized CUDA kernels.
///
/// `dump`, `run` and `zoo` need no GPU; `bench` and `verify` build the model's
/// kernels with nvcc and run them on an NVIDIA GPU.
#[derive(Debug, Parser)]
#[command(name = "aotune", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the optimized IR, the pass report, the task table and the memory plan.
    Dump(dump::DumpArgs),
    /// Run a model on the CPU reference executor (through its planned arena).
    Run(run::RunArgs),
    /// Run the build step: CUDA sources, kernels (nvcc), weights, executor.rs, plan.
    Build(build::BuildArgs),
    /// Time the model on the GPU (CPU reference where there is none).
    Bench(bench::BenchArgs),
    /// Compare the GPU with the CPU reference on the same random input.
    Verify(verify::VerifyArgs),
    /// Classify a JPEG/PNG image with an ImageNet model: top-K classes and their probabilities.
    Classify(classify::ClassifyArgs),
    /// Write a ResNet from the zoo (torchvision topology, deterministic weights) as ONNX.
    Zoo(zoo::ZooArgs),
    /// Measure kernel configs of every task on the GPU and write the tuning log.
    Tune(tune::TuneArgs),
    /// After `tune`: try each task's fastest configs in the model's own graph; keep the winners.
    Refine(refine::RefineArgs),
    /// Drop a tuning log's records that no build of the model uses any more (no GPU needed).
    Prune(prune::PruneArgs),
    /// Serve a model repository over KServe v2 HTTP and gRPC (Triton-compatible).
    #[cfg(feature = "serve")]
    Serve(serve::ServeArgs),
    /// The measuring process `tune` starts (internal).
    #[command(hide = true)]
    TuneWorker,
    /// Compiles one candidate for `tune --compile-in processes` (internal).
    #[command(hide = true, name = "nvrtc-compile")]
    NvrtcCompile,
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Dump(args) => dump::dump(args),
        Command::Run(args) => run::run(args),
        Command::Zoo(args) => zoo::zoo(args),
        Command::Bench(args) => bench::bench(args),
        Command::Build(args) => build::build(args),
        Command::Verify(args) => verify::verify(args),
        Command::Classify(args) => classify::classify(args),
        Command::Tune(args) => tune::tune_command(args),
        Command::Refine(args) => refine::refine_command(args),
        Command::Prune(args) => prune::prune(args),
        #[cfg(feature = "serve")]
        Command::Serve(args) => serve::serve_command(args),
        Command::TuneWorker => tune::worker(),
        Command::NvrtcCompile => tune::nvrtc_compile(),
    }
}

/// Writes to stdout; a closed pipe (`aotune dump … | head`) ends quietly.
pub fn print_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
