//! The learned cost model (update / predict): ridge regression of
//! `ln(measured µs) − ln(prior µs)` on [`FeatureSchema`] features, one model
//! per template group, fitted from sufficient statistics (`XᵀX`, `Xᵀy`) so
//! an update costs `O(d²)` and a refit one `d × d` Cholesky.
//!
//! On top of the shared model each task gets a correction: a ridge fit of
//! its own residuals on the per-config columns only (values, logs,
//! one-hots), refitted from scratch before each of its rounds. The shared
//! model carries what holds across shapes ("stages = 4 beats the prior
//! everywhere"); the correction what holds for this shape alone, once the
//! task has a few measurements.
//!
//! Why ridge and not boosted trees: the analytic prior already captures the
//! big nonlinear effects (waves, occupancy, split-K fixup); what is left is a
//! smooth correction per field value and interaction, which a linear model
//! learns from tens of measurements, deterministically and in microseconds.
//! The posterior spread `s·√(xᵀA⁻¹x)` gives the search its exploration bonus.

use super::features::FeatureSchema;
use super::linalg::Cholesky;
use super::space::{ConfigTable, TaskSpace};

/// Floor on the residual spread in log space (about 1 %: timing noise).
const MIN_SIGMA: f64 = 0.01;
/// Successful measurements a task needs before it gets a correction.
const CORRECTION_MIN_ROWS: usize = 8;
/// Ridge penalties of the correction: its intercept and its other columns
/// (stronger than the shared model's: it learns from tens of rows).
const CORRECTION_LAMBDA_INTERCEPT: f64 = 1e-3;
const CORRECTION_LAMBDA: f64 = 4.0;

/// Ridge regression from accumulated `XᵀX`, `Xᵀy`, `yᵀy`.
#[derive(Debug, Clone)]
pub(crate) struct Ridge {
    dim: usize,
    penalty: Vec<f64>,
    xtx: Vec<f64>,
    xty: Vec<f64>,
    yy: f64,
    rows: usize,
    fit: Option<Fit>,
    stale: bool,
}

#[derive(Debug, Clone)]
struct Fit {
    beta: Vec<f64>,
    chol: Cholesky,
    sigma: f64,
}

impl Ridge {
    pub fn new(penalty: Vec<f64>) -> Ridge {
        let dim = penalty.len();
        Ridge {
            dim,
            penalty,
            xtx: vec![0.0; dim * dim],
            xty: vec![0.0; dim],
            yy: 0.0,
            rows: 0,
            fit: None,
            stale: false,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Adds one observation (rows with non-finite values are dropped).
    pub fn update(&mut self, x: &[f64], y: f64) {
        if x.len() != self.dim || !y.is_finite() || x.iter().any(|v| !v.is_finite()) {
            return;
        }
        for i in 0..self.dim {
            if x[i] == 0.0 {
                continue;
            }
            for j in 0..=i {
                self.xtx[i * self.dim + j] += x[i] * x[j];
            }
            self.xty[i] += x[i] * y;
        }
        self.yy += y * y;
        self.rows += 1;
        self.stale = true;
    }

    /// Solves for the coefficients if rows were added since the last fit.
    /// A numerically singular system keeps the previous fit.
    pub fn refit(&mut self) {
        if !self.stale || self.rows == 0 {
            return;
        }
        self.stale = false;
        let d = self.dim;
        let mut a = self.xtx.clone();
        for i in 0..d {
            a[i * d + i] += self.penalty[i];
        }
        let Some(chol) = Cholesky::new(&a, d) else {
            return;
        };
        let beta = chol.solve(&self.xty);
        // RSS = yᵀy − 2βᵀXᵀy + βᵀXᵀXβ, with XᵀX stored as its lower triangle.
        let mut quad = 0.0;
        for i in 0..d {
            quad += self.xtx[i * d + i] * beta[i] * beta[i];
            for j in 0..i {
                quad += 2.0 * self.xtx[i * d + j] * beta[i] * beta[j];
            }
        }
        let xb: f64 = beta.iter().zip(&self.xty).map(|(b, v)| b * v).sum();
        let rss = (self.yy - 2.0 * xb + quad).max(0.0);
        let sigma = (rss / self.rows.saturating_sub(1).max(1) as f64)
            .sqrt()
            .max(MIN_SIGMA);
        self.fit = Some(Fit { beta, chol, sigma });
    }

    /// Mean and spread of the prediction at `x`, once fitted.
    pub fn predict(&self, x: &[f64]) -> Option<(f64, f64)> {
        let fit = self.fit.as_ref()?;
        let mean: f64 = fit.beta.iter().zip(x).map(|(b, v)| b * v).sum();
        let z = fit.chol.forward(x);
        let q: f64 = z.iter().map(|v| v * v).sum();
        Some((mean, fit.sigma * q.sqrt()))
    }

    /// Mean only (cheaper: no triangular solve).
    pub fn predict_mean(&self, x: &[f64]) -> Option<f64> {
        let fit = self.fit.as_ref()?;
        Some(fit.beta.iter().zip(x).map(|(b, v)| b * v).sum())
    }
}

/// One template group's model: its feature layout, the shared regression
/// and each task's correction.
#[derive(Debug, Clone)]
pub(crate) struct CostModel {
    schema: FeatureSchema,
    ridge: Ridge,
    /// Per task slot, the fit of its residuals on the first `local` columns.
    corrections: Vec<Option<Ridge>>,
    local: usize,
    buf: Vec<f64>,
}

/// A prediction of `ln(µs)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Prediction {
    pub mean: f64,
    pub spread: f64,
}

impl CostModel {
    pub fn new(schema: FeatureSchema) -> CostModel {
        let ridge = Ridge::new(schema.penalty());
        let buf = vec![0.0; schema.dim()];
        let local = schema.config_columns();
        CostModel {
            corrections: vec![None; schema.tasks()],
            local,
            schema,
            ridge,
            buf,
        }
    }

