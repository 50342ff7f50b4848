//! One input's values for a request's rows, as the batcher holds them until
//! they are gathered into a batch: f32 numbers (JSON, `fp32_contents`,
//! decoded images), or the client's little-endian bytes of the input's
//! datatype kept as received (gRPC `raw_input_contents` is a slice of the
//! received message), so a raw tensor is copied once on its way to the
//! device: into the batch's staging buffer, in the model input's dtype.

use super::datatype::Datatype;
use super::row_pool::PooledRow;
use aotune::runtime::InputStaging;
use bytes::Bytes;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

/// `len()` values, row after row.
#[derive(Debug)]
pub enum Rows {
    F32(Vec<f32>),
    /// Little-endian elements of `datatype`; the length is a multiple of
    /// its size (checked when built by [`Rows::from_le_bytes`]).
    Le {
        bytes: Bytes,
        datatype: Datatype,
    },
    /// One row copied into a pinned buffer of the model's pool (little-endian
    /// `datatype` elements, the model input's dtype), as the request arrived.
    Pinned {
        row: PooledRow,
        datatype: Datatype,
    },
}

impl PartialEq for Rows {
    /// Same variant, datatype and values (bytes for the raw variants).
    fn eq(&self, other: &Rows) -> bool {
        match (self, other) {
            (Rows::F32(a), Rows::F32(b)) => a == b,
            (
                Rows::Le { bytes, datatype },
                Rows::Le {
                    bytes: b,
                    datatype: d,
                },
            ) => bytes == b && datatype == d,
            (
                Rows::Pinned { row, datatype },
                Rows::Pinned {
                    row: r,
                    datatype: d,
                },
            ) => row.as_bytes() == r.as_bytes() && datatype == d,
            _ => false,
        }
    }
}

impl Rows {
    /// `bytes` as little-endian `datatype` values, or `None` when its
    /// length is not a multiple of the element size.
    pub fn from_le_bytes(bytes: Bytes, datatype: Datatype) -> Option<Rows> {
        (bytes.len() % datatype.size() == 0).then_some(Rows::Le { bytes, datatype })
    }

    /// The number of values.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        match self {
            Rows::F32(v) => v.len(),
            Rows::Le { bytes, datatype } => bytes.len() / datatype.size(),
            Rows::Pinned { row, datatype } => row.as_bytes().len() / datatype.size(),
        }
    }

    /// Writes values `start .. start + dst.len()` into `dst`, converted to
    /// its element type (rounded to nearest even when narrower). The main
    /// paths, FP32 bytes into f32 and FP16 bytes into f16, copy bits.
    ///
    /// # Panics
    ///
    /// When that range is not inside `0 .. len()` (the batcher's pieces are
    /// cut from checked requests).
    pub fn copy_to(&self, start: usize, dst: InputStaging<'_>) {
        let end = start + dst.len();
        match (self, dst) {
            (Rows::F32(v), InputStaging::F32(d)) => d.copy_from_slice(&v[start..end]),
            (Rows::F32(v), InputStaging::F16(d)) => d.convert_from_f32_slice(&v[start..end]),
            (Rows::F32(v), InputStaging::BF16(d)) => d.convert_from_f32_slice(&v[start..end]),
            (Rows::Le { bytes, datatype }, dst) => {
                let src = &bytes[start * datatype.size()..end * datatype.size()];
                copy_le(*datatype, src, dst);
            }
            (Rows::Pinned { row, datatype }, dst) => {
                let src = &row.as_bytes()[start * datatype.size()..end * datatype.size()];
                copy_le(*datatype, src, dst);
            }
        }
    }

    /// Every value as f32, as a new vector.
    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.len()];
        self.copy_to(0, InputStaging::F32(&mut out));
        out
    }
}

