//! Template sweeps through nvcc: for every template, a few shapes × a sample
//! of its search space (plus the default) × precisions are rendered through
//! the same path `generate_cuda` uses, batched into a few `.cu` files, and
//! compiled with `nvcc -cubin` for sm_90a with `-Xptxas -v`; every kernel must
//! compile without register spills. Without nvcc the tests skip
//! (`crate::skip`).

use super::assemble::assemble;
use super::config::TaskRef;
use super::nvcc::{self, KernelReport, Nvcc};
use super::source::Instance;
use super::*;
use crate::ir::{
    Activation, BinaryOp, Conv2d, DType, Epilogue, GlobalPool, Graph, Layout, NodeId, Op, Pool2d,
    Precision, Shortcut, UnaryOp,
};
use crate::test_graphs::{one_op, In};
use serde::Serialize;

/// Every `n`-th element so that about `n` remain, first and last included.
pub(crate) fn sample<T: Clone>(all: &[T], n: usize) -> Vec<T> {
    if all.len() <= n || n < 2 {
        return all.to_vec();
    }
    (0..n)
        .map(|i| all[i * (all.len() - 1) / (n - 1)].clone())
        .collect()
}

/// The instance of node 0 of `graph` with `config` forced through the
/// override path (`None`: the default), under a unique `label`.
pub(crate) fn node_instance<C: Serialize>(
    graph: &Graph,
    config: Option<&C>,
    label: &str,
) -> Instance {
    let value = config.map(|c| serde_json::to_value(c).unwrap());
    let node = graph.node(NodeId(0));
    let task = TaskRef {
        hash: label,
        op: node.op.kind(),
        node: &node.name,
        overridden: value.as_ref(),
    };
    let mut warnings = Vec::new();
    let instance = super::instantiate(graph, NodeId(0), &task, label, &mut warnings)
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    assert!(warnings.is_empty(), "{label}: {warnings:?}");
    instance
}

/// Compiles the instances in batches (two nvcc processes at a time) and
/// returns ptxas's report of every kernel; fails on any compile error,
/// missing kernel or spill.
///
/// Configs with a `min_blocks` register cap are the exception: their
/// validity rule only bounds the cap against an estimate, so ptxas may
/// spill on some (which the tuner prunes by the same report before
/// measuring, and no heuristic default has a cap); their spills are
/// counted and printed, not failed.
pub(crate) fn compile_all(nvcc: &Nvcc, name: &str, instances: Vec<Instance>) -> Vec<KernelReport> {
    let capped: std::collections::HashSet<String> = instances
        .iter()
        .filter(|i| i.config.contains("\"min_blocks\""))
        .map(|i| i.symbol.clone())
        .collect();
    let reports = compile_reports(nvcc, name, instances);
    let mut capped_spills = 0;
    for k in &reports {
        if capped.contains(&k.name) {
            capped_spills += usize::from(k.spills());
            continue;
        }
        assert!(!k.spills(), "{name}: {} spills: {k:?}", k.name);
    }
    if !capped.is_empty() {
        println!(
            "{name}: {capped_spills} of {} kernels with a min_blocks register cap spill (pruned by the tuner)",
            capped.len()
        );
    }
    reports
}

/// [`compile_all`] without the spill check (for calibration).
fn compile_reports(nvcc: &Nvcc, name: &str, instances: Vec<Instance>) -> Vec<KernelReport> {
    const BATCH: usize = 48;
    let batches: Vec<Vec<Instance>> = instances.chunks(BATCH).map(<[_]>::to_vec).collect();
    let sources: Vec<(String, String, Vec<String>)> = batches
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let rendered: Vec<(Instance, String)> =
                b.iter().map(|x| (x.clone(), x.symbol.clone())).collect();
            (
                format!("{name}_{i}"),
                assemble(&rendered),
                b.iter().map(|x| x.symbol.clone()).collect(),
            )
        })
        .collect();
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 4);
    let mut reports = Vec::new();
    for group in sources.chunks(workers) {
        let results: Vec<Result<Vec<KernelReport>, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = group
                .iter()
                .map(|(label, source, _)| s.spawn(move || nvcc::compile(nvcc, source, label)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("nvcc thread panicked".into()))
                })
                .collect()
        });
        for ((label, _, symbols), result) in group.iter().zip(results) {
            let r = result.unwrap_or_else(|e| panic!("{label}: {e}"));
            for symbol in symbols {
                assert!(
                    r.iter().any(|k| &k.name == symbol),
                    "{label}: no ptxas report for {symbol}"
                );
            }
            reports.extend(r);
        }
    }
    reports
}

fn dtypes(precision: Precision) -> DType {
    precision.storage()
}

