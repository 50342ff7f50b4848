//! The GPU backend: the model built with `aotune_compiler::Build` at each
//! batch size (kernels by nvcc, as `aotune bench` builds them) and run by the
//! aotune runtime (`runtime::Model`, one CUDA graph launch per batch).
//!
//! Builds go to `<cache>/serve_<name>_<precision>_b<batch>/`; the build step
//! skips nvcc when the build key (model bytes, tuning log, precision, batch,
//! template versions) is unchanged, so a restart reuses the kernels. Each
//! executor loads its own `Model` per batch size (its own arena and graphs),
//! so instances run concurrently.
//!
//! With `input_datatype` FP16 the model is built with an f16 input
//! (`Build::input_dtype`, into `serve_<name>_<precision>_f16in_b<batch>/`):
//! clients send f16 bytes, the batcher gathers them into the f16 staging
//! buffer, and half the bytes cross to the device. Each batch copies only its
//! request rows in and out (`Model::infer_staged_rows_timed`, whose CUDA events give
//! the `aotune_device_duration_seconds` stages). With `"gpu_wait": "block"` the executor sleeps
//! on a blocking-sync event while its batch runs (`WaitMode::Block`).
//! With `concurrent_kernels` below `instances`, every executor's models share
//! one `KernelTurns`: batches run their kernels on the GPU in the order they
//! were submitted, that many at once, while later batches' input copies run.

use super::backend::{Backend, BackendError, Executor, Fill, GpuMemory, Signature};
use super::cpu_backend::signature_of;
use super::datatype::Datatype;
use super::row_pool::RowPool;
use aotune::runtime::{
    KernelTurns, LoadOptions, Model, ModelFiles, PinnedRows, StageTimes, WaitMode,
};
use aotune_compiler::Build;
use aotune_spec::{DType, Precision};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct GpuBackend {
    signature: Signature,
    precision: Precision,
    /// Build directory per batch size.
    dirs: BTreeMap<usize, PathBuf>,
    device: String,
    options: LoadOptions,
    /// Pinned buffers one-row requests are copied into on arrival.
    pool: Option<Arc<RowPool>>,
    /// Shared by every executor's models (`concurrent_kernels`).
    turns: Option<Arc<KernelTurns>>,
}

impl GpuBackend {
    /// Builds `model` (named `name` in the repository) at `batch_sizes`
    /// (`symbolic_batch`), or once at its exported batch, into `cache`, with
    /// its input of `input` datatype (FP16 needs fp16 precision); then loads
    /// it once to check that it runs on this GPU. With `kernel_turns`, that
    /// many batches' kernels run at once (see the module doc).
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        name: &str,
        model: &Path,
        tuning: Option<&Path>,
        precision: Precision,
        input: Datatype,
        batch_sizes: &[usize],
        symbolic_batch: bool,
        cache: &Path,
        wait: WaitMode,
        dense_cublaslt: bool,
        kernel_turns: Option<usize>,
        pool_rows: impl FnOnce(usize) -> usize,
    ) -> Result<GpuBackend, BackendError> {
        let tag: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let (input_dtype, suffix) = match input {
            Datatype::FP32 => (DType::F32, ""),
            Datatype::FP16 => (DType::F16, "_f16in"),
        };
        let lt = if dense_cublaslt { "_lt" } else { "" };
        let mut build = Build::new(model)
            .precision(precision)
            .input_dtype(input_dtype)
            .dense_cublaslt(dense_cublaslt)
            .out_dir(cache)
            .name(format!("serve_{tag}_{precision}{suffix}{lt}"));
        let batch_sizes = if symbolic_batch { batch_sizes } else { &[1] };
        if symbolic_batch {
            build = build.batches(batch_sizes);
        }
        if let Some(t) = tuning {
            build = build.tuning(t);
        }
        let built = build.compile().map_err(|e| {
            BackendError::Compile(format!("building '{}' for the GPU: {e}", model.display()))
        })?;
        for b in &built {
            for note in b.notes.iter().chain(&b.info) {
                tracing::info!(model = name, "{note}");
            }
        }
        let mut dirs = BTreeMap::new();
        let mut signature = None;
        for (b, &batch) in built.iter().zip(batch_sizes) {
            let s = signature_of(&b.compiled.graph, b.compiled.batch.map(|_| batch))?;
            if s.inputs.len() != 1 || s.outputs.len() != 1 {
                return Err(BackendError::Unsupported(format!(
                    "the GPU runtime runs models of one input and one output; this one has {} \
                     and {} (set \"backend\": \"cpu\" to serve it on the CPU reference)",
                    s.inputs.len(),
                    s.outputs.len()
                )));
            }
            let key = if s.batched { batch } else { 1 };
            dirs.insert(key, b.dir.clone());
            match &signature {
                None => signature = Some(s),
                Some(first) if first.inputs != s.inputs || first.outputs != s.outputs => {
                    return Err(BackendError::Unsupported(format!(
                        "the model's tensors at batch {batch} are not those at batch {} with \
                         another first dimension",
                        batch_sizes[0]
                    )))
                }
                Some(_) => {}
            }
        }
        let mut signature =
            signature.ok_or_else(|| BackendError::Unsupported("no batch size to build".into()))?;
        signature.batch_sizes = dirs.keys().copied().collect();
        signature.inputs[0].datatype = input;
        let options = LoadOptions {
            wait,
            ..LoadOptions::default()
        };
        let mut backend = GpuBackend {
            signature,
            precision,
            dirs,
            device: String::new(),
            options,
            pool: None,
            turns: None,
        };
        let probe = GpuExecutor::load(&backend.dirs, backend.signature.batched, &options, None)?;
        let first = probe.models.values().next();
        if let (Some(model), Some(width)) = (first, kernel_turns) {
            backend.turns = Some(
                KernelTurns::new(model, width)
                    .map_err(|e| BackendError::Gpu(format!("setting up kernel turns: {e}")))?,
            );
        }
        backend.device = first
            .map(|m| m.device_name().to_string())
            .unwrap_or_default();
        let row_bytes = backend.signature.inputs[0].item_len() * input.size();
        let pool_rows = pool_rows(row_bytes);
        if let (Some(model), true) = (first, backend.signature.batched && pool_rows > 0) {
            let buffers = (0..pool_rows)
                .map(|_| PinnedRows::alloc(model, row_bytes))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| BackendError::Gpu(format!("allocating the pinned row pool: {e}")))?;
            backend.pool = Some(Arc::new(RowPool::new(buffers, row_bytes, input)));
            tracing::info!(
                model = name,
                rows = pool_rows,
                mib = (pool_rows * row_bytes) as f64 / (1 << 20) as f64,
                "pinned row pool for the arrival copy"
            );
        }
        Ok(backend)
    }
}

