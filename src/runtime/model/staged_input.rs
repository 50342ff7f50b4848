//! The input as the caller hands it over. [`Model::infer`] takes f32 and
//! writes it into the pinned staging buffer in the input's own dtype
//! (`spec().inputs[0].dtype`: f32, or f16/bf16 for a build with
//! `Build::input_dtype`), converting with `half`'s slice conversion. A server
//! instead writes a batch's rows straight into staging, typed
//! ([`Model::input_staging`]) or as raw little-endian bytes
//! ([`Model::input_staging_bytes`]), and runs them with
//! [`Model::infer_staged`] (the whole batch: one graph launch that copies the
//! whole input in and the whole output out) or [`Model::infer_staged_rows`]
//! (only the first `rows` rows are copied each way). None of these allocate.

use aotune_spec::DType;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use super::super::driver;
use super::super::error::RuntimeError;
use super::pinned_rows::PinnedRows;
use super::Model;

/// Where [`Model::run_rows`] takes the input rows from.
#[derive(Clone, Copy)]
pub(super) enum RowSource<'a> {
    /// The front of the model's own pinned staging buffer.
    Staging,
    /// Pinned buffers of whole rows, in order.
    Pinned(&'a [&'a PinnedRows]),
}

/// Device milliseconds of one [`Model::infer_staged_rows_timed`] call, from
/// CUDA events on the model's stream: each stage includes any wait for the
/// GPU behind other work (other models' streams share the device).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageTimes {
    /// The input rows' copy from pinned staging to the device.
    pub input_ms: f32,
    /// Waiting for earlier batches' kernels ([`super::KernelTurns`]; 0
    /// without turns).
    pub turn_wait_ms: f32,
    /// The forward graph (every kernel).
    pub kernels_ms: f32,
    /// The output rows' copy back to pinned staging.
    pub output_ms: f32,
}

/// The pinned input staging buffer, typed by the model input's dtype; its
/// length is the input's element count.
#[derive(Debug)]
pub enum InputStaging<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [f16]),
    BF16(&'a mut [bf16]),
}

