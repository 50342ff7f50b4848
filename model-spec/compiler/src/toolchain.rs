//! The CUDA toolchain: the pinned compiler wheels and where nvcc is found.
//! The one place both the build step and the test harnesses look.
//!
//! Looked for in this order: `$NVCC`, `$CUDA_HOME/bin`, `PATH`,
//! `/usr/local/cuda/bin`, and the repository's pinned-wheel install
//! (`.tools/cuda/nvidia/cu13`, made by `make cuda-tools`). The wheel layout
//! keeps CUDA's headers beside `bin/`, so its include directory is passed
//! explicitly.

use std::path::{Path, PathBuf};

/// The pinned wheels (one per line in `cuda-wheels.txt`, which the Makefile
/// installs): mixing versions breaks nvcc.
pub const CUDA_WHEELS_FILE: &str = include_str!("../cuda-wheels.txt");

/// The pinned wheels as one pip argument list.
pub fn cuda_wheels() -> String {
    CUDA_WHEELS_FILE
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// How to get nvcc, for error messages.
pub fn install_hint() -> String {
    format!(
        "install the pinned CUDA 13.0 compiler wheels (about 105 MB, no GPU needed) with \
         `make cuda-tools` in the aotune repo, i.e. `python3 -m pip install --target .tools/cuda {}`, \
         or point $NVCC at an nvcc 13.0",
        cuda_wheels()
    )
}

/// The repository's pinned-wheel install.
pub fn repo_wheels() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/cuda/nvidia/cu13")
}

/// Where nvcc is looked for, in order.
pub fn nvcc_candidates() -> Vec<PathBuf> {
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

/// An nvcc on this machine and the include directory it needs (the wheel
/// layout's `<root>/include`; none for a regular CUDA install).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvccPath {
    pub path: PathBuf,
    pub include: Option<PathBuf>,
}

/// No nvcc was found: where we looked, and how to get one.
#[derive(Debug, Clone, thiserror::Error)]
#[error("nvcc not found (looked at: {looked}); {hint}")]
pub struct NoNvcc {
    pub looked: String,
    pub hint: String,
}

/// The first nvcc found.
pub fn find_nvcc() -> Result<NvccPath, NoNvcc> {
    let looked = nvcc_candidates();
    let Some(path) = looked.iter().find(|p| p.is_file()).cloned() else {
        return Err(NoNvcc {
            looked: looked
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            hint: install_hint(),
        });
    };
    let include = path.parent().and_then(Path::parent).and_then(|root| {
        let inc = root.join("include");
        (inc.join("cuda_fp16.h").is_file() && !root.join("targets").is_dir()).then_some(inc)
    });
    Ok(NvccPath { path, include })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_wheel_list_pins_every_package() {
        let wheels = super::cuda_wheels();
        assert_eq!(wheels.split(' ').count(), 6, "{wheels}");
        assert!(wheels.split(' ').all(|w| w.contains("==13.0.")), "{wheels}");
    }
}
