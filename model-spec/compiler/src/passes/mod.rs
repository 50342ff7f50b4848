//! Graph-to-graph passes, run in a fixed order by [`optimize`].
//!
//! Each pass lives in its own file, rewrites the graph through one
//! [`crate::ir::Patch`], verifies the result in debug and test builds
//! ([`crate::ir::debug_verify`]) and returns a [`PassSummary`] of what it
//! changed. The order matters: BatchNorm must be folded before the conv
//! epilogue is fused (the BatchNorm sits between the conv and its bias/ReLU),
//! a projection shortcut joins its conv once the epilogue has made it that
//! conv's residual,
//! the global-pool canonicalization must run before layout assignment (only
//! pools become channels-last), precision comes after layout so the
//! input's NHWC `Convert` doubles as its f16/bf16 conversion, and the stem's
//! space-to-depth rewrite and channel padding come after both (they rewrite
//! that f16/bf16 NHWC `Convert`); an f16/bf16 graph input is declared right
//! after precision, once only conversions read it; the space-to-depth
//! rewrite runs first, and the padding takes the conversions it left. A
//! LayerNorm over channels joins its depthwise conv, a LayerNorm over the
//! last axis the Denses that read it, and the global pool its conv, last,
//! once layouts and dtypes are final (the first matches the free Transpose
//! view of a channels-last conv output that layout leaves; the second needs
//! the weights in their storage type).

mod attention_views;
mod canonicalize_transpose;
mod concat_of_slices;
mod dce;
mod dense;
mod dense_epilogue;
#[cfg(test)]
mod direct_eval;
mod fold_batch_norm;
mod fuse_attention;
mod fuse_conv_layer_norm;
mod fuse_dense_layer_norm;
mod fuse_epilogue;
mod fuse_gelu;
mod fuse_global_pool;
mod fuse_layer_norm;
mod fuse_shortcut;
#[cfg(test)]
mod fuse_transformer_tests;
mod input_dtype;
mod layout;
mod pad_channels;
mod precision;
mod space_to_depth;
mod token_order;

pub use attention_views::attention_views;
pub use canonicalize_transpose::canonicalize_transpose;
pub use concat_of_slices::concat_of_slices;
pub use dce::dce;
pub use dense::{canonicalize_global_pool, lower_dense};
pub use fold_batch_norm::fold_batch_norm;
pub use fuse_attention::fuse_attention;
pub use fuse_conv_layer_norm::fuse_conv_layer_norm;
pub use fuse_dense_layer_norm::fuse_dense_layer_norm;
pub use fuse_epilogue::fuse_epilogue;
pub use fuse_gelu::fuse_gelu;
pub use fuse_global_pool::{fuse_global_pool, MAX_POOLED_PIXELS};
pub use fuse_layer_norm::fuse_layer_norm;
pub use fuse_shortcut::fuse_shortcut;
pub use input_dtype::set_input_dtype;
pub use layout::to_channels_last;
pub use pad_channels::pad_input_channels;
pub use precision::apply_precision;
pub use space_to_depth::space_to_depth_input;

use crate::ir::{DType, Graph, NodeId, Precision, ValueId};
use std::collections::{HashMap, HashSet};
use std::fmt;

/// What [`optimize`] does beyond the fixed pass order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassOptions {
    /// Numeric mode: storage type of activations and weights.
    pub precision: Precision,
    /// Run [`to_channels_last`] (NHWC activations, OHWI weights).
    pub channels_last: bool,
    /// The dtype of the graph inputs: f32, or the precision's 16-bit storage
    /// type ([`set_input_dtype`]).
    pub input_dtype: DType,
    /// Run [`fuse_conv_layer_norm`] (off by default: see
    /// `CompileOptions::fuse_depthwise_norm`).
    pub fuse_depthwise_norm: bool,
    /// Run [`fuse_dense_layer_norm`] (off by default: see
    /// `CompileOptions::fuse_dense_norm`).
    pub fuse_dense_norm: bool,
}

impl Default for PassOptions {
    fn default() -> Self {
        PassOptions {
            precision: Precision::Fp32,
            channels_last: true,
            input_dtype: DType::F32,
            fuse_depthwise_norm: false,
            fuse_dense_norm: false,
        }
    }
}

