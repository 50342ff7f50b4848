//! What runs a model: its signature (tensor names and shapes, compiled batch
//! sizes) and the executors that run one batch at a time. Two backends
//! implement it: the CPU reference ([`super::cpu_backend`]) and the GPU
//! runtime ([`super::gpu_backend`]).

use super::datatype::Datatype;
use super::row_pool::RowPool;
use aotune::runtime::{InputStaging, PinnedRows, StageTimes};
use std::fmt;
use std::sync::Arc;

/// The datatype of every output (the compiled models give f32).
pub const FP32: &str = "FP32";

/// One input or output of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    /// The shape of one row (batch item), without the batch dimension; for an
    /// unbatched model, the whole tensor's shape.
    pub item_shape: Vec<usize>,
    /// What requests must send (FP32 for every output).
    pub datatype: Datatype,
}

impl TensorSpec {
    /// An FP32 tensor.
    pub fn fp32(name: impl Into<String>, item_shape: Vec<usize>) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            item_shape,
            datatype: Datatype::FP32,
        }
    }

    /// Values in one row.
    pub fn item_len(&self) -> usize {
        self.item_shape.iter().product()
    }
}

/// What a client sees of a model and what the batcher needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// True when the first dimension of every input and output is a batch
    /// dimension the model was compiled at several values of (a symbolic
    /// batch). False for a model exported with a fixed batch: each request
    /// then carries the whole tensor, and is one "row".
    pub batched: bool,
    /// The batch sizes an executor runs, sorted and distinct; `[1]` when
    /// unbatched.
    pub batch_sizes: Vec<usize>,
}

impl Signature {
    /// The largest batch an executor runs.
    pub fn max_batch(&self) -> usize {
        self.batch_sizes.last().copied().unwrap_or(1)
    }

    /// The smallest compiled batch size holding `rows` rows (`rows` is at
    /// most [`Self::max_batch`]).
    pub fn batch_for(&self, rows: usize) -> usize {
        self.batch_sizes
            .iter()
            .copied()
            .find(|&b| b >= rows)
            .unwrap_or_else(|| self.max_batch())
    }

    /// The shape clients see: `-1` for the batch dimension.
    pub fn client_shape(&self, tensor: &TensorSpec) -> Vec<i64> {
        let dims = tensor.item_shape.iter().map(|&d| d as i64);
        if self.batched {
            std::iter::once(-1).chain(dims).collect()
        } else {
            dims.collect()
        }
    }
}

/// Why a backend could not load a model or run a batch.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackendError {
    #[error("{0}")]
    Compile(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("GPU: {0}")]
    Gpu(String),
    #[error("CPU reference: {0}")]
    Reference(String),
}

/// Writes input `i` of a batch into the given buffer (see [`Executor::run`]).
pub type Fill<'a> = dyn FnMut(usize, InputStaging<'_>) + 'a;

/// Runs batches of one model. Created on, and used only by, its executor
/// thread (a GPU model holds a CUDA context that stays on one thread).
pub trait Executor {
    /// Runs a batch of `rows` request rows at batch size `batch` (one of
    /// [`Signature::batch_sizes`], at least `rows`; the rest is padding).
    /// The inputs are written by `fill(i, buffer)`, called once per input `i`
    /// in the signature's input order with a buffer of at least `rows ×
    /// inputs[i].item_len()` elements: it writes the rows at the front,
    /// converted to the buffer's element type, and zeros the rest. The GPU
    /// backend hands it the front `rows` rows of the pinned staging buffer
    /// (in the model input's dtype) and copies only those to the device, so
    /// the padding rows compute on stale data, which rows computed
    /// independently never see. Returns the first `rows` rows of each output
    /// (`rows × item_len` f32 values), in the signature's output order.
    fn run(
        &mut self,
        batch: usize,
        rows: usize,
        fill: &mut Fill<'_>,
    ) -> Result<Vec<Vec<f32>>, BackendError>;

    /// The device time of the last successful [`Executor::run`] by stage (the
    /// GPU backend's CUDA events); `None` where there is no device.
    fn last_stage_times(&self) -> Option<StageTimes> {
        None
    }

    /// The GPU memory this executor holds and the device's use (the GPU
    /// backend, summed over its batch sizes); `None` where there is no
    /// device.
    fn gpu_memory(&self) -> Option<GpuMemory> {
        None
    }

    /// [`Executor::run`] for a batch whose `parts.len()` rows of its one
    /// input are already in pinned buffers (one row each, in the model
    /// input's dtype), copied to the device straight from them; `None` where
    /// the executor has no such path (the caller then gathers).
    fn run_pinned(
        &mut self,
        _batch: usize,
        _parts: &[&PinnedRows],
    ) -> Option<Result<Vec<Vec<f32>>, BackendError>> {
        None
    }
}

/// An executor's GPU memory (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuMemory {
    /// Device memory of its weights (one copy per loaded batch size).
    pub weights: u64,
    /// Device memory of its activation arenas.
    pub arena: u64,
    /// Pinned host memory of its staging buffers.
    pub staging: u64,
    /// The whole device, every process: used and total (`cuMemGetInfo`).
    pub device_used: u64,
    pub device_total: u64,
}

/// A loaded model: its signature, and a factory of executors (one per
/// instance).
pub trait Backend: Send + Sync {
    fn signature(&self) -> &Signature;
    /// The pool that one-row requests are copied into as they arrive, where
    /// the backend has one (the GPU's).
    fn row_pool(&self) -> Option<&Arc<RowPool>> {
        None
    }
    /// What runs it, for logs and metadata: "cpu-reference fp32", "gpu …".
    fn describe(&self) -> String;
    /// A new executor; called on the thread that will use it.
    fn executor(&self) -> Result<Box<dyn Executor>, BackendError>;
}

impl fmt::Debug for dyn Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Backend({})", self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signature(batched: bool) -> Signature {
        Signature {
            inputs: vec![TensorSpec::fp32("x", vec![3, 4])],
            outputs: vec![],
            batched,
            batch_sizes: vec![1, 8, 32],
        }
    }

    #[test]
    fn batch_for_rounds_up_to_a_compiled_size() {
        let s = signature(true);
        assert_eq!([1, 2, 8, 9, 32].map(|r| s.batch_for(r)), [1, 8, 8, 32, 32]);
        assert_eq!(s.max_batch(), 32);
    }

    #[test]
    fn client_shape_marks_the_batch_dimension() {
        let s = signature(true);
        assert_eq!(s.client_shape(&s.inputs[0]), vec![-1, 3, 4]);
        let s = signature(false);
        assert_eq!(s.client_shape(&s.inputs[0]), vec![3, 4]);
        assert_eq!(s.inputs[0].item_len(), 12);
    }
}