/// A FusedConv test graph: NHWC input `[n, c, hw, hw]`, OHWI weight.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_graph(
    n: usize,
    c: usize,
    hw: [usize; 2],
    k: usize,
    conv: Conv2d,
    epilogue: Epilogue,
    precision: Precision,
    out_dtype: DType,
) -> Graph {
    let s = dtypes(precision);
    let cl = Layout::ChannelsLast;
    let mut inputs = vec![
        In::act(&[n, c, hw[0], hw[1]], s, cl),
        In::constant(
            &[k, c / conv.groups, conv.kernel[0], conv.kernel[1]],
            s,
            cl,
            1,
        ),
    ];
    if epilogue.bias {
        inputs.push(In::constant(&[k], DType::F32, Layout::RowMajor, 2));
    }
    if epilogue.residual {
        let [p, q] = conv.output_hw(hw[0], hw[1]).unwrap();
        inputs.push(In::act(&[n, k, p, q], s, cl));
    }
    one_op(
        Op::FusedConv {
            conv,
            epilogue,
            shortcut: None,
            pool: None,
        },
        &inputs,
        out_dtype,
        cl,
        precision,
    )
    .0
}

/// A FusedConv with a shortcut: a 1×1 conv over NHWC `x [n, c, hw, hw]`
/// plus a 1×1 stride-`stride` conv over `xs [n, cs, hw·stride, hw·stride]`
/// (weight `[k, c + cs, 1, 1]`), bias and Relu.
pub(crate) fn shortcut_graph(
    n: usize,
    [c, cs]: [usize; 2],
    hw: usize,
    stride: usize,
    k: usize,
    precision: Precision,
) -> Graph {
    let s = dtypes(precision);
    let cl = Layout::ChannelsLast;
    let size = (hw - 1) * stride + 1;
    let inputs = [
        In::act(&[n, c, hw, hw], s, cl),
        In::constant(&[k, c + cs, 1, 1], s, cl, 1),
        In::constant(&[k], DType::F32, Layout::RowMajor, 2),
        In::act(&[n, cs, size, size], s, cl),
    ];
    let epilogue = Epilogue {
        bias: true,
        residual: false,
        activation: Activation::Relu,
    };
    let op = Op::FusedConv {
        conv: geometry(1, 1, [0; 4], 1, 1),
        epilogue,
        shortcut: Some(Shortcut {
            strides: [stride; 2],
        }),
        pool: None,
    };
    one_op(op, &inputs, s, cl, precision).0
}

pub(crate) fn geometry(
    kernel: usize,
    stride: usize,
    pads: [usize; 4],
    dilation: usize,
    groups: usize,
) -> Conv2d {
    Conv2d {
        kernel: [kernel, kernel],
        strides: [stride, stride],
        pads,
        dilations: [dilation, dilation],
        groups,
    }
}

/// Conv test cases: (graph label, graph) for one precision.
pub(crate) fn conv_cases(precision: Precision) -> Vec<(String, Graph)> {
    let s = precision.storage();
    let relu = Epilogue {
        bias: true,
        residual: false,
        activation: Activation::Relu,
    };
    let full = Epilogue {
        bias: true,
        residual: true,
        activation: Activation::Relu,
    };
    // GELU epilogues (`epilogue_gelu.cuh`): erf on the tiled templates,
    // tanh on the direct one.
    let gelu = |tanh| Epilogue {
        activation: Activation::Gelu { tanh },
        ..full
    };
    let clip = Epilogue {
        bias: false,
        residual: false,
        activation: Activation::Clip {
            min: -0.5,
            max: 6.0,
        },
    };
    vec![
        // The stem: C = 3, 7×7 stride 2.
        (
            "stem".into(),
            conv_graph(
                1,
                3,
                [40, 40],
                64,
                geometry(7, 2, [3; 4], 1, 1),
                relu,
                precision,
                s,
            ),
        ),
        // 3×3 with a residual, M not a multiple of any tile.
        (
            "3x3".into(),
            conv_graph(
                2,
                64,
                [7, 7],
                64,
                geometry(3, 1, [1; 4], 1, 1),
                full,
                precision,
                s,
            ),
        ),
        // 1×1 stride 2 (no padding), f32 output.
        (
            "1x1s2".into(),
            conv_graph(
                1,
                256,
                [14, 14],
                512,
                geometry(1, 2, [0; 4], 1, 1),
                relu,
                precision,
                DType::F32,
            ),
        ),
        // 1×1 with a residual and GELU, M and N both ragged against every
        // tile (M = 105, N = 72, a multiple of 8: 16-byte epilogue chunks).
        (
            "1x1res".into(),
            conv_graph(
                3,
                24,
                [5, 7],
                72,
                geometry(1, 1, [0; 4], 1, 1),
                gelu(false),
                precision,
                s,
            ),
        ),
        // Odd channel counts, dilation, asymmetric pads, Clip, no bias.
        (
            "odd".into(),
            conv_graph(
                1,
                20,
                [11, 9],
                35,
                geometry(3, 2, [1, 0, 2, 1], 2, 1),
                clip,
                precision,
                s,
            ),
        ),
        // A projection shortcut at stride 2 (ResNet's downsample block:
        // 16-byte chunks from both inputs), and one over odd channel counts
        // at stride 1 (gathered element by element).
        (
            "shortcut".into(),
            shortcut_graph(2, [64, 32], 7, 2, 128, precision),
        ),
        (
            "shortcut_odd".into(),
            shortcut_graph(1, [12, 5], 6, 1, 24, precision),
        ),
        // Grouped (with a tanh GELU) and depthwise: the direct template.
        (
            "grouped".into(),
            conv_graph(
                1,
                32,
                [9, 9],
                64,
                geometry(3, 1, [1; 4], 1, 4),
                gelu(true),
                precision,
                s,
            ),
        ),
        (
            "depthwise".into(),
            conv_graph(
                2,
                48,
                [8, 8],
                48,
                geometry(3, 2, [1; 4], 1, 48),
                relu,
                precision,
                s,
            ),
        ),
    ]
}

