//! A simulated GPU for the tuner's tests.
//!
//! The spaces are real: ResNet-50's 27 convolution tasks (the v1.5 layer
//! shapes of the default-geometry table in `codegen/cuda/conv.rs`) with the
//! conv template's full search space, heuristic default and analytic cost
//! model as prior. The "true" latency hidden from the tuner is
//! `prior × perturbation`, the perturbation being deterministic
//! ([`Perturbation`], amplitudes of the default one):
//! - a factor per (field, value) shared by all tasks (e^±0.20 each, e.g.
//!   "stages = 4 is better than the model thinks"): the systematic error a
//!   learned model can pick up across tasks;
//! - a factor per (task, field, value), e^±0.12: what only the task's own
//!   measurements teach;
//! - a factor per pair of (field, value)s, e^±0.05 each: interactions the
//!   model's features do not spell out;
//! - a factor per (task, config), e^±0.06: what no model predicts.
//!
//! Together they put the prior's best config up to 2× off the true optimum
//! (the analytic model's constants are guesses, not measurements).
//!
//! About 5 % of the configs fail (compile, launch, wrong result), plus every
//! config over 160 KiB of shared memory at launch; the default never fails.
//! Each measurement returns five repeats within ±0.4 % of the true time.

use super::measure::{FailStage, Measurer, Trial, TrialOutcome};
use super::space::{flatten, Leaf, TaskSpace};
use crate::codegen::cuda::cost_model::estimate_ns;
use crate::codegen::cuda::{ConvConfig, ConvShape, KernelConfig, LinearConfig, LinearShape};
use crate::ir::{Activation, DType, Precision};
use crate::zoo::{fnv1a64, splitmix64};
use std::collections::{HashMap, HashSet};

/// `(C, H=W, K, R=S, stride, weight, residual)` of ResNet-50's conv tasks.
pub(crate) const RESNET50: [(usize, usize, usize, usize, usize, usize, bool); 27] = [
    (3, 224, 64, 7, 2, 1, false),
    (64, 56, 64, 1, 1, 1, false),
    (64, 56, 64, 3, 1, 3, false),
    (64, 56, 256, 1, 1, 1, false),
    (64, 56, 256, 1, 1, 3, true),
    (256, 56, 64, 1, 1, 2, false),
    (256, 56, 128, 1, 1, 1, false),
    (128, 56, 128, 3, 2, 1, false),
    (256, 56, 512, 1, 2, 1, false),
    (128, 28, 512, 1, 1, 1, true),
    (512, 28, 128, 1, 1, 3, false),
    (128, 28, 128, 3, 1, 3, false),
    (128, 28, 512, 1, 1, 3, true),
    (512, 28, 256, 1, 1, 1, false),
    (256, 28, 256, 3, 2, 1, false),
    (256, 14, 1024, 1, 1, 1, true),
    (512, 28, 1024, 1, 2, 1, false),
    (1024, 14, 256, 1, 1, 5, false),
    (256, 14, 256, 3, 1, 5, false),
    (256, 14, 1024, 1, 1, 5, true),
    (1024, 14, 512, 1, 1, 1, false),
    (512, 14, 512, 3, 2, 1, false),
    (512, 7, 2048, 1, 1, 1, true),
    (1024, 14, 2048, 1, 2, 1, false),
    (2048, 7, 512, 1, 1, 2, false),
    (512, 7, 512, 3, 1, 2, false),
    (512, 7, 2048, 1, 1, 2, true),
];

/// Largest shared memory the simulated launches accept.
const SMEM_LIMIT: u64 = 160 * 1024;

pub(crate) fn conv_shape(batch: usize, layer: usize, dtype: DType) -> ConvShape {
    let (c, hw, k, rs, stride, _, residual) = RESNET50[layer];
    let pad = rs / 2;
    let out = (hw + 2 * pad - rs) / stride + 1;
    ConvShape {
        n: batch,
        c,
        h: hw,
        w: hw,
        k,
        r: rs,
        s: rs,
        p: out,
        q: out,
        stride: [stride; 2],
        pad: [pad; 4],
        dilation: [1, 1],
        groups: 1,
        x_dtype: dtype,
        w_dtype: dtype,
        residual: residual.then_some(dtype),
        out_dtype: dtype,
        bias: Some(DType::F32),
        activation: Activation::Relu,
        shortcut: None,
        pool: false,
        row_norm: None,
        precision: if dtype == DType::F16 {
            Precision::Fp16
        } else {
            Precision::Fp32
        },
    }
}

