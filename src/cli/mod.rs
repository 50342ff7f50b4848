//! Command-line interface: argument definitions and dispatch.

mod dump;
mod model_args;
mod run;
mod zoo;

use clap::{Parser, Subcommand};

/// aotune: an ahead-of-time compiler from ONNX to specialized CUDA kernels.
///
/// Today's subcommands need no GPU: they import, optimize and plan a model,
/// and run it on the CPU reference executor.
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
    /// Write a ResNet from the zoo (torchvision topology, deterministic weights) as ONNX.
    Zoo(zoo::ZooArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Dump(args) => dump::dump(args),
        Command::Run(args) => run::run(args),
        Command::Zoo(args) => zoo::zoo(args),
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
