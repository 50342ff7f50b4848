//! The fused attention kernels (`attention.cu`) on the GPU, through the
//! whole build: small ONNX models written here — the decomposed attention
//! exporters write (MatMul → Mul/Div by the scale → [Add mask] → Softmax →
//! MatMul, Swin's shifted windows with their Reshapes), or ONNX's
//! `Attention` (opset 23) for the causal and grouped-head cases — are
//! compiled by `Build` (the optimized graph must hold an `Attention` node,
//! run by an `attention_*` kernel), loaded and run; the output must match
//! the CPU reference of the same optimized graph within the precision's
//! emulation bar, and the fp32 reference of the imported graph within its
//! fp32 bar, and two runs must agree bit for bit.
//!
//! Cases: ViT-B/16's [1, 12, 197, 64] at fp32, tf32, fp16 and bf16; a
//! [4, 3, 49, 32] attention with a constant bias mask; Swin's shifted
//! windows (2 images × 4 windows, the mask folded per window, read at batch
//! mod 4); causal [1, 2, 130, 64]; head sizes 128 and 32 (77 tokens); one
//! head over 4096 keys with 77 queries; one key/value head for 4 query
//! heads with Dv = 32; head size 24 (the SIMT kernel at fp16); and a sample
//! of the tensor-core kernel's configs on the ViT shape
//! (`AOTUNE_SWEEP_CONFIGS`, default 12), each through a tuning log.
//!
//! Without a driver the test prints `SKIPPED` (a failure under
//! `AOTUNE_REQUIRE_GPU=1`); `AOTUNE_GPU_TESTS_DRY_RUN=1` with nvcc builds
//! everything and runs the CPU references, up to `Model::load`.

mod common;

use aotune_compiler::build::template_versions;
use aotune_compiler::codegen::cuda::ops::attention::{
    attention_shape, AttentionConfig, AttentionMmaConfig, AttentionShape,
};
use aotune_compiler::codegen::cuda::KernelConfig;
use aotune_compiler::ir::{Graph, NodeId, Precision};
use aotune_compiler::reference::{rel_l2, run, RunOptions};
use aotune_compiler::schedule::{BestLog, BestRecord, Target, BEST_FORMAT};
use aotune_compiler::zoo::fill;
use aotune_compiler::{Build, Built};
use common::gpu::{self, Mode, TempDir};
use std::path::{Path, PathBuf};

// ---- a minimal ONNX writer ---------------------------------------------------

/// The shared test ONNX writer (`common::onnx`), spelled the way these
/// models use it: nodes named after their output, one graph name.
mod proto {
    use crate::common::onnx;
    pub use onnx::{tensor_raw as tensor, value_info, Attr};

    pub fn node(op: &str, inputs: &[&str], output: &str, attrs: &[(&str, Attr)]) -> Vec<u8> {
        onnx::node(op, &format!("{output}_node"), inputs, output, attrs)
    }

    /// A `ModelProto` (IR 9) at `opset` around one graph.
    pub fn model(
        nodes: &[Vec<u8>],
        initializers: &[Vec<u8>],
        input: &[u8],
        output: &[u8],
        opset: i64,
    ) -> Vec<u8> {
        onnx::model("attention_test", opset, nodes, initializers, input, output)
    }
}

use proto::Attr;

// ---- the test models -----------------------------------------------------------

/// What is added to the scores.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mask {
    None,
    /// A constant `[H, Sq, Skv]` in [-2, 2], a tenth of it -10000 (never a
    /// query's own position).
    Bias,
    /// Swin's shifted windows over a batch of images × `windows`: the bias,
    /// then Reshape `[-1, windows, H, S, S]`, `+ [1, windows, 1, S, S]`
    /// (0 or -100), Reshape back.
    Windows(usize),
}

/// How the attention is spelled.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Form {
    /// MatMul(q·c, Transpose(k)) → Mul(scale) → [mask] → Softmax → MatMul.
    Decomposed,
    /// ONNX `Attention` (opset 23).
    Onnx { causal: bool },
}

/// One model: input `[batch, heads, sq, d]`.
#[derive(Debug, Clone)]
struct Case {
    label: &'static str,
    heads: usize,
    /// Key/value heads (`Form::Onnx` only; 1 or `heads`).
    kv_heads: usize,
    sq: usize,
    skv: usize,
    d: usize,
    dv: usize,
    mask: Mask,
    form: Form,
    batch: usize,
    precisions: &'static [Precision],
}