/// A pass met something it cannot compile, e.g. a BatchNormalization whose
/// `var + epsilon` is not positive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pass {pass}: node '{node}' ({op}): {message}")]
pub struct PassError {
    pub pass: &'static str,
    /// The node's name (onnx-ir's or pass-made).
    pub node: String,
    /// The node's op kind ([`crate::ir::Op::kind`]).
    pub op: &'static str,
    pub message: String,
}

/// What one pass changed, as counted events, e.g. `(53, "BatchNormalization folded")`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassSummary {
    pub pass: &'static str,
    pub changes: Vec<(usize, String)>,
}

impl PassSummary {
    pub fn new(pass: &'static str) -> Self {
        PassSummary {
            pass,
            changes: Vec::new(),
        }
    }

    /// Records `count` events of kind `what` (kept even when zero, so a
    /// report always lists the same lines for the same pass).
    pub fn add(&mut self, count: usize, what: impl Into<String>) {
        self.changes.push((count, what.into()));
    }

    /// The count recorded under `what` (0 if none).
    pub fn count(&self, what: &str) -> usize {
        self.changes
            .iter()
            .filter(|(_, w)| w == what)
            .map(|(n, _)| n)
            .sum()
    }

    /// True when the pass changed nothing.
    pub fn is_noop(&self) -> bool {
        self.changes.iter().all(|(n, _)| *n == 0)
    }
}

impl fmt::Display for PassSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.pass)?;
        let done: Vec<String> = self
            .changes
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect();
        if done.is_empty() {
            f.write_str(" no change")
        } else {
            write!(f, " {}", done.join(", "))
        }
    }
}

/// Summaries of every pass [`optimize`] ran, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    pub passes: Vec<PassSummary>,
}

impl PassReport {
    /// Sum over all runs of `pass` of the count recorded under `what`.
    pub fn count(&self, pass: &str, what: &str) -> usize {
        self.passes
            .iter()
            .filter(|s| s.pass == pass)
            .map(|s| s.count(what))
            .sum()
    }
}

impl fmt::Display for PassReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for summary in &self.passes {
            writeln!(f, "{summary}")?;
        }
        Ok(())
    }
}

/// Runs every pass in order: dce → fuse_layer_norm → fuse_gelu → fuse_attention →
/// canonicalize_transpose → fold_batch_norm → canonicalize_global_pool
/// → fuse_epilogue → fuse_shortcut → lower_dense → to_channels_last (if enabled) →
/// apply_precision → set_input_dtype (unless f32) → space_to_depth_input →
/// pad_input_channels → fuse_conv_layer_norm (if asked) → fuse_dense_layer_norm (if
/// asked) → fuse_global_pool → dce. Each pass verifies the graph it leaves in debug
/// and test builds.
pub fn optimize(graph: &mut Graph, options: &PassOptions) -> Result<PassReport, PassError> {
    let mut report = PassReport::default();
    report.passes.push(dce(graph)?);
    report.passes.push(fuse_layer_norm(graph)?);
    report.passes.push(fuse_gelu(graph)?);
    report.passes.push(fuse_attention(graph)?);
    report.passes.push(canonicalize_transpose(graph)?);
    report.passes.push(concat_of_slices(graph)?);
    report.passes.push(attention_views(graph)?);
    report.passes.push(fold_batch_norm(graph)?);
    report.passes.push(canonicalize_global_pool(graph)?);
    report.passes.push(fuse_epilogue(graph)?);
    report.passes.push(fuse_shortcut(graph)?);
    report.passes.push(lower_dense(graph)?);
    if options.channels_last {
        report.passes.push(to_channels_last(graph)?);
    }
    report
        .passes
        .push(apply_precision(graph, options.precision)?);
    if options.input_dtype != DType::F32 {
        report
            .passes
            .push(set_input_dtype(graph, options.input_dtype)?);
    }
    report.passes.push(space_to_depth_input(graph)?);
    report.passes.push(pad_input_channels(graph)?);
    if options.fuse_depthwise_norm {
        report.passes.push(fuse_conv_layer_norm(graph)?);
    }
    if options.fuse_dense_norm {
        report.passes.push(fuse_dense_layer_norm(graph)?);
    }
    report.passes.push(fuse_global_pool(graph)?);
    report.passes.push(dce(graph)?);
    Ok(report)
}

/// Who reads each value: node users (once per use) and graph outputs.
/// Computed once at the start of a pass, on the graph before its patch.
struct Uses {
    users: HashMap<ValueId, Vec<NodeId>>,
    outputs: HashSet<ValueId>,
}

