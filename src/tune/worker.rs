//! The measuring worker: a separate process (`aotune tune-worker`) that owns
//! the CUDA context, so a candidate that faults or hangs takes down only the
//! worker, which the tuner restarts ([`super::runner`]).
//!
//! For each candidate: load its cubin, poison the output, launch once and
//! compare with the session's reference output (relative L2), then time it:
//! a few untimed launches, then repeats of (evict L2 by writing a large
//! buffer, event, launch, event) until both a minimum count and a minimum
//! total are reached, or a maximum count. Every repeat is reported. A
//! session set up with `chain > 1` times each repeat as one launch of a CUDA
//! graph holding `chain` launches back to back (programmatic dependent
//! launches between them when asked), divided by `chain`, with no flush.

use super::compare;
use super::protocol::{ArgSpec, ArgType, Failure, Repeats, Reply, Request, Role};
use crate::runtime::driver::{self, DeviceBuffer, Event, Function, KernelParams, Module, Stream};
use crate::runtime::matmul::{MatmulLibrary, PreparedMatmul};
use crate::runtime::{error_name, open_device, query_device};
use aotune_compiler::artifact::LibraryMatmul;
use aotune_compiler::ir::DType;
use cudarc::cublaslt::result::CublasError;
use cudarc::cublaslt::sys::cublasStatus_t;
use cudarc::driver::result::DriverError;
use cudarc::driver::sys::CUresult;
use cudarc::driver::CudaContext;
use rayon::prelude::*;
use std::io::{BufRead, Write};
use std::sync::Arc;

/// Runs the worker on stdin/stdout until stdin closes or the context dies.
pub fn worker_main() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut worker: Option<Worker> = None;
    let mut ctx: Option<Arc<CudaContext>> = None;
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Request>(&line) {
            Err(e) => Reply::Error {
                message: format!("bad request: {e}"),
            },
            Ok(Request::Setup {
                args,
                seed,
                flush_bytes,
                chain,
                programmatic,
            }) => {
                worker = None;
                let timing = ChainTiming {
                    launches: chain.max(1),
                    programmatic,
                };
                match setup(&mut ctx, &args, seed, flush_bytes, timing) {
                    Ok((w, ready)) => {
                        worker = Some(w);
                        ready
                    }
                    Err(message) => Reply::Error { message },
                }
            }
            Ok(Request::Measure {
                cubin,
                symbol,
                grid,
                block,
                smem_bytes,
                role,
                tolerance,
                repeats,
            }) => match worker.as_mut() {
                None => Reply::Error {
                    message: "measure before setup".into(),
                },
                Some(w) => match std::fs::read(&cubin) {
                    Err(e) => Reply::Error {
                        message: format!("cannot read {}: {e}", cubin.display()),
                    },
                    Ok(image) => w.measure(
                        &image, &symbol, grid, block, smem_bytes, role, tolerance, repeats,
                    ),
                },
            },
            Ok(Request::MeasureMatmul {
                matmul,
                role,
                tolerance,
                repeats,
            }) => match worker.as_mut() {
                None => Reply::Error {
                    message: "measure before setup".into(),
                },
                Some(w) => w.measure_matmul(&matmul, role, tolerance, repeats),
            },
        };
        serde_json::to_writer(&mut out, &reply)?;
        out.write_all(b"\n")?;
        out.flush()?;
        if matches!(reply, Reply::Failed { fatal: true, .. }) {
            // The context is unusable; the tuner starts a new worker.
            std::process::exit(3);
        }
    }
    Ok(())
}

/// How a session times its repeats (`Request::Setup`'s `chain`).
#[derive(Debug, Clone, Copy)]
struct ChainTiming {
    /// Launches per repeat (1: a plain launch between events, after a flush).
    launches: u32,
    programmatic: bool,
}

struct Worker {
    ctx: Arc<CudaContext>,
    timing: ChainTiming,
    stream: Stream,
    args: Vec<(ArgSpec, DeviceBuffer)>,
    params: KernelParams,
    flush: DeviceBuffer,
    reference: Option<Vec<f32>>,
    output_host: Vec<u8>,
    events: Vec<(Event, Event)>,
    /// cuBLASLt, opened by the session's first `MeasureMatmul`.
    library: Option<Arc<MatmulLibrary>>,
}

/// Why running a kernel or a cuBLASLt matmul failed.
enum RunError {
    Driver(DriverError),
    Matmul(CublasError),
}