fn prior_ns(config: &ConvConfig, shape: &ConvShape) -> Option<f64> {
    let model = config.tile_model(shape)?;
    Some(estimate_ns(
        shape.gemm_m(),
        shape.gemm_n(),
        shape.gemm_k(),
        &model,
    ))
}

/// The task space of one convolution, named `name`.
pub(crate) fn conv_space(name: &str, shape: &ConvShape, weight: usize) -> TaskSpace {
    let mut configs = ConvConfig::search_space(shape);
    let default = ConvConfig::default_for(shape);
    let default_index = match configs.iter().position(|c| *c == default) {
        Some(i) => i,
        None => {
            configs.push(default);
            configs.len() - 1
        }
    };
    let features = [
        shape.gemm_m(),
        shape.gemm_n(),
        shape.gemm_k(),
        shape.r * shape.s,
        shape.stride[0],
    ]
    .iter()
    .map(|&v| (v as f64).log2())
    .collect();
    TaskSpace {
        task: format!("{:016x}", fnv1a64(name.as_bytes())),
        op: "FusedConv".into(),
        key: format!("{name} {shape:?}"),
        template: "conv/2".into(),
        weight,
        flops: 2 * shape.macs() as u64,
        bytes: 0,
        prior_ns: configs.iter().map(|c| prior_ns(c, shape)).collect(),
        configs: configs
            .iter()
            .map(|c| serde_json::to_value(c).unwrap_or_default())
            .collect(),
        shape_features: features,
        default: default_index,
    }
}

/// ResNet-50's conv tasks at `batch`, fp16.
pub(crate) fn resnet50_spaces(batch: usize) -> Vec<TaskSpace> {
    (0..RESNET50.len())
        .map(|l| {
            conv_space(
                &format!("resnet50.conv{l}.b{batch}"),
                &conv_shape(batch, l, DType::F16),
                RESNET50[l].5,
            )
        })
        .collect()
}

/// A small space without priors: the grid-stride template's 16 configs.
pub(crate) fn linear_space(name: &str, items: u64, weight: usize) -> TaskSpace {
    let shape = LinearShape { items };
    let configs = LinearConfig::search_space(&shape);
    let default = LinearConfig::default_for(&shape);
    TaskSpace {
        task: format!("{:016x}", fnv1a64(name.as_bytes())),
        op: "Relu".into(),
        key: name.into(),
        template: "linear/1".into(),
        weight,
        flops: items,
        bytes: 8 * items,
        default: configs.iter().position(|c| *c == default).unwrap_or(0),
        configs: configs
            .iter()
            .map(|c| serde_json::to_value(c).unwrap_or_default())
            .collect(),
        prior_ns: vec![],
        shape_features: vec![],
    }
}

/// Amplitudes (in ln) of the perturbation's factors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Perturbation {
    pub shared: f64,
    pub per_task: f64,
    pub pairs: f64,
    pub per_config: f64,
}

impl Perturbation {
    pub const DEFAULT: Perturbation = Perturbation {
        shared: 0.20,
        per_task: 0.12,
        pairs: 0.05,
        per_config: 0.06,
    };
    /// Mostly task-specific errors: little for the shared model to carry.
    pub const TRANSFERS_POORLY: Perturbation = Perturbation {
        shared: 0.10,
        per_task: 0.20,
        pairs: 0.06,
        per_config: 0.08,
    };
}

impl Default for Perturbation {
    fn default() -> Self {
        Perturbation::DEFAULT
    }
}

fn hash(parts: &[&str]) -> u64 {
    splitmix64(fnv1a64(parts.join("|").as_bytes()))
}

