//! The tuner's builder: compiles candidate kernels to sm_90a cubins with
//! NVRTC, many at once (every core), each under a deadline, and reads
//! ptxas's report (registers, spills, shared memory) from the program log so
//! that hopeless candidates are pruned before anything runs on the GPU.
//!
//! NVRTC needs no GPU: this runs (and is tested) on machines without one.
//! `libnvrtc.so.13` is found through the loader's search path, or preloaded
//! from `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64` or the repo's pinned
//! wheels (`.tools/cuda`), so `LD_LIBRARY_PATH` need not be set.

use cudarc::nvrtc::{result, sys};
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Why NVRTC could not be used at all.
#[derive(Debug, thiserror::Error)]
pub enum NvrtcSetupError {
    #[error(
        "libnvrtc.so.13 (CUDA 13's runtime compiler) was not found; looked in the loader path and \
         {looked}. Install the CUDA 13 toolkit, set CUDA_HOME, or run `make cuda-tools` in the \
         aotune repo"
    )]
    NotFound { looked: String },
    #[error("cuda_fp16.h was not found for NVRTC; looked in {looked}. Set CUDA_HOME")]
    NoHeaders { looked: String },
}

/// ptxas's resource report for one kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PtxasReport {
    pub registers: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
    pub static_smem_bytes: u32,
    /// Bytes of the per-thread stack frame (local memory).
    pub stack_bytes: u32,
}

/// A compiled candidate.
#[derive(Debug, Clone)]
pub struct Cubin {
    pub image: Vec<u8>,
    pub report: PtxasReport,
    pub compile_time: Duration,
}

/// Why one candidate did not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompileFailure {
    Error(String),
    Timeout(Duration),
}

impl std::fmt::Display for CompileFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompileFailure::Error(log) => write!(f, "NVRTC: {log}"),
            CompileFailure::Timeout(d) => {
                write!(f, "compile timed out after {:.0} s", d.as_secs_f64())
            }
        }
    }
}

fn library_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        dirs.push(PathBuf::from(&home).join("lib64"));
        dirs.push(PathBuf::from(&home).join("lib"));
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    dirs.push(repo_wheels().join("lib"));
    dirs
}

fn include_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        dirs.push(PathBuf::from(home).join("include"));
    }
    dirs.push(PathBuf::from("/usr/local/cuda/include"));
    dirs.push(repo_wheels().join("include"));
    dirs
}

fn repo_wheels() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/cuda/nvidia/cu13")
}

