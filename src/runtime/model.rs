//! A compiled model loaded on one GPU: [`Model::load`] does all the work that
//! allocates, [`Model::infer`] does none.
//!
//! Loading checks the spec and the weights, opens the device (primary
//! context, retained), creates a stream, loads the kernel image and looks up
//! every kernel, raises the dynamic shared memory limit of kernels that need
//! more than 48 KiB, uploads the weights once, allocates one zeroed arena and
//! pinned input/output staging buffers, resolves every launch's parameter
//! array, and captures the forward pass twice as CUDA graphs: `forward`
//! (kernels only, for `infer_device` and timing) and `io` (copy the staged
//! input into the arena, kernels, copy the output slot back to staging). It
//! then runs `io` once, which checks that every kernel runs and resolves every
//! driver symbol `infer` needs. `infer` is then: copy into pinned memory, one
//! graph launch, synchronize, copy out. How the input gets into pinned
//! memory (f32 converted to the input's dtype, or a server's rows written in
//! place, copied whole or row by row) is `model/staged_input.rs`.
//!
//! Each `Model` owns its stream, module, memory and graphs, so several models
//! (the same or different ones, on the same or different devices) coexist in
//! one process; the primary context is shared through the driver's reference
//! count. Every public method binds the model's context to the calling thread
//! first.

use std::sync::Arc;
use std::time::Instant;

use aotune_spec::artifact::{Arg, Launch, ModelSpec, TensorSlot};
use aotune_spec::target::{target_warning, Target};
use aotune_spec::Precision;
use cudarc::driver::result::DriverError;
use cudarc::driver::CudaContext;

use super::device_info::{DeviceInfo, MemoryReport};
use super::driver::{
    self, DeviceBuffer, Event, Function, GraphExec, KernelParams, Module, PinnedBuffer, Stream,
};
use super::error::RuntimeError;
use super::launch_plan::{self, DeviceBases};
use super::matmul::{MatmulLibrary, PreparedMatmul};
use cudarc::cublaslt::result::CublasError;

mod kernel_turns;
mod pinned_rows;
mod setup;
mod staged_input;
mod swap;
pub use kernel_turns::KernelTurns;
pub use pinned_rows::PinnedRows;
#[cfg(test)]
use setup::require_driver;
use setup::{
    alloc_device, alloc_pinned, check_arch_specific, configure_kernels, find_kernels,
    function_limits, load_module, shared_optin,
};
pub(crate) use setup::{open_device, query_device};
pub use staged_input::{InputStaging, StageTimes};
pub use swap::LaunchKernel;

/// Dynamic shared memory a launch may use without opting in.
const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;

/// How to load a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// CUDA device ordinal (default 0).
    pub device: usize,
    /// Hash the weights and compare with the spec's FNV-1a 64 (default on;
    /// about 0.1 s per 100 MB). Size is always checked.
    /// [`ModelFiles::read_dir`](super::ModelFiles::read_dir) already hashes.
    pub verify_weights_hash: bool,
    /// Whether kernels after the first are programmatic dependent launches
    /// (see [`LaunchMode`]); by default, at small batches only.
    pub launch: LaunchMode,
    /// How the calling thread waits for an inference to finish (see
    /// [`WaitMode`]); by default it spins.
    pub wait: WaitMode,
}

/// How [`Model::infer`] and its staged variants wait for the GPU (in a
/// server's config: `"spin"` or `"block"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitMode {
    /// `cuStreamSynchronize` under the context's default scheduling: the
    /// thread spins (lowest latency; one busy core per waiting thread).
    #[default]
    Spin,
    /// A blocking-sync event: the thread sleeps until the GPU is done (it
    /// wakes later than a spinning thread notices; frees the core, which
    /// matters when several executors wait at once next to network threads).
    Block,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            device: 0,
            verify_weights_hash: true,
            launch: LaunchMode::Auto,
            wait: WaitMode::Spin,
        }
    }
}

/// How the kernels of a model are launched.
///
/// A programmatic dependent launch (sm_90) lets a kernel's CTAs start as the
/// previous kernel's drain; the tensor-core convs stream their first weight
/// tiles in before they wait for it (`common.cuh`). Measured on the H200
/// (measured 2026-12-02 on the H200; docs/history.md), tuned ResNet-50 fp16, PDL against plain:
/// batch 1 0.2372 vs 0.2477 ms, batch 8 0.4238 vs 0.4502 ms, but batch 64
/// 1.9447 vs 1.9319 ms and batch 256 7.1506 vs 7.0619 ms (full grids leave
/// no room for the next kernel's CTAs, whose early start then only costs).
/// tf32 loses at batch 1 too: on an H100 (2026-12-06, ResNet-50, committed
/// log, same call) PDL 0.4090 ms against plain 0.3726 ms, so `Auto` keeps
/// programmatic launches to the 16-bit precisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LaunchMode {
    /// Programmatic for fp16/bf16 up to [`LaunchMode::PROGRAMMATIC_MAX_BATCH`],
    /// plain otherwise.
    #[default]
    Auto,
    Programmatic,
    Plain,
}

