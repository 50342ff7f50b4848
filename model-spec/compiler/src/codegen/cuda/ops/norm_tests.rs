//! nvcc sweep of the reduction and normalization kernels (`reduce.cu`,
//! `rows.cu`): one-op graphs of every `ReduceKind`, the softmax family,
//! LayerNorm, GroupNorm, LpNorm and MeanVarianceNorm, over rows (warp,
//! CTA, streamed) and strided slices, at fp32, fp16 and bf16, each with its
//! default config and a sample of the `LinearConfig` space (1024-thread
//! blocks included), compiled for sm_90a without register spills. Skips
//! without nvcc.

use crate::codegen::cuda::config::{KernelConfig, LinearConfig, LinearShape};
use crate::codegen::cuda::test_support::{compile_all, node_instance, nvcc, sample};
use crate::ir::{DType, Graph, Layout, Op, Precision, ReduceKind};
use crate::test_graphs::{one_op, In};

/// One-op graphs of every reduction and normalization kernel shape.
pub(crate) fn norm_cases(precision: Precision) -> Vec<(String, Graph)> {
    let s = precision.storage();
    let rm = Layout::RowMajor;
    let act = |shape: &[usize]| In::act(shape, s, rm);
    let constant = |shape: &[usize], seed| In::constant(shape, DType::F32, rm, seed);
    let mut out = Vec::new();
    let mut add = |label: String, op: Op, inputs: Vec<In>| {
        out.push((label, one_op(op, &inputs, s, rm, precision).0));
    };
    let ln = |axis, epsilon| Op::LayerNorm { axis, epsilon };
    add(
        "ln_vit".into(),
        ln(2, 1e-6),
        vec![
            act(&[2, 197, 768]),
            constant(&[768], 1),
            constant(&[768], 2),
        ],
    );
    add(
        "ln_convnext".into(),
        ln(3, 1e-6),
        vec![act(&[2, 7, 7, 768]), constant(&[768], 3)],
    );
    add(
        "ln_swin".into(),
        ln(2, 1e-5),
        vec![act(&[3, 7, 96]), constant(&[96], 13), constant(&[96], 14)],
    );
    add(
        "ln_odd".into(),
        ln(1, 1e-5),
        vec![act(&[3, 5, 33]), constant(&[5, 33], 4), constant(&[33], 5)],
    );
    add(
        "ln_4096".into(),
        ln(1, 1e-5),
        vec![act(&[3, 4096]), constant(&[4096], 6), constant(&[4096], 7)],
    );
    add(
        "ln_stream".into(),
        ln(2, 1e-5),
        vec![act(&[1, 2, 1 << 16]), constant(&[1 << 16], 8)],
    );
    add(
        "ln_short".into(),
        ln(2, 1e-5),
        vec![act(&[3, 4, 5]), constant(&[5], 9), constant(&[1], 10)],
    );
    let kinds = [
        ReduceKind::Sum,
        ReduceKind::Max,
        ReduceKind::Min,
        ReduceKind::Prod,
        ReduceKind::L1,
        ReduceKind::L2,
        ReduceKind::SumSquare,
        ReduceKind::LogSum,
        ReduceKind::LogSumExp,
    ];
    for kind in kinds {
        for axes in [vec![2], vec![1], vec![0, 2], vec![1, 2]] {
            let op = Op::Reduce {
                kind,
                axes: axes.clone(),
                keepdims: axes.len() == 1,
            };
            add(format!("{kind:?}{axes:?}"), op, vec![act(&[2, 5, 96])]);
        }
    }
    add(
        "mean_rows".into(),
        Op::ReduceMean {
            axes: vec![2],
            keepdims: true,
        },
        vec![act(&[2, 3, 5000])],
    );
    add(
        "gmp_rows".into(),
        Op::GlobalMaxPool,
        vec![act(&[2, 6, 8, 8])],
    );
    for axis in [1, 2] {
        add(
            format!("softmax{axis}"),
            Op::Softmax { axis },
            vec![act(&[2, 5, 96])],
        );
        add(
            format!("logsoftmax{axis}"),
            Op::LogSoftmax { axis },
            vec![act(&[2, 5, 96])],
        );
        add(
            format!("hardmax{axis}"),
            Op::Hardmax { axis },
            vec![act(&[2, 5, 96])],
        );
        for p in [1, 2] {
            add(
                format!("lp{p}_{axis}"),
                Op::LpNorm { axis, p },
                vec![act(&[2, 5, 96])],
            );
        }
    }
    add(
        "hardmax_long".into(),
        Op::Hardmax { axis: 1 },
        vec![act(&[2, 3000])],
    );
    for (groups, per) in [(1, 8), (4, 8), (4, 4), (8, 8)] {
        add(
            format!("gn{groups}_{per}"),
            Op::GroupNorm {
                groups,
                epsilon: 1e-5,
            },
            vec![
                act(&[2, 8, 6, 6]),
                constant(&[per], 11),
                constant(&[per], 12),
            ],
        );
    }
    for axes in [vec![0, 2, 3], vec![2, 3]] {
        add(
            format!("mvn{axes:?}"),
            Op::MeanVarianceNorm { axes },
            vec![act(&[2, 3, 8, 8])],
        );
    }
    out
}

/// A sample of the `LinearConfig` space and a 1024-thread block.
fn sweep_configs() -> Vec<LinearConfig> {
    let mut configs = sample(&LinearConfig::search_space(&LinearShape { items: 1 }), 3);
    configs.push(LinearConfig {
        block: 1024,
        per_thread: 1,
    });
    configs
}

#[test]
fn norm_kernels_compile_without_spills() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    let mut instances = Vec::new();
    for precision in [Precision::Fp32, Precision::Fp16, Precision::Bf16] {
        for (label, graph) in norm_cases(precision) {
            let label: String = format!("{label}_{precision}")
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            instances.push(node_instance::<LinearConfig>(&graph, None, &label));
            for (i, c) in sweep_configs().iter().enumerate() {
                instances.push(node_instance(&graph, Some(c), &format!("{label}_{i}")));
            }
        }
    }
    let reports = compile_all(&nvcc, "norm_sweep", instances);
    assert!(!reports.is_empty());
}

/// Writes the sweep's kernels to `$AOTUNE_NORM_SWEEP_CU` (debugging aid).
#[test]
#[ignore]
fn write_norm_sweep_source() {
    let Some(path) = std::env::var_os("AOTUNE_NORM_SWEEP_CU") else {
        return;
    };
    let mut rendered = Vec::new();
    for precision in [Precision::Fp32, Precision::Fp16, Precision::Bf16] {
        for (label, graph) in norm_cases(precision) {
            let label: String = format!("{label}_{precision}")
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            for (i, c) in sweep_configs().iter().enumerate() {
                let i = node_instance(&graph, Some(c), &format!("{label}_{i}"));
                rendered.push((i.clone(), i.symbol.clone()));
            }
        }
    }
    std::fs::write(path, crate::codegen::cuda::assemble::assemble(&rendered)).unwrap();
}