/// Convolutions with the global average pool in their epilogue
/// (`pool: Some(Avg)`), under the tensor-core precisions (strict fp32's
/// SIMT kernel has none): ResNet-50's last conv at batch 1 over fewer
/// channels (7×7 pixels, bias + residual + ReLU), and two images of 4×4
/// 3×3 outputs in one tile (M = 32, K = 72).
pub(crate) fn pooled_cases(precision: Precision) -> Vec<(String, Graph)> {
    if precision == Precision::Fp32 {
        return Vec::new();
    }
    let s = precision.storage();
    let epilogue = |residual| Epilogue {
        bias: true,
        residual,
        activation: Activation::Relu,
    };
    let pooled = |mut graph: Graph| {
        let node = &mut graph.nodes[0];
        if let Op::FusedConv { pool, .. } = &mut node.op {
            *pool = Some(GlobalPool::Avg);
        }
        let out = node.output;
        let y = &mut graph.values[out.index()];
        y.shape = vec![y.shape[0], y.shape[1], 1, 1];
        graph
    };
    let last = conv_graph(
        1,
        128,
        [7, 7],
        256,
        geometry(1, 1, [0; 4], 1, 1),
        epilogue(true),
        precision,
        s,
    );
    let two = conv_graph(
        2,
        32,
        [4, 4],
        72,
        geometry(3, 1, [1; 4], 1, 1),
        epilogue(false),
        precision,
        s,
    );
    vec![
        ("pooled7x7".into(), pooled(last)),
        ("pooled2x4x4".into(), pooled(two)),
    ]
}

/// Tensor-core configs that exercise each path of `conv_mma.cu` on `shape`:
/// the first valid config (in search-space order) with each of: staged and
/// direct epilogue under split-K, a staged epilogue of several passes, the
/// largest CTA tile, each k step, one warp, 16-wide warp tiles.
pub(crate) fn mma_coverage(shape: &ConvShape) -> Vec<ConvConfig> {
    use super::mma_config::MmaEpilogue::{Direct, Staged};
    let space = MmaConfig::search_space(shape);
    if space.is_empty() {
        return Vec::new();
    }
    let passes = |c: &MmaConfig| c.block_m / c.warps_m / 16 / c.epilogue_mi(shape) as u32;
    let largest = space.iter().map(|c| c.block_m * c.block_n).max();
    let first_k = space[0].block_k;
    type Wanted<'a> = Box<dyn Fn(&MmaConfig) -> bool + 'a>;
    let predicates: Vec<Wanted> = vec![
        Box::new(|c| c.epilogue == Staged && c.split_k > 1),
        Box::new(|c| c.epilogue == Direct && c.split_k > 1),
        Box::new(|c| c.epilogue == Staged && passes(c) > 1),
        Box::new(|c| c.epilogue == Staged && Some(c.block_m * c.block_n) == largest),
        Box::new(|c| c.epilogue == Staged && c.block_k == first_k),
        Box::new(|c| c.epilogue == Staged && c.block_k != first_k),
        Box::new(|c| c.warps_m * c.warps_n == 1),
        Box::new(|c| c.block_n / c.warps_n == 16 && c.block_m / c.warps_m == 64),
    ];
    let mut out: Vec<ConvConfig> = Vec::new();
    for p in &predicates {
        if let Some(c) = space.iter().find(|c| p(c)) {
            if !out.contains(&ConvConfig::Mma(*c)) {
                out.push(ConvConfig::Mma(*c));
            }
        }
    }
    out
}

/// The first mma and the first wgmma config of `space` with `early_trigger`
/// on: no space holds it (`refine --candidates trigger` sets it), so it is
/// compiled here.
fn early_trigger_variants(space: &[ConvConfig]) -> Vec<ConvConfig> {
    let mma = space.iter().find_map(|c| match c {
        ConvConfig::Mma(m) => Some(ConvConfig::Mma(MmaConfig {
            early_trigger: true,
            ..*m
        })),
        _ => None,
    });
    let wgmma = space.iter().find_map(|c| match c {
        ConvConfig::Wgmma(w) => Some(ConvConfig::Wgmma(WgmmaConfig {
            early_trigger: true,
            ..*w
        })),
        _ => None,
    });
    mma.into_iter().chain(wgmma).collect()
}