impl LaunchMode {
    /// The largest batch [`LaunchMode::Auto`] launches programmatically
    /// (the build loads the convs' weights before the grid dependency wait
    /// up to the same batch).
    pub const PROGRAMMATIC_MAX_BATCH: usize = aotune_spec::launch::PROGRAMMATIC_MAX_BATCH;

    /// Whether a model of this batch size and precision is launched
    /// programmatically.
    pub fn programmatic(self, batch: usize, precision: Precision) -> bool {
        match self {
            LaunchMode::Auto => {
                batch <= Self::PROGRAMMATIC_MAX_BATCH
                    && matches!(precision, Precision::Fp16 | Precision::Bf16)
            }
            LaunchMode::Programmatic => true,
            LaunchMode::Plain => false,
        }
    }
}

/// One launch, ready to go: the kernel handle and its parameter array, or
/// the cuBLASLt matmul it runs instead.
struct PreparedLaunch {
    work: Work,
    grid: [u32; 3],
    block: [u32; 3],
    smem_bytes: u32,
    params: KernelParams,
    /// Launched as a programmatic dependent launch.
    programmatic: bool,
}

/// What a launch runs.
enum Work {
    Kernel(Function),
    Matmul(PreparedMatmul),
}

/// Why enqueueing a launch failed.
enum LaunchFailure {
    Kernel(DriverError),
    Matmul(CublasError),
}

/// A compiled model, resident on one GPU.
pub struct Model {
    // Fields drop in declaration order, after `Drop::drop` has synchronized
    // the stream: the graphs before the module and the memory their nodes
    // use, the stream and the context last.
    io_graph: GraphExec,
    forward_graph: GraphExec,
    launches: Vec<PreparedLaunch>,
    _module: Module,
    /// Modules of kernels loaded after the build's ([`Model::load_kernel`]).
    extra_modules: Vec<Module>,
    input_staging: PinnedBuffer,
    output_staging: PinnedBuffer,
    arena: DeviceBuffer,
    weights: DeviceBuffer,
    stream: Stream,
    spec: ModelSpec,
    device: DeviceInfo,
    /// Why this model may run below its best here (see [`Model::warnings`]).
    warnings: Vec<String>,
    /// Distinguishes models, so a [`LaunchKernel`] is used only with its own.
    id: u64,
    /// Events around the copies and kernels of [`Model::infer_staged_rows_timed`],
    /// made on its first call.
    stage_events: Option<[Event; 5]>,
    /// The blocking-sync event inferences wait on ([`WaitMode::Block`]).
    done_event: Option<Event>,
    /// Shared with other models whose row runs take turns on the GPU
    /// ([`Model::take_kernel_turns`]).
    kernel_turns: Option<Arc<KernelTurns>>,
    ctx: Arc<CudaContext>,
}

