//! The default model the `aotune` binary embeds: zoo ResNet-50 at batch 1,
//! fp16. Shared by the root build script and the `generated/` check, so both
//! make exactly the same build.

use crate::build::{Build, BuildError, Nvcc};
use crate::ir::Precision;
use crate::zoo::{write_resnet, ResNetDepth, DEFAULT_SEED};
use std::path::Path;

pub const BATCH: usize = 1;
pub const PRECISION: Precision = Precision::Fp16;
pub const NAME: &str = "resnet50";

/// The build of the default model (writing the zoo model first if absent).
pub fn build(model: &Path, tuning: &str) -> Result<Build, String> {
    if !model.is_file() {
        write_resnet(ResNetDepth::R50, DEFAULT_SEED, model)
            .map_err(|e| format!("cannot write the default model: {e}"))?;
    }
    Ok(Build::new(model)
        .tuning(tuning)
        .batch(BATCH)
        .precision(PRECISION)
        .name(NAME))
}

/// For the root build script: compiles the default model into `OUT_DIR`.
/// An error means the binary is built without it (the message says why).
pub fn embed(model: &Path, tuning: &str) -> Result<(), String> {
    println!("cargo:rerun-if-changed={}", model.display());
    println!("cargo:rerun-if-changed={tuning}");
    println!("cargo:rerun-if-env-changed=AOTUNE_NO_EMBED");
    if std::env::var_os("AOTUNE_NO_EMBED").is_some() {
        return Err(
            "AOTUNE_NO_EMBED is set: building the aotune binary without an embedded GPU model"
                .into(),
        );
    }
    if let Err(e) = Nvcc::find() {
        return Err(format!(
            "building the aotune binary without an embedded GPU model: {e}. \
             `aotune bench`/`verify` will compile kernels at run time (they need nvcc then)"
        ));
    }
    build(model, tuning)?
        .compile()
        .map(|_| ())
        .map_err(|e: BuildError| format!("building the default model failed: {e}"))
}
