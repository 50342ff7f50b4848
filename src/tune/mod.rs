//! `aotune tune` on a GPU: the builder (NVRTC, every core), the measuring
//! worker process and its supervisor, and the [`GpuMeasurer`] that ties them
//! to the search in [`aotune_compiler::tune`].

mod compare;
pub mod compile_pool;
pub mod compile_process;
mod gpu_measurer;
pub mod nvrtc;
pub mod protocol;
pub mod refine;
mod runner;
mod spaces;
mod worker;

pub use compile_process::compile_child_main;
pub use gpu_measurer::{median, tolerance, GpuMeasurer, MeasureSettings, MeasurerError};
pub use runner::{Runner, WorkerError};
pub use spaces::{tunable_tasks, TunableTask, CUBLASLT_CANDIDATES};
pub use worker::worker_main;
