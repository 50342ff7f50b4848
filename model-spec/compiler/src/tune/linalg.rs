//! The little linear algebra the ridge model needs: a Cholesky factor of a
//! symmetric positive-definite matrix and triangular solves with it. The
//! matrices are at most a few hundred wide, so plain loops are enough.

/// Lower-triangular `L` with `L·Lᵀ = A`, row-major `n × n`.
#[derive(Debug, Clone)]
pub(crate) struct Cholesky {
    n: usize,
    l: Vec<f64>,
}

impl Cholesky {
    /// Factors the row-major `n × n` matrix `a` (only its lower triangle is
    /// read); `None` when it is not numerically positive definite.
    pub fn new(a: &[f64], n: usize) -> Option<Cholesky> {
        if a.len() != n * n {
            return None;
        }
        let mut l = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..=i {
                let dot: f64 = (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum();
                let v = a[i * n + j] - dot;
                if i == j {
                    let floor = 1e-12 * a[i * n + i].abs().max(1e-300);
                    if v.is_nan() || v <= floor || !v.is_finite() {
                        return None;
                    }
                    l[i * n + i] = v.sqrt();
                } else {
                    l[i * n + j] = v / l[j * n + j];
                }
            }
        }
        Some(Cholesky { n, l })
    }

    /// `z` with `L·z = b`.
    pub fn forward(&self, b: &[f64]) -> Vec<f64> {
        let n = self.n;
        let mut z = vec![0.0; n];
        for i in 0..n {
            let dot: f64 = (0..i).map(|k| self.l[i * n + k] * z[k]).sum();
            z[i] = (b[i] - dot) / self.l[i * n + i];
        }
        z
    }

    /// `x` with `A·x = b`.
    pub fn solve(&self, b: &[f64]) -> Vec<f64> {
        let n = self.n;
        let mut x = self.forward(b);
        for i in (0..n).rev() {
            let dot: f64 = (i + 1..n).map(|k| self.l[k * n + i] * x[k]).sum();
            x[i] = (x[i] - dot) / self.l[i * n + i];
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_a_known_system() {
        // A = [[4, 2, 0.4], [2, 5, 1], [0.4, 1, 3]], x = [1, -2, 0.5].
        let a = [4.0, 2.0, 0.4, 2.0, 5.0, 1.0, 0.4, 1.0, 3.0];
        let x = [1.0, -2.0, 0.5];
        let b: Vec<f64> = (0..3)
            .map(|i| (0..3).map(|j| a[i * 3 + j] * x[j]).sum())
            .collect();
        let c = Cholesky::new(&a, 3).unwrap();
        for (got, want) in c.solve(&b).iter().zip(x) {
            assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        }
        // ‖L⁻¹b‖² = bᵀA⁻¹b = xᵀb.
        let z = c.forward(&b);
        let q: f64 = z.iter().map(|v| v * v).sum();
        let xb: f64 = x.iter().zip(&b).map(|(x, b)| x * b).sum();
        assert!((q - xb).abs() < 1e-9);
    }

    #[test]
    fn refuses_what_is_not_positive_definite() {
        assert!(Cholesky::new(&[1.0, 2.0, 2.0, 1.0], 2).is_none());
        assert!(Cholesky::new(&[0.0], 1).is_none());
        assert!(Cholesky::new(&[1.0, 0.0], 2).is_none());
    }
}