const HALF: &[Precision] = &[Precision::Fp16, Precision::Fp32];

fn base(label: &'static str, heads: usize, s: usize, d: usize) -> Case {
    Case {
        label,
        heads,
        kv_heads: heads,
        sq: s,
        skv: s,
        d,
        dv: d,
        mask: Mask::None,
        form: Form::Decomposed,
        batch: 1,
        precisions: HALF,
    }
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            precisions: &Precision::ALL,
            ..base("vit", 12, 197, 64)
        },
        Case {
            mask: Mask::Bias,
            batch: 4,
            precisions: &[Precision::Fp16, Precision::Bf16, Precision::Fp32],
            ..base("masked", 3, 49, 32)
        },
        Case {
            mask: Mask::Windows(4),
            batch: 8,
            ..base("swin_shifted", 3, 49, 32)
        },
        Case {
            form: Form::Onnx { causal: true },
            precisions: &[Precision::Fp16, Precision::Bf16, Precision::Fp32],
            ..base("causal", 2, 130, 64)
        },
        Case {
            batch: 2,
            ..base("d128", 4, 100, 128)
        },
        Case {
            batch: 2,
            ..base("d32", 4, 77, 32)
        },
        Case {
            skv: 4096,
            ..base("long_kv", 1, 77, 64)
        },
        Case {
            kv_heads: 1,
            dv: 32,
            form: Form::Onnx { causal: false },
            batch: 2,
            ..base("mqa_dv32", 4, 40, 64)
        },
        Case {
            batch: 2,
            ..base("d24", 2, 21, 24)
        },
    ]
}