/// Little-endian `datatype` elements of `src` into `dst` (as many).
fn copy_le(datatype: Datatype, src: &[u8], dst: InputStaging<'_>) {
    match (datatype, dst) {
        (Datatype::FP32, InputStaging::F32(d)) => {
            for (d, s) in d.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        }
        (Datatype::FP16, InputStaging::F16(d)) => {
            for (d, s) in d.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16::from_bits(u16::from_le_bytes([s[0], s[1]]));
            }
        }
        (Datatype::FP16, InputStaging::F32(d)) => {
            for (d, s) in d.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16::from_bits(u16::from_le_bytes([s[0], s[1]])).to_f32();
            }
        }
        (Datatype::FP32, InputStaging::F16(d)) => {
            for (d, s) in d.iter_mut().zip(src.chunks_exact(4)) {
                *d = f16::from_f32(f32::from_le_bytes([s[0], s[1], s[2], s[3]]));
            }
        }
        (Datatype::FP32, InputStaging::BF16(d)) => {
            for (d, s) in d.iter_mut().zip(src.chunks_exact(4)) {
                *d = bf16::from_f32(f32::from_le_bytes([s[0], s[1], s[2], s[3]]));
            }
        }
        (Datatype::FP16, InputStaging::BF16(d)) => {
            for (d, s) in d.iter_mut().zip(src.chunks_exact(2)) {
                let x = f16::from_bits(u16::from_le_bytes([s[0], s[1]])).to_f32();
                *d = bf16::from_f32(x);
            }
        }
    }
}

impl From<Vec<f32>> for Rows {
    fn from(v: Vec<f32>) -> Rows {
        Rows::F32(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le_f32(values: &[f32]) -> Rows {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Rows::from_le_bytes(Bytes::from(bytes), Datatype::FP32).unwrap()
    }

    fn le_f16(values: &[f32]) -> Rows {
        let bytes: Vec<u8> = values
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect();
        Rows::from_le_bytes(Bytes::from(bytes), Datatype::FP16).unwrap()
    }

    #[test]
    fn raw_bytes_read_as_little_endian_f32() {
        let values = [1.5f32, -2.0, 3.25, 1e-3];
        let rows = le_f32(&values);
        let mut dst = [0.0; 2];
        rows.copy_to(1, InputStaging::F32(&mut dst));
        assert_eq!(dst, [-2.0, 3.25]);
        assert_eq!(rows.to_vec(), values);
        assert_eq!(Rows::from(values.to_vec()), Rows::F32(values.to_vec()));
    }

    #[test]
    fn fp16_bytes_copy_into_f16_staging_bit_for_bit() {
        let values = [1.5f32, -2.0, 0.1, 65504.0];
        let rows = le_f16(&values);
        assert_eq!(rows.len(), 4);
        let mut dst = [f16::ZERO; 3];
        rows.copy_to(1, InputStaging::F16(&mut dst));
        let want = [-2.0f32, 0.1, 65504.0].map(f16::from_f32);
        assert_eq!(dst.map(f16::to_bits), want.map(f16::to_bits));
        // Into f32 staging, each value widens exactly.
        assert_eq!(rows.to_vec(), values.map(|v| f16::from_f32(v).to_f32()));
    }

    #[test]
    fn numbers_and_fp32_bytes_round_into_f16_staging() {
        let values = [0.1f32, 1.0 / 3.0, -7.75];
        let want = values.map(|v| f16::from_f32(v).to_bits());
        for rows in [Rows::F32(values.to_vec()), le_f32(&values)] {
            let mut dst = [f16::ZERO; 3];
            rows.copy_to(0, InputStaging::F16(&mut dst));
            assert_eq!(dst.map(f16::to_bits), want, "{rows:?}");
            let mut dst = [bf16::ZERO; 3];
            rows.copy_to(0, InputStaging::BF16(&mut dst));
            assert_eq!(
                dst.map(bf16::to_f32),
                values.map(|v| bf16::from_f32(v).to_f32())
            );
        }
        let mut dst = [bf16::ZERO; 1];
        le_f16(&[0.5]).copy_to(0, InputStaging::BF16(&mut dst));
        assert_eq!(dst[0].to_f32(), 0.5);
    }

    #[test]
    fn a_length_not_a_multiple_of_the_element_size_is_refused() {
        assert!(Rows::from_le_bytes(Bytes::from_static(&[0, 0, 0]), Datatype::FP32).is_none());
        assert!(Rows::from_le_bytes(Bytes::from_static(&[0, 0, 0]), Datatype::FP16).is_none());
        assert!(Rows::from_le_bytes(Bytes::new(), Datatype::FP32)
            .unwrap()
            .to_vec()
            .is_empty());
    }
}
