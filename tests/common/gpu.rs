//! Helpers of the GPU integration tests (`gpu_kernels`, `gpu_fixtures`,
//! `gpu_runtime`, `gpu_templates`, …): whether to run or skip, build
//! directories, a process-wide limit on concurrent builds (nvcc), decoding
//! GPU tensors, and where the fixtures are (their weight refill is
//! `super::fixture`; running a generated module without a build directory
//! is `super::kernels`).
//!
//! Without an NVIDIA driver or without nvcc every GPU test prints one
//! `SKIPPED <test>: <reason>` line and passes. `AOTUNE_GPU_TESTS_DRY_RUN=1`
//! on a machine with nvcc but no driver runs everything up to
//! `Model::load` (builds, CPU references) and checks that the load fails
//! with `RuntimeError::NoDriver`.
//!
//! Environment:
//! - `AOTUNE_TEST_JOBS`: concurrent builds (default: the number of cores);
//! - `AOTUNE_GPU_TEST_TMP`: where build directories go (default: the
//!   system temp dir); `AOTUNE_KEEP_BUILDS=1` keeps them;
//! - `NVCC` / `CUDA_HOME`: which nvcc `Build` uses (see `Nvcc::find`).

use aotune::runtime::{driver_present, LoadOptions, Model, ModelFiles, RuntimeError};
use aotune_compiler::build::Nvcc;
use aotune_compiler::ir::Precision;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Condvar, Mutex, OnceLock};

/// How far a GPU test can go on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Driver and nvcc: the whole test.
    Gpu,
    /// nvcc but no driver, with `AOTUNE_GPU_TESTS_DRY_RUN` set: builds and
    /// CPU references only; loads must fail with `RuntimeError::NoDriver`.
    DryRun,
}

fn dry_run_requested() -> bool {
    std::env::var_os("AOTUNE_GPU_TESTS_DRY_RUN").is_some_and(|v| !v.is_empty() && v != "0")
}

/// `Some(mode)`, or `None` after printing `SKIPPED <test>: <reason>`.
pub fn mode_or_skip(test: &str) -> Option<Mode> {
    let nvcc = Nvcc::find();
    if !driver_present() {
        if dry_run_requested() {
            return match nvcc {
                Ok(_) => {
                    println!(
                        "DRY RUN {test}: no NVIDIA driver; building and checking up to Model::load"
                    );
                    Some(Mode::DryRun)
                }
                Err(e) => {
                    super::skip(test, &format!("dry run asked for but no nvcc: {e}"));
                    None
                }
            };
        }
        super::skip(
            test,
            "no NVIDIA driver (libcuda.so.1 not loadable); set AOTUNE_GPU_TESTS_DRY_RUN=1 to build without a GPU",
        );
        return None;
    }
    if let Err(e) = nvcc {
        let first_line = e.to_string();
        let first_line = first_line.lines().next().unwrap_or_default().to_string();
        super::skip(test, &format!("no nvcc for the build step: {first_line}"));
        return None;
    }
    hold_primary_context();
    Some(Mode::Gpu)
}

/// Keeps device 0's primary context retained for the whole process, so
/// loading and dropping many small models does not create and destroy the
/// context each time.
fn hold_primary_context() {
    static CONTEXT: OnceLock<Option<std::sync::Arc<cudarc::driver::CudaContext>>> = OnceLock::new();
    CONTEXT.get_or_init(|| cudarc::driver::CudaContext::new(0).ok());
}

/// The bar against the CPU emulation of the same precision
/// ([`Precision::tolerance_vs_emulation`]).
pub fn tolerance(p: Precision) -> f64 {
    p.tolerance_vs_emulation()
}

/// The bar against an fp32 reference such as ONNX Runtime
/// ([`Precision::tolerance_vs_fp32`]).
#[allow(dead_code)] // not every test binary compares with fp32
pub fn tolerance_vs_fp32(p: Precision) -> f64 {
    p.tolerance_vs_fp32()
}

/// True when a rel. L2 error fails its tolerance (NaN fails).
pub fn exceeds(err: f64, tol: f64) -> bool {
    err.is_nan() || err > tol
}

/// Loads a build directory on device 0. In a dry run, checks that the load
/// fails with `NoDriver` and returns `None`.
pub fn load(dir: &Path, mode: Mode) -> Result<Option<Model>, String> {
    load_with(dir, mode, &LoadOptions::default())
}

/// [`load`] with explicit load options.
#[allow(dead_code)] // not every test binary loads with options
pub fn load_with(dir: &Path, mode: Mode, options: &LoadOptions) -> Result<Option<Model>, String> {
    let files = ModelFiles::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    loaded(files.load(options), mode, &dir.display().to_string())
}

/// What a load (of `what`) must give in `mode`: the model on a GPU; in a
/// dry run `None`, after checking that it failed with `NoDriver`.
pub fn loaded(
    load: Result<Model, RuntimeError>,
    mode: Mode,
    what: &str,
) -> Result<Option<Model>, String> {
    match (load, mode) {
        (Ok(model), Mode::Gpu) => Ok(Some(model)),
        (Err(e), Mode::Gpu) => Err(format!("loading {what}: {e}")),
        (Err(RuntimeError::NoDriver), Mode::DryRun) => Ok(None),
        (Err(e), Mode::DryRun) => Err(format!(
            "dry run: loading {what} should fail with NoDriver, got: {e}"
        )),
        (Ok(_), Mode::DryRun) => Err("dry run: a model loaded without a driver".into()),
    }
}