/// The first mma and the first wgmma config of `space` reducing as a
/// reduce-scatter (`split_reduce: spread`) at each split-K factor: the
/// region and the pairs each rank owns differ with the split and the tile,
/// so each one is compiled (and checked on the GPU, gpu_tests.rs).
pub(crate) fn spread_variants(space: &[ConvConfig]) -> Vec<ConvConfig> {
    let spread = |c: &ConvConfig| match c {
        ConvConfig::Mma(m) if m.split_reduce == SplitReduce::Spread => Some(("mma", m.split_k)),
        ConvConfig::Wgmma(w) if w.split_reduce == SplitReduce::Spread => Some(("wgmma", w.split_k)),
        _ => None,
    };
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for c in space {
        if let Some(key) = spread(c) {
            if !seen.contains(&key) {
                seen.push(key);
                out.push(*c);
            }
        }
    }
    out
}

fn conv_instances(precision: Precision, per_case: usize) -> Vec<Instance> {
    let mut out = Vec::new();
    for (label, graph) in conv_cases(precision)
        .into_iter()
        .chain(pooled_cases(precision))
    {
        let shape = conv::conv_shape(&graph, NodeId(0)).unwrap();
        let space = ConvConfig::search_space(&shape);
        assert!(!space.is_empty(), "{label}: empty search space");
        // Sample each template's part of the space.
        let mma: Vec<ConvConfig> = space
            .iter()
            .filter(|c| matches!(c, ConvConfig::Mma(_)))
            .copied()
            .collect();
        let wgmma: Vec<ConvConfig> = space
            .iter()
            .filter(|c| matches!(c, ConvConfig::Wgmma(w) if !w.swap_ab))
            .copied()
            .collect();
        let swapped: Vec<ConvConfig> = space
            .iter()
            .filter(|c| matches!(c, ConvConfig::Wgmma(w) if w.swap_ab))
            .copied()
            .collect();
        let other: Vec<ConvConfig> = space
            .iter()
            .filter(|c| !matches!(c, ConvConfig::Mma(_) | ConvConfig::Wgmma(_)))
            .copied()
            .collect();
        let mut configs = sample(&mma, per_case);
        configs.extend(sample(&wgmma, per_case));
        configs.extend(sample(&swapped, per_case));
        configs.extend(sample(&other, per_case));
        configs.extend(mma_coverage(&shape));
        configs.extend(early_trigger_variants(&space));
        configs.extend(spread_variants(&space));
        configs.push(ConvConfig::default_for(&shape));
        for (i, c) in configs.iter().enumerate() {
            if let Err(e) = c.validate(&shape) {
                panic!("{label}: sweep config {i} {c:?} is not in its space: {e}");
            }
            out.push(node_instance(
                &graph,
                Some(c),
                &format!("{label}{i}_{}", precision),
            ));
        }
    }
    out
}

/// The sweep's configs are all in their spaces: checked without nvcc, so
/// a sampler that strays (a variant a shape's space forbids) fails on every
/// machine, not only where the compile sweep runs.
#[test]
fn conv_sweep_configs_are_in_their_spaces() {
    for precision in Precision::ALL {
        assert!(!conv_instances(precision, 8).is_empty());
    }
}

#[test]
fn conv_templates_compile_without_spills() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    let mut instances = Vec::new();
    for precision in Precision::ALL {
        instances.extend(conv_instances(precision, 8));
    }
    let reports = compile_all(&nvcc, "conv_sweep", instances);
    let max = reports.iter().map(|r| r.registers).max().unwrap_or(0);
    println!(
        "{} conv kernels compiled, max {max} registers, no spills",
        reports.len()
    );
}

pub(crate) fn dense_cases(precision: Precision) -> Vec<(String, Graph)> {
    let s = precision.storage();
    let mut out = Vec::new();
    let gelu = |tanh| Activation::Gelu { tanh };
    for (m, n, k, residual, activation) in [
        (1, 1000, 2048, false, Activation::None),
        (4, 37, 100, true, Activation::Relu),
        (8, 96, 64, false, gelu(true)),
        (16, 64, 256, false, gelu(false)),
        (40, 130, 96, true, Activation::Relu),
        // A ViT-like MLP row count: the tiled templates, ragged M.
        (197, 72, 48, true, gelu(false)),
    ] {
        let epilogue = Epilogue {
            bias: true,
            residual,
            activation,
        };
        let mut inputs = vec![
            In::act(&[m, k], s, Layout::RowMajor),
            In::constant(&[n, k], s, Layout::RowMajor, 3),
            In::constant(&[n], DType::F32, Layout::RowMajor, 4),
        ];
        if residual {
            inputs.push(In::act(&[m, n], s, Layout::RowMajor));
        }
        let graph = one_op(
            Op::Dense { epilogue },
            &inputs,
            DType::F32,
            Layout::RowMajor,
            precision,
        )
        .0;
        out.push((format!("dense{m}x{n}x{k}"), graph));
    }
    out
}