impl Model {
    /// Opens device `options.device`, loads `cubin` (a cubin, fatbin or PTX
    /// image holding every kernel of `spec`), uploads `weights` once,
    /// allocates the arena and pinned staging, resolves every launch's
    /// parameters and captures the forward pass as CUDA graphs (see the
    /// module documentation). Fails with a [`RuntimeError`] naming the
    /// problem, never panics; without an NVIDIA driver it returns
    /// [`RuntimeError::NoDriver`].
    pub fn load(
        spec: &ModelSpec,
        cubin: &[u8],
        weights: &[u8],
        options: &LoadOptions,
    ) -> Result<Model, RuntimeError> {
        launch_plan::validate(spec)?;
        check_weights(spec, weights, options.verify_weights_hash)?;
        if cubin.is_empty() {
            return Err(RuntimeError::InvalidKernelImage {
                bytes: 0,
                code: "empty image".into(),
            });
        }

        let ctx = open_device(options.device)?;
        let device = query_device(&ctx, options.device)?;
        let stream = Stream::new(&ctx).map_err(RuntimeError::cuda(
            "cuStreamCreate",
            "creating the model's stream",
        ))?;
        check_arch_specific(spec, &device)?;
        let module = load_module(&ctx, cubin, &device)?;
        let functions = find_kernels(&module, spec)?;
        configure_kernels(spec, &functions, &ctx, &device)?;

        let mut weights_buffer = alloc_device(&ctx, &device, weights.len() as u64, "weights")?;
        weights_buffer
            .upload(weights, &stream)
            .map_err(RuntimeError::cuda(
                "cuMemcpyHtoDAsync",
                "uploading the weights",
            ))?;
        let mut arena = alloc_device(&ctx, &device, spec.arena_bytes, "activation arena")?;
        arena
            .zero(&stream)
            .map_err(RuntimeError::cuda("cuMemsetD8Async", "zeroing the arena"))?;
        stream.synchronize().map_err(RuntimeError::cuda(
            "cuStreamSynchronize",
            "uploading the weights and zeroing the arena",
        ))?;
        let input_staging = alloc_pinned(&ctx, spec.inputs[0].bytes, "input staging buffer")?;
        let mut output_staging =
            alloc_pinned(&ctx, spec.outputs[0].bytes, "output staging buffer")?;

        let bases = DeviceBases {
            arena: arena.ptr(),
            weights: weights_buffer.ptr(),
        };
        let programmatic = options.launch.programmatic(spec.batch, spec.precision);
        let library = match spec.launches.iter().find(|l| l.matmul.is_some()) {
            Some(first) => Some(Arc::new(MatmulLibrary::open(&ctx, &first.node)?)),
            None => None,
        };
        let mut warnings = tuning_warnings(spec, &device);
        let mut launches: Vec<PreparedLaunch> = Vec::with_capacity(spec.launches.len());
        for (index, launch) in spec.launches.iter().enumerate() {
            let addresses = launch_plan::resolve_args(&launch.args, bases);
            let work = match (&launch.matmul, &library) {
                (Some(m), Some(library)) => {
                    let prepared = library.prepare(
                        &ctx,
                        &launch.node,
                        m,
                        &launch.args,
                        &addresses,
                        weights,
                    )?;
                    warnings.extend(prepared.warning.clone());
                    Work::Matmul(prepared)
                }
                _ => Work::Kernel(functions[launch.kernel as usize]),
            };
            launches.push(PreparedLaunch {
                work,
                grid: launch.grid,
                block: launch.block,
                smem_bytes: launch.smem_bytes,
                params: KernelParams::new(addresses),
                programmatic: programmatic && index > 0,
            });
        }
        if library.is_some() {
            // cuBLASLt loads its kernels on first use: do that outside capture.
            for (index, prepared) in launches.iter().enumerate() {
                if let Work::Matmul(m) = &prepared.work {
                    // SAFETY: the operands point into the arena and weights.
                    unsafe { m.run(&stream) }.map_err(|e| {
                        launch_error(
                            spec,
                            index,
                            prepared,
                            "running once at load",
                            LaunchFailure::Matmul(e),
                        )
                    })?;
                }
            }
            stream.synchronize().map_err(RuntimeError::cuda(
                "cuStreamSynchronize",
                "running the cuBLASLt matmuls once at load",
            ))?;
        }

        let (forward_graph, io_graph) = capture_graphs(
            &stream,
            &launches,
            spec,
            &arena,
            &input_staging,
            &mut output_staging,
        )?;

        let done_event = match options.wait {
            WaitMode::Spin => None,
            WaitMode::Block => Some(Event::blocking(&ctx).map_err(RuntimeError::cuda(
                "cuEventCreate",
                "creating the blocking-sync event",
            ))?),
        };
        let model = Model {
            io_graph,
            forward_graph,
            launches,
            _module: module,
            extra_modules: Vec::new(),
            input_staging,
            output_staging,
            arena,
            weights: weights_buffer,
            stream,
            spec: spec.clone(),
            warnings,
            device,
            id: swap::next_model_id(),
            stage_events: None,
            done_event,
            kernel_turns: None,
            ctx,
        };
        for w in &model.warnings {
            tracing::warn!("{w}");
        }
        model
            .io_graph
            .launch(&model.stream)
            .map_err(RuntimeError::cuda(
                "cuGraphLaunch",
                "running the forward pass once at load",
            ))?;
        model.stream.synchronize().map_err(RuntimeError::cuda(
            "cuStreamSynchronize",
            "running the forward pass once at load (`aotune verify --per-layer` runs the \
             launches one by one to find the failing one)",
        ))?;
        // `infer_device` copies device to device, which nothing above did:
        // resolve that driver entry point here, where allocating is allowed.
        driver::resolve_device_to_device_copy(&model.stream);
        model
            .forward_graph
            .launch(&model.stream)
            .map_err(RuntimeError::cuda(
                "cuGraphLaunch",
                "running the kernels-only graph once at load",
            ))?;
        model.stream.synchronize().map_err(RuntimeError::cuda(
            "cuStreamSynchronize",
            "running the kernels-only graph once at load",
        ))?;
        // Under `WaitMode::Block` inferences record and wait on the done
        // event: do both once here, so that their driver entry points (which
        // cudarc resolves on first use, allocating) are resolved at load.
        if let Some(done) = &model.done_event {
            record(done, &model.stream)?;
            done.synchronize().map_err(RuntimeError::cuda(
                "cuEventSynchronize",
                "waiting on the blocking-sync event once at load",
            ))?;
        }
        Ok(model)
    }

    /// Runs the model on `input` (f32, row-major, `spec.inputs[0]`'s element
    /// count) and writes `output` (likewise for `spec.outputs[0]`). Copies
    /// into pinned staging (rounding to the input's dtype when it is f16 or
    /// bf16, see [`Model::input_staging`]), launches the captured graph
    /// (input copy, kernels, output copy), waits, copies out. Allocates
    /// nothing on the host or the device.
    pub fn infer(&mut self, input: &[f32], output: &mut [f32]) -> Result<(), RuntimeError> {
        self.stage_f32(input)?;
        self.infer_staged(output)
    }

