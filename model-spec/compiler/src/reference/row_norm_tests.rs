//! A Dense carrying a [`RowNorm`] against LayerNorm → Dense computed
//! naively in f64.

use super::super::testing::Rng;
use super::super::{rel_l2, run, Accumulate, RunOptions};
use crate::ir::{Activation, Epilogue, Op, RowNorm};
use crate::test_graphs::Builder;

const EPS: f32 = 1e-6;

/// One LayerNorm → Dense problem: x `[m, k]`, γ, β `[k]`, w `[n, k]`, b `[n]`.
struct Problem {
    m: usize,
    k: usize,
    n: usize,
    x: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    w: Vec<f32>,
    b: Vec<f32>,
}

impl Problem {
    /// Random data; each element of x is `offset + uniform(-1, 1)`.
    fn random([m, k, n]: [usize; 3], offset: f32, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let x = rng.vec(m * k).into_iter().map(|v| v + offset).collect();
        let gamma = rng.vec(k).into_iter().map(|v| 1.0 + 0.5 * v).collect();
        Problem {
            m,
            k,
            n,
            x,
            gamma,
            beta: rng.vec(k),
            w: rng.vec(n * k),
            b: rng.vec(n),
        }
    }

    /// `gelu(Dense(LayerNorm(x)))`, all in f64, rounded once to f32.
    fn naive(&self) -> Vec<f32> {
        let (k, n) = (self.k, self.n);
        let mut out = Vec::with_capacity(self.m * n);
        for row in self.x.chunks(k) {
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / k as f64;
            let var = row
                .iter()
                .map(|&v| (f64::from(v) - mean).powi(2))
                .sum::<f64>()
                / k as f64;
            let r = 1.0 / (var + f64::from(EPS)).sqrt();
            let normed: Vec<f64> = (0..k)
                .map(|t| {
                    (f64::from(row[t]) - mean) * r * f64::from(self.gamma[t])
                        + f64::from(self.beta[t])
                })
                .collect();
            for j in 0..n {
                let dot: f64 = (0..k)
                    .map(|t| normed[t] * f64::from(self.w[j * k + t]))
                    .sum();
                let y = (dot + f64::from(self.b[j])) as f32;
                out.push(Activation::Gelu { tanh: false }.apply(y));
            }
        }
        out
    }

    /// The folded Dense (w' = w·diag(γ) stored f32, b' = b + w·β, s = Σ_k
    /// w'), run with `accumulate`.
    fn folded(&self, accumulate: Accumulate) -> Vec<f32> {
        let (m, k, n) = (self.m, self.k, self.n);
        let w2: Vec<f32> = (0..n * k).map(|i| self.w[i] * self.gamma[i % k]).collect();
        let b2: Vec<f32> = (0..n)
            .map(|j| {
                let wb: f64 = (0..k)
                    .map(|t| f64::from(self.w[j * k + t]) * f64::from(self.beta[t]))
                    .sum();
                (f64::from(self.b[j]) + wb) as f32
            })
            .collect();
        let sums: Vec<f32> = w2
            .chunks(k)
            .map(|r| r.iter().map(|&v| f64::from(v)).sum::<f64>() as f32)
            .collect();
        let mut g = Builder::new();
        let x = g.input("x", &[m, k]);
        let w = g.constant("w", &[n, k], w2);
        let b = g.constant("b", &[n], b2);
        let s = g.constant("s", &[n], sums);
        let op = Op::Dense {
            epilogue: Epilogue {
                bias: true,
                residual: false,
                activation: Activation::Gelu { tanh: false },
            },
            norm: Some(RowNorm { epsilon: EPS }),
        };
        let y = g.op(op, &[x, w, b, s]);
        g.output(y);
        let opts = RunOptions {
            accumulate,
            ..RunOptions::default()
        };
        run(&g.finish(), &[&self.x], &opts).unwrap().remove(0)
    }
}

#[test]
fn a_dense_with_a_row_norm_is_layer_norm_then_dense() {
    let p = Problem::random([37, 96, 24], 0.0, 41);
    let want = p.naive();
    for accumulate in [Accumulate::F32, Accumulate::F64] {
        let err = rel_l2(&p.folded(accumulate), &want);
        assert!(err < 1e-5, "{accumulate:?}: rel err {err}");
    }
}

/// Rows of 100 + noise in [-1, 1): the statistics stay exact (a one-pass
/// f32 variance would lose them), and the only new error is the f32
/// cancellation in `acc − μ·s`, relative to |μ·s|.
#[test]
fn rows_far_from_zero_mean_still_match() {
    let p = Problem::random([20, 64, 16], 100.0, 42);
    let want = p.naive();
    for accumulate in [Accumulate::F32, Accumulate::F64] {
        let err = rel_l2(&p.folded(accumulate), &want);
        assert!(err < 1e-4, "{accumulate:?}: rel err {err}");
    }
}
