//! The reduction and normalization kernels (`reduce.cu`, `rows.cu`) on the
//! GPU against the CPU reference.
//!
//! Small ONNX models are written here (one input `[batch, ...]`, several
//! branches flattened and concatenated into the one output the runtime
//! takes): LayerNormalization over ViT's `[197, 768]` rows (eps 1e-6),
//! ConvNeXt's `[7, 7, 768]` (axis 3, and axis 2 with broadcast scale and
//! bias: CTA rows), Swin's `[7, 7, 96]` (rows sharing a warp), odd rows
//! (`[5, 33]` over axis 1 and 2) and rows of 4096;
//! every ReduceKind (and ReduceMean) over the last axis, a middle axis and
//! two axes, keepdims or not; Softmax, LogSoftmax and Hardmax (on floored
//! values, so ties and the first-maximum rule matter) along the last and a
//! middle axis; LpNormalization p = 1, 2; MeanVarianceNormalization;
//! GroupNormalization with 1 and 4 groups (per channel, opset 21; per
//! group, opset 18) and InstanceNormalization, over rows and short slices.
//! Each model is built through the full `Build` at fp32, fp16 and bf16,
//! batch 1 and 2, with the default configs and with tuning logs forcing
//! other `LinearConfig`s on the reduction and normalization tasks (64
//! threads with 2 rows per warp or CTA; 1024 threads, which streams rows
//! that do not fit the smaller register budget), then run: the output must
//! match the CPU reference of the optimized graph (the same precision) and
//! of the imported fp32 graph within DESIGN.md's bars, every launch must
//! match the CPU's value of its node, and two runs must agree bit for bit.
//!
//! Without a driver the GPU tests skip (`common::gpu::mode_or_skip`; under
//! `AOTUNE_GPU_TESTS_DRY_RUN=1` they build everything and check that the
//! load fails with `NoDriver`); `test_models_generate_row_kernels` needs
//! neither driver nor nvcc. `AOTUNE_SWEEP_FILTER=<text>` keeps the variants
//! whose label (`<model> <precision> b<batch> c<config>`) contains it.

mod common;

use aotune_compiler::codegen::cuda::{generate_cuda, ConfigOverrides, LinearConfig};
use aotune_compiler::ir::Precision;
use aotune_compiler::reference::{rel_l2, run, run_traced, RunOptions};
use aotune_compiler::schedule::{BestLog, BestRecord, Target, BEST_FORMAT};
use aotune_compiler::zoo::fill;
use aotune_compiler::{compile_bytes, Build, Built, CompileOptions};
use common::gpu::{self, Mode, TempDir};
use common::onnx::{self, Attr};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

// ---- test models ---------------------------------------------------------------

/// A test model: branches from one input `[batch, ...]`, each ended with
/// [`Net::output`]; [`Net::finish`] flattens and concatenates them.
struct Net {
    name: String,
    opset: i64,
    nodes: Vec<Vec<u8>>,
    inits: Vec<Vec<u8>>,
    /// Shapes after the batch dimension.
    shapes: HashMap<String, Vec<usize>>,
    ends: Vec<String>,
    counter: u64,
}

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

impl Net {
    fn new(name: &str, opset: i64, input_dims: &[usize]) -> Net {
        let shapes = HashMap::from([("input".to_string(), input_dims.to_vec())]);
        Net {
            name: name.into(),
            opset,
            nodes: Vec::new(),
            inits: Vec::new(),
            shapes,
            ends: Vec::new(),
            counter: 0,
        }
    }