    /// Like [`Model::infer`] with device buffers: copies `input` into the
    /// arena, launches the kernels-only graph, copies the output slot to
    /// `output`, and waits for all of it. Allocates nothing.
    ///
    /// # Safety
    ///
    /// `input` and `output` are device addresses (`CUdeviceptr`) usable from
    /// this model's context (same device), holding `spec().inputs[0].bytes`
    /// and `spec().outputs[0].bytes` bytes, not inside this model's memory;
    /// writes to `input` on other streams have completed.
    pub unsafe fn infer_device(&mut self, input: u64, output: u64) -> Result<(), RuntimeError> {
        self.bind()?;
        let input_slot = &self.spec.inputs[0];
        let output_slot = &self.spec.outputs[0];
        // SAFETY: the input slot lies inside the arena (validated); the
        // caller vouches for `input`.
        unsafe {
            driver::copy_device_to_device(
                self.arena.ptr() + input_slot.offset,
                input,
                input_slot.bytes as usize,
                &self.stream,
            )
        }
        .map_err(RuntimeError::cuda(
            "cuMemcpyDtoDAsync",
            "copying the input into the arena",
        ))?;
        self.launch_forward_graph()?;
        // SAFETY: as above, for the output slot and `output`.
        unsafe {
            driver::copy_device_to_device(
                output,
                self.arena.ptr() + output_slot.offset,
                output_slot.bytes as usize,
                &self.stream,
            )
        }
        .map_err(RuntimeError::cuda(
            "cuMemcpyDtoDAsync",
            "copying the output out of the arena",
        ))?;
        self.stream.synchronize().map_err(RuntimeError::cuda(
            "cuStreamSynchronize",
            "running the forward graph",
        ))
    }

    /// Runs the launches one at a time without the graph and, after each,
    /// calls `inspect(launch_index, slot, bytes)` with the raw bytes of the
    /// value it wrote (`spec().values[launch.output]`, in its own dtype and
    /// layout). Stops early when `inspect` returns `false`. A failing launch
    /// is reported with its index, node and kernel.
    pub fn run_layers(
        &mut self,
        input: &[f32],
        mut inspect: impl FnMut(usize, &TensorSlot, &[u8]) -> bool,
    ) -> Result<(), RuntimeError> {
        self.stage_f32(input)?;
        self.bind()?;
        let input_at = self.arena.ptr() + self.spec.inputs[0].offset;
        // SAFETY: the input slot is in the arena; the staging buffer is not
        // touched again before the synchronize below.
        unsafe { driver::copy_pinned_to_device(input_at, &self.input_staging, &self.stream) }
            .map_err(RuntimeError::cuda(
                "cuMemcpyHtoDAsync",
                "copying the input into the arena",
            ))?;
        let largest = self.spec.values.iter().map(|v| v.bytes).max().unwrap_or(0);
        let mut host = vec![0u8; largest as usize];
        for (index, (launch, prepared)) in self.spec.launches.iter().zip(&self.launches).enumerate()
        {
            let site = || format!("running {}", describe_launch(&self.spec, index, prepared));
            let slot = &self.spec.values[launch.output as usize];
            if writes_only_its_output(launch, slot) {
                // Poisoned with NaN (0xff bytes in f32, f16 and bf16), so a
                // kernel that leaves part of its output unwritten shows.
                // SAFETY: the slot is in the arena.
                unsafe {
                    driver::fill_range(
                        self.arena.ptr() + slot.offset,
                        0xff,
                        slot.bytes as usize,
                        &self.stream,
                    )
                }
                .map_err(|source| RuntimeError::Cuda {
                    call: "cuMemsetD8Async",
                    during: format!("poisoning the output of {}", site()),
                    source,
                })?;
            }
            // SAFETY: the parameters were resolved from validated offsets
            // into the arena and weights, both alive for `self`'s lifetime.
            unsafe { launch_prepared(prepared, &self.stream, prepared.programmatic) }
                .map_err(|failure| launch_error(&self.spec, index, prepared, "running", failure))?;
            let bytes = &mut host[..slot.bytes as usize];
            // SAFETY: the slot is in the arena; `bytes` is read only after
            // the synchronize below.
            unsafe {
                driver::copy_device_to_host(bytes, self.arena.ptr() + slot.offset, &self.stream)
            }
            .map_err(|source| RuntimeError::Cuda {
                call: "cuMemcpyDtoHAsync",
                during: format!(
                    "copying the output of {}",
                    describe_launch(&self.spec, index, prepared)
                ),
                source,
            })?;
            self.stream
                .synchronize()
                .map_err(|source| RuntimeError::Cuda {
                    call: "cuStreamSynchronize",
                    during: site(),
                    source,
                })?;
            if !inspect(index, slot, bytes) {
                break;
            }
        }
        Ok(())
    }