impl Uses {
    fn of(graph: &Graph) -> Self {
        Uses {
            users: graph.users(),
            outputs: graph.outputs.iter().copied().collect(),
        }
    }

    /// Nodes reading `value`, in node order, once per use.
    fn users(&self, value: ValueId) -> &[NodeId] {
        self.users.get(&value).map_or(&[], Vec::as_slice)
    }

    fn is_output(&self, value: ValueId) -> bool {
        self.outputs.contains(&value)
    }

    /// The node that is the only reader of `value`, when `value` has exactly
    /// one use and is not a graph output: only then may that node fuse it away.
    fn sole_user(&self, value: ValueId) -> Option<NodeId> {
        match self.users(value) {
            [user] if !self.is_output(value) => Some(*user),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, Layout, Node, Op, ValueKind};
    use crate::reference::{self, RunOptions};
    use crate::test_graphs::{op_counts, rel_l2, Builder};

    /// The optimized graph's output against the original's, both on the CPU
    /// reference (which reads every value through its layout and dtype).
    fn reference_error(original: &Graph, optimized: &Graph, input: &[f32]) -> f64 {
        let opts = RunOptions::default();
        let want = reference::run(original, &[input], &opts).unwrap();
        let got = reference::run(optimized, &[input], &opts).unwrap();
        reference::rel_l2(&got[0], &want[0])
    }

    /// The op counts ResNet-50 must come out of [`optimize`] with, after
    /// its input conversion (`Convert`, or `SpaceToDepth` at f16/bf16).
    /// With `pooled`, the GlobalAveragePool is the last conv's epilogue.
    fn resnet50_optimized(pooled: bool) -> Vec<(&'static str, usize)> {
        let mut counts = vec![("Dense", 1), ("Flatten", 1), ("FusedConv", 49)];
        if !pooled {
            counts.push(("GlobalAveragePool", 1));
        }
        counts.push(("MaxPool", 1));
        counts
    }

    /// FusedConvs whose epilogue pools their output.
    fn pooled_convs(graph: &Graph) -> usize {
        let pooled = |n: &&Node| matches!(n.op, Op::FusedConv { pool: Some(_), .. });
        graph.nodes.iter().filter(pooled).count()
    }

    /// ResNet-50's input conversion on `size`² images: a `Convert`, or at
    /// f16/bf16 (`folded`) the stem's space-to-depth image (2×2 blocks of
    /// the image padded by 3, 16 channels, OH + 3 rows and columns).
    fn resnet50_input_conversion(size: usize, folded: bool) -> Op {
        if !folded {
            return Op::Convert;
        }
        let out = size / 2 + 3;
        Op::SpaceToDepth {
            block: 2,
            pad_top: 3,
            pad_left: 3,
            channels: 16,
            height: out,
            width: out,
        }
    }

    /// Checks `opt` is exactly the input conversion `convert`, 49 FusedConv
    /// (12 with a residual, 4 with the downsample blocks' projection as a
    /// shortcut; the stem a 4×4 stride-1 one after a `SpaceToDepth`),
    /// MaxPool, GlobalAveragePool (with `pooled`, fused into the last
    /// conv), Flatten, Dense, laid out NHWC up to the Flatten.
    fn check_resnet50(opt: &Graph, convert: &Op, pooled: bool) {
        let mut counts = op_counts(opt);
        counts.retain(|&(kind, n)| !(kind == convert.kind() && n == 1));
        assert_eq!(counts, resnet50_optimized(pooled));
        assert_eq!(pooled_convs(opt), pooled as usize);
        assert_eq!(residual_and_shortcut_convs(opt), (12, 4));
        assert_eq!(opt.nodes[0].op, *convert);
        assert_eq!(opt.nodes[0].inputs, opt.inputs);
        let Op::FusedConv { conv: stem, .. } = opt.nodes[1].op else {
            panic!("the stem follows the input conversion");
        };
        let folded = matches!(convert, Op::SpaceToDepth { .. });
        let (kernel, stride) = if folded { (4, 1) } else { (7, 2) };
        assert_eq!((stem.kernel, stem.strides), ([kernel; 2], [stride; 2]));
        for node in &opt.nodes {
            let out = opt.value(node.output);
            let expected = match node.op {
                Op::Flatten { .. } | Op::Dense { .. } => Layout::RowMajor,
                _ => Layout::ChannelsLast,
            };
            assert_eq!(out.layout, expected, "{}", node.name);
        }
    }

    /// FusedConvs with a residual, and with a shortcut.
    fn residual_and_shortcut_convs(graph: &Graph) -> (usize, usize) {
        let epilogues = graph.nodes.iter().filter_map(|n| match n.op {
            Op::FusedConv {
                epilogue, shortcut, ..
            } => Some((epilogue.residual, shortcut.is_some())),
            _ => None,
        });
        epilogues.fold((0, 0), |(r, s), (res, sc)| {
            (r + res as usize, s + sc as usize)
        })
    }

    fn optimized(graph: &Graph, precision: Precision) -> (Graph, PassReport) {
        let mut graph = graph.clone();
        let options = PassOptions {
            precision,
            ..PassOptions::default()
        };
        let report = optimize(&mut graph, &options).unwrap();
        (graph, report)
    }

    /// Checks the f16/bf16 storage contract: f32 at the edges and in biases,
    /// the storage type everywhere else.
    fn check_storage(graph: &Graph, storage: DType) {
        for &v in graph.inputs.iter().chain(&graph.outputs) {
            assert_eq!(graph.value(v).dtype, DType::F32, "{}", graph.value(v).name);
            assert_eq!(graph.value(v).layout, Layout::RowMajor);
        }
        for node in &graph.nodes {
            let weight_and_bias = match node.op {
                Op::FusedConv { epilogue, .. } | Op::Dense { epilogue, .. } => {
                    Some((node.inputs[1], epilogue.bias.then(|| node.inputs[2])))
                }
                _ => None,
            };
            if let Some((w, bias)) = weight_and_bias {
                assert_eq!(graph.value(w).dtype, storage, "{} weight", node.name);
                if let Some(b) = bias {
                    assert_eq!(graph.value(b).dtype, DType::F32, "{} bias", node.name);
                }
            }
            let out = graph.value(node.output);
            if !graph.outputs.contains(&node.output) {
                assert_eq!(out.dtype, storage, "{}", node.name);
            }
            for &input in &node.inputs {
                if graph.value(input).kind == ValueKind::Input {
                    assert!(
                        matches!(
                            node.op,
                            Op::Convert | Op::PadChannels { .. } | Op::SpaceToDepth { .. }
                        ),
                        "{} reads a graph input",
                        node.name
                    );
                }
            }
        }
    }

    #[test]
    fn resnet_like_fp32_structure_and_numerics() {
        let (graph, input) = Builder::resnet_like(2, 32, 10, false);
        let (opt, report) = optimized(&graph, Precision::Fp32);
        assert_eq!(
            op_counts(&opt),
            [
                ("Convert", 1),
                ("Dense", 1),
                ("Flatten", 1),
                ("FusedConv", 7),
                ("GlobalAveragePool", 1),
                ("MaxPool", 1),
            ]
        );
        assert_eq!(residual_and_shortcut_convs(&opt), (1, 1));
        assert_eq!(opt.nodes[0].op, Op::Convert);
        assert_eq!(opt.nodes[0].inputs, opt.inputs);
        insta::assert_snapshot!(report.to_string(), @r"
        dce: no change
        fuse_layer_norm: no change
        fuse_gelu: no change
        fuse_attention: no change
        canonicalize_transpose: no change
        concat_of_slices: no change
        attention_views: no change
        fold_batch_norm: 8 BatchNormalization folded
        canonicalize_global_pool: no change
        fuse_epilogue: 8 Conv fused, 8 with bias, 2 with residual Add, 7 with activation
        fuse_shortcut: 1 projection shortcut fused
        dense: 1 Gemm → Dense
        layout: 9 activations channels-last, 7 weights packed OHWI, 1 Convert to NHWC
        precision: no change
        space_to_depth: no change
        pad_channels: no change
        fuse_global_pool: no change
        dce: no change
        ");
        let want = direct_eval::evaluate(&graph, &[&input]);
        let got = direct_eval::evaluate(&opt, &[&input]);
        let error = rel_l2(&got[0], &want[0]);
        assert!(error <= 1e-5, "rel. L2 {error:e}");
        let error = reference_error(&graph, &opt, &input);
        assert!(error <= 1e-5, "reference: rel. L2 {error:e}");
    }

    #[test]
    fn resnet_like_fp16_and_bf16_numerics() {
        for dynamo in [false, true] {
            let (graph, input) = Builder::resnet_like(1, 24, 10, dynamo);
            let want = direct_eval::evaluate(&graph, &[&input]);
            for precision in [Precision::Fp16, Precision::Bf16] {
                let (opt, _) = optimized(&graph, precision);
                assert_eq!(opt.precision, precision);
                check_storage(&opt, precision.storage());
                let kinds: Vec<&str> = opt.nodes.iter().map(|n| n.op.kind()).collect();
                let head = if dynamo { "Reshape" } else { "Flatten" };
                assert_eq!(kinds[kinds.len() - 3..], ["FusedConv", head, "Dense"]);
                assert_eq!(pooled_convs(&opt), 1, "{precision}: the pool is fused");
                let got = direct_eval::evaluate(&opt, &[&input]);
                let error = rel_l2(&got[0], &want[0]);
                let bound = if precision == Precision::Fp16 {
                    1e-2
                } else {
                    3e-2
                };
                assert!(
                    error <= bound,
                    "{precision} dynamo={dynamo}: rel. L2 {error:e}"
                );
            }
        }
    }

    #[test]
    fn resnet50_becomes_convert_fused_convs_pools_and_dense() {
        let (graph, input) = Builder::resnet50(32);
        assert_eq!(
            op_counts(&graph),
            [
                ("Add", 16),
                ("BatchNormalization", 53),
                ("Conv", 53),
                ("Flatten", 1),
                ("Gemm", 1),
                ("GlobalAveragePool", 1),
                ("MaxPool", 1),
                ("Relu", 49),
            ]
        );
        for precision in [Precision::Fp32, Precision::Fp16] {
            let (opt, report) = optimized(&graph, precision);
            let fp16 = precision == Precision::Fp16;
            let convert = resnet50_input_conversion(32, fp16);
            check_resnet50(&opt, &convert, fp16);
            assert_eq!(
                report.count("fold_batch_norm", "BatchNormalization folded"),
                53
            );
        }
        // Numerics on the reference, batch 1 at 32x32.
        let (opt, _) = optimized(&graph, Precision::Fp32);
        let error = reference_error(&graph, &opt, &input);
        assert!(error <= 1e-5, "reference: rel. L2 {error:e}");
    }

    #[test]
    fn zoo_resnet50_import_optimizes_to_the_expected_structure() {
        let model = crate::zoo::resnet_onnx(crate::zoo::ResNetDepth::R50, crate::zoo::DEFAULT_SEED);
        let options = crate::onnx::ImportOptions::default();
        let imported = crate::onnx::import_bytes(&model, "zoo resnet50", &options).unwrap();
        let (opt, report) = optimized(&imported.graph, Precision::Fp16);
        let size = imported.graph.value(imported.graph.inputs[0]).shape[2];
        check_resnet50(&opt, &resnet50_input_conversion(size, true), true);
        check_storage(&opt, DType::F16);
        insta::assert_snapshot!(report.to_string(), @r"
        dce: no change
        fuse_layer_norm: no change
        fuse_gelu: no change
        fuse_attention: no change
        canonicalize_transpose: no change
        concat_of_slices: no change
        attention_views: no change
        fold_batch_norm: 53 BatchNormalization folded
        canonicalize_global_pool: no change
        fuse_epilogue: 53 Conv fused, 53 with bias, 16 with residual Add, 49 with activation
        fuse_shortcut: 4 projection shortcut fused
        dense: 1 Gemm → Dense
        layout: 51 activations channels-last, 49 weights packed OHWI, 1 Convert to NHWC
        precision: 53 activations f16, 50 weights f16
        space_to_depth: 1 input Convert rewritten, 1 SpaceToDepth, 1 convolutions made stride 1, 1 weights rearranged
        pad_channels: no change
        fuse_global_pool: 1 GlobalAveragePool fused into its conv
        dce: no change
        ");
    }

    /// A random DAG over `[1,4,6,6]` values: convs, BatchNorms, activations,
    /// Adds/Sums (possibly of one value twice), Identities and max pools,
    /// with some intermediate values returned too and, sometimes, the head.
    fn random_graph(seed: u64) -> (Graph, Vec<f32>) {
        let mut b = Builder::new();
        for _ in 0..seed {
            b.uniform(0.0, 1.0);
        }
        let x = b.input("x", &[1, 4, 6, 6]);
        let mut values = vec![x];
        let pick = |b: &mut Builder, values: &[crate::ir::ValueId]| {
            values[(b.uniform(0.0, values.len() as f32) as usize).min(values.len() - 1)]
        };
        for step in 0..8 {
            let v = pick(&mut b, &values);
            let name = format!("n{step}");
            let kind = (b.uniform(0.0, 8.0) as usize).min(7);
            let out = match kind {
                0 | 1 => {
                    let bias = kind == 1;
                    b.conv(&name, v, 4, 3, 1, bias)
                }
                2 => b.batch_norm(&name, v),
                3 => b.relu(&name, v),
                4 => {
                    let clip = crate::ir::UnaryOp::Clip {
                        min: -0.5,
                        max: 0.5,
                    };
                    b.node(&name, Op::Unary(clip), &[v])
                }
                5 => {
                    let w = pick(&mut b, &values);
                    let op = if step % 2 == 0 {
                        Op::Sum
                    } else {
                        Op::Binary(crate::ir::BinaryOp::Add)
                    };
                    b.node(&name, op, &[v, w])
                }
                6 => b.node(&name, Op::Identity, &[v]),
                _ => {
                    let pool = crate::ir::Pool2d {
                        kernel: [3, 3],
                        strides: [1, 1],
                        pads: [1; 4],
                        dilations: [1, 1],
                        ceil_mode: false,
                    };
                    b.node(&name, Op::MaxPool(pool), &[v])
                }
            };
            values.push(out);
        }
        let last = *values.last().unwrap_or(&x);
        if b.uniform(0.0, 1.0) < 0.5 {
            b.output(last);
        } else {
            let dynamo = b.uniform(0.0, 1.0) < 0.5;
            let head = b.head(last, 3, dynamo);
            b.output(head);
        }
        for _ in 0..2 {
            if b.uniform(0.0, 1.0) < 0.4 {
                let extra = pick(&mut b, &values);
                b.output(extra);
            }
        }
        let input = b.data_for(x);
        (b.finish(), input)
    }

    /// Every random graph, optimized at every precision with and without
    /// NHWC, computes what it computed before, on both the direct loops and
    /// the CPU reference (which reads values through their physical layout).
    #[test]
    fn random_graphs_keep_their_outputs() {
        let opts = RunOptions::default();
        for seed in 0..150 {
            let (graph, input) = random_graph(seed);
            let want = direct_eval::evaluate(&graph, &[&input]);
            let want_reference = reference::run(&graph, &[&input], &opts).unwrap();
            for precision in Precision::ALL {
                for channels_last in [true, false] {
                    let mut opt = graph.clone();
                    let options = PassOptions {
                        precision,
                        channels_last,
                        ..Default::default()
                    };
                    optimize(&mut opt, &options).unwrap();
                    if precision.storage() != DType::F32 {
                        check_storage(&opt, precision.storage());
                    }
                    let got = direct_eval::evaluate(&opt, &[&input]);
                    let got_reference = reference::run(&opt, &[&input], &opts).unwrap();
                    let bound = match precision {
                        Precision::Fp32 => 1e-5,
                        // The reference rounds matrix-product operands to tf32.
                        Precision::Tf32 => 2e-3,
                        Precision::Fp16 => 1e-2,
                        Precision::Bf16 => 5e-2,
                    };
                    let pairs = got.iter().zip(&want);
                    for (g, w) in pairs.chain(got_reference.iter().zip(&want_reference)) {
                        let error = reference::rel_l2(g, w);
                        assert!(
                            error <= bound,
                            "seed {seed} {precision} channels_last={channels_last}: {error:e}\n{}",
                            crate::ir::print_graph(&graph)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn optimize_is_idempotent() {
        let (graph, _) = Builder::resnet_like(1, 16, 5, true);
        for precision in Precision::ALL {
            let (once, _) = optimized(&graph, precision);
            let (twice, report) = optimized(&once, precision);
            assert_eq!(twice, once, "{precision}");
            assert!(report.passes.iter().all(PassSummary::is_noop), "{report}");
        }
    }

    #[test]
    fn without_channels_last_everything_stays_row_major() {
        let (graph, input) = Builder::resnet_like(1, 16, 5, false);
        let mut opt = graph.clone();
        let options = PassOptions {
            precision: Precision::Fp16,
            channels_last: false,
            ..Default::default()
        };
        optimize(&mut opt, &options).unwrap();
        assert!(opt.values.iter().all(|v| v.layout == Layout::RowMajor));
        check_storage(&opt, DType::F16);
        let want = direct_eval::evaluate(&graph, &[&input]);
        let got = direct_eval::evaluate(&opt, &[&input]);
        assert!(rel_l2(&got[0], &want[0]) <= 1e-2);
    }
}