    fn shape(&self, x: &str) -> Vec<usize> {
        self.shapes[x].clone()
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}{}", self.counter)
    }

    /// A float initializer uniform in `[center - half, center + half]`.
    fn constant(&mut self, dims: &[usize], center: f32, half: f32) -> String {
        let name = self.fresh("w");
        let n: usize = dims.iter().product();
        let values = fill(1000 + self.counter, center, half, n);
        self.inits.push(onnx::tensor(&name, dims, &values));
        name
    }

    fn axes(&mut self, axes: &[i64]) -> String {
        let name = self.fresh("axes");
        self.inits
            .push(onnx::tensor_i64(&name, &[axes.len()], axes));
        name
    }

    fn push(
        &mut self,
        op: &str,
        inputs: &[&str],
        shape: Vec<usize>,
        attrs: &[(&str, Attr)],
    ) -> String {
        let out = self.fresh(&op.to_ascii_lowercase());
        let node_name = format!("{out}_node");
        self.nodes
            .push(onnx::node(op, &node_name, inputs, &out, attrs));
        self.shapes.insert(out.clone(), shape);
        out
    }

    fn same(&mut self, op: &str, inputs: &[&str], attrs: &[(&str, Attr)]) -> String {
        let shape = self.shape(inputs[0]);
        self.push(op, inputs, shape, attrs)
    }

    /// `x · scale + shift` with scalar constants.
    fn affine(&mut self, x: &str, scale: f32, shift: f32) -> String {
        let s = self.fresh("s");
        self.inits.push(onnx::tensor(&s, &[], &[scale]));
        let y = self.same("Mul", &[x, &s], &[]);
        let b = self.fresh("s");
        self.inits.push(onnx::tensor(&b, &[], &[shift]));
        self.same("Add", &[&y, &b], &[])
    }

    /// Values in [0.9, 1.1]: products and logs of sums stay tame.
    fn near_one(&mut self, x: &str) -> String {
        self.affine(x, 0.1, 1.0)
    }

    /// Small integers: Hardmax meets ties, which no precision rounds away.
    fn floored(&mut self, x: &str) -> String {
        let y = self.affine(x, 8.0, 0.0);
        self.same("Floor", &[&y], &[])
    }

    /// LayerNormalization over `axis..` (axis counted with the batch).
    fn layer_norm(
        &mut self,
        x: &str,
        axis: usize,
        epsilon: f32,
        scale: &[usize],
        bias: Option<&[usize]>,
    ) -> String {
        let s = self.constant(scale, 1.0, 0.5);
        let mut inputs = vec![x.to_string(), s];
        if let Some(b) = bias {
            inputs.push(self.constant(b, 0.0, 0.5));
        }
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.same(
            "LayerNormalization",
            &refs,
            &[
                ("axis", Attr::Int(axis as i64)),
                ("epsilon", Attr::Float(epsilon)),
            ],
        )
    }

    /// `op` over `axes` (counted with the batch; never 0), axes as an input.
    fn reduce(&mut self, op: &str, x: &str, axes: &[usize], keepdims: bool) -> String {
        let rank = self.shape(x).len() + 1;
        assert!(
            axes.iter().all(|&a| a > 0 && a < rank),
            "{}: axes",
            self.name
        );
        let shape: Vec<usize> = self
            .shape(x)
            .iter()
            .enumerate()
            .filter_map(|(i, &d)| match (axes.contains(&(i + 1)), keepdims) {
                (false, _) => Some(d),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect();
        let a: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        let name = self.axes(&a);
        self.push(
            op,
            &[x, &name],
            shape,
            &[("keepdims", Attr::Int(keepdims as i64))],
        )
    }

    fn along(&mut self, op: &str, x: &str, axis: usize) -> String {
        self.same(op, &[x], &[("axis", Attr::Int(axis as i64))])
    }

    fn lp(&mut self, x: &str, axis: usize, p: i64) -> String {
        self.same(
            "LpNormalization",
            &[x],
            &[("axis", Attr::Int(axis as i64)), ("p", Attr::Int(p))],
        )
    }

    fn mvn(&mut self, x: &str, axes: &[i64]) -> String {
        self.same("MeanVarianceNormalization", &[x], &[("axes", ints(axes))])
    }

    /// GroupNormalization with `per` scale and bias values (groups or C).
    fn group_norm(&mut self, x: &str, groups: usize, per: usize) -> String {
        let s = self.constant(&[per], 1.0, 0.5);
        let b = self.constant(&[per], 0.0, 0.5);
        self.same(
            "GroupNormalization",
            &[x, &s, &b],
            &[
                ("num_groups", Attr::Int(groups as i64)),
                ("epsilon", Attr::Float(1e-5)),
            ],
        )
    }

    fn instance_norm(&mut self, x: &str) -> String {
        let c = self.shape(x)[0];
        let s = self.constant(&[c], 1.0, 0.5);
        let b = self.constant(&[c], 0.0, 0.5);
        self.same(
            "InstanceNormalization",
            &[x, &s, &b],
            &[("epsilon", Attr::Float(1e-5))],
        )
    }

    fn output(&mut self, x: &str) {
        self.ends.push(x.to_string());
    }

    /// The serialized model: every result flattened, concatenated on axis 1.
    fn finish(mut self) -> Vec<u8> {
        let input_dims = self.shape("input");
        let ends = std::mem::take(&mut self.ends);
        assert!(ends.len() >= 2, "{}: two or more results", self.name);
        let flat: Vec<String> = ends
            .iter()
            .map(|e| {
                let s = self.shape(e);
                if s.len() == 1 {
                    e.clone()
                } else {
                    let n = s.iter().product();
                    self.push("Flatten", &[e], vec![n], &[("axis", Attr::Int(1))])
                }
            })
            .collect();
        let total: usize = flat.iter().map(|f| self.shape(f)[0]).sum();
        let refs: Vec<&str> = flat.iter().map(String::as_str).collect();
        self.nodes.push(onnx::node(
            "Concat",
            "concat_output",
            &refs,
            "output",
            &[("axis", Attr::Int(1))],
        ));
        onnx::model(
            &self.name,
            self.opset,
            &self.nodes,
            &self.inits,
            &onnx::value_info("input", &input_dims),
            &onnx::value_info("output", &[total]),
        )
    }
}

/// ViT-B/16's rows: LayerNorm (scale and bias, and scale only), the
/// softmax family, ReduceMean and ReduceL2 (Swin V2's q/k norm) over the
/// last axis, LpNorm and MVN over it, and a sum over both axes (one CTA
/// row of 151 296 elements, streamed) and a max over the middle axis.
fn net_vit() -> Net {
    let mut m = Net::new("vit", 19, &[197, 768]);
    let x = "input";
    let a = m.layer_norm(x, 2, 1e-6, &[768], Some(&[768]));
    m.output(&a);
    let b = m.layer_norm(x, 2, 1e-5, &[768], None);
    m.output(&b);
    for op in ["Softmax", "LogSoftmax"] {
        let s = m.along(op, x, 2);
        m.output(&s);
    }
    let f = m.floored(x);
    let h = m.along("Hardmax", &f, 2);
    m.output(&h);
    for (op, keep) in [("ReduceMean", true), ("ReduceL2", false)] {
        let r = m.reduce(op, x, &[2], keep);
        m.output(&r);
    }
    let l = m.lp(x, 2, 2);
    m.output(&l);
    let l = m.lp(x, 2, 1);
    m.output(&l);
    let v = m.mvn(x, &[2]);
    m.output(&v);
    let s = m.reduce("ReduceSum", x, &[1, 2], true);
    m.output(&s);
    let s = m.reduce("ReduceMax", x, &[1], false);
    m.output(&s);
    m
}

/// ConvNeXt's channels-last LayerNorm (axis 3) and one over the last two
/// axes (rows of 5376: a CTA each) with a scale and bias broadcast along
/// them; a softmax and an MVN across the middle axes; LpNorm p = 2.
fn net_convnext() -> Net {
    let mut m = Net::new("convnext", 19, &[7, 7, 768]);
    let x = "input";
    let a = m.layer_norm(x, 3, 1e-6, &[768], Some(&[768]));
    m.output(&a);
    let b = m.layer_norm(x, 2, 1e-5, &[768], Some(&[7, 768]));
    m.output(&b);
    let c = m.along("Softmax", x, 1);
    m.output(&c);
    let d = m.mvn(x, &[1, 2]);
    m.output(&d);
    let e = m.lp(x, 3, 2);
    m.output(&e);
    m
}

/// Swin's and ConvNeXt's stage-1 rows of 96 channels (12 f16 vectors:
/// two rows per warp at f16, an odd number of rows), normalized and reduced.
fn net_swin() -> Net {
    let mut m = Net::new("swin", 19, &[7, 7, 96]);
    let x = "input";
    let a = m.layer_norm(x, 3, 1e-5, &[96], Some(&[96]));
    m.output(&a);
    let s = m.along("Softmax", x, 3);
    m.output(&s);
    let f = m.floored(x);
    let h = m.along("Hardmax", &f, 3);
    m.output(&h);
    let r = m.reduce("ReduceL2", x, &[3], true);
    m.output(&r);
    let l = m.lp(x, 3, 2);
    m.output(&l);
    m
}

/// Odd rows: `[5, 33]` normalized over axis 1 (165, scalar accesses) and 2
/// (33); the softmax family and norms along both axes (rows and slices).
fn net_odd() -> Net {
    let mut m = Net::new("odd", 19, &[5, 33]);
    let x = "input";
    let a = m.layer_norm(x, 1, 1e-5, &[5, 33], Some(&[33]));
    m.output(&a);
    let b = m.layer_norm(x, 2, 1e-5, &[33], Some(&[1]));
    m.output(&b);
    let f = m.floored(x);
    for axis in [1, 2] {
        for op in ["Softmax", "LogSoftmax"] {
            let s = m.along(op, x, axis);
            m.output(&s);
        }
        let h = m.along("Hardmax", &f, axis);
        m.output(&h);
        let l = m.lp(x, axis, if axis == 1 { 1 } else { 2 });
        m.output(&l);
    }
    let v = m.mvn(x, &[1, 2]);
    m.output(&v);
    m
}

/// Rows of 4096: a CTA per row.
fn net_long() -> Net {
    let mut m = Net::new("long", 19, &[4096]);
    let x = "input";
    let a = m.layer_norm(x, 1, 1e-5, &[4096], Some(&[4096]));
    m.output(&a);
    for op in ["Softmax", "LogSoftmax"] {
        let s = m.along(op, x, 1);
        m.output(&s);
    }
    let f = m.floored(x);
    let h = m.along("Hardmax", &f, 1);
    m.output(&h);
    for op in ["ReduceSum", "ReduceMax", "ReduceLogSumExp"] {
        let r = m.reduce(op, x, &[1], true);
        m.output(&r);
    }
    let l = m.lp(x, 1, 2);
    m.output(&l);
    let v = m.mvn(x, &[1]);
    m.output(&v);
    m
}

/// Every reduction over `[6, 5, 40]`: the last axis (rows of 40), a middle
/// axis, the last two (rows of 200), and two that are not rows; keepdims
/// alternating. Products and log-sums over values near 1.
fn net_reduce() -> Net {
    let mut m = Net::new("reduce", 19, &[6, 5, 40]);
    let x = "input";
    let pos = m.near_one(x);
    let ops = [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceSumSquare",
        "ReduceLogSum",
        "ReduceLogSumExp",
    ];
    for (i, op) in ops.into_iter().enumerate() {
        let src = if matches!(op, "ReduceProd" | "ReduceLogSum") {
            pos.clone()
        } else {
            x.to_string()
        };
        for (j, axes) in [&[3][..], &[2], &[2, 3], &[1, 3], &[1, 2]]
            .into_iter()
            .enumerate()
        {
            let r = m.reduce(op, &src, axes, (i + j) % 2 == 0);
            m.output(&r);
        }
    }
    m
}

/// GroupNormalization at opset 21 (scale and bias per channel): 1 and 4
/// groups; InstanceNormalization (a group per channel) over rows of 36 and
/// of 4; MVN over its default axes.
fn net_group21() -> Net {
    let mut m = Net::new("group21", 21, &[8, 6, 6]);
    let x = "input";
    for groups in [1, 4] {
        let g = m.group_norm(x, groups, 8);
        m.output(&g);
    }
    let i = m.instance_norm(x);
    m.output(&i);
    let v = m.mvn(x, &[0, 2, 3]);
    m.output(&v);
    m
}

/// GroupNormalization at opset 18 (scale and bias per group) over short
/// slices and rows, and InstanceNormalization over 2×2 images.
fn net_group18() -> Net {
    let mut m = Net::new("group18", 18, &[8, 2, 2]);
    let x = "input";
    for groups in [1, 4, 8] {
        let g = m.group_norm(x, groups, groups);
        m.output(&g);
    }
    let i = m.instance_norm(x);
    m.output(&i);
    m
}

/// A test model's builder.
type MakeNet = fn() -> Net;

const NETS: [(&str, MakeNet); 8] = [
    ("vit", net_vit),
    ("convnext", net_convnext),
    ("swin", net_swin),
    ("odd", net_odd),
    ("long", net_long),
    ("reduce", net_reduce),
    ("group21", net_group21),
    ("group18", net_group18),
];

// ---- the check ---------------------------------------------------------------------

/// The IR ops whose kernels this file tests (their tasks get the forced
/// configs). A ReduceMean over H and W of a 4-D value becomes a
/// GlobalAveragePool, whose NHWC kernel has a config of its own.
fn is_norm_op(op: &str) -> bool {
    op.starts_with("Reduce")
        || matches!(
            op,
            "Softmax"
                | "LogSoftmax"
                | "Hardmax"
                | "LayerNormalization"
                | "GroupNormalization"
                | "LpNormalization"
                | "MeanVarianceNormalization"
        )
}

/// The configs each variant is built with (`None`: the defaults).
fn configs() -> [Option<LinearConfig>; 3] {
    [
        None,
        Some(LinearConfig {
            block: 64,
            per_thread: 2,
        }),
        Some(LinearConfig {
            block: 1024,
            per_thread: 1,
        }),
    ]
}

struct Variant {
    label: String,
    precision: Precision,
    batch: usize,
    config: Option<LinearConfig>,
}

struct Checked {
    built: Built,
    input: Vec<f32>,
    emulated: Vec<f32>,
    traced: Vec<Vec<f32>>,
    reference: Vec<f32>,
}

/// Builds one variant (with a tuning log forcing its config on every
/// norm task) and runs the CPU references.
fn build_and_reference(onnx: &Path, tmp: &Path, v: &Variant) -> Result<Checked, String> {
    let dir: PathBuf = tmp.join(v.label.replace(' ', "_"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut build = Build::new(onnx)
        .batch(v.batch)
        .precision(v.precision)
        .name("k")
        .out_dir(&dir);
    let mut forced = Vec::new();
    if let Some(config) = v.config {
        let bytes = std::fs::read(onnx).map_err(|e| e.to_string())?;
        let options = CompileOptions {
            batch: Some(v.batch),
            precision: v.precision,
            channels_last: true,
            ..Default::default()
        };
        let compiled = compile_bytes(&bytes, "k", &options).map_err(|e| e.to_string())?;
        let json = serde_json::to_value(config).map_err(|e| e.to_string())?;
        let records: Vec<BestRecord> = compiled
            .tasks
            .iter()
            .filter(|t| is_norm_op(&t.key.op))
            .map(|t| BestRecord {
                task: t.key.hash_hex(),
                op: t.key.op.clone(),
                key: t.key.canonical.clone(),
                template: "-".into(),
                config: json.clone(),
                median_us: 1.0,
                target: Target {
                    gpu: "gpu_norms test".into(),
                    sm: "90".into(),
                    driver: "-".into(),
                    cuda: "-".into(),
                    timing: Default::default(),
                },
            })
            .collect();
        forced = records.iter().map(|r| r.task.clone()).collect();
        let log = BestLog {
            format: BEST_FORMAT.to_string(),
            records,
        };
        let path = dir.join("best.json");
        std::fs::write(&path, log.to_json()).map_err(|e| format!("{}: {e}", path.display()))?;
        build = build.tuning(&path);
    }
    let built = build
        .compile()
        .map_err(|e| format!("build: {e}"))?
        .into_iter()
        .next()
        .ok_or("the build returned nothing")?;
    let rejected: Vec<&String> = built
        .notes
        .iter()
        .filter(|n| n.contains("using the default") || n.contains("ignored"))
        .collect();
    if !rejected.is_empty() {
        return Err(format!("tuned configs not applied: {rejected:?}"));
    }
    if let Some(c) = v.config {
        let tag = format!("_b{}i{}", c.block, c.per_thread);
        for task in &forced {
            let found = built
                .spec
                .kernels
                .iter()
                .any(|k| k.contains(&task[..8]) && k.ends_with(&tag));
            if !found {
                return Err(format!("task {task}: no kernel with tag {tag}"));
            }
        }
    }
    let input = fill(
        7 + v.batch as u64,
        0.0,
        1.0,
        built.spec.inputs[0].elements(),
    );
    let opts = RunOptions::default();
    let graph = &built.compiled.graph;
    let emulated = run(graph, &[&input], &opts)
        .map_err(|e| format!("CPU emulation: {e}"))?
        .swap_remove(0);
    let traced = run_traced(graph, &[&input], &opts).map_err(|e| format!("CPU trace: {e}"))?;
    let reference = run(&built.compiled.imported, &[&input], &opts)
        .map_err(|e| format!("CPU reference: {e}"))?
        .swap_remove(0);
    Ok(Checked {
        built,
        input,
        emulated,
        traced,
        reference,
    })
}

/// Runs a build on the GPU; the disagreements found, and the worst
/// per-launch error with its kernel.
fn compare(v: &Variant, c: Checked, mode: Mode) -> (Vec<String>, (f64, String)) {
    let Checked {
        built,
        input,
        emulated,
        traced,
        reference,
    } = c;
    let mut fails = Vec::new();
    let mut worst = (0.0f64, String::new());
    let what = &v.label;
    let mut model = match gpu::load(&built.dir, mode) {
        Ok(Some(model)) => model,
        Ok(None) => {
            gpu::discard_build(&built.dir);
            return (fails, worst);
        }
        Err(e) => return (vec![format!("{what}: {e}")], worst),
    };
    let spec = &built.spec;
    let mut out = vec![f32::NAN; spec.outputs[0].elements()];
    let mut again = vec![f32::NAN; out.len()];
    if let Err(e) = model
        .infer(&input, &mut out)
        .and_then(|()| model.infer(&input, &mut again))
    {
        return (vec![format!("{what}: infer: {e}")], worst);
    }
    if out
        .iter()
        .zip(&again)
        .any(|(a, b)| a.to_bits() != b.to_bits())
    {
        fails.push(format!("{what}: two runs of the same input differ"));
    }
    if out.iter().any(|x| !x.is_finite()) {
        fails.push(format!("{what}: the output holds NaN or infinity"));
    }
    let p = v.precision;
    let (tol, tol_ref) = (gpu::tolerance(p), gpu::tolerance_vs_fp32(p));
    let err = rel_l2(&out, &emulated);
    if gpu::exceeds(err, tol) {
        fails.push(format!(
            "{what}: output vs CPU emulation rel. L2 {err:.3e} > {tol:e}"
        ));
    }
    // Against fp32, the precision's own rounding may already exceed the
    // model-level bar on these synthetic nets (bf16 stores 8 significand
    // bits): the GPU may be at most 1.5× as far from fp32 as the emulation.
    let tol_ref = tol_ref.max(1.5 * rel_l2(&emulated, &reference));
    let err = rel_l2(&out, &reference);
    if gpu::exceeds(err, tol_ref) {
        fails.push(format!(
            "{what}: output vs fp32 reference rel. L2 {err:.3e} > {tol_ref:e}"
        ));
    }
    let graph = &built.compiled.graph;
    let node_of: HashMap<&str, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (graph.value(n.output).name.as_str(), i))
        .collect();
    let ran = model.run_layers(&input, |i, slot, bytes| {
        let got = aotune::runtime::decode_slot(slot, bytes);
        let launch = &spec.launches[i];
        let symbol = spec.kernels[launch.kernel as usize].to_string();
        let Some(&node) = node_of.get(&*slot.name) else {
            fails.push(format!(
                "{what}: launch {i} writes '{}', no node's output",
                slot.name
            ));
            return true;
        };
        let err = rel_l2(&got, &traced[node]);
        if gpu::exceeds(err, tol) {
            fails.push(format!(
                "{what}: launch {i} node '{}' kernel {symbol}: rel. L2 {err:.3e} > {tol:e}",
                launch.node
            ));
        }
        if err > worst.0 || err.is_nan() {
            worst = (err, format!("{what} {symbol}"));
        }
        true
    });
    if let Err(e) = ran {
        fails.push(format!("{what}: run_layers: {e}"));
    }
    drop(model);
    gpu::discard_build(&built.dir);
    (fails, worst)
}

/// Builds and checks `net` at fp32, fp16 and bf16, batch 1 and 2, with
/// every config of [`configs`].
fn check(test: &str, net: fn() -> Net, precisions: &[Precision]) {
    let Some(mode) = gpu::mode_or_skip(test) else {
        return;
    };
    let tmp = TempDir::new(&format!("gpu-norms-{test}"));
    let onnx = tmp.path().join(format!("{test}.onnx"));
    std::fs::write(&onnx, net().finish()).expect("write test model");
    let filter = std::env::var("AOTUNE_SWEEP_FILTER").unwrap_or_default();
    let mut variants = Vec::new();
    for &precision in precisions {
        for batch in [1, 2] {
            for (i, config) in configs().into_iter().enumerate() {
                let label = format!("{test} {precision} b{batch} c{i}");
                if label.contains(filter.as_str()) {
                    variants.push(Variant {
                        label,
                        precision,
                        batch,
                        config,
                    });
                }
            }
        }
    }
    let mut fails = Vec::new();
    let mut worst: HashMap<Precision, (f64, String)> = HashMap::new();
    gpu::pipeline(
        (0..variants.len()).collect(),
        |i| gpu::catch(|| build_and_reference(&onnx, tmp.path(), &variants[i])).map(|c| (i, c)),
        |done| match done {
            Ok((i, checked)) => {
                let (f, w) = compare(&variants[i], checked, mode);
                fails.extend(f);
                let slot = worst.entry(variants[i].precision).or_default();
                if w.0 > slot.0 || w.0.is_nan() {
                    *slot = w;
                }
            }
            Err(e) => fails.push(format!("{test}: {e}")),
        },
    );
    for p in precisions {
        if let Some((err, at)) = worst.get(p).filter(|w| !w.1.is_empty()) {
            println!("{test} {p}: worst launch rel. L2 {err:.2e} at {at}");
        }
    }
    for f in fails.iter().take(40) {
        eprintln!("FAIL {f}");
    }
    assert!(
        fails.is_empty(),
        "{test}: {} failure(s), first: {}",
        fails.len(),
        fails[0]
    );
}

const ALL: [Precision; 3] = [Precision::Fp32, Precision::Fp16, Precision::Bf16];

#[test]
fn layer_norm_vit_rows() {
    check("vit", net_vit, &ALL);
}

#[test]
fn layer_norm_convnext_rows() {
    check("convnext", net_convnext, &ALL);
}

#[test]
fn layer_norm_swin_rows_share_warps() {
    check("swin", net_swin, &ALL);
}

#[test]
fn odd_rows_and_middle_axes() {
    check("odd", net_odd, &ALL);
}

#[test]
fn rows_of_4096_take_a_cta() {
    check("long", net_long, &ALL);
}

#[test]
fn every_reduce_kind_over_rows_and_slices() {
    check("reduce", net_reduce, &[Precision::Fp32, Precision::Fp16]);
}

#[test]
fn group_and_instance_norm() {
    check("group21", net_group21, &[Precision::Fp32, Precision::Fp16]);
    check("group18", net_group18, &[Precision::Fp32, Precision::Fp16]);
}

/// Without a GPU or nvcc: every test model imports, optimizes and gets a
/// kernel for every node (with each forced config too), and the
/// transformer LayerNorms run as a warp per row in registers.
#[test]
fn test_models_generate_row_kernels() {
    for (name, net) in NETS {
        let bytes = net().finish();
        for precision in ALL {
            let options = CompileOptions {
                batch: Some(2),
                precision,
                channels_last: true,
                ..Default::default()
            };
            let compiled = compile_bytes(&bytes, name, &options)
                .unwrap_or_else(|e| panic!("{name} {precision}: {e}"));
            let module = generate_cuda(&compiled.graph, &compiled.plan, &ConfigOverrides::new())
                .unwrap_or_else(|e| panic!("{name} {precision}: {e}"));
            assert!(module.warnings.is_empty(), "{name}: {:?}", module.warnings);
            for config in configs().into_iter().flatten() {
                let mut overrides = ConfigOverrides::new();
                for t in compiled.tasks.iter().filter(|t| is_norm_op(&t.key.op)) {
                    overrides.insert(t.key.hash_hex(), &config);
                }
                let forced = generate_cuda(&compiled.graph, &compiled.plan, &overrides)
                    .unwrap_or_else(|e| panic!("{name} {precision} {config:?}: {e}"));
                assert!(forced.warnings.is_empty(), "{name}: {:?}", forced.warnings);
            }
            if name == "vit" && precision == Precision::Fp16 {
                let src = &module.source;
                let ln = src
                    .find("struct layernorm_")
                    .map(|at| &src[at..at + 600])
                    .unwrap_or_else(|| panic!("no layernorm kernel"));
                for want in [
                    "L = 768, V = 8",
                    "SLOTS = 3",
                    "WARP = true",
                    "STREAM = false",
                ] {
                    assert!(ln.contains(want), "{want} not in {ln}");
                }
            }
            if name == "long" {
                assert!(
                    module.source.contains("WARP = false"),
                    "{name}: no CTA rows"
                );
            }
        }
    }
}

/// Device time of the transformer LayerNorms and a softmax at fp16, batch 1
/// and 64 (`time_layers`, median of 20), with the bytes each launch moves
/// per microsecond. Not a check: `cargo test --test gpu_norms -- --ignored
/// --nocapture time_`.
#[test]
#[ignore]
fn time_transformer_norms() {
    let Some(mode) = gpu::mode_or_skip("time_transformer_norms") else {
        return;
    };
    let tmp = TempDir::new("gpu-norms-time");
    for (name, dims, axis) in [
        ("vit", vec![197, 768], 2),
        ("convnext", vec![56, 56, 96], 3),
        ("swin", vec![3136, 96], 2),
    ] {
        let mut m = Net::new(name, 19, &dims);
        let a = m.layer_norm(
            "input",
            axis,
            1e-6,
            &[*dims.last().unwrap()],
            Some(&[*dims.last().unwrap()]),
        );
        m.output(&a);
        let s = m.along("Softmax", "input", axis);
        m.output(&s);
        let onnx = tmp.path().join(format!("{name}.onnx"));
        std::fs::write(&onnx, m.finish()).expect("write model");
        for batch in [1, 64] {
            let dir = tmp.path().join(format!("{name}_b{batch}"));
            let built = Build::new(&onnx)
                .batch(batch)
                .precision(Precision::Fp16)
                .name("k")
                .out_dir(&dir)
                .compile()
                .expect("build")
                .swap_remove(0);
            let Some(mut model) = gpu::load(&built.dir, mode).expect("load") else {
                continue;
            };
            let input = fill(3, 0.0, 1.0, built.spec.inputs[0].elements());
            let mut out = vec![0.0; built.spec.outputs[0].elements()];
            model.infer(&input, &mut out).expect("infer");
            let times = model.time_layers(5, 20).expect("time");
            for (i, launch) in built.spec.launches.iter().enumerate() {
                let symbol = &built.spec.kernels[launch.kernel as usize];
                if !(symbol.starts_with("layernorm") || symbol.starts_with("softmax")) {
                    continue;
                }
                let elements: usize = batch * dims.iter().product::<usize>();
                let us = f64::from(times[i]) * 1e3;
                println!(
                    "{name} b{batch} {symbol}: {us:.2} µs, {:.0} GB/s (f16 in and out)",
                    (elements * 4) as f64 / us / 1e3
                );
            }
        }
    }
}
