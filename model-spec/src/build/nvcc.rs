//! Finding and running nvcc.
//!
//! Looked for in this order: `$NVCC`, `$CUDA_HOME/bin`, `PATH`,
//! `/usr/local/cuda/bin`, and the repo's pinned-wheel install
//! (`.tools/cuda/nvidia/cu13`, made by `make cuda-tools`). The wheel layout
//! keeps CUDA's headers beside `bin/`, so its include directory is passed
//! explicitly.

use super::BuildError;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned wheels (DESIGN.md): mixing versions breaks nvcc.
pub const CUDA_WHEELS: &str =
    "nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88";

/// How to get nvcc, for error messages.
pub fn install_hint() -> String {
    format!(
        "install the pinned CUDA 13.0 compiler wheels (about 105 MB, no GPU needed) with \
         `make cuda-tools` in the aotune repo, i.e. `python3 -m pip install --target .tools/cuda {CUDA_WHEELS}`, \
         or point $NVCC at an nvcc 13.0"
    )
}

/// A usable nvcc and the include directories it needs.
#[derive(Debug, Clone)]
pub struct Nvcc {
    pub path: PathBuf,
    pub includes: Vec<PathBuf>,
}

fn repo_wheels() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/cuda/nvidia/cu13")
}

fn candidates() -> Vec<PathBuf> {
    let mut c = Vec::new();
    if let Some(p) = std::env::var_os("NVCC") {
        c.push(PathBuf::from(p));
    }
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        c.push(PathBuf::from(home).join("bin/nvcc"));
    }
    if let Some(path) = std::env::var_os("PATH") {
        c.extend(std::env::split_paths(&path).map(|d| d.join("nvcc")));
    }
    c.push(PathBuf::from("/usr/local/cuda/bin/nvcc"));
    c.push(repo_wheels().join("bin/nvcc"));
    c
}

impl Nvcc {
    /// The first nvcc found, or an error saying where we looked and how to get one.
    pub fn find() -> Result<Nvcc, BuildError> {
        let looked = candidates();
        let path = looked
            .iter()
            .find(|p| p.is_file())
            .cloned()
            .ok_or_else(|| BuildError::NoNvcc {
                looked: looked
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                hint: install_hint(),
            })?;
        let mut includes = Vec::new();
        if let Some(root) = path.parent().and_then(Path::parent) {
            // Wheel layout: <root>/bin/nvcc with headers in <root>/include.
            let inc = root.join("include");
            if inc.join("cuda_fp16.h").is_file() && !root.join("targets").is_dir() {
                includes.push(inc);
            }
        }
        Ok(Nvcc { path, includes })
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
