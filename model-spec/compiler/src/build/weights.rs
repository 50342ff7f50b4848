//! The weight blob: every constant a kernel reads, in its storage dtype and
//! physical (pre-packed) layout, each at a 256-byte-aligned offset.

use crate::ir::{DType, Graph, ValueId};
use std::collections::BTreeMap;

pub const WEIGHT_ALIGNMENT: usize = 256;

#[derive(Debug, Clone, PartialEq)]
pub struct WeightBlob {
    pub bytes: Vec<u8>,
    /// Byte offset of each constant in the blob.
    pub offsets: BTreeMap<ValueId, u64>,
}

fn encode(dtype: DType, data: &[f32], out: &mut Vec<u8>) {
    match dtype {
        DType::F32 => out.extend(data.iter().flat_map(|v| v.to_le_bytes())),
        DType::F16 => out.extend(
            data.iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes()),
        ),
        DType::BF16 => out.extend(
            data.iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()),
        ),
    }
}

/// Lays out the constants in `values` (deduplicated, in id order).
pub fn pack_weights(graph: &Graph, values: impl IntoIterator<Item = ValueId>) -> WeightBlob {
    let mut blob = WeightBlob {
        bytes: Vec::new(),
        offsets: BTreeMap::new(),
    };
    let wanted: std::collections::BTreeSet<ValueId> = values.into_iter().collect();
    for id in wanted {
        let value = graph.value(id);
        let Some(data) = value.constant_data() else {
            continue;
        };
        let pad = blob.bytes.len().next_multiple_of(WEIGHT_ALIGNMENT) - blob.bytes.len();
        blob.bytes.extend(std::iter::repeat_n(0u8, pad));
        blob.offsets.insert(id, blob.bytes.len() as u64);
        encode(value.dtype, data, &mut blob.bytes);
    }
    blob
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Precision, Value, ValueKind};

    #[test]
    fn constants_are_aligned_and_encoded_in_their_dtype() {
        let mut g = Graph {
            values: vec![],
            nodes: vec![],
            inputs: vec![],
            outputs: vec![],
            precision: Precision::Fp16,
        };
        let a = g.add_value(Value::constant("a", vec![3], vec![1.0, 2.0, 3.0]));
        let b = g.add_value(Value {
            dtype: DType::F16,
            ..Value::constant("b", vec![2], vec![0.5, -1.0])
        });
        let x = g.add_value(Value {
            kind: ValueKind::Input,
            ..Value::activation("x", vec![2])
        });
        let blob = pack_weights(&g, [b, a, x, a]);
        assert_eq!(blob.offsets[&a], 0);
        assert_eq!(blob.offsets[&b], 256);
        assert_eq!(blob.offsets.len(), 2, "activations are not weights");
        assert_eq!(&blob.bytes[..4], &1.0f32.to_le_bytes());
        assert_eq!(
            &blob.bytes[256..258],
            &half::f16::from_f32(0.5).to_le_bytes()
        );
        assert_eq!(blob.bytes.len(), 260);
    }
}
