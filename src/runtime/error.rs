//! What can go wrong loading or running a compiled model on the GPU.
//!
//! Every variant says what was expected, what was found and what to do about
//! it: a missing driver names the driver version aotune needs, a memory
//! failure says how many bytes were asked for and how many were free, a
//! length mismatch names the tensor and its shape, and any other CUDA failure
//! names the driver call and the launch (node and kernel) or step it came
//! from. Nothing in the runtime panics on these paths.

use std::fmt;
use std::path::PathBuf;

use cudarc::driver::result::DriverError;

/// The CUDA version aotune's kernels are built with (nvcc 13.0, sm_90): the
/// driver must support at least this version (driver 580 or newer).
pub const REQUIRED_CUDA: CudaVersion = CudaVersion(13000);

/// A CUDA version as the driver reports it (`1000 * major + 10 * minor`),
/// displayed as `major.minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CudaVersion(pub i32);

impl fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0 / 1000, (self.0 % 1000) / 10)
    }
}

/// Why loading or running a model failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// `libcuda.so.1` cannot be loaded.
    #[error(
        "no NVIDIA driver found (libcuda.so.1 not loadable); aotune's GPU path needs an NVIDIA \
         driver >= 580 (CUDA {REQUIRED_CUDA}): install it, or put the directory holding \
         libcuda.so.1 on LD_LIBRARY_PATH; the CPU reference runs without a GPU with `aotune run`"
    )]
    NoDriver,
    /// The driver loaded but reports no usable device.
    #[error(
        "no CUDA device is visible ({detail}); check `nvidia-smi` and CUDA_VISIBLE_DEVICES; the \
         CPU reference runs without a GPU with `aotune run`"
    )]
    NoDevice { detail: String },
    /// `LoadOptions::device` is not one of the visible devices.
    #[error(
        "CUDA device {ordinal} was requested but {count} device(s) are visible (ordinals 0..{count}); \
         pick another device or check CUDA_VISIBLE_DEVICES"
    )]
    DeviceOutOfRange { ordinal: usize, count: usize },
    /// The driver is older than the CUDA version the kernels were built with.
    #[error(
        "the NVIDIA driver supports CUDA {found} but aotune's kernels need CUDA {required} \
         (driver >= 580){detail}; update the NVIDIA driver"
    )]
    DriverTooOld {
        found: CudaVersion,
        required: CudaVersion,
        /// Empty, or `; <driver call>: <error>` when a call revealed it.
        detail: String,
    },
    /// The kernel image has neither machine code for this GPU nor PTX the
    /// driver can compile for it.
    #[error(
        "the kernels contain no code for {device} (sm_{sm}) that driver CUDA {driver} can run \
         ({code}); they are built for sm_90 with CUDA {REQUIRED_CUDA}: rebuild them for sm_{sm}, \
         or update the driver if it is older than CUDA {REQUIRED_CUDA}"
    )]
    NoBinaryForGpu {
        device: String,
        sm: u32,
        driver: CudaVersion,
        code: String,
    },
    /// Some kernels use Hopper-only instructions (wgmma, sm_90a).
    #[error(
        "{kernels} kernels (e.g. {first}) use Hopper's wgmma instructions (sm_90a), which \
         {device} (sm_{sm}) does not have: tune or build this model on an sm_90 GPU, or give \
         those tasks mma.sync configs in the tuning log"
    )]
    NeedsHopper {
        device: String,
        sm: u32,
        kernels: usize,
        first: String,
    },
    /// The kernels' PTX is newer than the driver can compile.
    #[error(
        "the kernels' PTX was written by a newer CUDA than driver CUDA {driver} can compile \
         ({code}); build them with the pinned nvcc {REQUIRED_CUDA}, or update the NVIDIA driver"
    )]
    PtxTooNew { driver: CudaVersion, code: String },
    /// The kernel bytes are not a cubin, fatbin or PTX image the driver accepts.
    #[error(
        "the kernel image ({bytes} bytes) is not a valid cubin, fatbin or PTX ({code}); the file is \
         truncated or not the build's `kernels.cubin`"
    )]
    InvalidKernelImage { bytes: usize, code: String },
    /// A kernel symbol the spec names is not in the loaded image.
    #[error(
        "kernel `{symbol}` (kernels[{index}] in the spec) is not in the cubin; the cubin and the \
         manifest come from different builds: rebuild the model"
    )]
    MissingKernel { symbol: String, index: usize },
    /// A device allocation failed for lack of memory.
    #[error(
        "out of GPU memory allocating {requested} bytes for the {what} on {device}: {free} of \
         {total} bytes are free; free memory held by other processes (`nvidia-smi`) or use a \
         smaller batch"
    )]
    OutOfMemory {
        what: &'static str,
        device: String,
        requested: u64,
        free: u64,
        total: u64,
    },
    /// A pinned host allocation failed.
    #[error(
        "cannot allocate {requested} bytes of pinned host memory for the {what} ({code}); the \
         system is short of page-lockable memory (see `ulimit -l`)"
    )]
    HostOutOfMemory {
        what: &'static str,
        requested: u64,
        code: String,
    },
    /// The caller's buffer does not have the tensor's element count.
    #[error(
        "{role} `{tensor}` has shape {shape:?} = {expected} f32 elements, but the buffer passed \
         has {got}"
    )]
    WrongLength {
        role: &'static str,
        tensor: String,
        shape: Vec<usize>,
        expected: usize,
        got: usize,
    },
    /// [`crate::runtime::Model::infer_staged_rows`] was asked for no rows,
    /// more than the batch, or a part of a model whose output's first
    /// dimension is not the batch.
    #[error(
        "cannot run {rows} rows of model input `{tensor}` {shape:?}: a batch holds 1 to {batch} \
         rows, and fewer than {batch} only when the output's first dimension is the batch too \
         ({output_rows} here)"
    )]
    RowsOutOfRange {
        tensor: String,
        shape: Vec<usize>,
        rows: usize,
        batch: usize,
        output_rows: usize,
    },
    /// No compiled batch size takes an input of this length.
    #[error(
        "the input has {got} f32 elements, but this model was compiled for batch sizes {batches:?} \
         taking {lengths:?} elements: pass a whole batch of one of those sizes, or add the batch \
         size to include_model!'s `batch = [...]`"
    )]
    NoBatchForLength {
        got: usize,
        lengths: Vec<usize>,
        batches: Vec<usize>,
    },
    /// The weights file beside the binary could not be read.
    #[error(
        "cannot read the weights of model `{model}` from '{path}': {message}; copy the \
         build's weight file beside the binary, or build with embedded weights"
    )]
    WeightsFile {
        model: String,
        path: String,
        message: String,
    },
    /// The weight blob has another size than the spec says.
    #[error(
        "the weights blob is {got} bytes but model `{model}` expects {expected}; the weights \
         belong to another build: rebuild the model or pass its own weights"
    )]
    WeightsSize {
        model: String,
        expected: u64,
        got: u64,
    },
    /// The weight blob's FNV-1a 64 differs from the spec's.
    #[error(
        "the weights blob hashes to {got:016x} (FNV-1a 64) but model `{model}` expects \
         {expected:016x}; the weights are corrupt or belong to another build: rebuild the model"
    )]
    WeightsHash {
        model: String,
        expected: u64,
        got: u64,
    },
    /// The spec is inconsistent (an offset out of range, a bad index, ...).
    #[error("invalid model spec for `{model}`: {reason}; the build is broken or the manifest was edited")]
    InvalidSpec { model: String, reason: String },
    /// The spec was written by another format version.
    #[error(
        "{origin} has format version {found} but this runtime reads version {expected}; rebuild \
         the model with this aotune"
    )]
    FormatVersion {
        origin: String,
        found: u32,
        expected: u32,
    },
    /// A launch asks for more than this GPU or kernel allows.
    #[error("launch {index} (node `{node}`, kernel `{kernel}`) cannot run on {device}: {reason}")]
    LaunchConfig {
        index: usize,
        node: String,
        kernel: String,
        device: String,
        reason: String,
    },
    /// A cuBLASLt call of a Dense launch failed (or its spec cannot be run).
    #[error(
        "cuBLASLt {call} failed for node `{node}`: {status}; rebuild without \
         `--dense-cublaslt` (or without the log's cuBLASLt records) to run it as a kernel"
    )]
    Matmul {
        node: String,
        call: &'static str,
        status: String,
    },
    /// The model runs Dense layers through cuBLASLt but the library is missing.
    #[error(
        "node `{node}` runs through cuBLASLt, but libcublasLt cannot be loaded: install the \
         CUDA toolkit's cuBLAS (libcublasLt.so.13) or put its directory on LD_LIBRARY_PATH, \
         or rebuild without `--dense-cublaslt`"
    )]
    MatmulLibraryMissing { node: String },
    /// `Model::load_kernel` or `set_launch_kernel` refused a kernel.
    #[error("cannot take kernel turns: {reason}")]
    KernelTurns { reason: String },
    #[error("cannot put another kernel into the model's launches: {reason}")]
    KernelSwap { reason: String },
    /// Any other CUDA driver failure.
    #[error("{call} failed while {during}: {}", describe(.source))]
    Cuda {
        call: &'static str,
        during: String,
        #[source]
        source: DriverError,
    },
    /// A model file cannot be read.
    #[error("cannot read `{}`: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `manifest.json` does not parse as a [`aotune_spec::artifact::ModelSpec`].
    #[error("`{}` is not a valid aotune manifest: {source}", .path.display())]
    Manifest {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A model file does not match its manifest.
    #[error("`{}` does not match its manifest: {problem}", .path.display())]
    FileMismatch {
        path: PathBuf,
        problem: Box<RuntimeError>,
    },
}

