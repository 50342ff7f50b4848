//! `aotune-zoo`: writes a torchvision ResNet (18, 34, 50, 101 or 152) as an
//! ONNX file with deterministic synthetic weights and unfolded
//! BatchNormalization, e.g.
//! `aotune-zoo resnet50 -o models/resnet50.onnx --seed 0`.
//! The bytes depend only on the model name and the seed.

use std::path::PathBuf;
use std::process::ExitCode;

use aotune_compiler::zoo::{write_resnet, ResNetDepth, DEFAULT_SEED};
use clap::Parser;

/// Write a torchvision ResNet as ONNX (opset 17) with synthetic weights.
///
/// Every initializer `t` is filled from seed `fnv1a64(t.name) ^ SEED` with the
/// splitmix64 rule of the torchvision fixtures; convs have no bias and
/// BatchNormalization is not folded.
#[derive(Debug, Parser)]
#[command(name = "aotune-zoo", version)]
struct Args {
    /// Model to write: resnet18, resnet34, resnet50, resnet101 or resnet152.
    #[arg(required_unless_present = "list")]
    model: Option<ResNetDepth>,

    /// Output file [default: models/<MODEL>.onnx].
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,

    /// Seed XORed into every tensor's FNV-1a name hash.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,

    /// List the known models with their parameter counts and exit.
    #[arg(long)]
    list: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.list {
        for depth in ResNetDepth::ALL {
            println!("{depth:<10} {:>11} parameters", depth.parameter_count());
        }
        return ExitCode::SUCCESS;
    }
    let Some(depth) = args.model else {
        eprintln!(
            "error: no model given; known models: {}",
            ResNetDepth::known_names()
        );
        return ExitCode::FAILURE;
    };
    let path = args
        .output
        .unwrap_or_else(|| PathBuf::from("models").join(format!("{depth}.onnx")));
    match write_resnet(depth, args.seed, &path) {
        Ok(()) => {
            println!(
                "wrote {} ({depth}, seed {}, {} parameters)",
                path.display(),
                args.seed,
                depth.parameter_count()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
