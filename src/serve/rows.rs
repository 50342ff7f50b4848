//! One input's values for a request's rows, as the batcher holds them until
//! they are gathered into a batch: f32 numbers (JSON, `fp32_contents`,
//! decoded images), or the client's little-endian bytes kept as received
//! (gRPC `raw_input_contents` is a slice of the received message), so a raw
//! tensor is copied once on its way to the device: into the batch.

use bytes::Bytes;

/// `len()` f32 values, row after row.
#[derive(Debug, Clone, PartialEq)]
pub enum Rows {
    F32(Vec<f32>),
    /// f32 little-endian; the length is a multiple of 4 (checked when built
    /// by [`Rows::from_le_bytes`]).
    Le(Bytes),
}

impl Rows {
    /// `bytes` as f32 little-endian values, or `None` when its length is not
    /// a multiple of 4.
    pub fn from_le_bytes(bytes: Bytes) -> Option<Rows> {
        (bytes.len() % 4 == 0).then_some(Rows::Le(bytes))
    }

    /// Writes values `start .. start + dst.len()` into `dst`.
    ///
    /// # Panics
    ///
    /// When that range is not inside `0 .. len()` (the batcher's pieces are
    /// cut from checked requests).
    pub fn copy_to(&self, start: usize, dst: &mut [f32]) {
        match self {
            Rows::F32(v) => dst.copy_from_slice(&v[start..start + dst.len()]),
            Rows::Le(b) => {
                let src = &b[start * 4..(start + dst.len()) * 4];
                for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                    *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                }
            }
        }
    }

    /// Every value, as a new vector.
    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<f32> {
        let len = match self {
            Rows::F32(v) => v.len(),
            Rows::Le(b) => b.len() / 4,
        };
        let mut out = vec![0.0; len];
        self.copy_to(0, &mut out);
        out
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

    #[test]
    fn raw_bytes_read_as_little_endian_f32() {
        let values = [1.5f32, -2.0, 3.25, 1e-3];
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let rows = Rows::from_le_bytes(Bytes::from(bytes)).unwrap();
        let mut dst = [0.0; 2];
        rows.copy_to(1, &mut dst);
        assert_eq!(dst, [-2.0, 3.25]);
        assert_eq!(rows.to_vec(), values);
        assert_eq!(Rows::from(values.to_vec()), Rows::F32(values.to_vec()));
    }

    #[test]
    fn a_length_not_a_multiple_of_four_is_refused() {
        assert!(Rows::from_le_bytes(Bytes::from_static(&[0, 0, 0])).is_none());
        assert!(Rows::from_le_bytes(Bytes::new())
            .unwrap()
            .to_vec()
            .is_empty());
    }
}