#[test]
fn dense_templates_compile_without_spills() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    let mut instances = Vec::new();
    for precision in Precision::ALL {
        for (label, graph) in dense_cases(precision) {
            let shape = dense::dense_shape(&graph, NodeId(0)).unwrap();
            let space = DenseConfig::search_space(&shape);
            let gemv: Vec<DenseConfig> = space
                .iter()
                .filter(|c| matches!(c, DenseConfig::Gemv(_)))
                .copied()
                .collect();
            let tiled: Vec<DenseConfig> = space
                .iter()
                .filter(|c| !matches!(c, DenseConfig::Gemv(_)))
                .copied()
                .collect();
            let mut configs = sample(&gemv, 4);
            configs.extend(sample(&tiled, 4));
            configs.push(DenseConfig::default_for(&shape));
            for (i, c) in configs.iter().enumerate() {
                instances.push(node_instance(
                    &graph,
                    Some(c),
                    &format!("{label}_{i}_{precision}"),
                ));
            }
        }
    }
    compile_all(&nvcc, "dense_sweep", instances);
}

/// One-op graphs of every memory-bound template, for one storage type.
pub(crate) fn misc_cases(precision: Precision) -> Vec<(String, Graph)> {
    let s = precision.storage();
    let (cl, rm) = (Layout::ChannelsLast, Layout::RowMajor);
    let f32 = DType::F32;
    let pool = |k: usize, st: usize, pads: [usize; 4], d: usize, ceil: bool| Pool2d {
        kernel: [k, k],
        strides: [st, st],
        pads,
        dilations: [d, d],
        ceil_mode: ceil,
    };
    let mut out: Vec<(String, Graph)> = Vec::new();
    let mut add = |label: &str, op: Op, inputs: Vec<In>, dtype: DType, layout: Layout| {
        out.push((
            label.to_string(),
            one_op(op, &inputs, dtype, layout, precision).0,
        ));
    };
    for (i, (p, layout)) in [
        (pool(3, 2, [1; 4], 1, false), cl),
        (pool(3, 2, [0, 0, 1, 1], 1, true), rm),
        (pool(2, 1, [1, 0, 1, 0], 2, false), cl),
    ]
    .into_iter()
    .enumerate()
    {
        let x = In::act(&[2, 24, 11, 10], s, layout);
        add(
            &format!("maxpool{i}"),
            Op::MaxPool(p),
            vec![x.clone()],
            s,
            layout,
        );
        for include in [false, true] {
            add(
                &format!("avgpool{i}{include}"),
                Op::AveragePool {
                    pool: p,
                    count_include_pad: include,
                },
                vec![x.clone()],
                s,
                layout,
            );
        }
    }
    add(
        "gap_nhwc",
        Op::GlobalAveragePool,
        vec![In::act(&[2, 64, 7, 7], s, cl)],
        s,
        cl,
    );
    add(
        "gmp_nchw",
        Op::GlobalMaxPool,
        vec![In::act(&[2, 6, 5, 3], s, rm)],
        f32,
        rm,
    );
    add(
        "gap_rank3",
        Op::GlobalAveragePool,
        vec![In::act(&[2, 6, 5], s, rm)],
        s,
        rm,
    );
    add(
        "reducemean",
        Op::ReduceMean {
            axes: vec![0, 2],
            keepdims: false,
        },
        vec![In::act(&[3, 4, 5], s, rm)],
        s,
        rm,
    );
    add(
        "softmax",
        Op::Softmax { axis: 1 },
        vec![In::act(&[2, 7, 3], s, rm)],
        f32,
        rm,
    );
    add(
        "convert_in",
        Op::Convert,
        vec![In::act(&[2, 3, 9, 8], f32, rm)],
        s,
        cl,
    );
    add(
        "convert_out",
        Op::Convert,
        vec![In::act(&[2, 5, 4, 3], s, cl)],
        f32,
        rm,
    );
    add(
        "convert_dtype",
        Op::Convert,
        vec![In::act(&[4, 40], s, rm)],
        f32,
        rm,
    );
    add(
        "flatten_copy",
        Op::Flatten { axis: 1 },
        vec![In::act(&[2, 3, 4, 5], s, rm)],
        s,
        rm,
    );
    for (name, u) in [
        ("relu", UnaryOp::Relu),
        ("sigmoid", UnaryOp::Sigmoid),
        (
            "clip",
            UnaryOp::Clip {
                min: -0.25,
                max: 0.5,
            },
        ),
    ] {
        add(
            name,
            Op::Unary(u),
            vec![In::act(&[2, 16, 3, 3], s, cl)],
            s,
            cl,
        );
    }
    for (name, b) in [
        ("add", BinaryOp::Add),
        ("sub", BinaryOp::Sub),
        ("mul", BinaryOp::Mul),
        ("div", BinaryOp::Div),
    ] {
        add(
            name,
            Op::Binary(b),
            vec![
                In::act(&[2, 3, 4], s, rm),
                In::constant(&[3, 1], f32, rm, 5),
            ],
            s,
            rm,
        );
    }
    // The rest of the elementwise table (`unary_code`, `binary_code`). A
    // positive operand (`|c| + 0.5`) where the op's domain needs one.
    let positive = |shape: &[usize], seed: u64| {
        let mut c = In::constant(shape, f32, rm, seed);
        c.constant = c
            .constant
            .map(|v| v.iter().map(|x| x.abs() + 0.5).collect());
        c
    };
    let cast = crate::ir::CastTarget::F16;
    for (name, u) in [
        ("erf", UnaryOp::Erf),
        ("tanh", UnaryOp::Tanh),
        ("exp", UnaryOp::Exp),
        ("recip", UnaryOp::Reciprocal),
        ("neg", UnaryOp::Neg),
        ("abs", UnaryOp::Abs),
        ("floor", UnaryOp::Floor),
        ("ceil", UnaryOp::Ceil),
        ("sin", UnaryOp::Sin),
        ("cos", UnaryOp::Cos),
        ("sign", UnaryOp::Sign),
        ("not", UnaryOp::Not),
        ("hardswish", UnaryOp::HardSwish),
        (
            "hardsigmoid",
            UnaryOp::HardSigmoid {
                alpha: 0.3,
                beta: 0.4,
            },
        ),
        ("softplus", UnaryOp::Softplus),
        ("softsign", UnaryOp::Softsign),
        ("mish", UnaryOp::Mish),
        ("elu", UnaryOp::Elu { alpha: 1.5 }),
        (
            "selu",
            UnaryOp::Selu {
                alpha: 1.7,
                gamma: 1.05,
            },
        ),
        ("leakyrelu", UnaryOp::LeakyRelu { alpha: 0.1 }),
        ("gelu", UnaryOp::Gelu { tanh: false }),
        ("gelu_tanh", UnaryOp::Gelu { tanh: true }),
        ("cast_f16", UnaryOp::Cast(cast)),
        ("cast_bf16", UnaryOp::Cast(crate::ir::CastTarget::BF16)),
        ("cast_int", UnaryOp::Cast(crate::ir::CastTarget::Int)),
        ("cast_bool", UnaryOp::Cast(crate::ir::CastTarget::Bool)),
    ] {
        add(
            name,
            Op::Unary(u),
            vec![In::act(&[2, 8, 3, 3], s, cl)],
            s,
            cl,
        );
    }
    for (name, u) in [("log", UnaryOp::Log), ("sqrt", UnaryOp::Sqrt)] {
        add(name, Op::Unary(u), vec![positive(&[4, 9], 7)], s, rm);
    }
    for (name, b) in [
        ("max", BinaryOp::Max),
        ("min", BinaryOp::Min),
        ("equal", BinaryOp::Equal),
        ("less", BinaryOp::Less),
        ("less_eq", BinaryOp::LessOrEqual),
        ("greater", BinaryOp::Greater),
        ("greater_eq", BinaryOp::GreaterOrEqual),
        ("and", BinaryOp::And),
        ("or", BinaryOp::Or),
        ("xor", BinaryOp::Xor),
        ("prelu", BinaryOp::PRelu),
    ] {
        add(
            name,
            Op::Binary(b),
            vec![
                In::act(&[2, 3, 4], s, rm),
                In::constant(&[3, 1], f32, rm, 5),
            ],
            s,
            rm,
        );
    }
    for (name, b) in [
        ("pow", BinaryOp::Pow),
        ("fmod", BinaryOp::Mod { fmod: true }),
        ("mod", BinaryOp::Mod { fmod: false }),
    ] {
        add(
            name,
            Op::Binary(b),
            vec![positive(&[2, 3, 4], 8), In::act(&[3, 1], s, rm)],
            s,
            rm,
        );
    }
    add(
        "sum3",
        Op::Sum,
        vec![
            In::act(&[2, 3], s, rm),
            In::constant(&[3], f32, rm, 6),
            In::act(&[2, 1], s, rm),
        ],
        s,
        rm,
    );
    let bn: Vec<In> = std::iter::once(In::act(&[2, 6, 3, 4], s, cl))
        .chain((0..4).map(|i| {
            let mut p = In::constant(&[6], f32, rm, 10 + i);
            if i == 3 {
                // variance: positive
                p.constant = p
                    .constant
                    .map(|v| v.iter().map(|x| x.abs() + 0.5).collect());
            }
            p
        }))
        .collect();
    add("batchnorm", Op::BatchNorm { epsilon: 1e-5 }, bn, s, cl);
    add(
        "concat",
        Op::Concat { axis: 1 },
        vec![
            In::act(&[2, 3, 4], s, rm),
            In::act(&[2, 1, 4], s, rm),
            In::constant(&[2, 2, 4], f32, rm, 7),
        ],
        s,
        rm,
    );
    for (ta, tb) in [(false, false), (true, true)] {
        let a = if ta { [12, 5] } else { [5, 12] };
        let b = if tb { [7, 12] } else { [12, 7] };
        add(
            &format!("gemm{ta}{tb}"),
            Op::Gemm {
                alpha: 0.5,
                beta: -1.5,
                trans_a: ta,
                trans_b: tb,
            },
            vec![
                In::act(&a, s, rm),
                In::act(&b, s, rm),
                In::constant(&[7], f32, rm, 8),
            ],
            f32,
            rm,
        );
    }
    add(
        "matmul",
        Op::MatMul,
        vec![In::act(&[2, 1, 5, 12], s, rm), In::act(&[3, 12, 6], s, rm)],
        s,
        rm,
    );
    out
}