/// Builds the ONNX model of `case`. q = x·cq, k = x·ck (or, for more keys
/// than queries, `Wk [skv, sq] · x`), v = sigmoid(k) (or `k · Wv` for
/// Dv ≠ D); one key/value head is the mean over the heads.
fn model(case: &Case) -> Vec<u8> {
    let (h, sq, skv, d, dv) = (case.heads, case.sq, case.skv, case.d, case.dv);
    let mut nodes = Vec::new();
    let mut inits = Vec::new();
    let mut seed = 100u64;
    let constant = |inits: &mut Vec<Vec<u8>>, name: &str, dims: &[usize], values: Vec<f32>| {
        let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        inits.push(proto::tensor(name, dims, 1, &raw));
        name.to_string()
    };
    let mut uniform = |n: usize, center: f32, half: f32| {
        seed += 1;
        fill(seed, center, half, n)
    };
    // q and k spread so that the softmax is far from uniform.
    let cq = constant(&mut inits, "cq", &[d], uniform(d, 0.0, 3.0));
    let ck = constant(&mut inits, "ck", &[d], uniform(d, 0.0, 3.0));
    nodes.push(proto::node("Mul", &["input", &cq], "q", &[]));
    nodes.push(proto::node("Mul", &["input", &ck], "k_rows", &[]));
    if skv != sq {
        let wk = constant(&mut inits, "wk", &[skv, sq], uniform(skv * sq, 0.0, 1.0));
        nodes.push(proto::node("MatMul", &[&wk, "k_rows"], "k_full", &[]));
    } else {
        nodes.push(proto::node("Identity", &["k_rows"], "k_full", &[]));
    }
    if case.kv_heads != h {
        assert_eq!(
            case.kv_heads, 1,
            "{}: one key/value head or all",
            case.label
        );
        let axes = proto::tensor("axes", &[1], 7, &1i64.to_le_bytes());
        inits.push(axes);
        nodes.push(proto::node(
            "ReduceMean",
            &["k_full", "axes"],
            "k",
            &[("keepdims", Attr::Int(1))],
        ));
    } else {
        nodes.push(proto::node("Identity", &["k_full"], "k", &[]));
    }
    if dv != d {
        let wv = constant(&mut inits, "wv", &[d, dv], uniform(d * dv, 0.0, 0.5));
        nodes.push(proto::node("MatMul", &["k", &wv], "v", &[]));
    } else {
        nodes.push(proto::node("Sigmoid", &["k"], "v", &[]));
    }
    let scale = (d as f32).powf(-0.5);
    let opset = match case.form {
        Form::Onnx { causal } => {
            nodes.push(proto::node(
                "Attention",
                &["q", "k", "v"],
                "output",
                &[
                    ("is_causal", Attr::Int(causal.into())),
                    ("scale", Attr::Float(scale)),
                ],
            ));
            23
        }
        Form::Decomposed => {
            nodes.push(proto::node(
                "Transpose",
                &["k"],
                "kt",
                &[("perm", Attr::Ints(vec![0, 1, 3, 2]))],
            ));
            nodes.push(proto::node("MatMul", &["q", "kt"], "qk", &[]));
            let s = constant(&mut inits, "scale", &[], vec![scale]);
            nodes.push(proto::node("Mul", &["qk", &s], "scaled", &[]));
            let mut scores = "scaled".to_string();
            if case.mask != Mask::None {
                let n = h * sq * skv;
                let mut bias = uniform(n, 0.0, 2.0);
                for (i, b) in bias.iter_mut().enumerate() {
                    let (row, col) = ((i / skv) % sq, i % skv);
                    if i % 10 == 3 && row != col {
                        *b = -10000.0;
                    }
                }
                let bias = constant(&mut inits, "bias", &[h, sq, skv], bias);
                nodes.push(proto::node("Add", &[&scores, &bias], "biased", &[]));
                scores = "biased".into();
            }
            if let Mask::Windows(windows) = case.mask {
                let i64s = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
                let (w, hh, a, b) = (windows as i64, h as i64, sq as i64, skv as i64);
                inits.push(proto::tensor("split", &[5], 7, &i64s(&[-1, w, hh, a, b])));
                inits.push(proto::tensor("merge", &[4], 7, &i64s(&[-1, hh, a, b])));
                let values = (0..windows * sq * skv)
                    .map(|i| {
                        let (wi, row, col) = (i / (sq * skv), (i / skv) % sq, i % skv);
                        if row != col && (row + col + wi) % 3 == 0 {
                            -100.0
                        } else {
                            0.0
                        }
                    })
                    .collect();
                let wmask = constant(&mut inits, "window_mask", &[1, windows, 1, sq, skv], values);
                nodes.push(proto::node("Reshape", &[&scores, "split"], "windows", &[]));
                nodes.push(proto::node("Add", &["windows", &wmask], "masked", &[]));
                nodes.push(proto::node("Reshape", &["masked", "merge"], "merged", &[]));
                scores = "merged".into();
            }
            nodes.push(proto::node(
                "Softmax",
                &[&scores],
                "p",
                &[("axis", Attr::Int(-1))],
            ));
            nodes.push(proto::node("MatMul", &["p", "v"], "output", &[]));
            17
        }
    };
    proto::model(
        &nodes,
        &inits,
        &proto::value_info("input", &[h, sq, d]),
        &proto::value_info("output", &[h, sq, dv]),
        opset,
    )
}

// ---- building and checking -----------------------------------------------------

/// The `Attention` node of an optimized graph; fails if there is none (the
/// model would not test the kernel).
fn attention_node(graph: &Graph) -> Result<NodeId, String> {
    let found: Vec<NodeId> = graph
        .node_ids()
        .filter(|&id| graph.node(id).op.kind() == "Attention")
        .collect();
    match found[..] {
        [id] => Ok(id),
        _ => Err(format!(
            "the optimized graph has {} Attention nodes, want 1",
            found.len()
        )),
    }
}

/// One build of one case at one precision, with `config` for the
/// attention task when given.
struct Job {
    case: Case,
    precision: Precision,
    config: Option<AttentionConfig>,
    index: usize,
}

impl Job {
    fn label(&self) -> String {
        let config = self
            .config
            .map(|c| format!(" {}", c.tag()))
            .unwrap_or_default();
        format!(
            "{} {} b{}{config}",
            self.case.label, self.precision, self.case.batch
        )
    }
}

/// A finished build and the CPU's answers.
struct Checked {
    built: Built,
    input: Vec<f32>,
    emulated: Vec<f32>,
    reference: Vec<f32>,
}

