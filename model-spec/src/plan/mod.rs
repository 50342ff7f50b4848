//! Memory plan: every non-constant value (graph inputs, activations,
//! outputs) gets an offset in one arena.
//!
//! OWNER: plan helper. The public types below are the contract other modules
//! (the CPU reference, codegen) rely on; keep their names and meaning.

use crate::ir::ValueId;

/// One arena buffer: a value (or a chain of view values aliasing it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buffer {
    /// The value this buffer holds. View ops (Flatten, Reshape, Identity) whose
    /// input is planned get a `Buffer` of their own with the *same* offset.
    pub value: ValueId,
    /// Byte offset in the arena, a multiple of [`MemoryPlan::alignment`].
    pub offset: usize,
    /// Bytes of the value in its storage type.
    pub bytes: usize,
    /// First step the buffer must hold data: 0 for graph inputs, `i + 1` for
    /// the output of node `i`.
    pub first: usize,
    /// Last step that reads it (`nodes.len() + 1` for graph outputs).
    pub last: usize,
}

/// Offsets of every planned value in one arena.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    pub alignment: usize,
    pub arena_bytes: usize,
    /// Max over steps of the bytes live at that step: no plan can be smaller.
    pub lower_bound: usize,
    /// Sorted by value id.
    pub buffers: Vec<Buffer>,
}

impl MemoryPlan {
    pub fn buffer(&self, value: ValueId) -> Option<&Buffer> {
        self.buffers
            .binary_search_by_key(&value, |b| b.value)
            .ok()
            .map(|i| &self.buffers[i])
    }
}
