//! The worker's output check: a candidate's raw output bytes against the
//! reference kernel's decoded output, by relative L2 distance, decoded and
//! summed in parallel chunks on every core without materializing the
//! candidate's f32 copy (batch-256 outputs reach 400 MB, and the check ran
//! once per candidate on one core).
//!
//! Same rule as [`aotune_spec::reference::rel_l2`]: elements that are NaN in
//! both, or the same infinity, are skipped; a NaN on one side only is
//! counted apart (the caller fails the candidate on it).

use aotune_spec::ir::DType;
use half::{bf16, f16};
use rayon::prelude::*;

/// Storage type of the raw output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    F32,
    F16,
    Bf16,
}

impl Elem {
    fn size(self) -> usize {
        match self {
            Elem::F32 => 4,
            Elem::F16 | Elem::Bf16 => 2,
        }
    }

    fn decode(self, b: &[u8]) -> f32 {
        match self {
            Elem::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            Elem::F16 => f16::from_le_bytes([b[0], b[1]]).to_f32(),
            Elem::Bf16 => bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        }
    }
}

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

/// Compares `raw` (little-endian `elem` values) with `want`.
pub fn distance(raw: &[u8], elem: Elem, want: &[f32]) -> Distance {
    let size = elem.size();
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
            let (mut diff, mut norm, mut nan) = (0.0f64, 0.0f64, false);
            for (b, &w) in bytes.chunks_exact(size).zip(want) {
                let g = elem.decode(b);
                if g.is_nan() != w.is_nan() {
                    nan = true;
                }
                if (g.is_nan() && w.is_nan()) || (g.is_infinite() && g == w) {
                    continue;
                }
                let d = f64::from(g) - f64::from(w);
                diff += d * d;
                norm += f64::from(w) * f64::from(w);
            }
            (diff, norm, nan)
        })
        .reduce(
            || (0.0, 0.0, false),
            |a, b| (a.0 + b.0, a.1 + b.1, a.2 || b.2),
        );
    let rel_l2 = if norm == 0.0 {
        diff.sqrt()
    } else {
        (diff / norm).sqrt()
    };
    Distance {
        rel_l2,
        nan_mismatch: nan,
    }
}

/// Decodes `raw` on every core, with the runtime's decoder.
pub fn decode(raw: &[u8], elem: Elem) -> Vec<f32> {
    let dtype = match elem {
        Elem::F32 => DType::F32,
        Elem::F16 => DType::F16,
        Elem::Bf16 => DType::BF16,
    };
    raw.par_chunks(CHUNK * elem.size())
        .flat_map_iter(|c| crate::runtime::decode_values(dtype, c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aotune_spec::reference::rel_l2;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        (0..n as u64)
            .map(|i| {
                let z = aotune_spec::zoo::splitmix64(seed.wrapping_mul(31).wrapping_add(i));
                ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn encode(v: &[f32], elem: Elem) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| match elem {
                Elem::F32 => x.to_le_bytes().to_vec(),
                Elem::F16 => f16::from_f32(x).to_le_bytes().to_vec(),
                Elem::Bf16 => bf16::from_f32(x).to_le_bytes().to_vec(),
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
        for elem in [Elem::F32, Elem::F16, Elem::Bf16] {
            let raw = encode(&noisy, elem);
            let got = decode(&raw, elem);
            let d = distance(&raw, elem, &want);
            let serial = rel_l2(&got, &want);
            assert!(
                (d.rel_l2 - serial).abs() <= 1e-9 * serial.max(1e-12),
                "{elem:?}"
            );
            assert!(d.rel_l2 > 1e-3 && !d.nan_mismatch, "{elem:?}: {d:?}");
            assert_eq!(
                distance(
                    &encode(&want, elem),
                    elem,
                    &decode(&encode(&want, elem), elem)
                )
                .rel_l2,
                0.0
            );
        }
    }

    #[test]
    fn a_poisoned_element_is_a_nan_mismatch_and_lengths_must_agree() {
        let want = values(1000, 3);
        let mut raw = encode(&want, Elem::F16);
        // The worker poisons outputs with 0xff bytes: an f16 NaN.
        raw[2 * 500] = 0xff;
        raw[2 * 500 + 1] = 0xff;
        let d = distance(
            &raw,
            Elem::F16,
            &decode(&encode(&want, Elem::F16), Elem::F16),
        );
        assert!(d.nan_mismatch);
        assert_eq!(distance(&raw[2..], Elem::F16, &want).rel_l2, f64::INFINITY);
    }
}