impl From<DriverError> for RunError {
    fn from(e: DriverError) -> Self {
        RunError::Driver(e)
    }
}

impl From<CublasError> for RunError {
    fn from(e: CublasError) -> Self {
        RunError::Matmul(e)
    }
}

impl RunError {
    fn reply(self, kind: Failure, doing: &str) -> Reply {
        match self {
            RunError::Driver(e) => Reply::Failed {
                kind,
                reason: format!("{doing}: {}", error_name(&e)),
                fatal: is_sticky(&e),
            },
            RunError::Matmul(e) => Reply::Failed {
                kind,
                reason: format!("{doing}: cuBLASLt {:?}", e.0),
                fatal: e.0 == cublasStatus_t::CUBLAS_STATUS_EXECUTION_FAILED,
            },
        }
    }
}

fn setup(
    ctx_slot: &mut Option<Arc<CudaContext>>,
    args: &[ArgSpec],
    seed: u64,
    flush_bytes: usize,
    timing: ChainTiming,
) -> Result<(Worker, Reply), String> {
    let ctx = match ctx_slot {
        Some(c) => c.clone(),
        None => {
            let c = open_device(0).map_err(|e| e.to_string())?;
            *ctx_slot = Some(c.clone());
            c
        }
    };
    ctx.bind_to_thread().map_err(|e| error_name(&e))?;
    let info = query_device(&ctx, 0).map_err(|e| e.to_string())?;
    let cuda = |call: &'static str| move |e: DriverError| format!("{call}: {}", error_name(&e));
    let stream = Stream::new(&ctx).map_err(cuda("cuStreamCreate"))?;
    let mut buffers = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        let mut b = DeviceBuffer::alloc(&ctx, a.bytes).map_err(cuda("cuMemAlloc"))?;
        if !a.output {
            b.upload(&fill_values(a, seed.wrapping_add(i as u64)), &stream)
                .map_err(cuda("cuMemcpyHtoDAsync"))?;
        }
        buffers.push((a.clone(), b));
    }
    let mut flush = DeviceBuffer::alloc(&ctx, flush_bytes.max(16)).map_err(cuda("cuMemAlloc"))?;
    flush.zero(&stream).map_err(cuda("cuMemsetD8Async"))?;
    stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
    let params = KernelParams::new(buffers.iter().map(|(_, b)| b.ptr()).collect());
    let output_bytes = args
        .iter()
        .filter(|a| a.output)
        .map(|a| a.bytes)
        .max()
        .unwrap_or(0);
    let ready = Reply::Ready {
        gpu: info.name.clone(),
        sm: format!("sm_{}", info.sm()),
        driver: info.driver.to_string(),
    };
    Ok((
        Worker {
            ctx,
            timing,
            stream,
            args: buffers,
            params,
            flush,
            reference: None,
            output_host: vec![0; output_bytes],
            events: Vec::new(),
            library: None,
        },
        ready,
    ))
}

/// Deterministic values in [-1, 1) (splitmix64 of the element index, so
/// the same whatever the thread count), encoded as `a.dtype`; filled on
/// every core (batch-256 inputs hold 100M elements).
fn fill_values(a: &ArgSpec, seed: u64) -> Vec<u8> {
    let size = a.dtype.size();
    let base = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut out = vec![0u8; a.bytes];
    let whole = a.bytes / size * size;
    out[..whole]
        .par_chunks_mut(size)
        .enumerate()
        .for_each(|(i, dst)| {
            let z = aotune_compiler::zoo::splitmix64(base.wrapping_add(i as u64));
            let v = ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            match a.dtype {
                ArgType::F32 => dst.copy_from_slice(&v.to_le_bytes()),
                ArgType::F16 => dst.copy_from_slice(&half::f16::from_f32(v).to_le_bytes()),
                ArgType::Bf16 => dst.copy_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
            }
        });
    out
}

fn storage_type(a: ArgType) -> DType {
    match a {
        ArgType::F32 => DType::F32,
        ArgType::F16 => DType::F16,
        ArgType::Bf16 => DType::BF16,
    }
}

/// Errors after which the context cannot be used again.
fn is_sticky(e: &DriverError) -> bool {
    !matches!(
        e.0,
        CUresult::CUDA_ERROR_INVALID_VALUE
            | CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
            | CUresult::CUDA_ERROR_INVALID_IMAGE
            | CUresult::CUDA_ERROR_NOT_FOUND
            | CUresult::CUDA_ERROR_OUT_OF_MEMORY
            | CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
            | CUresult::CUDA_ERROR_INVALID_PTX
            | CUresult::CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
    )
}