/// Worker side: write the model (and a tuning log), build, check the graph
/// and kernel, run the CPU references.
fn build(job: &Job, tmp: &Path) -> Result<Checked, String> {
    let case = &job.case;
    let dir: PathBuf = tmp.join(format!("{}_{}_{}", case.label, job.precision, job.index));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let onnx = dir.join(format!("{}.onnx", case.label));
    std::fs::write(&onnx, model(case)).map_err(|e| e.to_string())?;
    let mut b = Build::new(&onnx)
        .batch(case.batch)
        .precision(job.precision)
        .name("a")
        .out_dir(&dir);
    if let Some(config) = job.config {
        // The task's hash comes from a build without a log.
        let probe = Build::new(&onnx)
            .batch(case.batch)
            .precision(job.precision)
            .name("probe")
            .out_dir(dir.join("probe"))
            .skip_nvcc(true)
            .compile()
            .map_err(|e| format!("probe build: {e}"))?;
        let compiled = &probe
            .first()
            .ok_or("the probe build returned nothing")?
            .compiled;
        let task = compiled
            .tasks
            .iter()
            .find(|t| t.key.op == "Attention")
            .ok_or("no Attention task")?;
        let log = BestLog {
            format: BEST_FORMAT.to_string(),
            records: vec![BestRecord {
                task: task.key.hash_hex(),
                op: task.key.op.clone(),
                key: task.key.canonical.clone(),
                template: template_versions()
                    .get("Attention")
                    .cloned()
                    .unwrap_or_else(|| "-".into()),
                config: serde_json::to_value(config).map_err(|e| e.to_string())?,
                median_us: 1.0,
                target: Target {
                    gpu: "gpu_attention test".into(),
                    sm: "90".into(),
                    driver: "-".into(),
                    cuda: "-".into(),
                    timing: Default::default(),
                },
            }],
        };
        let path = dir.join("best.json");
        std::fs::write(&path, log.to_json()).map_err(|e| e.to_string())?;
        b = b.tuning(&path);
    }
    let built = b
        .compile()
        .map_err(|e| format!("build: {e}"))?
        .into_iter()
        .next()
        .ok_or("the build returned nothing")?;
    let graph = &built.compiled.graph;
    let node = attention_node(graph)?;
    let kernel = built
        .spec
        .kernels
        .iter()
        .find(|k| k.starts_with("attention_"))
        .ok_or_else(|| format!("no attention kernel among {:?}", built.spec.kernels))?;
    if let Some(config) = job.config {
        if !kernel.ends_with(&format!("_{}", config.tag())) {
            return Err(format!(
                "kernel {kernel} does not carry config {}",
                config.tag()
            ));
        }
    }
    if built.ptxas_log.contains("bytes spill stores")
        && !built.ptxas_log.contains(" 0 bytes spill stores")
    {
        return Err(format!("{kernel} spills registers:\n{}", built.ptxas_log));
    }
    // The shape the kernel was made for is the node's.
    attention_shape(graph, node)?;
    let input = fill(
        11 + job.index as u64,
        0.0,
        1.0,
        built.spec.inputs[0].elements(),
    );
    let opts = RunOptions::default();
    let emulated = run(graph, &[&input], &opts)
        .map_err(|e| format!("CPU emulation: {e}"))?
        .swap_remove(0);
    let reference = run(&built.compiled.imported, &[&input], &opts)
        .map_err(|e| format!("CPU reference: {e}"))?
        .swap_remove(0);
    Ok(Checked {
        built,
        input,
        emulated,
        reference,
    })
}

/// GPU side: load, run twice, compare, time. Returns the errors (vs
/// emulation, vs fp32) and the attention kernel's µs, or what failed.
fn check(job: &Job, checked: Checked, mode: Mode) -> Result<Option<(f64, f64, f64)>, String> {
    let Checked {
        built,
        input,
        emulated,
        reference,
    } = checked;
    let Some(mut model) = gpu::load(&built.dir, mode)? else {
        gpu::discard_build(&built.dir);
        return Ok(None);
    };
    let mut out = vec![f32::NAN; built.spec.outputs[0].elements()];
    model
        .infer(&input, &mut out)
        .map_err(|e| format!("infer: {e}"))?;
    let mut again = vec![f32::NAN; out.len()];
    model
        .infer(&input, &mut again)
        .map_err(|e| format!("second infer: {e}"))?;
    if out
        .iter()
        .zip(&again)
        .any(|(a, b)| a.to_bits() != b.to_bits())
    {
        return Err("two runs of the same input differ".into());
    }
    if out.iter().any(|x| !x.is_finite()) {
        return Err("the output holds NaN or infinity".into());
    }
    let p = job.precision;
    let (err_emu, err_ref) = (rel_l2(&out, &emulated), rel_l2(&out, &reference));
    let (tol, tol_ref) = (gpu::tolerance(p), gpu::tolerance_vs_fp32(p));
    if gpu::exceeds(err_emu, tol) {
        return Err(format!("vs CPU emulation rel. L2 {err_emu:.3e} > {tol:e}"));
    }
    if gpu::exceeds(err_ref, tol_ref) {
        return Err(format!(
            "vs fp32 reference rel. L2 {err_ref:.3e} > {tol_ref:e}"
        ));
    }
    // The attention launch's device time (median of 20 graphs of 10
    // back-to-back launches each), for the record.
    let times = model
        .time_layers(3, 20)
        .map_err(|e| format!("time_layers: {e}"))?;
    let spec = &built.spec;
    let micros = spec
        .launches
        .iter()
        .zip(&times)
        .filter(|(l, _)| spec.kernels[l.kernel as usize].starts_with("attention_"))
        .map(|(_, &ms)| f64::from(ms) * 1e3)
        .sum();
    drop(model);
    gpu::discard_build(&built.dir);
    Ok(Some((err_emu, err_ref, micros)))
}

