//! The deterministic fill rule for synthetic weights, shared by the zoo and
//! by the code that refills the torchvision fixtures (whose README defines it).
//!
//! A tensor is described by `(seed, center, half_width)`. Element `i` is
//! `center + half_width * (2u - 1)` where `u = (splitmix64(seed + i) >> 40) / 2^24`
//! is an exact f32 in `[0, 1)`. Only wrapping integer arithmetic and
//! correctly rounded f32 operations, evaluated in that order, are involved
//! (Rust never contracts a multiply and an add into an FMA), so the values are
//! bit-identical on every platform. The fixtures take `seed = fnv1a64(name)`;
//! the zoo takes `fnv1a64(name) ^ model_seed` ([`tensor_seed`]), which is the
//! same thing for model seed 0.

pub use aotune_spec::hash::fnv1a64;

/// splitmix64's output function applied to `z` (the generator's state after
/// the increment is `z + 0x9E3779B97F4A7C15`).
pub fn splitmix64(z: u64) -> u64 {
    let mut z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of the tensor called `name` in a zoo model built with `model_seed`:
/// `fnv1a64(name) ^ model_seed`.
pub fn tensor_seed(name: &str, model_seed: u64) -> u64 {
    fnv1a64(name.as_bytes()) ^ model_seed
}

/// `n` values uniform in `[center - half_width, center + half_width)`, element
/// `i` drawn from `splitmix64(seed + i)` (wrapping) as described in the module
/// documentation.
pub fn fill(seed: u64, center: f32, half_width: f32, n: usize) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let x = splitmix64(seed.wrapping_add(i));
            // 24 bits fit an f32 mantissa, and dividing by 2^24 is exact.
            let u = (x >> 40) as f32 / 16_777_216.0;
            center + half_width * (2.0 * u - 1.0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_fixture_seed() {
        // `fc.weight` in fixtures/resnet50_seedstyle/fill.json.
        assert_eq!(fnv1a64(b"fc.weight"), 8_789_663_796_911_392_672);
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn tensor_seed_with_model_seed_zero_is_fixture_seed() {
        assert_eq!(tensor_seed("fc.weight", 0), 8_789_663_796_911_392_672);
        assert_eq!(tensor_seed("fc.weight", 1), 8_789_663_796_911_392_673);
    }

    #[test]
    fn splitmix64_reference_values() {
        // The first outputs of the reference splitmix64 generator seeded with 0.
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64(0x9e37_79b9_7f4a_7c15), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn fill_matches_fixture_first_values() {
        // fixtures/resnet50_seedstyle/fill.json, tensor `fc.weight`; the JSON
        // holds the f32 values printed as f64, so they compare exactly in f64.
        let half_width = 0.038_273_278_623_819_35_f64 as f32;
        let v = fill(8_789_663_796_911_392_672, 0.0, half_width, 3);
        let expected: [f64; 3] = [
            -0.001_175_312_325_358_390_8,
            0.021_594_237_536_191_94,
            -0.028_371_971_100_568_77,
        ];
        for (&got, want) in v.iter().zip(expected) {
            assert_eq!(f64::from(got), want, "{got} != {want}");
        }
    }

    #[test]
    fn fill_stays_in_range() {
        let v = fill(42, 1.0, 0.25, 10_000);
        assert!(v.iter().all(|&x| (0.75..1.25).contains(&x)));
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
        assert!((mean - 1.0).abs() < 0.01, "mean {mean}");
    }
}