#[test]
fn memory_bound_templates_compile_without_spills() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    let mut instances = Vec::new();
    for precision in [Precision::Fp32, Precision::Fp16, Precision::Bf16] {
        for (label, graph) in misc_cases(precision) {
            let label = format!("{label}_{precision}");
            instances.push(node_instance::<LinearConfig>(&graph, None, &label));
            if matches!(graph.nodes[0].op, Op::Gemm { .. } | Op::MatMul) {
                let shape = matmul::matmul_shape(&graph, NodeId(0)).unwrap();
                for (i, c) in MatmulConfig::search_space(&shape).iter().enumerate() {
                    instances.push(node_instance(&graph, Some(c), &format!("{label}_{i}")));
                }
            } else {
                // The first and last config of the template's space.
                let space = candidate::task_candidates(&graph, NodeId(0)).unwrap();
                for (i, c) in sample(&space.configs, 2).iter().enumerate() {
                    instances.push(node_instance(&graph, Some(c), &format!("{label}_{i}")));
                }
            }
        }
    }
    compile_all(&nvcc, "misc_sweep", instances);
}

/// Calibration aid for the register estimates: ptxas's registers and spills
/// against `regs_estimate` over the SIMT (fp32) and MMA (fp16, tf32) spaces
/// of the first three conv cases with split-K ≤ 2 (every split-K factor for
/// MMA configs estimated at 200 registers or more), then per precision the
/// largest under-estimate. Slow (a few thousand kernels); set
/// `AOTUNE_CALIB_PRECISIONS=fp16,tf32` to run only some precisions.
#[test]
#[ignore]
fn register_estimates_vs_ptxas() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    // `AOTUNE_CALIB_KERNELS=wgmma` (or `mma`, `simt`) calibrates one template.
    let only = std::env::var("AOTUNE_CALIB_KERNELS").ok();
    let wanted = |kernel: &str| only.as_deref().is_none_or(|k| k == kernel);
    let precisions = match std::env::var("AOTUNE_CALIB_PRECISIONS") {
        Ok(list) => list.split(',').filter_map(|p| p.parse().ok()).collect(),
        Err(_) => Precision::ALL.to_vec(),
    };
    for precision in precisions {
        let cases = conv_cases(precision);
        let mut instances = Vec::new();
        let mut estimates = std::collections::HashMap::new();
        for (label, graph) in cases.iter().take(3) {
            let shape = conv::conv_shape(graph, NodeId(0)).unwrap();
            for (i, c) in ConvConfig::search_space(&shape).iter().enumerate() {
                let est = match c {
                    ConvConfig::Simt(s)
                        if wanted("simt") && s.split_k <= 2 && precision == Precision::Fp32 =>
                    {
                        s.regs_estimate(&shape)
                    }
                    // Deeper split-K only near the register limit.
                    ConvConfig::Mma(m)
                        if wanted("mma") && (m.split_k <= 2 || m.regs_estimate(&shape) >= 200) =>
                    {
                        m.regs_estimate(&shape)
                    }
                    ConvConfig::Wgmma(w) if wanted("wgmma") && w.split_k <= 2 => {
                        w.regs_estimate(&shape)
                    }
                    _ => continue,
                };
                let inst = node_instance(graph, Some(c), &format!("{label}{i}_{precision}"));
                estimates.insert(inst.symbol.clone(), est);
                instances.push(inst);
            }
        }
        let all = compile_reports(&nvcc, &format!("calib_{precision}"), instances);
        let mut worst: Option<(i64, String)> = None;
        for r in all {
            if let Some(&est) = estimates.get(&r.name) {
                println!(
                    "{:<60} est {:>3} ptxas {:>3} spill {}",
                    r.name, est, r.registers, r.spill_stores
                );
                let under = i64::from(r.registers) - est as i64;
                if worst.as_ref().is_none_or(|(w, _)| under > *w) {
                    worst = Some((under, r.name.clone()));
                }
            }
        }
        println!(
            "{precision}: {} kernels, largest under-estimate {worst:?}",
            estimates.len()
        );
    }
}