    /// Learns from one successful measurement of config `i` of the task in
    /// `slot`.
    pub fn update(
        &mut self,
        slot: usize,
        space: &TaskSpace,
        table: &ConfigTable,
        i: usize,
        us: f64,
    ) {
        self.schema.write(slot, space, table, i, &mut self.buf);
        let y = us.ln() - FeatureSchema::offset(space, i);
        self.ridge.update(&self.buf, y);
    }

    pub fn refit(&mut self) {
        self.ridge.refit();
    }

    pub fn trained(&self) -> bool {
        self.ridge.fit.is_some() && self.ridge.rows() > 0
    }

    /// Refits the correction of the task in `slot` from its successful
    /// measurements `(config, µs)`, against the shared model as it is now.
    pub fn refit_task(
        &mut self,
        slot: usize,
        space: &TaskSpace,
        table: &ConfigTable,
        measured: &[(usize, f64)],
    ) {
        self.corrections[slot] = None;
        if !self.trained() || measured.len() < CORRECTION_MIN_ROWS {
            return;
        }
        let penalty: Vec<f64> = (0..self.local)
            .map(|c| {
                if c == 0 {
                    CORRECTION_LAMBDA_INTERCEPT
                } else {
                    CORRECTION_LAMBDA
                }
            })
            .collect();
        let mut fit = Ridge::new(penalty);
        for &(i, us) in measured {
            self.schema.write(slot, space, table, i, &mut self.buf);
            let Some(shared) = self.ridge.predict_mean(&self.buf) else {
                return;
            };
            let residual = us.ln() - FeatureSchema::offset(space, i) - shared;
            fit.update(&self.buf[..self.local], residual);
        }
        fit.refit();
        self.corrections[slot] = Some(fit);
    }