impl Worker {
    #[allow(clippy::too_many_arguments)]
    fn measure(
        &mut self,
        image: &[u8],
        symbol: &str,
        grid: [u32; 3],
        block: [u32; 3],
        smem_bytes: u32,
        role: Role,
        tolerance: f64,
        repeats: Repeats,
    ) -> Reply {
        let failed = |kind: Failure, call: &str, e: DriverError| Reply::Failed {
            kind,
            reason: format!("{call}: {}", error_name(&e)),
            fatal: is_sticky(&e),
        };
        if let Err(e) = self.ctx.bind_to_thread() {
            return failed(Failure::Fault, "cuCtxSetCurrent", e);
        }
        let module = match Module::load(&self.ctx, image) {
            Ok(m) => m,
            Err(e) => return failed(Failure::Launch, "cuModuleLoadData", e),
        };
        let function = match module.function(symbol) {
            Ok(f) => f,
            Err(e) => return failed(Failure::Launch, "cuModuleGetFunction", e),
        };
        // Above 48 KiB of shared memory (static + dynamic) a kernel must
        // opt in, as `Model::load` does.
        let static_bytes = match function.static_shared_bytes() {
            Ok(b) => b.max(0) as u32,
            Err(e) => return failed(Failure::Launch, "cuFuncGetAttribute", e),
        };
        if static_bytes + smem_bytes > 48 * 1024 {
            if let Err(e) = function.set_max_dynamic_shared_bytes(smem_bytes as i32) {
                return failed(Failure::Launch, "cuFuncSetAttribute", e);
            }
        }
        // Check: poison the output, run once, compare.
        let out = match self.poison_output() {
            Ok(out) => out,
            Err(reply) => return reply,
        };
        if let Err(e) = self.launch(function, grid, block, smem_bytes) {
            return failed(Failure::Launch, "cuLaunchKernel", e);
        }
        let rel_l2 = match self.compare_output(out, role, tolerance) {
            Ok(rel) => rel,
            Err(reply) => return reply,
        };
        match self.time(function, grid, block, smem_bytes, repeats) {
            Ok(repeats_us) => Reply::Measured { repeats_us, rel_l2 },
            Err(e) => failed(Failure::Fault, "timing the kernel", e),
        }
        // `module` unloads here, after the stream is idle.
    }

    /// Poisons the output (all bits set: NaN) before a checked run; returns
    /// its argument index.
    fn poison_output(&mut self) -> Result<usize, Reply> {
        let Some(out) = self.args.iter().rposition(|(a, _)| a.output) else {
            return Err(Reply::Error {
                message: "no output argument".into(),
            });
        };
        self.args[out]
            .1
            .fill(0xff, &self.stream)
            .map_err(|e| RunError::from(e).reply(Failure::Fault, "cuMemsetD8Async"))?;
        Ok(out)
    }