/// The attention task's shape of `case` at `precision` (a build without
/// nvcc).
fn case_shape(case: &Case, precision: Precision) -> AttentionShape {
    let dir = TempDir::new(&format!("gpu-attention-space-{}", case.label));
    let onnx = dir.path().join("m.onnx");
    std::fs::write(&onnx, model(case)).expect("write the model");
    let built = Build::new(&onnx)
        .batch(case.batch)
        .precision(precision)
        .name("space")
        .out_dir(dir.path().join("out"))
        .skip_nvcc(true)
        .compile()
        .expect("the sweep's model compiles");
    let graph = &built[0].compiled.graph;
    attention_shape(graph, attention_node(graph).unwrap()).unwrap()
}

/// Configs of the sweep: `AOTUNE_SWEEP_CONFIGS` (a number or `all`),
/// default 12, evenly spaced over the space, the default first.
fn config_sample(case: &Case, precision: Precision) -> Vec<AttentionConfig> {
    let n = match std::env::var("AOTUNE_SWEEP_CONFIGS").ok().as_deref() {
        Some("all") => usize::MAX,
        Some(n) => n.parse().ok().filter(|&n| n > 0).unwrap_or(12),
        None => 12,
    };
    let shape = case_shape(case, precision);
    let default = AttentionConfig::default_for(&shape);
    let space: Vec<AttentionConfig> = AttentionConfig::search_space(&shape)
        .into_iter()
        .filter(|c| *c != default)
        .collect();
    let picks = n.saturating_sub(1).min(space.len());
    let mut sample = vec![default];
    for j in 0..picks {
        let at = if picks == 1 {
            0
        } else {
            j * (space.len() - 1) / (picks - 1)
        };
        sample.push(space[at]);
    }
    sample
}

