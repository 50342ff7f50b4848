//! Page-locked host buffers that hold input rows outside any model, so a
//! server can copy each request into pinned memory as it arrives and a batch
//! can be copied to the device straight from them
//! ([`Model::infer_pinned_rows_timed`]), without gathering the rows into the
//! model's own staging buffer first.

use super::super::driver::PinnedBuffer;
use super::super::error::RuntimeError;
use super::{alloc_pinned, Model};

/// `len()` bytes of page-locked host memory in the device context of the
/// model it was made for (usable by every model on that device). Written
/// through [`PinnedRows::as_bytes_mut`]; read by the device copies of
/// [`Model::infer_pinned_rows_timed`].
pub struct PinnedRows {
    buffer: PinnedBuffer,
}

impl PinnedRows {
    /// `bytes` of zeroed pinned memory on `model`'s device.
    pub fn alloc(model: &Model, bytes: usize) -> Result<PinnedRows, RuntimeError> {
        model.bind()?;
        let buffer = alloc_pinned(&model.ctx, bytes as u64, "pinned request rows")?;
        Ok(PinnedRows { buffer })
    }

    pub fn len(&self) -> usize {
        self.buffer.bytes()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_bytes()
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_bytes_mut()
    }

    pub(super) fn buffer(&self) -> &PinnedBuffer {
        &self.buffer
    }
}

impl std::fmt::Debug for PinnedRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedRows({} bytes)", self.len())
    }
}