    /// Device milliseconds of each of `runs` (at least 1) back-to-back
    /// launches of the kernels-only graph, after `warmup` untimed ones,
    /// measured with CUDA events between consecutive launches. The input is
    /// whatever the arena holds (the last `infer`'s).
    pub fn time_graph(&mut self, warmup: usize, runs: usize) -> Result<Vec<f32>, RuntimeError> {
        let runs = runs.max(1);
        self.bind()?;
        let events = self.events(runs + 1)?;
        for _ in 0..warmup {
            self.launch_forward_graph()?;
        }
        record(&events[0], &self.stream)?;
        for event in &events[1..] {
            self.launch_forward_graph()?;
            record(event, &self.stream)?;
        }
        self.stream.synchronize().map_err(RuntimeError::cuda(
            "cuStreamSynchronize",
            "timing the forward graph",
        ))?;
        events
            .windows(2)
            .map(|pair| elapsed(&pair[0], &pair[1]))
            .collect()
    }

    /// Host wall-clock milliseconds of each of `runs` (at least 1) full
    /// [`Model::infer`] calls (copies in and out included) after `warmup`.
    pub fn time_infer(
        &mut self,
        input: &[f32],
        warmup: usize,
        runs: usize,
    ) -> Result<Vec<f32>, RuntimeError> {
        let mut output = vec![0f32; self.spec.outputs[0].elements()];
        for _ in 0..warmup {
            self.infer(input, &mut output)?;
        }
        (0..runs.max(1))
            .map(|_| {
                let start = Instant::now();
                self.infer(input, &mut output)?;
                Ok(start.elapsed().as_secs_f32() * 1e3)
            })
            .collect()
    }

    /// Median device milliseconds of each launch (indexed like
    /// `spec().launches`): each kernel is captured `REPEAT` times back to back
    /// in a graph of its own, timed `runs` (at least 1) times after `warmup`
    /// untimed runs, and the graph's time divided by `REPEAT`. The sum over
    /// layers is then comparable with [`Model::time_graph`]; what is left is
    /// the cost of the kernels' order (caches) and of the graph's boundaries.
    pub fn time_layers(&mut self, warmup: usize, runs: usize) -> Result<Vec<f32>, RuntimeError> {
        /// Back-to-back launches of one kernel per timed graph: the
        /// per-launch time then includes the gap a launch costs inside a
        /// graph (as in the forward pass), not an event's or a host launch's.
        const REPEAT: usize = 10;
        let runs = runs.max(1);
        self.bind()?;
        let events = self.events(runs + 1)?;
        let mut out = Vec::with_capacity(self.launches.len());
        for index in 0..self.launches.len() {
            let prepared = &self.launches[index];
            let graph = capture(&self.stream, "capturing a per-layer timing graph", || {
                for r in 0..REPEAT {
                    let programmatic = prepared.programmatic && r > 0;
                    // SAFETY: the parameters were resolved from validated offsets
                    // into the arena and weights, both alive for `self`'s lifetime.
                    unsafe { launch_prepared(prepared, &self.stream, programmatic) }.map_err(
                        |failure| launch_error(&self.spec, index, prepared, "capturing", failure),
                    )?;
                }
                Ok(())
            })?;
            let launch = |g: &GraphExec| {
                g.launch(&self.stream).map_err(RuntimeError::cuda(
                    "cuGraphLaunch",
                    "launching a per-layer timing graph",
                ))
            };
            for _ in 0..warmup {
                launch(&graph)?;
            }
            record(&events[0], &self.stream)?;
            for event in &events[1..] {
                launch(&graph)?;
                record(event, &self.stream)?;
            }
            self.stream.synchronize().map_err(RuntimeError::cuda(
                "cuStreamSynchronize",
                "timing the launches one by one",
            ))?;
            let samples = events
                .windows(2)
                .map(|pair| elapsed(&pair[0], &pair[1]).map(|ms| ms / REPEAT as f32))
                .collect::<Result<Vec<f32>, _>>()?;
            out.push(median(samples));
        }
        Ok(out)
    }

    /// Bytes the model holds (weights, arena, pinned staging) and the
    /// device's free and total memory right now.
    pub fn memory(&self) -> Result<MemoryReport, RuntimeError> {
        self.bind()?;
        let (free, total) = driver::memory_info().map_err(RuntimeError::cuda(
            "cuMemGetInfo",
            "reading the device's memory use",
        ))?;
        let matmuls = self.launches.iter().filter_map(|l| match &l.work {
            Work::Matmul(m) => Some(m.bias_bytes()),
            Work::Kernel(_) => None,
        });
        let (count, biases) = matmuls.fold((0, 0), |(n, b), bias| (n + 1, b + bias));
        let workspace = if count > 0 {
            super::matmul::WORKSPACE_BYTES
        } else {
            0
        };
        Ok(MemoryReport {
            weights_bytes: self.weights.bytes() as u64,
            arena_bytes: self.arena.bytes() as u64,
            staging_bytes: (self.input_staging.bytes() + self.output_staging.bytes()) as u64,
            library_bytes: (workspace + biases) as u64,
            device_free: free as u64,
            device_total: total as u64,
        })
    }

    /// Why this model may run below its best on this GPU: its kernels were
    /// tuned on another one. Also logged (`tracing::warn!`) at load.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The GPU's name, e.g. `NVIDIA H200`.
    pub fn device_name(&self) -> &str {
        &self.device.name
    }

    /// The GPU: name, compute capability, driver version, memory.
    pub fn device(&self) -> &DeviceInfo {
        &self.device
    }