impl RuntimeError {
    /// A [`RuntimeError::Cuda`] mapper for `map_err`: `during` is only turned
    /// into a `String` when the call failed, so success paths do not allocate.
    pub(crate) fn cuda(
        call: &'static str,
        during: &'static str,
    ) -> impl FnOnce(DriverError) -> Self {
        move |source| RuntimeError::Cuda {
            call,
            during: during.to_string(),
            source,
        }
    }
}

/// `CUDA_ERROR_X: description`, from the driver's own tables.
pub(crate) fn describe(error: &DriverError) -> String {
    let name = error
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("CUresult {}", error.0 as u32));
    match error.error_string() {
        Ok(text) => format!("{name}: {}", text.to_string_lossy()),
        Err(_) => name,
    }
}

/// Only the error's name (`CUDA_ERROR_X`), for messages that explain it themselves.
pub(crate) fn error_name(error: &DriverError) -> String {
    error
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("CUresult {}", error.0 as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_versions_display_as_major_dot_minor() {
        assert_eq!(CudaVersion(13000).to_string(), "13.0");
        assert_eq!(CudaVersion(12080).to_string(), "12.8");
        assert_eq!(CudaVersion(11040).to_string(), "11.4");
        assert!(CudaVersion(12090) < REQUIRED_CUDA);
    }

    #[test]
    fn messages_name_what_was_expected_and_found() {
        let e = RuntimeError::DriverTooOld {
            found: CudaVersion(12040),
            required: REQUIRED_CUDA,
            detail: String::new(),
        };
        let text = e.to_string();
        assert!(
            text.contains("CUDA 12.4") && text.contains("CUDA 13.0"),
            "{text}"
        );

        let e = RuntimeError::WrongLength {
            role: "input",
            tensor: "input".into(),
            shape: vec![1, 3, 224, 224],
            expected: 150528,
            got: 7,
        };
        let text = e.to_string();
        assert!(
            text.contains("[1, 3, 224, 224]") && text.contains("150528"),
            "{text}"
        );
        assert!(text.contains("has 7"), "{text}");

        let e = RuntimeError::OutOfMemory {
            what: "activation arena",
            device: "NVIDIA H200".into(),
            requested: 1 << 40,
            free: 1 << 30,
            total: 1 << 37,
        };
        let text = e.to_string();
        assert!(text.contains(&(1u64 << 40).to_string()), "{text}");
        assert!(text.contains(&(1u64 << 30).to_string()), "{text}");

        let text = RuntimeError::NoDriver.to_string();
        assert!(
            text.contains("libcuda.so.1") && text.contains("580"),
            "{text}"
        );
        assert!(text.contains("aotune run"), "{text}");
    }
}