    /// Waits for the checked run, then compares argument `out` with the
    /// reference (or keeps it as the reference): its relative L2 distance.
    fn compare_output(&mut self, out: usize, role: Role, tolerance: f64) -> Result<f64, Reply> {
        let fault = |doing: &'static str| {
            move |e: DriverError| RunError::from(e).reply(Failure::Fault, doing)
        };
        self.stream
            .synchronize()
            .map_err(fault("running the kernel"))?;
        let out_spec = self.args[out].0.clone();
        self.args[out]
            .1
            .download(&mut self.output_host[..out_spec.bytes])
            .map_err(fault("cuMemcpyDtoH"))?;
        let raw = &self.output_host[..out_spec.bytes];
        let dtype = storage_type(out_spec.dtype);
        match (&self.reference, role) {
            (_, Role::Reference) => {
                let got = compare::decode(raw, dtype);
                if got.par_iter().any(|v| v.is_nan()) {
                    return Err(Reply::Failed {
                        kind: Failure::WrongResult,
                        reason: "the reference kernel left NaNs in its output".into(),
                        fatal: false,
                    });
                }
                self.reference = Some(got);
                Ok(0.0)
            }
            (Some(want), Role::Candidate) => {
                let d = compare::distance(raw, dtype, want);
                let (rel, nan) = (d.rel_l2, d.nan_mismatch);
                // A NaN distance is a failure too.
                if nan || rel.is_nan() || rel > tolerance {
                    return Err(Reply::Failed {
                        kind: Failure::WrongResult,
                        reason: format!(
                            "output differs from the reference: rel. L2 {rel:.3e} > {tolerance:.1e}{}",
                            if nan { " (NaNs where the reference has none)" } else { "" }
                        ),
                        fatal: false,
                    });
                }
                Ok(rel)
            }
            (None, Role::Candidate) => Err(Reply::Error {
                message: "candidate measured before the reference".into(),
            }),
        }
    }

    /// The session's task run by cuBLASLt (`m`'s heuristic rank) on the
    /// session's buffers: checked, then timed as a kernel would be.
    fn measure_matmul(
        &mut self,
        m: &LibraryMatmul,
        role: Role,
        tolerance: f64,
        repeats: Repeats,
    ) -> Reply {
        if let Err(e) = self.ctx.bind_to_thread() {
            return RunError::from(e).reply(Failure::Fault, "cuCtxSetCurrent");
        }
        let prepared = match self.prepare_matmul(m) {
            Ok(p) => p,
            Err(message) => {
                return Reply::Failed {
                    kind: Failure::Launch,
                    reason: message,
                    fatal: false,
                }
            }
        };
        let out = match self.poison_output() {
            Ok(out) => out,
            Err(reply) => return reply,
        };
        // SAFETY: the operands are the session's buffers, sized for the task.
        if let Err(e) = unsafe { prepared.run(&self.stream) } {
            return RunError::from(e).reply(Failure::Launch, "cublasLtMatmul");
        }
        let rel_l2 = match self.compare_output(out, role, tolerance) {
            Ok(rel) => rel,
            Err(reply) => return reply,
        };
        match self.time_matmul(&prepared, repeats) {
            Ok(repeats_us) => Reply::Measured { repeats_us, rel_l2 },
            Err(e) => e.reply(Failure::Fault, "timing the matmul"),
        }
    }

    /// A matmul over the session's buffers (x, w, [bias], [residual], y),
    /// its bias read back from the device.
    fn prepare_matmul(&mut self, m: &LibraryMatmul) -> Result<PreparedMatmul, String> {
        if self.args.len() != m.arg_count() {
            return Err(format!(
                "the session has {} buffers, the matmul takes {}",
                self.args.len(),
                m.arg_count()
            ));
        }
        let library = match &self.library {
            Some(l) => l.clone(),
            None => {
                let l = Arc::new(
                    MatmulLibrary::open(&self.ctx, "tuned task").map_err(|e| e.to_string())?,
                );
                self.library = Some(l.clone());
                l
            }
        };
        let bias = if m.bias {
            let (spec, buffer) = &self.args[2];
            let mut bytes = vec![0u8; spec.bytes];
            buffer
                .download(&mut bytes)
                .map_err(|e| format!("reading the bias back: {}", error_name(&e)))?;
            Some(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect::<Vec<f32>>(),
            )
        } else {
            None
        };
        let addresses: Vec<u64> = self.args.iter().map(|(_, b)| b.ptr()).collect();
        library
            .prepare_with_bias(&self.ctx, "tuned task", m, &addresses, bias.as_deref())
            .map_err(|e| e.to_string())
    }

    /// [`Self::time_runs`] for a matmul (no programmatic launch in a
    /// chain: cuBLASLt's kernels take no part in it).
    fn time_matmul(&mut self, m: &PreparedMatmul, r: Repeats) -> Result<Vec<f64>, RunError> {
        // SAFETY: as in `measure_matmul`.
        self.time_runs(r, |w, _| {
            unsafe { m.run(&w.stream) }.map_err(RunError::from)
        })
    }

    fn launch(
        &self,
        f: Function,
        grid: [u32; 3],
        block: [u32; 3],
        smem: u32,
    ) -> Result<(), DriverError> {
        // SAFETY: `f` is a kernel of a loaded module whose parameters are
        // the task's pointer arguments, one per buffer in `self.params`,
        // each allocated with the size the task's shapes give it.
        unsafe { driver::launch(f, grid, block, smem, &self.stream, &self.params) }
    }

    fn time(
        &mut self,
        f: Function,
        grid: [u32; 3],
        block: [u32; 3],
        smem: u32,
        r: Repeats,
    ) -> Result<Vec<f64>, DriverError> {
        let programmatic = self.timing.programmatic;
        self.time_runs(r, |w, i| {
            // SAFETY: as in `launch`; in a chain, the generated kernels read
            // and write memory only after `griddepcontrol.wait`, except
            // constants (weights), which nothing writes.
            unsafe {
                driver::launch_with(
                    f,
                    grid,
                    block,
                    smem,
                    &w.stream,
                    &w.params,
                    programmatic && i > 0,
                )
            }
        })
    }

    /// Times `run(self, i)` (which enqueues one run, the `i`-th of a chain)
    /// as the session asks: a few untimed runs, then repeats of (flush the
    /// L2, event, run, event); or, with `timing.launches > 1`, each repeat
    /// one launch of a graph holding that many runs back to back, as `bench
    /// --per-layer` times a model's kernels.
    fn time_runs<E: From<DriverError>>(
        &mut self,
        r: Repeats,
        run: impl Fn(&Self, u32) -> Result<(), E>,
    ) -> Result<Vec<f64>, E> {
        let launches = self.timing.launches;
        if launches <= 1 {
            for _ in 0..r.warmup {
                run(self, 0)?;
            }
            self.stream.synchronize()?;
            return self.timed_repeats(r, 1, |w, i| {
                if w.flush.bytes() > 16 {
                    w.flush.fill(i as u8, &w.stream)?;
                }
                w.events[i].0.record(&w.stream)?;
                run(w, 0)?;
                Ok(w.events[i].1.record(&w.stream)?)
            });
        }
        self.stream.begin_capture()?;
        let mut recorded = Ok(());
        for i in 0..launches {
            recorded = run(self, i);
            if recorded.is_err() {
                break;
            }
        }
        // Capture always ends, so the stream is usable after a failed run.
        let ended = self.stream.end_capture();
        recorded?;
        let graph = ended?.instantiate()?;
        for _ in 0..r.warmup.max(1) {
            graph.launch(&self.stream)?;
        }
        self.stream.synchronize()?;
        self.timed_repeats(r, launches, |w, i| {
            w.events[i].0.record(&w.stream)?;
            graph.launch(&w.stream)?;
            Ok(w.events[i].1.record(&w.stream)?)
        })
    }

    /// Runs `repeat(self, i)` (which records `events[i]` around what it
    /// times) in chunks until `r`'s minimum count and total are reached or
    /// its maximum count; each repeat's µs divided by `per_repeat`.
    fn timed_repeats<E: From<DriverError>>(
        &mut self,
        r: Repeats,
        per_repeat: u32,
        mut repeat: impl FnMut(&mut Self, usize) -> Result<(), E>,
    ) -> Result<Vec<f64>, E> {
        let max = r.max.max(r.min).max(1) as usize;
        while self.events.len() < max {
            self.events
                .push((Event::new(&self.ctx)?, Event::new(&self.ctx)?));
        }
        let mut times = Vec::with_capacity(max);
        let mut total_ms = 0.0;
        const CHUNK: usize = 10;
        while times.len() < max {
            let start = times.len();
            let end = (start + CHUNK).min(max);
            for i in start..end {
                repeat(self, i)?;
            }
            self.stream.synchronize()?;
            for i in start..end {
                let ms = self.events[i].0.elapsed_ms(&self.events[i].1)? as f64;
                total_ms += ms;
                times.push(ms * 1000.0 / per_repeat as f64);
            }
            if times.len() >= r.min as usize && total_ms >= r.min_total_ms {
                break;
            }
        }
        Ok(times)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_deterministic_and_in_range() {
        let spec = ArgSpec {
            bytes: 64,
            dtype: ArgType::F16,
            output: false,
        };
        let a = fill_values(&spec, 7);
        assert_eq!(a, fill_values(&spec, 7));
        assert_ne!(a, fill_values(&spec, 8));
        let v = compare::decode(&a, storage_type(ArgType::F16));
        assert_eq!(v.len(), 32);
        assert!(v.iter().all(|x| (-1.0..1.0).contains(x)));
        // Element i is the i-th splitmix64 value after the seed's base.
        let z = aotune_compiler::zoo::splitmix64(7u64.wrapping_mul(0x9e37_79b9_7f4a_7c15) + 5);
        let want = ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
        assert_eq!(v[5], half::f16::from_f32(want).to_f32());
    }

    #[test]
    fn only_resource_errors_leave_the_context_usable() {
        assert!(!is_sticky(&DriverError(
            CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
        )));
        assert!(is_sticky(&DriverError(
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
        )));
        assert!(is_sticky(&DriverError(
            CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
        )));
    }
}