/// A fresh directory, removed on drop unless `AOTUNE_KEEP_BUILDS` is set.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `<tmp>/aotune-<label>-<pid>-<n>`, `n` counting the calls of this
    /// process, so that tests running in parallel never share one.
    pub fn new(label: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self::at(&format!("aotune-{label}-{}-{n}", std::process::id()))
    }

    /// `<tmp>/aotune-<label>`, emptied first: for a directory held in a
    /// `static` (never dropped), so that reruns reuse one place.
    pub fn reused(label: &str) -> TempDir {
        Self::at(&format!("aotune-{label}"))
    }

    fn at(name: &str) -> TempDir {
        let root = std::env::var_os("AOTUNE_GPU_TEST_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let path = root.join(name);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("AOTUNE_KEEP_BUILDS").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Removes a build's directory once checked (kept with `AOTUNE_KEEP_BUILDS`).
pub fn discard_build(dir: &Path) {
    if std::env::var_os("AOTUNE_KEEP_BUILDS").is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

// ---- concurrency -----------------------------------------------------------

/// Concurrent builds allowed in this process (all tests together).
pub fn jobs() -> usize {
    std::env::var("AOTUNE_TEST_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
        })
}

static BUSY: Mutex<usize> = Mutex::new(0);
static FREED: Condvar = Condvar::new();

/// One of the process-wide [`jobs`] build slots, held until dropped.
pub struct Slot(());

pub fn slot() -> Slot {
    let limit = jobs();
    let mut busy = BUSY.lock().unwrap_or_else(|p| p.into_inner());
    while *busy >= limit {
        busy = FREED.wait(busy).unwrap_or_else(|p| p.into_inner());
    }
    *busy += 1;
    Slot(())
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut busy = BUSY.lock().unwrap_or_else(|p| p.into_inner());
        *busy -= 1;
        FREED.notify_one();
    }
}

/// Runs `work` over `items` on worker threads (each call holding a [`slot`])
/// and hands every result to `sink` on the calling thread as it arrives, so
/// the GPU checks of finished builds overlap with the builds still running.
pub fn pipeline<J: Send, R: Send>(
    items: Vec<J>,
    work: impl Fn(J) -> R + Sync,
    mut sink: impl FnMut(R),
) {
    let workers = jobs().min(items.len()).max(1);
    let queue = Mutex::new(items.into_iter().collect::<VecDeque<J>>());
    let (tx, rx) = mpsc::channel::<R>();
    std::thread::scope(|s| {
        for _ in 0..workers {
            let tx = tx.clone();
            let (queue, work) = (&queue, &work);
            s.spawn(move || loop {
                let job = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
                let Some(job) = job else { break };
                let result = {
                    let _slot = slot();
                    work(job)
                };
                if tx.send(result).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for r in rx {
            sink(r);
        }
    });
}

/// Runs `f`, turning a panic into an error (so one bad build does not hide
/// the results of the others).
pub fn catch<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        Err(format!("panicked: {message}"))
    })
}

// ---- tensors -----------------------------------------------------------------

/// The kernel family and template of a generated symbol
/// `<family>_<hash>_<tag>`, e.g. `conv/mma`, `dense/gemv`, `maxpool`.
pub fn template_of(symbol: &str) -> String {
    let parts: Vec<&str> = symbol.split('_').collect();
    let hash_at = parts
        .iter()
        .position(|p| (p.len() == 8 || p.len() == 16) && p.chars().all(|c| c.is_ascii_hexdigit()));
    let Some(i) = hash_at.filter(|&i| i > 0) else {
        return symbol.to_string();
    };
    let family = parts[..i].join("_");
    match parts.get(i + 1) {
        Some(kind) if matches!(*kind, "mma" | "simt" | "direct" | "gemv") => {
            format!("{family}/{kind}")
        }
        _ => family,
    }
}

/// Index of the largest element of each row of `classes` values.
pub fn top1(output: &[f32], classes: usize) -> Vec<usize> {
    output.chunks(classes).map(super::argmax).collect()
}

// ---- fixtures ------------------------------------------------------------------

/// A fixture's directory: the committed `tests/fixtures/<name>` (under the
/// working directory, where the GPU machine runs carried test binaries, or
/// under this crate), else `$AOTUNE_FIXTURE_PACK/<name>` when that variable
/// is set, else `<shared>/fixtures/<name>` (`$AOTUNE_SHARED` or `../shared`).
pub fn fixture_dir(name: &str) -> Result<PathBuf, String> {
    for root in [
        PathBuf::from("tests/fixtures"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"),
    ] {
        if root.join(name).join("meta.json").is_file() {
            return Ok(root.join(name));
        }
    }
    if let Some(pack) = std::env::var_os("AOTUNE_FIXTURE_PACK") {
        let dir = PathBuf::from(pack).join(name);
        return if dir.is_dir() {
            Ok(dir)
        } else {
            Err(format!(
                "{} is not a directory (AOTUNE_FIXTURE_PACK)",
                dir.display()
            ))
        };
    }
    let shared = super::shared_dir().ok_or_else(|| {
        "neither AOTUNE_FIXTURE_PACK nor ../shared (AOTUNE_SHARED) is present".to_string()
    })?;
    let dir = shared.join("fixtures").join(name);
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(format!("{} is not present", dir.display()))
    }
}

/// The files of a fixture a pack carries (everything in its directory is
/// small: the graph without weights, the fill rule, inputs and outputs).
pub fn fixture_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}