impl Backend for GpuBackend {
    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn describe(&self) -> String {
        format!("gpu {} {}", self.device, self.precision)
    }

    fn row_pool(&self) -> Option<&Arc<RowPool>> {
        self.pool.as_ref()
    }

    fn executor(&self) -> Result<Box<dyn Executor>, BackendError> {
        Ok(Box::new(GpuExecutor::load(
            &self.dirs,
            self.signature.batched,
            &self.options,
            self.turns.as_ref(),
        )?))
    }
}

struct GpuExecutor {
    models: BTreeMap<usize, Model>,
    /// The input's first dimension is the batch (else a request is the
    /// whole tensor and runs whole).
    batched: bool,
    /// The stages of the last batched run.
    last_stages: Option<StageTimes>,
}

impl GpuExecutor {
    fn load(
        dirs: &BTreeMap<usize, PathBuf>,
        batched: bool,
        options: &LoadOptions,
        turns: Option<&Arc<KernelTurns>>,
    ) -> Result<GpuExecutor, BackendError> {
        let mut models = BTreeMap::new();
        for (&batch, dir) in dirs {
            let files = ModelFiles::read_dir(dir).map_err(|e| BackendError::Gpu(e.to_string()))?;
            let mut model = files
                .load(options)
                .map_err(|e| BackendError::Gpu(e.to_string()))?;
            if let Some(turns) = turns {
                model
                    .take_kernel_turns(Arc::clone(turns))
                    .map_err(|e| BackendError::Gpu(e.to_string()))?;
            }
            for warning in model.warnings() {
                tracing::warn!("{warning}");
            }
            models.insert(batch, model);
        }
        Ok(GpuExecutor {
            models,
            batched,
            last_stages: None,
        })
    }
}

impl Executor for GpuExecutor {
    fn run(
        &mut self,
        batch: usize,
        rows: usize,
        fill: &mut Fill<'_>,
    ) -> Result<Vec<Vec<f32>>, BackendError> {
        let model = self
            .models
            .get_mut(&batch)
            .ok_or_else(|| BackendError::Gpu(format!("no build at batch {batch}")))?;
        let gpu = |e: aotune::runtime::RuntimeError| BackendError::Gpu(e.to_string());
        self.last_stages = None;
        if !self.batched {
            // One request is the whole tensor, whatever its first dimension.
            fill(0, model.input_staging());
            let mut output = vec![0.0f32; model.spec().outputs[0].elements()];
            model.infer_staged(&mut output).map_err(gpu)?;
            return Ok(vec![output]);
        }
        let staging = model.input_staging();
        let front = staging.len() / batch * rows;
        fill(0, staging.split_at_mut(front).0);
        let mut output = vec![0.0f32; model.spec().outputs[0].elements() / batch * rows];
        self.last_stages = Some(
            model
                .infer_staged_rows_timed(rows, &mut output)
                .map_err(gpu)?,
        );
        Ok(vec![output])
    }

    fn last_stage_times(&self) -> Option<StageTimes> {
        self.last_stages
    }

    fn run_pinned(
        &mut self,
        batch: usize,
        parts: &[&PinnedRows],
    ) -> Option<Result<Vec<Vec<f32>>, BackendError>> {
        self.last_stages = None;
        if !self.batched {
            return None;
        }
        let model = match self.models.get_mut(&batch) {
            Some(m) => m,
            None => return Some(Err(BackendError::Gpu(format!("no build at batch {batch}")))),
        };
        let rows = parts.len();
        let mut output = vec![0.0f32; model.spec().outputs[0].elements() / batch * rows];
        Some(
            model
                .infer_pinned_rows_timed(rows, parts, &mut output)
                .map(|times| {
                    self.last_stages = Some(times);
                    vec![output]
                })
                .map_err(|e| BackendError::Gpu(e.to_string())),
        )
    }

    fn gpu_memory(&self) -> Option<GpuMemory> {
        let mut total = GpuMemory::default();
        for model in self.models.values() {
            let m = model.memory().ok()?;
            total.weights += m.weights_bytes;
            // Working memory: the arena and cuBLASLt's workspace and biases.
            total.arena += m.arena_bytes + m.library_bytes;
            total.staging += m.staging_bytes;
            total.device_used = m.device_total.saturating_sub(m.device_free);
            total.device_total = m.device_total;
        }
        Some(total)
    }
}
