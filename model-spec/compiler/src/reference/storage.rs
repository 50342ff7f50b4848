//! Where non-constant values live while a graph runs, behind one trait so ops
//! do not care: [`ValueMap`] gives each value its own `Vec<f32>` (already
//! rounded to its dtype), [`Arena`] keeps every value in one byte arena at
//! the offset a [`MemoryPlan`] gave it, encoded in its storage type (f32, or
//! f16 / bf16 little-endian via `half`). Both hold elements in the value's
//! physical order; constants never go through storage (they are read from
//! the graph).

use super::RunError;
use crate::ir::{DType, Graph, ValueId};
use crate::plan::MemoryPlan;
use half::{bf16, f16};
use rayon::prelude::*;
use std::borrow::Cow;

/// Elements per parallel chunk when encoding or decoding.
const CHUNK: usize = 1 << 14;

/// Storage of the non-constant values of one run.
pub(crate) trait Storage: Send {
    /// Physical-order elements of `id`, decoded to f32.
    fn load(&self, id: ValueId) -> Result<Cow<'_, [f32]>, String>;
    /// Stores physical-order `data` as `id`, rounding to its dtype.
    fn store(&mut self, id: ValueId, data: Vec<f32>) -> Result<(), String>;
    /// `id` will not be read again.
    fn release(&mut self, _id: ValueId) {}
    /// True when `id` already holds its data without a kernel running: the
    /// plan made it an alias of its view op's input.
    fn is_alias(&self, _id: ValueId) -> bool {
        false
    }
}

fn check_len(graph: &Graph, id: ValueId, len: usize) -> Result<(), String> {
    let want = graph.value(id).numel();
    if len != want {
        return Err(format!(
            "internal: value %{} has {len} elements, shape {:?} needs {want}",
            id.0,
            graph.value(id).shape
        ));
    }
    Ok(())
}

/// Rounds every element to what `dtype` can hold.
pub(crate) fn round_to(dtype: DType, data: &mut [f32]) {
    if dtype == DType::F32 {
        return;
    }
    data.par_chunks_mut(CHUNK)
        .for_each(|chunk| chunk.iter_mut().for_each(|x| *x = dtype.round(*x)));
}

/// Each value in a buffer of its own.
pub(crate) struct ValueMap<'g> {
    graph: &'g Graph,
    values: Vec<Option<Vec<f32>>>,
}

impl<'g> ValueMap<'g> {
    pub(crate) fn new(graph: &'g Graph) -> Self {
        ValueMap {
            graph,
            values: vec![None; graph.values.len()],
        }
    }
}

impl Storage for ValueMap<'_> {
    fn load(&self, id: ValueId) -> Result<Cow<'_, [f32]>, String> {
        match self.values.get(id.index()) {
            Some(Some(data)) => Ok(Cow::Borrowed(data)),
            _ => Err(format!(
                "internal: value %{} read before it was written",
                id.0
            )),
        }
    }

    fn store(&mut self, id: ValueId, mut data: Vec<f32>) -> Result<(), String> {
        check_len(self.graph, id, data.len())?;
        round_to(self.graph.value(id).dtype, &mut data);
        self.values[id.index()] = Some(data);
        Ok(())
    }

    fn release(&mut self, id: ValueId) {
        if let Some(slot) = self.values.get_mut(id.index()) {
            *slot = None;
        }
    }
}

/// Every planned value in one byte arena.
pub(crate) struct Arena<'g> {
    graph: &'g Graph,
    bytes: Vec<u8>,
    /// Byte offset of each value (by value index), `None` when unplanned.
    offsets: Vec<Option<usize>>,
    aliases: Vec<bool>,
}

