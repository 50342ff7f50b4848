//! The two measures both sides report: the relative L2 error of an output
//! against a reference (the compiler's CPU reference checks, the runtime's
//! verify and the tuner's output checks) and the median of timing samples.

/// Relative L2 error `‖got − want‖₂ / ‖want‖₂`, in f64.
///
/// When `want` is all zeros the absolute norm `‖got‖₂` is returned (so equal
/// zero tensors give 0). Positions where both sides are NaN, or both the same
/// infinity, count as equal. Different lengths give infinity; any other NaN
/// gives NaN, which fails every `<=` tolerance check.
pub fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let (diff, norm) = l2_sums(got, want);
    rel_l2_of_sums(diff, norm)
}

/// `(‖got − want‖₂², ‖want‖₂²)` over equal-length slices, skipping the
/// positions [`rel_l2`] counts as equal; sums of slices of one tensor add up
/// to the whole tensor's (for computing [`rel_l2`] in parallel pieces).
pub fn l2_sums(got: &[f32], want: &[f32]) -> (f64, f64) {
    let mut diff = 0.0f64;
    let mut norm = 0.0f64;
    for (&g, &w) in got.iter().zip(want) {
        if (g.is_nan() && w.is_nan()) || (g.is_infinite() && g == w) {
            continue;
        }
        let d = f64::from(g) - f64::from(w);
        diff += d * d;
        norm += f64::from(w) * f64::from(w);
    }
    (diff, norm)
}

/// [`rel_l2`] from [`l2_sums`].
pub fn rel_l2_of_sums(diff: f64, norm: f64) -> f64 {
    if norm == 0.0 {
        diff.sqrt()
    } else {
        (diff / norm).sqrt()
    }
}

/// The median of `samples` (the mean of the middle two for an even count);
/// NaN when empty.
pub fn median(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rel_l2_handles_zero_and_nan() {
        assert_eq!(rel_l2(&[0.0, 0.0], &[0.0, 0.0]), 0.0);
        assert!((rel_l2(&[3.0, 4.0], &[0.0, 0.0]) - 5.0).abs() < 1e-12);
        assert!((rel_l2(&[1.0, 1.0], &[1.0, 2.0]) - (1.0f64 / 5.0).sqrt()).abs() < 1e-12);
        assert_eq!(rel_l2(&[f32::NAN, 1.0], &[f32::NAN, 1.0]), 0.0);
        assert!(rel_l2(&[f32::NAN, 1.0], &[0.0, 1.0]).is_nan());
        assert_eq!(rel_l2(&[1.0], &[1.0, 2.0]), f64::INFINITY);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
