//! Trying another kernel inside a loaded model's graph (`aotune refine`):
//! load a kernel from its own image, point launches at it, recapture the
//! graphs. The arena, weights and parameter arrays stay as they are.

use super::{
    capture_graphs, function_limits, load_module, shared_optin, Model, RuntimeError, Work,
    DEFAULT_SHARED_LIMIT,
};
use crate::runtime::driver::Function;
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_MODEL_ID: AtomicU64 = AtomicU64::new(1);

pub(super) fn next_model_id() -> u64 {
    NEXT_MODEL_ID.fetch_add(1, Ordering::Relaxed)
}

/// A kernel a model holds, with the geometry to launch it: the one a launch
/// runs now ([`Model::launch_kernel`]) or one loaded later
/// ([`Model::load_kernel`]). Only the model that gave it accepts it.
#[derive(Clone, Copy)]
pub struct LaunchKernel {
    model: u64,
    function: Function,
    grid: [u32; 3],
    block: [u32; 3],
    smem_bytes: u32,
}

impl std::fmt::Debug for LaunchKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchKernel")
            .field("grid", &self.grid)
            .field("block", &self.block)
            .field("smem_bytes", &self.smem_bytes)
            .finish_non_exhaustive()
    }
}

impl Model {
    /// The kernel launch `index` runs now, to put back after a trial.
    /// `None` for a launch that runs through cuBLASLt.
    pub fn launch_kernel(&self, index: usize) -> Option<LaunchKernel> {
        let l = self.launches.get(index)?;
        let Work::Kernel(function) = l.work else {
            return None;
        };
        Some(LaunchKernel {
            model: self.id,
            function,
            grid: l.grid,
            block: l.block,
            smem_bytes: l.smem_bytes,
        })
    }

    /// Loads kernel `symbol` from `image` (a cubin), to be launched with
    /// `grid`, `block` and `smem_bytes` of dynamic shared memory (opted into
    /// above 48 KiB). The module stays loaded as long as the model.
    pub fn load_kernel(
        &mut self,
        image: &[u8],
        symbol: &str,
        grid: [u32; 3],
        block: [u32; 3],
        smem_bytes: u32,
    ) -> Result<LaunchKernel, RuntimeError> {
        self.bind()?;
        let module = load_module(&self.ctx, image, &self.device)?;
        let function = module
            .function(symbol)
            .map_err(|_| RuntimeError::MissingKernel {
                symbol: symbol.to_string(),
                index: 0,
            })?;
        let during = || format!("preparing kernel `{symbol}`");
        let (threads, static_bytes) = function_limits(&function, during())?;
        let optin = shared_optin(&self.ctx, during())?;
        let wanted: u64 = block.iter().map(|&b| u64::from(b)).product();
        let shared = static_bytes + u64::from(smem_bytes);
        if wanted > threads || shared > optin {
            return Err(RuntimeError::KernelSwap {
                reason: format!(
                    "kernel `{symbol}` allows {threads} threads and {optin} B of shared memory \
                     per block; the launch asks {wanted} threads and {shared} B"
                ),
            });
        }
        if shared > u64::from(DEFAULT_SHARED_LIMIT) {
            function
                .set_max_dynamic_shared_bytes(smem_bytes as i32)
                .map_err(|source| RuntimeError::Cuda {
                    call: "cuFuncSetAttribute",
                    during: during(),
                    source,
                })?;
        }
        self.extra_modules.push(module);
        Ok(LaunchKernel {
            model: self.id,
            function,
            grid,
            block,
            smem_bytes,
        })
    }

    /// Makes launches `indices` run `kernel`, then recaptures both graphs.
    ///
    /// # Safety
    ///
    /// `kernel` takes the parameters of every launch it replaces (one
    /// pointer per argument, the same tensors in the same order), touches
    /// no memory but theirs and its module's, and reads them only after
    /// `griddepcontrol.wait` where the model launches programmatically, as
    /// the build's kernels do: kernels rendered by the build's code
    /// generator for the same node (`codegen::cuda::candidate`) do.
    pub unsafe fn set_launch_kernel(
        &mut self,
        indices: &[usize],
        kernel: LaunchKernel,
    ) -> Result<(), RuntimeError> {
        if kernel.model != self.id {
            return Err(RuntimeError::KernelSwap {
                reason: "the kernel was loaded into another model".into(),
            });
        }
        if let Some(&bad) = indices.iter().find(|&&i| i >= self.launches.len()) {
            return Err(RuntimeError::KernelSwap {
                reason: format!(
                    "launch {bad} does not exist (the model has {})",
                    self.launches.len()
                ),
            });
        }
        if let Some(&bad) = indices
            .iter()
            .find(|&&i| matches!(self.launches[i].work, Work::Matmul(_)))
        {
            return Err(RuntimeError::KernelSwap {
                reason: format!("launch {bad} runs through cuBLASLt, not a kernel"),
            });
        }
        self.bind()?;
        self.stream.synchronize().map_err(RuntimeError::cuda(
            "cuStreamSynchronize",
            "finishing work before recapturing the graphs",
        ))?;
        for &i in indices {
            let l = &mut self.launches[i];
            l.work = Work::Kernel(kernel.function);
            l.grid = kernel.grid;
            l.block = kernel.block;
            l.smem_bytes = kernel.smem_bytes;
        }
        let (forward, io) = capture_graphs(
            &self.stream,
            &self.launches,
            &self.spec,
            &self.arena,
            &self.input_staging,
            &mut self.output_staging,
        )?;
        self.forward_graph = forward;
        self.io_graph = io;
        Ok(())
    }
}
