//! Running nvcc for the build step (found by [`crate::toolchain`]).

use super::BuildError;
use crate::toolchain::{self, find_nvcc};
use std::path::{Path, PathBuf};
use std::process::Command;

pub use toolchain::install_hint;

/// A usable nvcc and the include directories it needs.
#[derive(Debug, Clone)]
pub struct Nvcc {
    pub path: PathBuf,
    pub includes: Vec<PathBuf>,
}

impl Nvcc {
    /// The first nvcc found, or an error saying where we looked and how to get one.
    pub fn find() -> Result<Nvcc, BuildError> {
        let found = find_nvcc().map_err(|e| BuildError::NoNvcc {
            looked: e.looked,
            hint: e.hint,
        })?;
        Ok(Nvcc {
            path: found.path,
            includes: found.include.into_iter().collect(),
        })
    }

    /// Compiles `source` to a fatbin holding sm_90a SASS (Hopper's wgmma
    /// needs the arch-specific target) and compute_90 PTX for other GPUs,
    /// in which the wgmma kernels trap.
    /// Returns the ptxas report (registers, spills).
    pub fn compile_fatbin(&self, source: &Path, output: &Path) -> Result<String, BuildError> {
        let mut cmd = Command::new(&self.path);
        cmd.arg("-fatbin")
            .arg("-O3")
            .arg("-std=c++17")
            .arg("-gencode=arch=compute_90a,code=sm_90a")
            .arg("-gencode=arch=compute_90,code=compute_90")
            .arg("-Xptxas=-v")
            .arg("-o")
            .arg(output)
            .arg(source);
        for inc in &self.includes {
            cmd.arg("-I").arg(inc);
        }
        if let Some(ccbin) = host_compiler() {
            cmd.arg("-ccbin").arg(ccbin);
        }
        let out = cmd.output().map_err(|e| BuildError::Nvcc {
            command: format!("{cmd:?}"),
            message: e.to_string(),
        })?;
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            return Err(BuildError::Nvcc {
                command: format!("{cmd:?}"),
                message: log,
            });
        }
        Ok(log)
    }
}

/// The host C++ compiler cargo would use, when called from a build script
/// (the `cc` crate reads TARGET/HOST); otherwise nvcc's default.
fn host_compiler() -> Option<PathBuf> {
    std::env::var_os("TARGET")?;
    let compiler = cc::Build::new()
        .cpp(true)
        .cargo_metadata(false)
        .try_get_compiler()
        .ok()?;
    Some(compiler.path().to_path_buf())
}
