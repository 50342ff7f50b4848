//! The one-op graphs the template sweeps run (`tests/nvcc_sweeps.rs`
//! through nvcc, `tests/gpu_templates.rs` on the GPU against the CPU
//! reference), per precision: convolutions (the stem, 3×3 with a residual,
//! 1×1 strided, ragged GELU, odd channels with dilation, projection
//! shortcuts, grouped and depthwise; with the global average pool in the
//! epilogue; depthwise with a LayerNorm over channels), dense layers, every memory-bound template, and the input
//! conversions and global pools; plus the tensor-core configs that cover
//! each path of `conv_mma.cu` and the split-K reduce-scatter variants.
//! Graphs come from the compiler's test-graph builder
//! (`aotune_compiler::test_graphs`, feature `test-support`).

use aotune_compiler::codegen::cuda::{
    ConvConfig, ConvShape, MmaConfig, MmaEpilogue, SplitReduce, WgmmaConfig,
};
use aotune_compiler::ir::{
    Activation, BinaryOp, ChannelNorm, Conv2d, DType, Epilogue, GlobalPool, Graph, Layout, Op,
    Pool2d, Precision, RowNorm, Shortcut, UnaryOp,
};
use aotune_compiler::test_graphs::{one_op, In};

fn dtypes(precision: Precision) -> DType {
    precision.storage()
}

/// A FusedConv test graph: NHWC input `[n, c, hw, hw]`, OHWI weight.
#[allow(clippy::too_many_arguments)]
pub fn conv_graph(
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
            norm: None,
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
pub fn shortcut_graph(
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
        norm: None,
    };
    one_op(op, &inputs, s, cl, precision).0
}

pub fn geometry(
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
pub fn conv_cases(precision: Precision) -> Vec<(String, Graph)> {
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
        // ConvNeXt's depthwise 7×7 on a 28×28 map: the vectorized path
        // (the widest strips of input columns).
        (
            "depthwise_7x7".into(),
            conv_graph(
                1,
                96,
                [28, 28],
                96,
                geometry(7, 1, [3; 4], 1, 96),
                relu,
                precision,
                s,
            ),
        ),
    ]
}

/// Depthwise convolutions with a LayerNorm over channels in their epilogue
/// (`norm: Some(..)`, the `conv_depthwise_norm` kernel): ConvNeXt-T's four
/// 7×7 layers with a bias, a 3×3 stride-2 one over 16 channels at batch 3,
/// 20 channels (5 lanes a pixel) 5×5 without a bias, 1024 channels at 7×7
/// (the most, 196 KiB of staged taps) and a 1×49 filter (the widest row
/// of input a thread holds).
pub fn norm_cases(precision: Precision) -> Vec<(String, Graph)> {
    let s = precision.storage();
    let cl = Layout::ChannelsLast;
    let case = |label: &str, n, c, hw: [usize; 2], conv: Conv2d, bias: bool| {
        let mut inputs = vec![
            In::act(&[n, c, hw[0], hw[1]], s, cl),
            In::constant(&[c, 1, conv.kernel[0], conv.kernel[1]], s, cl, 1),
        ];
        if bias {
            inputs.push(In::constant(&[c], DType::F32, Layout::RowMajor, 2));
        }
        inputs.push(In::constant(&[c], DType::F32, Layout::RowMajor, 3));
        inputs.push(In::constant(&[c], DType::F32, Layout::RowMajor, 4));
        let op = Op::FusedConv {
            conv,
            epilogue: Epilogue {
                bias,
                ..Epilogue::NONE
            },
            shortcut: None,
            pool: None,
            norm: Some(ChannelNorm { epsilon: 1e-6 }),
        };
        (label.to_string(), one_op(op, &inputs, s, cl, precision).0)
    };
    let seven = |c| geometry(7, 1, [3; 4], 1, c);
    vec![
        case("dwln56x96", 1, 96, [56, 56], seven(96), true),
        case("dwln28x192", 1, 192, [28, 28], seven(192), true),
        case("dwln14x384", 1, 384, [14, 14], seven(384), true),
        case("dwln7x768", 1, 768, [7, 7], seven(768), true),
        case(
            "dwln_s2",
            3,
            16,
            [9, 9],
            geometry(3, 2, [1; 4], 1, 16),
            true,
        ),
        case(
            "dwln_c20",
            1,
            20,
            [8, 8],
            geometry(5, 1, [2; 4], 1, 20),
            false,
        ),
        case("dwln_c1024", 1, 1024, [5, 5], seven(1024), true),
        case(
            "dwln_1x49",
            1,
            64,
            [3, 60],
            Conv2d {
                kernel: [1, 49],
                pads: [0, 24, 0, 24],
                ..geometry(1, 1, [0; 4], 1, 64)
            },
            true,
        ),
    ]
}

