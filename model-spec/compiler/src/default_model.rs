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

/// What [`embed`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Embedded {
    /// The default model is compiled into `OUT_DIR`.
    Built,
    /// Not built, for the reason given (no nvcc, or `AOTUNE_NO_EMBED`): the
    /// binary is built without it.
    Skipped(String),
}

/// For the root build script: compiles the default model into `OUT_DIR`.
/// Without nvcc (or with `AOTUNE_NO_EMBED` set) it skips, saying why; with
/// nvcc present, a failed build is an error, which fails the build script.
pub fn embed(model: &Path, tuning: &str) -> Result<Embedded, String> {
    println!("cargo:rerun-if-changed={}", model.display());
    println!("cargo:rerun-if-changed={tuning}");
    println!("cargo:rerun-if-env-changed=AOTUNE_NO_EMBED");
    if std::env::var_os("AOTUNE_NO_EMBED").is_some() {
        return Ok(Embedded::Skipped(
            "AOTUNE_NO_EMBED is set: building the aotune binary without an embedded GPU model"
                .into(),
        ));
    }
    if let Err(e) = Nvcc::find() {
        return Ok(Embedded::Skipped(format!(
            "building the aotune binary without an embedded GPU model: {e}. \
             `aotune bench`/`verify` will compile kernels at run time (they need nvcc then)"
        )));
    }
    build(model, tuning)?
        .compile()
        .map(|_| Embedded::Built)
        .map_err(|e: BuildError| {
            format!(
                "nvcc is present but building the default model {} failed: {e} \
                 (set AOTUNE_NO_EMBED=1 to build the aotune binary without it)",
                model.display()
            )
        })
}