    /// The spec the model was loaded from.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// The (primary) context the model runs in, for code that shares it.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn bind(&self) -> Result<(), RuntimeError> {
        self.ctx.bind_to_thread().map_err(RuntimeError::cuda(
            "cuCtxSetCurrent",
            "binding the model's CUDA context to this thread",
        ))
    }

    fn check_input(&self, got: usize) -> Result<(), RuntimeError> {
        check_length("input", &self.spec.inputs[0], got)
    }

    fn check_output(&self, got: usize) -> Result<(), RuntimeError> {
        check_length("output", &self.spec.outputs[0], got)
    }

    fn events(&self, count: usize) -> Result<Vec<Event>, RuntimeError> {
        (0..count)
            .map(|_| {
                Event::new(&self.ctx).map_err(RuntimeError::cuda(
                    "cuEventCreate",
                    "creating timing events",
                ))
            })
            .collect()
    }

    fn launch_forward_graph(&self) -> Result<(), RuntimeError> {
        self.forward_graph
            .launch(&self.stream)
            .map_err(RuntimeError::cuda(
                "cuGraphLaunch",
                "launching the forward graph",
            ))
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // Let in-flight work finish before the graphs, module and memory go;
        // errors cannot be reported from here, and the fields still drop.
        if self.ctx.bind_to_thread().is_ok() {
            let _ = self.stream.synchronize();
        }
    }
}

/// Launches one prepared launch on `stream`.
///
/// # Safety
///
/// The arena and weights the parameters point into are still allocated.
unsafe fn launch_prepared(
    prepared: &PreparedLaunch,
    stream: &Stream,
    programmatic: bool,
) -> Result<(), LaunchFailure> {
    match &prepared.work {
        // SAFETY: the function's module is loaded for as long as the `Model`
        // holding `prepared`; the parameter array matches the kernel (one
        // pointer per argument, as the build emitted it); the caller vouches
        // for the memory.
        Work::Kernel(function) => unsafe {
            driver::launch_with(
                *function,
                prepared.grid,
                prepared.block,
                prepared.smem_bytes,
                stream,
                &prepared.params,
                programmatic,
            )
        }
        .map_err(LaunchFailure::Kernel),
        // SAFETY: the caller vouches for the memory the operands point into.
        Work::Matmul(m) => unsafe { m.run(stream) }.map_err(LaunchFailure::Matmul),
    }
}

/// Names the launch: index, node, kernel, configuration and argument addresses.
fn describe_launch(spec: &ModelSpec, index: usize, prepared: &PreparedLaunch) -> String {
    let launch = &spec.launches[index];
    if let Some(m) = &launch.matmul {
        return format!(
            "launch {index} (node `{}`, cuBLASLt matmul M {} N {} K {}, args {:#x?})",
            launch.node,
            m.m,
            m.n,
            m.k,
            prepared.params.values()
        );
    }
    format!(
        "launch {index} (node `{}`, kernel `{}`, grid {:?}, block {:?}, {} B dynamic shared, \
         args {:#x?})",
        launch.node,
        spec.kernels[launch.kernel as usize],
        launch.grid,
        launch.block,
        launch.smem_bytes,
        prepared.params.values()
    )
}

fn launch_error(
    spec: &ModelSpec,
    index: usize,
    prepared: &PreparedLaunch,
    doing: &str,
    failure: LaunchFailure,
) -> RuntimeError {
    let during = format!("{doing} {}", describe_launch(spec, index, prepared));
    match failure {
        LaunchFailure::Kernel(source) => RuntimeError::Cuda {
            call: "cuLaunchKernel",
            during,
            source,
        },
        LaunchFailure::Matmul(e) => RuntimeError::Matmul {
            node: spec.launches[index].node.to_string(),
            call: "cublasLtMatmul",
            status: format!("{:?} while {during}", e.0),
        },
    }
}

/// Records every launch on a capturing stream.
fn record_launches(
    stream: &Stream,
    launches: &[PreparedLaunch],
    spec: &ModelSpec,
) -> Result<(), RuntimeError> {
    for (index, prepared) in launches.iter().enumerate() {
        // SAFETY: the parameters point into the arena and weights, which the
        // `Model` under construction owns and drops after its graphs.
        unsafe { launch_prepared(prepared, stream, prepared.programmatic) }
            .map_err(|failure| launch_error(spec, index, prepared, "capturing", failure))?;
    }
    Ok(())
}