/// Makes sure libnvrtc can be loaded, preloading it by full path when the
/// loader path lacks it (a later `dlopen` by soname then finds the loaded
/// copy). Returns the include directory for `cuda_fp16.h`.
pub fn setup() -> Result<PathBuf, NvrtcSetupError> {
    static SETUP: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let result = SETUP.get_or_init(|| {
        // SAFETY: loading CUDA's own libraries, whose initializers are benign.
        if !unsafe { sys::is_culib_present() } {
            let mut loaded = false;
            for dir in library_dirs() {
                let lib = dir.join("libnvrtc.so.13");
                if !lib.is_file() {
                    continue;
                }
                // The builtins library first: libnvrtc loads it by soname.
                for name in ["libnvrtc-builtins.so.13.0", "libnvrtc.so.13"] {
                    // SAFETY: as above; the handle is leaked so it stays loaded.
                    if let Ok(l) = unsafe { libloading::Library::new(dir.join(name)) } {
                        std::mem::forget(l);
                    }
                }
                // SAFETY: as above.
                loaded = unsafe { sys::is_culib_present() };
                if loaded {
                    break;
                }
            }
            if !loaded {
                return Err(format!(
                    "nf:{}",
                    library_dirs()
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        include_dirs()
            .into_iter()
            .find(|d| d.join("cuda_fp16.h").is_file())
            .ok_or_else(|| {
                format!(
                    "nh:{}",
                    include_dirs()
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    });
    match result {
        Ok(p) => Ok(p.clone()),
        Err(e) if e.starts_with("nf:") => Err(NvrtcSetupError::NotFound {
            looked: e[3..].to_string(),
        }),
        Err(e) => Err(NvrtcSetupError::NoHeaders {
            looked: e[3..].to_string(),
        }),
    }
}

/// The NVRTC options matching the build's nvcc flags (`-O3 -std=c++17`,
/// sm_90a SASS), plus ptxas's verbose report. `-default-device`: what nvcc
/// compiles must compile here, and nvcc takes the generic lambdas and
/// `constexpr` helpers inside device code (the row kernels' `each`) as
/// device code, where NVRTC in JIT mode would call them host functions and
/// fail every candidate of the task (tests/nvrtc_candidates.rs).
fn options(include: &Path) -> Vec<String> {
    vec![
        "--gpu-architecture=sm_90a".into(),
        "-std=c++17".into(),
        "-default-device".into(),
        "--ptxas-options=-v".into(),
        format!("--include-path={}", include.display()),
    ]
}

/// Compiles one source to a cubin (blocking).
pub fn compile(source: &str, name: &str, include: &Path) -> Result<Cubin, CompileFailure> {
    let start = Instant::now();
    let src = CString::new(source).map_err(|_| CompileFailure::Error("source has a NUL".into()))?;
    let cname = CString::new(name).map_err(|_| CompileFailure::Error("name has a NUL".into()))?;
    let prog = result::create_program(&src, Some(&cname))
        .map_err(|e| CompileFailure::Error(format!("create program: {e:?}")))?;
    let opts = options(include);
    // SAFETY: `prog` is a live program until destroyed below; the options
    // outlive the call.
    let compiled = unsafe { result::compile_program(prog, &opts) };
    let log = program_log(prog);
    let out = match compiled {
        Err(e) => Err(CompileFailure::Error(format!(
            "{e:?}\n{}",
            tail(&log, 2000)
        ))),
        Ok(()) => cubin(prog).map(|image| Cubin {
            image,
            report: parse_ptxas(&log),
            compile_time: start.elapsed(),
        }),
    };
    // SAFETY: destroyed once, after its last use.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

fn program_log(prog: sys::nvrtcProgram) -> String {
    // SAFETY: `prog` is live; the returned buffer is NUL-terminated.
    match unsafe { result::get_program_log(prog) } {
        Ok(raw) => unsafe { CStr::from_ptr(raw.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
        Err(_) => String::new(),
    }
}

fn cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>, CompileFailure> {
    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully for a real architecture, so it
    // has a cubin of `size` bytes, copied into a buffer of that size.
    unsafe {
        sys::nvrtcGetCUBINSize(prog, &mut size)
            .result()
            .map_err(|e| CompileFailure::Error(format!("cubin size: {e:?}")))?;
        let mut image = vec![0u8; size];
        sys::nvrtcGetCUBIN(prog, image.as_mut_ptr().cast())
            .result()
            .map_err(|e| CompileFailure::Error(format!("cubin: {e:?}")))?;
        Ok(image)
    }
}

fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    &s[start..]
}

/// Reads ptxas's `-v` lines (`Used N registers, …`, `N bytes stack frame,
/// N bytes spill stores, N bytes spill loads`). With several kernels in the
/// log, the largest values win.
pub fn parse_ptxas(log: &str) -> PtxasReport {
    let mut r = PtxasReport::default();
    let number_before = |line: &str, what: &str| -> Option<u32> {
        let at = line.find(what)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    for line in log.lines() {
        if let Some(v) = number_before(line, "registers") {
            r.registers = r.registers.max(v);
        }
        if let Some(v) = number_before(line, "bytes smem") {
            r.static_smem_bytes = r.static_smem_bytes.max(v);
        }
        if let Some(v) = number_before(line, "bytes stack frame") {
            r.stack_bytes = r.stack_bytes.max(v);
        }
        if let Some(v) = number_before(line, "bytes spill stores") {
            r.spill_store_bytes = r.spill_store_bytes.max(v);
        }
        if let Some(v) = number_before(line, "bytes spill loads") {
            r.spill_load_bytes = r.spill_load_bytes.max(v);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_ptxas_report() {
        let log = "ptxas info    : Compiling entry function 'k' for 'sm_90'\n\
                   ptxas info    : Function properties for k\n\
                   \x20   16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n\
                   ptxas info    : Used 168 registers, used 1 barriers, 4 bytes smem, 400 bytes cmem[0]\n";
        let r = parse_ptxas(log);
        assert_eq!(
            r,
            PtxasReport {
                registers: 168,
                spill_store_bytes: 8,
                spill_load_bytes: 12,
                static_smem_bytes: 4,
                stack_bytes: 16,
            }
        );
        assert_eq!(parse_ptxas(""), PtxasReport::default());
    }
}
