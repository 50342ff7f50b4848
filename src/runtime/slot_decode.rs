//! Reading a tensor slot's raw bytes (its storage dtype and physical
//! layout, as `Model::run_layers` hands them out) as logical row-major f32.

use crate::artifact::{DType, Layout, TensorSlot};

/// Decodes `bytes` of `slot` to logical (ONNX-order, row-major) f32.
pub fn decode_slot(slot: &TensorSlot, bytes: &[u8]) -> Vec<f32> {
    let physical = decode_values(slot.dtype, bytes);
    if slot.layout == Layout::RowMajor || slot.shape.len() != 4 {
        return physical;
    }
    to_logical(slot, physical)
}

/// Decodes little-endian `dtype` values, in the order they are stored.
pub(crate) fn decode_values(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    }
}

/// NHWC-ordered values of a rank-4 slot to logical NCHW order.
fn to_logical(slot: &TensorSlot, physical: Vec<f32>) -> Vec<f32> {
    let (n, c, h, w) = (slot.shape[0], slot.shape[1], slot.shape[2], slot.shape[3]);
    let mut logical = vec![0.0; physical.len()];
    for ni in 0..n {
        for hi in 0..h {
            for wi in 0..w {
                for ci in 0..c {
                    logical[((ni * c + ci) * h + hi) * w + wi] =
                        physical[((ni * h + hi) * w + wi) * c + ci];
                }
            }
        }
    }
    logical
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_last_f16_decodes_to_nchw() {
        // logical [1, 2, 1, 2]: c0 = [1, 2], c1 = [3, 4]; NHWC bytes: 1 3 2 4.
        let slot = TensorSlot {
            name: "t".into(),
            shape: vec![1, 2, 1, 2].into(),
            dtype: DType::F16,
            layout: Layout::ChannelsLast,
            offset: 0,
            bytes: 8,
        };
        let bytes: Vec<u8> = [1.0f32, 3.0, 2.0, 4.0]
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        assert_eq!(decode_slot(&slot, &bytes), vec![1.0, 2.0, 3.0, 4.0]);
    }
}