impl InputStaging<'_> {
    pub fn dtype(&self) -> DType {
        match self {
            InputStaging::F32(_) => DType::F32,
            InputStaging::F16(_) => DType::F16,
            InputStaging::BF16(_) => DType::BF16,
        }
    }

    /// Elements (not bytes).
    pub fn len(&self) -> usize {
        match self {
            InputStaging::F32(s) => s.len(),
            InputStaging::F16(s) => s.len(),
            InputStaging::BF16(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first `mid` elements and the rest (as `slice::split_at_mut`).
    ///
    /// # Panics
    ///
    /// When `mid > len()`.
    pub fn split_at_mut(self, mid: usize) -> (Self, Self) {
        match self {
            InputStaging::F32(s) => {
                let (a, b) = s.split_at_mut(mid);
                (InputStaging::F32(a), InputStaging::F32(b))
            }
            InputStaging::F16(s) => {
                let (a, b) = s.split_at_mut(mid);
                (InputStaging::F16(a), InputStaging::F16(b))
            }
            InputStaging::BF16(s) => {
                let (a, b) = s.split_at_mut(mid);
                (InputStaging::BF16(a), InputStaging::BF16(b))
            }
        }
    }

    /// A shorter view of the same buffer: `self.reborrow()` lets a caller
    /// keep `self` after passing a view on.
    pub fn reborrow(&mut self) -> InputStaging<'_> {
        match self {
            InputStaging::F32(s) => InputStaging::F32(s),
            InputStaging::F16(s) => InputStaging::F16(s),
            InputStaging::BF16(s) => InputStaging::BF16(s),
        }
    }

    /// Sets every element to zero.
    pub fn fill_zero(&mut self) {
        match self {
            InputStaging::F32(s) => s.fill(0.0),
            InputStaging::F16(s) => s.fill(f16::ZERO),
            InputStaging::BF16(s) => s.fill(bf16::ZERO),
        }
    }

    /// Writes `values` (`len()` of them) rounded to the dtype.
    ///
    /// # Panics
    ///
    /// When `values.len() != self.len()` ([`Model::infer`] checks first).
    pub fn write_f32(&mut self, values: &[f32]) {
        match self {
            InputStaging::F32(s) => s.copy_from_slice(values),
            InputStaging::F16(s) => s.convert_from_f32_slice(values),
            InputStaging::BF16(s) => s.convert_from_f32_slice(values),
        }
    }
}

impl Model {
    /// The input's element type (`spec().inputs[0].dtype`).
    pub fn input_dtype(&self) -> DType {
        self.spec.inputs[0].dtype
    }

    /// The pinned host buffer the input is copied to the device from, typed
    /// by [`Model::input_dtype`]. Writing the input here and calling
    /// [`Model::infer_staged`] or [`Model::infer_staged_rows`] saves
    /// [`Model::infer`]'s copy: a server gathers a batch's requests in place.
    pub fn input_staging(&mut self) -> InputStaging<'_> {
        match self.input_dtype() {
            DType::F32 => InputStaging::F32(self.input_staging.as_f32_mut()),
            DType::F16 => InputStaging::F16(self.input_staging.as_f16_mut()),
            DType::BF16 => InputStaging::BF16(self.input_staging.as_bf16_mut()),
        }
    }

    /// [`Model::input_staging`] as bytes (`spec().inputs[0].bytes` of them):
    /// elements of [`Model::input_dtype`], little-endian, row-major.
    pub fn input_staging_bytes(&mut self) -> &mut [u8] {
        self.input_staging.as_bytes_mut()
    }

    /// Writes `input` (f32, the input's element count, checked) into
    /// staging in the input's dtype.
    pub(super) fn stage_f32(&mut self, input: &[f32]) -> Result<(), RuntimeError> {
        self.check_input(input.len())?;
        self.input_staging().write_f32(input);
        Ok(())
    }

    /// [`Model::infer`] on the input already in [`Model::input_staging`].
    /// Allocates nothing on the host or the device.
    pub fn infer_staged(&mut self, output: &mut [f32]) -> Result<(), RuntimeError> {
        self.check_output(output.len())?;
        self.bind()?;
        self.io_graph
            .launch(&self.stream)
            .map_err(RuntimeError::cuda(
                "cuGraphLaunch",
                "launching the inference graph",
            ))?;
        self.sync_inference()?;
        output.copy_from_slice(self.output_staging.as_f32());
        Ok(())
    }

    /// Runs the batch whose first `rows` rows (indices of the input's first
    /// dimension) are in [`Model::input_staging`], and writes those rows of
    /// the output (`rows ×` the output's row length f32 values) to `output`.
    /// Only those rows are copied to the device and back; the other rows of
    /// the batch keep whatever the device buffer held, so this suits models
    /// whose rows are computed independently (convolutional networks in
    /// inference), where the padding rows of a partly filled batch are
    /// wasted work anyway. `rows` equal to the batch is [`Model::infer_staged`].
    /// Allocates nothing on the host or the device.
    pub fn infer_staged_rows(
        &mut self,
        rows: usize,
        output: &mut [f32],
    ) -> Result<(), RuntimeError> {
        let batch = self.spec.inputs[0].shape.first().copied().unwrap_or(1);
        if rows == batch {
            return self.infer_staged(output);
        }
        self.run_rows(rows, RowSource::Staging, output, false)
            .map(|_| ())
    }

    /// [`Model::infer_staged_rows`] with the device time of each stage
    /// measured by CUDA events: the input copy, the kernels (the forward
    /// graph) and the output copy. A full batch runs as the same three steps
    /// rather than the one inference graph. The events are made on the first
    /// call (which allocates them); later calls allocate nothing. A server
    /// uses this to report where a batch's time goes.
    pub fn infer_staged_rows_timed(
        &mut self,
        rows: usize,
        output: &mut [f32],
    ) -> Result<StageTimes, RuntimeError> {
        self.ensure_stage_events()?;
        let times = self.run_rows(rows, RowSource::Staging, output, true)?;
        Ok(times.unwrap_or_default())
    }

    /// Runs a batch whose first rows are `parts`, in order (whole rows of
    /// the input, in its dtype, little-endian; `rows` of them in all, at
    /// most the batch), and writes those rows of the output to `output`, as
    /// [`Model::infer_staged_rows_timed`] does for rows in the staging
    /// buffer: one device copy per part, the forward graph, the output rows
    /// back, with the stage times. The parts are only read, and not after
    /// this returns. Allocates nothing after the first timed call.
    pub fn infer_pinned_rows_timed(
        &mut self,
        rows: usize,
        parts: &[&PinnedRows],
        output: &mut [f32],
    ) -> Result<StageTimes, RuntimeError> {
        self.ensure_stage_events()?;
        let times = self.run_rows(rows, RowSource::Pinned(parts), output, true)?;
        Ok(times.unwrap_or_default())
    }

    /// Makes the stage events if they are not made yet (allocates once).
    pub(super) fn ensure_stage_events(&mut self) -> Result<(), RuntimeError> {
        if self.stage_events.is_none() {
            self.bind()?;
            let events = self.events(5)?;
            self.stage_events = events.try_into().ok();
        }
        Ok(())
    }

    /// Copies the first `rows` input rows in (from `source`), launches the
    /// forward graph, copies those output rows out and waits; with `timed`,
    /// records the stage events and returns their times. A pinned source
    /// must hold exactly `rows` rows in all (checked).
    pub(super) fn run_rows(
        &mut self,
        rows: usize,
        source: RowSource<'_>,
        output: &mut [f32],
        timed: bool,
    ) -> Result<Option<StageTimes>, RuntimeError> {
        let input_slot = &self.spec.inputs[0];
        let output_slot = &self.spec.outputs[0];
        let batch = input_slot.shape.first().copied().unwrap_or(1);
        let output_rows = output_slot.shape.first().copied().unwrap_or(1);
        if rows == 0 || rows > batch || output_rows != batch {
            return Err(RuntimeError::RowsOutOfRange {
                tensor: input_slot.name.to_string(),
                shape: input_slot.shape.to_vec(),
                rows,
                batch,
                output_rows,
            });
        }
        let output_len = output_slot.elements() / batch * rows;
        if output.len() != output_len {
            // Built only here: the success path allocates nothing.
            let mut output_shape = output_slot.shape.to_vec();
            output_shape[0] = rows;
            return Err(RuntimeError::WrongLength {
                role: "output",
                tensor: output_slot.name.to_string(),
                shape: output_shape,
                expected: output_len,
                got: output.len(),
            });
        }
        let input_bytes = input_slot.bytes as usize / batch * rows;
        if let RowSource::Pinned(parts) = source {
            let given: usize = parts.iter().map(|p| p.len()).sum();
            if given != input_bytes {
                return Err(RuntimeError::WrongLength {
                    role: "input",
                    tensor: input_slot.name.to_string(),
                    shape: input_slot.shape.to_vec(),
                    expected: input_bytes,
                    got: given,
                });
            }
        }
        let output_bytes = output_len * 4;
        let input_at = self.arena.ptr() + input_slot.offset;
        let output_at = self.arena.ptr() + output_slot.offset;
        self.bind()?;
        let events = if timed {
            self.stage_events.as_ref()
        } else {
            None
        };
        let mark = |i: usize| match events {
            Some(e) => super::record(&e[i], &self.stream),
            None => Ok(()),
        };
        mark(0)?;
        match source {
            // SAFETY: the input slot is in the arena and holds at least
            // `input_bytes`; staging is not written again before the
            // synchronize below.
            RowSource::Staging => unsafe {
                driver::copy_pinned_prefix_to_device(
                    input_at,
                    &self.input_staging,
                    input_bytes,
                    &self.stream,
                )
            }
            .map_err(RuntimeError::cuda(
                "cuMemcpyHtoDAsync",
                "copying the input rows into the arena",
            ))?,
            RowSource::Pinned(parts) => {
                let mut at = input_at;
                for part in parts {
                    // SAFETY: the parts sum to `input_bytes` (checked
                    // above), which the input slot holds; they are borrowed
                    // (so neither written nor freed) until this call returns,
                    // after the synchronize below.
                    unsafe { driver::copy_pinned_to_device(at, part.buffer(), &self.stream) }
                        .map_err(RuntimeError::cuda(
                            "cuMemcpyHtoDAsync",
                            "copying pinned request rows into the arena",
                        ))?;
                    at += part.len() as u64;
                }
            }
        }
        mark(1)?;
        let kernels = || {
            mark(2)?;
            self.launch_forward_graph()
        };
        match &self.kernel_turns {
            Some(turns) => turns.take(&self.stream, kernels)?,
            None => kernels()?,
        }
        mark(3)?;
        // SAFETY: as above, for the output slot and the output staging.
        unsafe {
            driver::copy_device_to_pinned_prefix(
                &mut self.output_staging,
                output_at,
                output_bytes,
                &self.stream,
            )
        }
        .map_err(RuntimeError::cuda(
            "cuMemcpyDtoHAsync",
            "copying the output rows out of the arena",
        ))?;
        if let Some(e) = events {
            super::record(&e[4], &self.stream)?;
        }
        self.sync_inference()?;
        output.copy_from_slice(&self.output_staging.as_f32()[..output_len]);
        let Some(e) = events else {
            return Ok(None);
        };
        Ok(Some(StageTimes {
            input_ms: super::elapsed(&e[0], &e[1])?,
            turn_wait_ms: super::elapsed(&e[1], &e[2])?,
            kernels_ms: super::elapsed(&e[2], &e[3])?,
            output_ms: super::elapsed(&e[3], &e[4])?,
        }))
    }

    fn sync_inference(&self) -> Result<(), RuntimeError> {
        if let Some(done) = &self.done_event {
            super::record(done, &self.stream)?;
            return done.synchronize().map_err(RuntimeError::cuda(
                "cuEventSynchronize",
                "running the inference graph (`aotune verify --per-layer` runs the launches \
                 one by one to find the failing one)",
            ));
        }
        self.stream.synchronize().map_err(RuntimeError::cuda(
            "cuStreamSynchronize",
            "running the inference graph (`aotune verify --per-layer` runs the launches one by \
             one to find the failing one)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_rounds_f32_to_the_input_dtype() {
        let values = [1.0f32, 0.1, -65504.0, 3.3e-5];
        let mut a = [0f32; 4];
        let mut h = [f16::ZERO; 4];
        let mut b = [bf16::ZERO; 4];
        for mut staging in [
            InputStaging::F32(&mut a),
            InputStaging::F16(&mut h),
            InputStaging::BF16(&mut b),
        ] {
            assert_eq!(staging.len(), 4);
            staging.write_f32(&values);
        }
        assert_eq!(a, values);
        let (mut front, mut back) = InputStaging::F32(&mut a).split_at_mut(1);
        back.fill_zero();
        assert_eq!((front.reborrow().len(), back.len()), (1, 3));
        assert_eq!(a, [1.0, 0.0, 0.0, 0.0]);
        assert_eq!(h.map(f16::to_f32), values.map(|v| DType::F16.round(v)));
        assert_eq!(b.map(bf16::to_f32), values.map(|v| DType::BF16.round(v)));
    }
}