/// Uniform in [-1, 1] from a hash.
fn signed(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// The simulated GPU: hidden true latencies, and a log of what was asked.
#[derive(Debug, Default)]
pub(crate) struct SimGpu {
    pub perturbation: Perturbation,
    /// Per task hash, every config measured (each must be measured once).
    pub measured: HashMap<String, HashSet<usize>>,
    /// `(task hash, config)` in the order measured.
    pub sequence: Vec<(String, usize)>,
    pub repeated: usize,
}

impl SimGpu {
    /// The true time of config `i` in µs, or why it fails.
    pub fn true_us(&self, space: &TaskSpace, i: usize) -> Result<f64, (FailStage, String)> {
        let amp = self.perturbation;
        let config = &space.configs[i];
        let config_text = config.to_string();
        if i != space.default {
            let h = hash(&[&space.task, &config_text, "fail"]);
            match h % 60 {
                0 | 1 => return Err((FailStage::Compile, "ptxas: too many registers".into())),
                2 => return Err((FailStage::Launch, "misaligned address".into())),
                3 => return Err((FailStage::WrongResult, "max error 3.2e-1".into())),
                _ => {}
            }
            if smem_bytes(config) > SMEM_LIMIT {
                return Err((
                    FailStage::Launch,
                    "too many resources requested for launch".into(),
                ));
            }
        }
        let base = space.prior_us(i).unwrap_or_else(|| {
            // Grid-stride configs: a bowl around 256 threads × 2 items.
            let block = config["block"].as_f64().unwrap_or(256.0);
            let per = config["per_thread"].as_f64().unwrap_or(1.0);
            5.0 * (1.0 + 0.3 * (block / 256.0).log2().powi(2) + 0.2 * (per / 2.0).log2().powi(2))
        });
        let mut log_factor = amp.per_config * signed(hash(&[&space.task, &config_text]));
        let fields: Vec<String> = flatten(config)
            .into_iter()
            .map(|(field, leaf)| match leaf {
                Leaf::Num(v) => format!("{field}={v}"),
                Leaf::Text(t) => format!("{field}={t}"),
            })
            .collect();
        for (a, fa) in fields.iter().enumerate() {
            log_factor += amp.shared * signed(hash(&[fa]));
            log_factor += amp.per_task * signed(hash(&[&space.task, fa]));
            for fb in &fields[a + 1..] {
                log_factor += amp.pairs * signed(hash(&[fa, fb]));
            }
        }
        Ok(base * log_factor.exp())
    }

    /// The best config of the space and its true time.
    pub fn optimum(&self, space: &TaskSpace) -> (usize, f64) {
        (0..space.configs.len())
            .filter_map(|i| self.true_us(space, i).ok().map(|us| (i, us)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((space.default, f64::INFINITY))
    }
}

/// Shared memory of an mma config as the template allocates it.
fn smem_bytes(config: &serde_json::Value) -> u64 {
    if config["kernel"] != "mma" {
        return 0;
    }
    let g = |k: &str| config[k].as_u64().unwrap_or(0);
    g("stages") * (g("block_m") + g("block_n")) * (g("block_k") + 8) * 2
}

impl Measurer for SimGpu {
    fn measure(&mut self, space: &TaskSpace, configs: &[usize]) -> Vec<Trial> {
        configs
            .iter()
            .map(|&i| {
                if !self
                    .measured
                    .entry(space.task.clone())
                    .or_default()
                    .insert(i)
                {
                    self.repeated += 1;
                }
                self.sequence.push((space.task.clone(), i));
                let key = [space.task.as_str(), &i.to_string()].join("/");
                let outcome = match self.true_us(space, i) {
                    Ok(us) => {
                        let repeats: Vec<f64> = (0..5)
                            .map(|r| us * (1.0 + 0.004 * signed(hash(&[&key, &r.to_string()]))))
                            .collect();
                        let mut sorted = repeats.clone();
                        sorted.sort_by(f64::total_cmp);
                        let median_us = sorted[2];
                        TrialOutcome::Ok {
                            repeats_us: repeats,
                            median_us,
                        }
                    }
                    Err((stage, reason)) => TrialOutcome::Failed { stage, reason },
                };
                Trial {
                    config: i,
                    outcome,
                    compile_ms: 40.0 + (hash(&[&key, "compile"]) % 80) as f64,
                }
            })
            .collect()
    }
}