/// Convolutions with the global average pool in their epilogue
/// (`pool: Some(Avg)`), under the tensor-core precisions (strict fp32's
/// SIMT kernel has none): ResNet-50's last conv at batch 1 over fewer
/// channels (7×7 pixels, bias + residual + ReLU), and two images of 4×4
/// 3×3 outputs in one tile (M = 32, K = 72).
pub fn pooled_cases(precision: Precision) -> Vec<(String, Graph)> {
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
pub fn mma_coverage(shape: &ConvShape) -> Vec<ConvConfig> {
    use MmaEpilogue::{Direct, Staged};
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

/// Warp-specialized wgmma tiles for `shape` (64×64 with 3 stages, 128×128
/// with 4, 128×192 with 5, 128×256 with 4; ping-pong 64×128 with 3 stages,
/// 64×256 and 128×128 with 4) where they validate: the search
/// space holds them only for GEMMs of at least two persistent waves of
/// 128×256 tiles, so the sweep's smaller shapes get them here.
pub fn warp_specialized_variants(shape: &ConvShape) -> Vec<WgmmaConfig> {
    [
        (64, 64, 3, false),
        (128, 128, 4, false),
        (128, 192, 5, false),
        (128, 256, 4, false),
        (64, 128, 3, true),
        (64, 256, 4, true),
        (128, 128, 4, true),
    ]
    .into_iter()
    .map(|(block_m, block_n, stages, pingpong)| {
        WgmmaConfig::warp_specialized_tile(block_m, block_n, stages, pingpong)
    })
    .filter(|c| c.validate(shape).is_ok())
    .collect()
}

/// The first mma and the first wgmma config of `space` with `early_trigger`
/// on: no space holds it (`refine --candidates trigger` sets it), so it is
/// compiled here.
pub fn early_trigger_variants(space: &[ConvConfig]) -> Vec<ConvConfig> {
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
/// so each one is compiled (and checked on the GPU, `tests/gpu_templates.rs`).
pub fn spread_variants(space: &[ConvConfig]) -> Vec<ConvConfig> {
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

pub fn dense_cases(precision: Precision) -> Vec<(String, Graph)> {
    let s = precision.storage();
    let tensor_cores = matches!(precision, Precision::Fp16 | Precision::Bf16);
    let mut out = Vec::new();
    let gelu = |tanh| Activation::Gelu { tanh };
    for (m, n, k, residual, activation, norm) in [
        (1, 1000, 2048, false, Activation::None, false),
        (4, 37, 100, true, Activation::Relu, false),
        (8, 96, 64, false, gelu(true), false),
        (16, 64, 256, false, gelu(false), false),
        (40, 130, 96, true, Activation::Relu, false),
        // A ViT-like MLP row count: the tiled templates, ragged M.
        (197, 72, 48, true, gelu(false), false),
        // More tiles than the persistent grid's 132 CTAs, ragged in M, N
        // and K: warp-specialized CTAs walk several tiles and their ring
        // wraps inside and across tiles (`warp_specialized_variants`).
        (2200, 2120, 200, true, gelu(false), false),
        // Rows normalized inside the GEMM (`RowNorm`, the wgmma template,
        // f16/bf16 only): ragged M and N, a K that ends in a partial k
        // tile, a residual.
        (197, 96, 136, false, gelu(false), true),
        (300, 200, 768, true, Activation::None, true),
    ] {
        if norm && !tensor_cores {
            continue;
        }
        let epilogue = Epilogue {
            bias: true,
            residual,
            activation,
        };
        let seed = if norm { 5 } else { 3 };
        let mut inputs = vec![
            In::act(&[m, k], s, Layout::RowMajor),
            In::constant(&[n, k], s, Layout::RowMajor, seed),
            In::constant(&[n], DType::F32, Layout::RowMajor, seed + 1),
        ];
        if residual {
            inputs.push(In::act(&[m, n], s, Layout::RowMajor));
        }
        if norm {
            // The column sums, the norm's last input.
            inputs.push(In::constant(&[n], DType::F32, Layout::RowMajor, 7));
        }
        let norm = norm.then_some(RowNorm { epsilon: 1e-6 });
        let graph = one_op(
            Op::Dense { epilogue, norm },
            &inputs,
            DType::F32,
            Layout::RowMajor,
            precision,
        )
        .0;
        let kind = if norm.is_some() {
            "dense_norm"
        } else {
            "dense"
        };
        out.push((format!("{kind}{m}x{n}x{k}"), graph));
    }
    out
}

/// One-op graphs of every memory-bound template, for one storage type.
pub fn misc_cases(precision: Precision) -> Vec<(String, Graph)> {
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
    let cast = aotune_compiler::ir::CastTarget::F16;
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
        (
            "cast_bf16",
            UnaryOp::Cast(aotune_compiler::ir::CastTarget::BF16),
        ),
        (
            "cast_int",
            UnaryOp::Cast(aotune_compiler::ir::CastTarget::Int),
        ),
        (
            "cast_bool",
            UnaryOp::Cast(aotune_compiler::ir::CastTarget::Bool),
        ),
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

/// One-op graphs of the input conversion (`to_nhwc`, plain and channel
/// padded; `space_to_depth`) and NHWC global pool templates, for one
/// storage type: the ResNet-50 shapes and odd ones (no 16-byte vector fits,
/// C not a multiple of the vector, a tile cut by the image's end; blocks
/// reaching past the image, 3×3 blocks, a channels-last 16-bit input).
pub fn stem_head_cases(precision: Precision) -> Vec<(String, Graph)> {
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