    /// Predicted `ln(µs)` of config `i`: the prior when untrained (spread 0),
    /// `None` when there is neither.
    pub fn predict(
        &mut self,
        slot: usize,
        space: &TaskSpace,
        table: &ConfigTable,
        i: usize,
        spread: bool,
    ) -> Option<Prediction> {
        if !self.trained() {
            return space.prior_us(i).map(|p| Prediction {
                mean: p.ln(),
                spread: 0.0,
            });
        }
        self.schema.write(slot, space, table, i, &mut self.buf);
        let offset = FeatureSchema::offset(space, i);
        let correction = self.corrections.get(slot).and_then(Option::as_ref);
        let local = &self.buf[..self.local];
        if spread {
            let (m, s) = self.ridge.predict(&self.buf)?;
            let (cm, cs) = correction
                .and_then(|c| c.predict(local))
                .unwrap_or((0.0, 0.0));
            Some(Prediction {
                mean: offset + m + cm,
                spread: (s * s + cs * cs).sqrt(),
            })
        } else {
            let m = self.ridge.predict_mean(&self.buf)?;
            let cm = correction
                .and_then(|c| c.predict_mean(local))
                .unwrap_or(0.0);
            Some(Prediction {
                mean: offset + m + cm,
                spread: 0.0,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::rng::Rng;

    #[test]
    fn ridge_recovers_a_linear_function_and_is_unsure_far_away() {
        // y = 0.5 + 2 x1 − x2 with a little noise; x2 only sampled near 0.
        let mut r = Ridge::new(vec![1e-6, 1e-3, 1e-3]);
        let mut rng = Rng::new(1);
        for _ in 0..200 {
            let (x1, x2) = (rng.unit() * 4.0 - 2.0, rng.unit() * 0.2);
            let y = 0.5 + 2.0 * x1 - x2 + (rng.unit() - 0.5) * 0.01;
            r.update(&[1.0, x1, x2], y);
        }
        r.refit();
        let (m, near) = r.predict(&[1.0, 1.0, 0.1]).unwrap();
        assert!((m - 2.4).abs() < 0.01, "{m}");
        let (_, far) = r.predict(&[1.0, 1.0, 10.0]).unwrap();
        assert!(far > 10.0 * near, "{far} vs {near}");
        assert_eq!(r.predict_mean(&[1.0, 1.0, 0.1]).unwrap(), m);
    }

    #[test]
    fn each_task_corrects_the_shared_model_with_its_own_trend() {
        use crate::tune::features::FeatureSchema;
        // Two tasks, one field `a`; time grows with `a` in task 0 and falls
        // in task 1, which the shared model (no shape features) averages out.
        let space = |name: &str| TaskSpace {
            task: name.into(),
            op: "Op".into(),
            key: name.into(),
            template: "t/1".into(),
            weight: 1,
            flops: 0,
            bytes: 0,
            configs: (0..20).map(|a| serde_json::json!({ "a": a * 3 })).collect(),
            prior_ns: vec![Some(1000.0); 20],
            shape_features: vec![],
            default: 0,
        };
        let (s0, s1) = (space("up"), space("down"));
        let (t0, t1) = (ConfigTable::new(&s0.configs), ConfigTable::new(&s1.configs));
        let mut m = CostModel::new(FeatureSchema::new(&[(&s0, &t0), (&s1, &t1)]));
        let truth = |slot: usize, i: usize| {
            if slot == 0 {
                0.05 * i as f64
            } else {
                -0.05 * i as f64
            }
        };
        let mut measured = [Vec::new(), Vec::new()];
        for i in (0..20).step_by(2) {
            for (slot, (s, t)) in [(&s0, &t0), (&s1, &t1)].into_iter().enumerate() {
                let us = truth(slot, i).exp();
                m.update(slot, s, t, i, us);
                measured[slot].push((i, us));
            }
        }
        m.refit();
        m.refit_task(0, &s0, &t0, &measured[0]);
        m.refit_task(1, &s1, &t1, &measured[1]);
        for (slot, (s, t)) in [(&s0, &t0), (&s1, &t1)].into_iter().enumerate() {
            // Unmeasured odd configs: predicted within 0.1 of the truth.
            for i in [3, 9, 15] {
                let p = m.predict(slot, s, t, i, true).unwrap();
                assert!(
                    (p.mean - truth(slot, i)).abs() < 0.1,
                    "task {slot} config {i}: {p:?}"
                );
                assert!(p.spread > 0.0);
            }
        }
        // Too few rows: no correction, the shared model alone.
        m.refit_task(1, &s1, &t1, &measured[1][..3]);
        let flat = m.predict(1, &s1, &t1, 19, false).unwrap().mean;
        assert!((flat - truth(1, 19)).abs() > 0.3, "{flat}");
    }

    #[test]
    fn non_finite_rows_are_dropped_and_an_empty_model_does_not_predict() {
        let mut r = Ridge::new(vec![1.0; 2]);
        r.update(&[1.0, f64::NAN], 1.0);
        r.update(&[1.0, 1.0], f64::INFINITY);
        assert_eq!(r.rows(), 0);
        r.refit();
        assert!(r.predict(&[1.0, 1.0]).is_none());
    }
}