/// Builds (in parallel) and checks every job; fails listing every failure.
fn run_jobs(test: &str, mode: Mode, jobs: Vec<Job>) {
    let tmp = TempDir::new(&format!("gpu-attention-{test}"));
    let labels: Vec<String> = jobs.iter().map(Job::label).collect();
    let mut failures = Vec::new();
    let indexed: Vec<(usize, Job)> = jobs.into_iter().enumerate().collect();
    gpu::pipeline(
        indexed,
        |(i, job)| {
            let result = gpu::catch(|| build(&job, tmp.path()));
            (i, job, result)
        },
        |(i, job, result)| {
            let outcome = result.and_then(|checked| check(&job, checked, mode));
            match outcome {
                Ok(Some((emu, fp32, micros))) => println!(
                    "{}: rel. L2 {emu:.2e} vs emulation, {fp32:.2e} vs fp32; attention {micros:.2} µs",
                    labels[i]
                ),
                Ok(None) => println!("{}: built; dry run stops at Model::load", labels[i]),
                Err(e) => {
                    eprintln!("FAIL {}: {e}", labels[i]);
                    failures.push(format!("{}: {e}", labels[i]));
                }
            }
        },
    );
    assert!(
        failures.is_empty(),
        "{test}: {} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---- tests --------------------------------------------------------------------------

#[test]
fn attention_shapes_match_the_cpu() {
    let test = "attention_shapes_match_the_cpu";
    let Some(mode) = gpu::mode_or_skip(test) else {
        return;
    };
    let jobs = cases()
        .into_iter()
        .flat_map(|case| {
            case.precisions.iter().map(move |&precision| Job {
                case: case.clone(),
                precision,
                config: None,
                index: 0,
            })
        })
        .collect();
    run_jobs(test, mode, jobs);
}

#[test]
fn attention_config_sample_matches_the_cpu() {
    let test = "attention_config_sample_matches_the_cpu";
    let Some(mode) = gpu::mode_or_skip(test) else {
        return;
    };
    let case = cases().remove(0);
    let jobs = config_sample(&case, Precision::Fp16)
        .into_iter()
        .enumerate()
        .map(|(index, config)| Job {
            case: case.clone(),
            precision: Precision::Fp16,
            config: Some(config),
            index,
        })
        .collect();
    run_jobs(test, mode, jobs);
}

/// Per case at fp16 and per predicate, the first tensor-core config of the
/// case's space that satisfies it (none where no config does).
fn first_mma_config_jobs(wanted: &[&dyn Fn(&AttentionMmaConfig) -> bool]) -> Vec<Job> {
    let mut jobs = Vec::new();
    for case in cases() {
        let shape = case_shape(&case, Precision::Fp16);
        for want in wanted {
            let first = AttentionConfig::search_space(&shape)
                .into_iter()
                .find(|c| matches!(c, AttentionConfig::Mma(m) if want(m)));
            if let Some(config) = first {
                jobs.push(Job {
                    case: case.clone(),
                    precision: Precision::Fp16,
                    config: Some(config),
                    index: jobs.len(),
                });
            }
        }
    }
    jobs
}

/// Every tensor-core case (masks, shifted windows, causal, long keys, one
/// key/value head) at fp16 with the first config of its space that splits
/// the keys over 2 and over 4 warp groups: the groups' merge sees every
/// masking path.
#[test]
fn attention_key_groups_match_the_cpu() {
    let test = "attention_key_groups_match_the_cpu";
    let Some(mode) = gpu::mode_or_skip(test) else {
        return;
    };
    let jobs = first_mma_config_jobs(&[
        &|m: &AttentionMmaConfig| m.kv_split == 2,
        &|m: &AttentionMmaConfig| m.kv_split == 4,
    ]);
    assert!(
        jobs.len() >= 10,
        "key-group configs for most cases: {}",
        jobs.len()
    );
    run_jobs(test, mode, jobs);
}

/// Every tensor-core case whose sequence rounds up to a tile that is not a
/// power of two (ViT's 197 queries: 208 rows) with the whole-sequence tile,
/// one key group and two: each CTA holds a whole head, 13 warps of it.
#[test]
fn attention_whole_sequence_tiles_match_the_cpu() {
    let test = "attention_whole_sequence_tiles_match_the_cpu";
    let Some(mode) = gpu::mode_or_skip(test) else {
        return;
    };
    let jobs = first_mma_config_jobs(&[
        &|m: &AttentionMmaConfig| !m.block_q.is_power_of_two() && m.kv_split == 1,
        &|m: &AttentionMmaConfig| !m.block_q.is_power_of_two() && m.kv_split == 2,
    ]);
    assert!(jobs.len() >= 2, "whole-sequence configs: {}", jobs.len());
    run_jobs(test, mode, jobs);
}

/// Without a GPU: every case's model fuses into one Attention node whose
/// kernel the default config renders (what the GPU tests rely on).
#[test]
fn attention_test_models_fuse_to_one_attention() {
    for case in cases() {
        for &precision in case.precisions {
            let options = aotune_compiler::CompileOptions {
                batch: Some(case.batch),
                precision,
                channels_last: true,
                ..Default::default()
            };
            let compiled = aotune_compiler::compile_bytes(&model(&case), case.label, &options)
                .unwrap_or_else(|e| panic!("{} {precision}: {e}", case.label));
            let node = attention_node(&compiled.graph)
                .unwrap_or_else(|e| panic!("{} {precision}: {e}", case.label));
            let shape = attention_shape(&compiled.graph, node)
                .unwrap_or_else(|e| panic!("{} {precision}: {e}", case.label));
            let default = AttentionConfig::default_for(&shape);
            assert_eq!(default.validate(&shape), Ok(()), "{}", case.label);
            if let Mask::Windows(windows) = case.mask {
                let mask = shape.mask.expect("the windows' mask");
                assert_eq!(mask.groups, windows, "{}: mask batch period", case.label);
            }
        }
    }
}
