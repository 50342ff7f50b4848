//! `aotune zoo`: write a zoo ResNet (same as the `aotune-zoo` tool).

use aotune_compiler::zoo::{write_resnet, ResNetDepth, DEFAULT_SEED};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ZooArgs {
    /// resnet18, resnet34, resnet50, resnet101 or resnet152.
    pub name: ResNetDepth,
    /// Where to write the model.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Weight seed (the same seed gives byte-identical files).
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
}

pub fn zoo(args: ZooArgs) -> anyhow::Result<()> {
    write_resnet(args.name, args.seed, &args.output)?;
    eprintln!("wrote {} to {}", args.name, args.output.display());
    Ok(())
}
