//! Kernel turns: batches of several models (each on its own stream) that
//! share one GPU run their kernels in submission order, at most `width` at
//! once. A batch's input copy is not ordered: it runs while earlier batches'
//! kernels do, so with `width` 1 the GPU goes from one batch's kernels
//! straight to the next one's, whose input is already on the device.
//!
//! The order is kept on the GPU, not the host: before its forward graph, a
//! batch's stream waits (`cuStreamWaitEvent`) for the event recorded after
//! the kernels of the batch submitted `width` turns earlier. Recording and
//! waiting happen under one lock, in submission order, so the ring needs
//! `width + 1` events: an event is recorded again only after every batch
//! that waits on its previous record has enqueued that wait.

use std::sync::{Arc, Mutex};

use super::super::driver::{Event, Stream};
use super::super::error::RuntimeError;
use super::Model;

/// Shared by the models whose batches take turns (see the module doc);
/// give it to each with [`Model::take_kernel_turns`].
pub struct KernelTurns {
    ordinal: usize,
    width: usize,
    ring: Mutex<Ring>,
}

struct Ring {
    /// `width + 1` events: the end of turn `t`'s kernels is `done[t % len]`.
    done: Vec<Event>,
    /// Turns submitted so far.
    submitted: u64,
}

impl KernelTurns {
    /// Turns on `model`'s GPU in which `width` (at least 1) batches' kernels
    /// may run at once. Allocates `width + 1` events.
    pub fn new(model: &Model, width: usize) -> Result<Arc<KernelTurns>, RuntimeError> {
        if width == 0 {
            return Err(RuntimeError::KernelTurns {
                reason: "at least one batch must be allowed to run its kernels".into(),
            });
        }
        model.bind()?;
        let done = (0..=width)
            .map(|_| {
                Event::untimed(&model.ctx).map_err(RuntimeError::cuda(
                    "cuEventCreate",
                    "creating the kernel turns' events",
                ))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Arc::new(KernelTurns {
            ordinal: model.ctx.ordinal(),
            width,
            ring: Mutex::new(Ring { done, submitted: 0 }),
        }))
    }

    /// How many batches' kernels may run at once.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Enqueues on `stream`: a wait for the kernels `width` turns back, then
    /// `kernels` (which enqueues this turn's kernels on `stream`), then this
    /// turn's end. If `kernels` fails the turn is not taken.
    pub(super) fn take<T>(
        &self,
        stream: &Stream,
        kernels: impl FnOnce() -> Result<T, RuntimeError>,
    ) -> Result<T, RuntimeError> {
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let len = ring.done.len() as u64;
        if ring.submitted >= self.width as u64 {
            let earlier = &ring.done[((ring.submitted - self.width as u64) % len) as usize];
            stream.wait(earlier).map_err(RuntimeError::cuda(
                "cuStreamWaitEvent",
                "waiting for the earlier batches' kernels",
            ))?;
        }
        let value = kernels()?;
        let slot = (ring.submitted % len) as usize;
        ring.done[slot].record(stream).map_err(RuntimeError::cuda(
            "cuEventRecord",
            "marking the end of a batch's kernels",
        ))?;
        ring.submitted += 1;
        Ok(value)
    }
}

impl Model {
    /// From now on, this model's row runs ([`Model::infer_staged_rows_timed`],
    /// [`Model::infer_pinned_rows_timed`]) take `turns` for their kernels;
    /// whole-graph runs ([`Model::infer`], [`Model::infer_staged`]) do not.
    /// `turns` must be on this model's GPU.
    pub fn take_kernel_turns(&mut self, turns: Arc<KernelTurns>) -> Result<(), RuntimeError> {
        if turns.ordinal != self.ctx.ordinal() {
            return Err(RuntimeError::KernelTurns {
                reason: format!(
                    "the turns are on GPU {} and the model on GPU {}",
                    turns.ordinal,
                    self.ctx.ordinal()
                ),
            });
        }
        self.kernel_turns = Some(turns);
        Ok(())
    }
}