impl<'g> Arena<'g> {
    /// Checks that every non-constant value the graph uses has a buffer that
    /// is big enough and inside the arena.
    pub(crate) fn new(graph: &'g Graph, plan: &MemoryPlan) -> Result<Self, RunError> {
        let mut offsets = vec![None; graph.values.len()];
        let mut aliases = vec![false; graph.values.len()];
        let used = graph.inputs.iter().chain(graph.outputs.iter()).chain(
            graph
                .nodes
                .iter()
                .flat_map(|n| n.inputs.iter().chain([&n.output])),
        );
        for &id in used {
            let value = match graph.values.get(id.index()) {
                Some(v) if !v.is_constant() => v,
                _ => continue,
            };
            let fail = |message: String| RunError::Plan {
                value: id.0,
                name: value.name.clone(),
                message,
            };
            let buffer = plan
                .buffer(id)
                .ok_or_else(|| fail("the value has no buffer".into()))?;
            let need = value
                .shape
                .iter()
                .try_fold(value.dtype.size(), |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| fail(format!("shape {:?} overflows", value.shape)))?;
            if buffer.bytes < need {
                return Err(fail(format!(
                    "buffer holds {} bytes, the value needs {need}",
                    buffer.bytes
                )));
            }
            let end = buffer.offset.checked_add(need);
            if end.is_none_or(|end| end > plan.arena_bytes) {
                return Err(fail(format!(
                    "buffer [{}, +{need}) ends past the arena's {} bytes",
                    buffer.offset, plan.arena_bytes
                )));
            }
            offsets[id.index()] = Some(buffer.offset);
            aliases[id.index()] = buffer.alias_of.is_some();
        }
        Ok(Arena {
            graph,
            bytes: vec![0; plan.arena_bytes],
            offsets,
            aliases,
        })
    }

    fn span(&self, id: ValueId) -> Result<(usize, usize, DType), String> {
        let value = self.graph.value(id);
        let offset = self
            .offsets
            .get(id.index())
            .copied()
            .flatten()
            .ok_or_else(|| format!("internal: value %{} has no arena buffer", id.0))?;
        Ok((offset, value.numel(), value.dtype))
    }
}

impl Storage for Arena<'_> {
    fn load(&self, id: ValueId) -> Result<Cow<'_, [f32]>, String> {
        let (offset, len, dtype) = self.span(id)?;
        let bytes = &self.bytes[offset..offset + len * dtype.size()];
        Ok(Cow::Owned(decode(bytes, dtype)))
    }

    fn store(&mut self, id: ValueId, data: Vec<f32>) -> Result<(), String> {
        check_len(self.graph, id, data.len())?;
        let (offset, len, dtype) = self.span(id)?;
        let bytes = &mut self.bytes[offset..offset + len * dtype.size()];
        encode(&data, dtype, bytes);
        Ok(())
    }

    fn is_alias(&self, id: ValueId) -> bool {
        self.aliases.get(id.index()).copied().unwrap_or(false)
    }
}

/// Little-endian `bytes` of `dtype` elements → f32.
pub(crate) fn decode(bytes: &[u8], dtype: DType) -> Vec<f32> {
    let size = dtype.size();
    let mut out = vec![0.0f32; bytes.len() / size];
    out.par_chunks_mut(CHUNK)
        .zip(bytes.par_chunks(CHUNK * size))
        .for_each(|(dst, src)| {
            let src = src.chunks_exact(size);
            match dtype {
                DType::F32 => dst
                    .iter_mut()
                    .zip(src)
                    .for_each(|(d, s)| *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]])),
                DType::F16 => dst
                    .iter_mut()
                    .zip(src)
                    .for_each(|(d, s)| *d = f16::from_le_bytes([s[0], s[1]]).to_f32()),
                DType::BF16 => dst
                    .iter_mut()
                    .zip(src)
                    .for_each(|(d, s)| *d = bf16::from_le_bytes([s[0], s[1]]).to_f32()),
            }
        });
    out
}

/// f32 → little-endian `dtype` elements in `bytes` (round to nearest even).
pub(crate) fn encode(data: &[f32], dtype: DType, bytes: &mut [u8]) {
    let size = dtype.size();
    bytes
        .par_chunks_mut(CHUNK * size)
        .zip(data.par_chunks(CHUNK))
        .for_each(|(dst, src)| {
            let dst = dst.chunks_exact_mut(size);
            match dtype {
                DType::F32 => dst
                    .zip(src)
                    .for_each(|(d, s)| d.copy_from_slice(&s.to_le_bytes())),
                DType::F16 => dst
                    .zip(src)
                    .for_each(|(d, s)| d.copy_from_slice(&f16::from_f32(*s).to_le_bytes())),
                DType::BF16 => dst
                    .zip(src)
                    .for_each(|(d, s)| d.copy_from_slice(&bf16::from_f32(*s).to_le_bytes())),
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_to_storage_type() {
        let data: Vec<f32> = (0..40_000).map(|i| (i as f32) * 0.001 + 0.1).collect();
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let mut bytes = vec![0u8; data.len() * dtype.size()];
            encode(&data, dtype, &mut bytes);
            let back = decode(&bytes, dtype);
            let want: Vec<f32> = data.iter().map(|&x| dtype.round(x)).collect();
            assert_eq!(back, want, "{dtype}");
        }
    }
}
