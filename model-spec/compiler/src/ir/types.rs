//! Element types, layouts and precisions of IR values.
//!
//! A value's `shape` is always its *logical* ONNX shape (NCHW for images, OIHW
//! for conv weights); its [`Layout`] says how that logical shape is laid out in
//! memory. Keeping the logical shape fixed means shape inference, printing and
//! the CPU reference never need to know which layout a pass chose.

pub use aotune_spec::{DType, Layout, Precision};

/// Rounds an f32 to tf32 (round to nearest, ties away, as cvt.rna.tf32.f32 does).
pub fn round_tf32(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x1000) & 0xffff_e000;
    f32::from_bits(rounded)
}

/// Number of elements of a shape.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tf32_rounding_keeps_ten_mantissa_bits() {
        let x = 1.0 + f32::EPSILON * 3.0;
        assert_eq!(round_tf32(x), 1.0);
        assert_eq!(round_tf32(1.5), 1.5);
        assert_eq!(round_tf32(-2.0), -2.0);
        let y = round_tf32(0.1);
        assert_eq!(y.to_bits() & 0x1fff, 0);
        assert!((y - 0.1).abs() < 1e-3 * 0.1);
    }
}