/// One-op graphs of the input conversion (`to_nhwc`, plain and channel
/// padded; `space_to_depth`) and NHWC global pool templates, for one
/// storage type: the ResNet-50 shapes and odd ones (no 16-byte vector fits,
/// C not a multiple of the vector, a tile cut by the image's end; blocks
/// reaching past the image, 3×3 blocks, a channels-last 16-bit input).
pub(crate) fn stem_head_cases(precision: Precision) -> Vec<(String, Graph)> {
    let s = precision.storage();
    let (cl, rm) = (Layout::ChannelsLast, Layout::RowMajor);
    let f32 = DType::F32;
    let case = |label: &str, op: Op, shape: &[usize], in_dtype: DType, in_layout, out_dtype| {
        let x = In::act(shape, in_dtype, in_layout);
        let graph = one_op(op, &[x], out_dtype, cl, precision).0;
        (label.to_string(), graph)
    };
    let pad = |channels| Op::PadChannels { channels };
    let s2d = |block, [pad_top, pad_left]: [usize; 2], channels, [height, width]: [usize; 2]| {
        Op::SpaceToDepth {
            block,
            pad_top,
            pad_left,
            channels,
            height,
            width,
        }
    };
    vec![
        case(
            "s2d_stem",
            s2d(2, [3, 3], 16, [115, 115]),
            &[1, 3, 224, 224],
            f32,
            rm,
            s,
        ),
        case(
            "s2d_odd",
            s2d(2, [2, 1], 16, [6, 5]),
            &[2, 3, 9, 7],
            f32,
            rm,
            s,
        ),
        case(
            "s2d_c1",
            s2d(2, [1, 1], 8, [4, 4]),
            &[1, 1, 7, 7],
            f32,
            rm,
            s,
        ),
        case(
            "s2d_c5_b3",
            s2d(3, [3, 0], 48, [5, 3]),
            &[1, 5, 10, 8],
            f32,
            rm,
            s,
        ),
        case(
            "s2d_vec4",
            s2d(2, [0, 0], 12, [3, 3]),
            &[2, 3, 6, 6],
            f32,
            rm,
            s,
        ),
        case(
            "s2d_scalar",
            s2d(2, [1, 1], 13, [3, 3]),
            &[1, 3, 5, 5],
            f32,
            rm,
            s,
        ),
        case(
            "s2d_nhwc_in",
            s2d(2, [1, 1], 16, [4, 4]),
            &[1, 3, 8, 8],
            s,
            cl,
            s,
        ),
        case("pad_stem", pad(8), &[1, 3, 224, 224], f32, rm, s),
        case("pad_tail", pad(8), &[2, 3, 9, 8], f32, rm, s),
        case("pad_odd", pad(8), &[1, 3, 5, 3], f32, rm, s),
        case("pad_c5", pad(16), &[2, 5, 4, 4], s, rm, s),
        case("to_nhwc_odd", Op::Convert, &[2, 3, 7, 3], f32, rm, s),
        case("to_nhwc_wide", Op::Convert, &[1, 40, 6, 6], s, rm, s),
        case(
            "gpool_head",
            Op::GlobalAveragePool,
            &[2, 2048, 7, 7],
            s,
            cl,
            s,
        ),
        case(
            "gpool_odd",
            Op::GlobalAveragePool,
            &[3, 6, 5, 3],
            s,
            cl,
            f32,
        ),
        case("gmp_nhwc", Op::GlobalMaxPool, &[2, 24, 3, 3], s, cl, s),
    ]
}

/// The conversion and global-pool templates over a sample of their search
/// spaces plus the default, at f32, f16 and bf16.
#[test]
fn stem_and_head_templates_compile_without_spills() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    let mut instances = Vec::new();
    for precision in [Precision::Fp32, Precision::Fp16, Precision::Bf16] {
        for (label, graph) in stem_head_cases(precision) {
            let label = format!("{label}_{precision}");
            let space = candidate::task_candidates(&graph, NodeId(0)).unwrap();
            assert!(
                ["pad", "convert", "s2d", "gpool"].contains(&space.family.as_str()),
                "{label}: {} kernel",
                space.family
            );
            let mut configs = sample(&space.configs, 6);
            configs.push(space.configs[space.default].clone());
            for (i, c) in configs.iter().enumerate() {
                instances.push(node_instance(&graph, Some(c), &format!("{label}_{i}")));
            }
        }
    }
    compile_all(&nvcc, "stem_head_sweep", instances);
}
