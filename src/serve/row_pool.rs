//! A model's pool of pinned row buffers: a request of one row whose raw bytes
//! are already in the model input's dtype is copied into a free buffer as it
//! arrives (on the handler's thread), so its batch is copied to the device
//! straight from the pool instead of being gathered into the executor's
//! staging buffer first (docs/design/serving-arrival-copy.md). The pool is
//! bounded: when it is empty a request takes the gathering path.

use super::datatype::Datatype;
use aotune::runtime::PinnedRows;
use std::sync::{Arc, Mutex};

/// Free pinned buffers of one row each.
pub struct RowPool {
    free: Mutex<Vec<PinnedRows>>,
    /// Bytes of one input row in the model input's dtype.
    row_bytes: usize,
    /// The datatype clients send those bytes in.
    datatype: Datatype,
}

/// One row in a pinned buffer of the pool; the buffer goes back when this
/// drops.
pub struct PooledRow {
    rows: Option<PinnedRows>,
    pool: Arc<RowPool>,
}

impl RowPool {
    pub fn new(buffers: Vec<PinnedRows>, row_bytes: usize, datatype: Datatype) -> RowPool {
        RowPool {
            free: Mutex::new(buffers),
            row_bytes,
            datatype,
        }
    }

    /// The datatype a request's raw bytes must have to use the pool.
    pub fn datatype(&self) -> Datatype {
        self.datatype
    }

    /// Copies `bytes` (one row) into a free buffer; `None` when the length is
    /// not one row or no buffer is free.
    pub fn take(self: &Arc<Self>, bytes: &[u8]) -> Option<PooledRow> {
        if bytes.len() != self.row_bytes {
            return None;
        }
        let mut rows = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop()?;
        rows.as_bytes_mut().copy_from_slice(bytes);
        Some(PooledRow {
            rows: Some(rows),
            pool: Arc::clone(self),
        })
    }
}

impl PooledRow {
    pub fn pinned(&self) -> &PinnedRows {
        // Only `drop` takes the buffer out.
        self.rows
            .as_ref()
            .expect("a pooled row holds its buffer until dropped")
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.pinned().as_bytes()
    }
}

impl Drop for PooledRow {
    fn drop(&mut self) {
        if let Some(rows) = self.rows.take() {
            self.pool
                .free
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(rows);
        }
    }
}

impl std::fmt::Debug for PooledRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PooledRow({} bytes)", self.as_bytes().len())
    }
}