/// The forward graph (kernels only) and the inference graph (input copy,
/// kernels, output copy) of `launches`.
fn capture_graphs(
    stream: &Stream,
    launches: &[PreparedLaunch],
    spec: &ModelSpec,
    arena: &DeviceBuffer,
    input_staging: &PinnedBuffer,
    output_staging: &mut PinnedBuffer,
) -> Result<(GraphExec, GraphExec), RuntimeError> {
    let forward_graph = capture(stream, "capturing the forward graph", || {
        record_launches(stream, launches, spec)
    })?;
    let input_at = arena.ptr() + spec.inputs[0].offset;
    let output_at = arena.ptr() + spec.outputs[0].offset;
    let io_graph = capture(stream, "capturing the inference graph", || {
        // SAFETY: the input slot holds `input_staging.bytes()` bytes of the
        // arena (validated); the staging buffer outlives the graph, which
        // `Model` drops first.
        unsafe { driver::copy_pinned_to_device(input_at, input_staging, stream) }.map_err(
            RuntimeError::cuda("cuMemcpyHtoDAsync", "capturing the input copy"),
        )?;
        record_launches(stream, launches, spec)?;
        // SAFETY: as above, for the output slot and the output staging.
        unsafe { driver::copy_device_to_pinned(output_staging, output_at, stream) }.map_err(
            RuntimeError::cuda("cuMemcpyDtoHAsync", "capturing the output copy"),
        )
    })?;
    Ok((forward_graph, io_graph))
}

/// Captures what `body` enqueues on `stream` and instantiates it. The
/// capture is always ended, so a failing `body` leaves the stream usable.
fn capture(
    stream: &Stream,
    what: &'static str,
    body: impl FnOnce() -> Result<(), RuntimeError>,
) -> Result<GraphExec, RuntimeError> {
    stream
        .begin_capture()
        .map_err(RuntimeError::cuda("cuStreamBeginCapture", what))?;
    let recorded = body();
    let ended = stream.end_capture();
    recorded?;
    let graph = ended.map_err(RuntimeError::cuda("cuStreamEndCapture", what))?;
    graph
        .instantiate()
        .map_err(RuntimeError::cuda("cuGraphInstantiate", what))
}

pub(super) fn record(event: &Event, stream: &Stream) -> Result<(), RuntimeError> {
    event.record(stream).map_err(RuntimeError::cuda(
        "cuEventRecord",
        "recording a timing event",
    ))
}

pub(super) fn elapsed(start: &Event, end: &Event) -> Result<f32, RuntimeError> {
    start.elapsed_ms(end).map_err(RuntimeError::cuda(
        "cuEventElapsedTime",
        "reading a timing event",
    ))
}

fn median(samples: Vec<f32>) -> f32 {
    let samples: Vec<f64> = samples.into_iter().map(f64::from).collect();
    aotune_spec::stats::median(&samples) as f32
}

fn check_length(role: &'static str, slot: &TensorSlot, got: usize) -> Result<(), RuntimeError> {
    let expected = slot.elements();
    if got == expected {
        Ok(())
    } else {
        Err(RuntimeError::WrongLength {
            role,
            tensor: slot.name.to_string(),
            shape: slot.shape.to_vec(),
            expected,
            got,
        })
    }
}

/// Size always; FNV-1a 64 when `hash` is set.
pub(crate) fn check_weights(
    spec: &ModelSpec,
    weights: &[u8],
    hash: bool,
) -> Result<(), RuntimeError> {
    if weights.len() as u64 != spec.weights.bytes {
        return Err(RuntimeError::WeightsSize {
            model: spec.name.to_string(),
            expected: spec.weights.bytes,
            got: weights.len() as u64,
        });
    }
    if hash {
        let got = aotune_spec::hash::fnv1a64(weights);
        if got != spec.weights.fnv1a64 {
            return Err(RuntimeError::WeightsHash {
                model: spec.name.to_string(),
                expected: spec.weights.fnv1a64,
                got,
            });
        }
    }
    Ok(())
}

/// The warning for a model tuned on other GPUs than `device`, if any.
fn tuning_warnings(spec: &ModelSpec, device: &DeviceInfo) -> Vec<String> {
    let targets: Vec<Target> = spec
        .tuned_on
        .iter()
        .map(|t| {
            let (gpu, sm) = t.split_once('|').unwrap_or((t, ""));
            Target {
                gpu: gpu.to_string(),
                sm: sm.to_string(),
                driver: String::new(),
                cuda: String::new(),
                timing: Default::default(),
            }
        })
        .collect();
    target_warning(&targets, &device.name, Some(&format!("sm_{}", device.sm())))
        .into_iter()
        .collect()
}

/// True when no argument of `launch` but its output points into the output
/// slot, so the slot can be poisoned before the launch (an in-place launch
/// reads it).
fn writes_only_its_output(launch: &Launch, slot: &TensorSlot) -> bool {
    let range = slot.offset..slot.offset + slot.bytes;
    launch
        .args
        .iter()
        .filter(|a| matches!(a, Arg::Arena(o) if range.contains(o)))
        .count()
        == 1
}

#[cfg(test)]
mod tests {

    #[test]
    fn auto_launches_programmatically_up_to_batch_8_only() {
        use super::LaunchMode;
        let (f16, tf32) = (Precision::Fp16, Precision::Tf32);
        assert!(LaunchMode::Auto.programmatic(1, f16));
        assert!(LaunchMode::Auto.programmatic(8, Precision::Bf16));
        assert!(!LaunchMode::Auto.programmatic(9, f16));
        assert!(!LaunchMode::Auto.programmatic(256, f16));
        assert!(!LaunchMode::Auto.programmatic(1, tf32));
        assert!(!LaunchMode::Auto.programmatic(1, Precision::Fp32));
        assert!(LaunchMode::Programmatic.programmatic(256, tf32));
        assert!(!LaunchMode::Plain.programmatic(1, f16));
        assert_eq!(super::LoadOptions::default().launch, LaunchMode::Auto);
    }

