//! The GPU runtime: loads a compiled model (spec, kernel image, weights) onto
//! one NVIDIA GPU and runs it with no allocation per inference.
//!
//! [`Model::load`] does everything that allocates or can be prepared ahead:
//! context, module, weights upload, one activation arena, pinned staging,
//! parameter arrays, and the forward pass captured as a CUDA graph.
//! [`Model::infer`] copies the input in, launches the graph and copies the
//! output out. [`Model::run_layers`] runs launch by launch for per-layer
//! checks, and the `time_*` methods measure with CUDA events. [`ModelFiles`]
//! reads a build directory. The driver is reached through cudarc's
//! `result`/`sys` layer (dynamically loaded, so binaries start without a
//! GPU); all `unsafe` is in `driver.rs`, `matmul.rs` (Dense layers run
//! through cuBLASLt) and a few calls in `model.rs`.
//! Errors are [`RuntimeError`]s that say what to do; nothing panics.

mod device_info;
pub(crate) mod driver;
mod embedded;
mod error;
mod launch_plan;
pub(crate) mod matmul;
mod model;
mod model_files;
mod slot_decode;

#[cfg(test)]
mod gpu_tests;

pub use device_info::{DeviceInfo, MemoryReport};
pub use embedded::weights_path;
#[cfg(feature = "cli")]
pub(crate) use error::error_name;
pub use error::{CudaVersion, RuntimeError, REQUIRED_CUDA};
pub use launch_plan::{resolve_args, validate as validate_spec, DeviceBases};
#[cfg(feature = "cli")]
pub(crate) use model::{open_device, query_device};
pub use model::{
    InputStaging, KernelTurns, LaunchKernel, LaunchMode, LoadOptions, Model, PinnedRows,
    StageTimes, WaitMode,
};
pub use model_files::{ModelFiles, CUBIN_FILE, MANIFEST_FILE};
pub use slot_decode::decode_slot;
#[cfg(feature = "cli")]
pub(crate) use slot_decode::decode_values;

/// Whether an NVIDIA driver library can be loaded on this machine (no CUDA
/// call is made). [`Model::load`] checks this itself; callers can use it to
/// choose the CPU path up front.
pub fn driver_present() -> bool {
    driver::driver_library_present()
}
