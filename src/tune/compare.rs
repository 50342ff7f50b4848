//! The worker's output check: a candidate's raw output bytes against the
//! reference kernel's decoded output, by relative L2 distance, decoded (with
//! the runtime's decoder) and summed in parallel chunks on every core, never
//! holding an f32 copy of the whole candidate (batch-256 outputs reach
//! 400 MB, and the check ran once per candidate on one core).
//!
//! The distance is [`aotune_compiler::reference::rel_l2`]'s, from its per-chunk
//! sums; a NaN on one side only is reported apart (the caller fails the
//! candidate on it).

use crate::runtime::decode_values;
use aotune_compiler::ir::DType;
use aotune_compiler::reference::{l2_sums, rel_l2_of_sums};
use rayon::prelude::*;

/// The distance of one output from the reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Distance {
    /// ‖got − want‖ / ‖want‖ (‖got − want‖ where the reference is zero);
    /// infinite when the lengths differ.
    pub rel_l2: f64,
    /// Whether some element is NaN on one side only.
    pub nan_mismatch: bool,
}

/// Elements per parallel chunk.
const CHUNK: usize = 1 << 16;

/// Compares `raw` (little-endian `dtype` values) with `want`.
pub fn distance(raw: &[u8], dtype: DType, want: &[f32]) -> Distance {
    let size = dtype.size();
    if raw.len() != want.len() * size {
        return Distance {
            rel_l2: f64::INFINITY,
            nan_mismatch: false,
        };
    }
    let (diff, norm, nan) = raw
        .par_chunks(CHUNK * size)
        .zip(want.par_chunks(CHUNK))
        .map(|(bytes, want)| {
            let got = decode_values(dtype, bytes);
            let (diff, norm) = l2_sums(&got, want);
            let nan = got.iter().zip(want).any(|(g, w)| g.is_nan() != w.is_nan());
            (diff, norm, nan)
        })
        .reduce(
            || (0.0, 0.0, false),
            |a, b| (a.0 + b.0, a.1 + b.1, a.2 || b.2),
        );
    Distance {
        rel_l2: rel_l2_of_sums(diff, norm),
        nan_mismatch: nan,
    }
}

/// Decodes `raw` on every core, with the runtime's decoder.
pub fn decode(raw: &[u8], dtype: DType) -> Vec<f32> {
    raw.par_chunks(CHUNK * dtype.size())
        .flat_map_iter(|c| decode_values(dtype, c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aotune_compiler::reference::rel_l2;
    use half::{bf16, f16};

    fn values(n: usize, seed: u64) -> Vec<f32> {
        (0..n as u64)
            .map(|i| {
                let z = aotune_compiler::zoo::splitmix64(seed.wrapping_mul(31).wrapping_add(i));
                ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn encode(v: &[f32], dtype: DType) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| match dtype {
                DType::F32 => x.to_le_bytes().to_vec(),
                DType::F16 => f16::from_f32(x).to_le_bytes().to_vec(),
                DType::BF16 => bf16::from_f32(x).to_le_bytes().to_vec(),
            })
            .collect()
    }

    #[test]
    fn matches_the_serial_rel_l2_for_every_type() {
        // More than one chunk, not a multiple of it.
        let n = 3 * CHUNK + 17;
        let want = values(n, 1);
        let noisy: Vec<f32> = want
            .iter()
            .zip(values(n, 2))
            .map(|(w, e)| w + 1e-2 * e)
            .collect();
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let raw = encode(&noisy, dtype);
            let got = decode(&raw, dtype);
            let d = distance(&raw, dtype, &want);
            let serial = rel_l2(&got, &want);
            assert!(
                (d.rel_l2 - serial).abs() <= 1e-9 * serial.max(1e-12),
                "{dtype:?}"
            );
            assert!(d.rel_l2 > 1e-3 && !d.nan_mismatch, "{dtype:?}: {d:?}");
            let exact = encode(&want, dtype);
            assert_eq!(distance(&exact, dtype, &decode(&exact, dtype)).rel_l2, 0.0);
        }
    }

    #[test]
    fn a_poisoned_element_is_a_nan_mismatch_and_lengths_must_agree() {
        let want = values(1000, 3);
        let mut raw = encode(&want, DType::F16);
        // The worker poisons outputs with 0xff bytes: an f16 NaN.
        raw[2 * 500] = 0xff;
        raw[2 * 500 + 1] = 0xff;
        let d = distance(
            &raw,
            DType::F16,
            &decode(&encode(&want, DType::F16), DType::F16),
        );
        assert!(d.nan_mismatch);
        assert_eq!(distance(&raw[2..], DType::F16, &want).rel_l2, f64::INFINITY);
    }
}