    #[test]
    fn a_model_tuned_on_another_gpu_warns_and_one_tuned_here_does_not() {
        let gpu = h200();
        let mut spec = relu_add_spec(8, &weights(8), 0);
        assert!(
            tuning_warnings(&spec, &gpu).is_empty(),
            "untuned: no warning"
        );
        spec.tuned_on = vec!["NVIDIA H200|sm_90".into()].into();
        assert!(tuning_warnings(&spec, &gpu).is_empty());
        spec.tuned_on = vec!["NVIDIA H100 80GB HBM3|sm_90".into()].into();
        let w = tuning_warnings(&spec, &gpu);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("H100") && w[0].contains("aotune tune"),
            "{}",
            w[0]
        );
    }
    use super::*;
    use crate::runtime::device_info::tests::h200;
    use crate::runtime::launch_plan::tests::relu_add_spec;

    #[test]
    fn wgmma_kernels_need_an_sm_90_gpu() {
        let mut gpu = h200();
        let mut spec = relu_add_spec(8, &weights(8), 0);
        assert!(check_arch_specific(&spec, &gpu).is_ok());
        spec.kernels = vec![
            "conv_1234abcd_mma_m64n64k32w2x2p3s1".into(),
            "conv_5678abcd_wgmma_m128n128p3s1".into(),
        ]
        .into();
        assert!(check_arch_specific(&spec, &gpu).is_ok());
        gpu.name = "NVIDIA B200".into();
        gpu.compute_capability = (10, 0);
        let e = check_arch_specific(&spec, &gpu).unwrap_err().to_string();
        assert!(
            e.starts_with("1 kernels (e.g. conv_5678abcd_wgmma_m128n128p3s1) use Hopper's wgmma")
                && e.contains("B200 (sm_100)"),
            "{e}"
        );
    }

    fn weights(n: usize) -> Vec<u8> {
        (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
    }

    #[test]
    fn load_without_a_driver_returns_no_driver() {
        // Where libcuda is present, the gate Model::load passes through
        // is checked with the library reported missing.
        if driver::driver_library_present() {
            let err = require_driver(false).expect_err("no driver, so the gate fails");
            assert!(matches!(err, RuntimeError::NoDriver), "{err}");
            assert!(err.to_string().contains("libcuda.so.1"), "{err}");
            assert!(require_driver(true).is_ok());
            return;
        }
        let w = weights(100);
        let spec = relu_add_spec(100, &w, 0);
        let err = Model::load(&spec, b"\x7fELF", &w, &LoadOptions::default())
            .err()
            .expect("no driver, so load fails");
        assert!(matches!(err, RuntimeError::NoDriver), "{err}");
        assert!(err.to_string().contains("libcuda.so.1"), "{err}");
    }

    #[test]
    fn spec_and_weights_are_checked_before_the_device() {
        let w = weights(100);
        let spec = relu_add_spec(100, &w, 0);
        let options = LoadOptions::default();

        let err = Model::load(&spec, b"\x7fELF", &w[..396], &options)
            .err()
            .unwrap();
        assert!(
            matches!(
                err,
                RuntimeError::WeightsSize {
                    expected: 400,
                    got: 396,
                    ..
                }
            ),
            "{err}"
        );

        let mut other = w.clone();
        other[0] ^= 1;
        let err = Model::load(&spec, b"\x7fELF", &other, &options)
            .err()
            .unwrap();
        assert!(matches!(err, RuntimeError::WeightsHash { .. }), "{err}");
        assert!(err
            .to_string()
            .contains(&format!("{:016x}", spec.weights.fnv1a64)));

        let err = Model::load(&spec, b"", &w, &options).err().unwrap();
        assert!(
            matches!(err, RuntimeError::InvalidKernelImage { bytes: 0, .. }),
            "{err}"
        );

        let mut broken = spec.clone();
        broken.launches.to_mut()[0].kernel = 7;
        let err = Model::load(&broken, b"\x7fELF", &w, &options)
            .err()
            .unwrap();
        assert!(matches!(err, RuntimeError::InvalidSpec { .. }), "{err}");
    }

    #[test]
    fn hash_check_can_be_skipped() {
        let w = weights(10);
        let spec = relu_add_spec(10, &w, 0);
        let mut other = w.clone();
        other[0] ^= 1;
        assert!(check_weights(&spec, &other, false).is_ok());
        assert!(check_weights(&spec, &other, true).is_err());
    }

    #[test]
    fn length_errors_name_the_tensor() {
        let w = weights(10);
        let spec = relu_add_spec(10, &w, 0);
        let err = check_length("input", &spec.inputs[0], 9).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("input `x`") && text.contains("[10]"),
            "{text}"
        );
        assert!(text.contains("has 9"), "{text}");
    }
}
