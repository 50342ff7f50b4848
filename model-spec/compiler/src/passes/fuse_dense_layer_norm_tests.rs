//! What [`fuse_dense_layer_norm`] folds, what it leaves, and that the
//! folded graph computes what the unfused one does (CPU reference).

use super::*;
use crate::ir::{Activation, Layout, UnaryOp};
use crate::reference::{rel_l2, run, RunOptions};
use crate::test_graphs::Builder;

const K: usize = 32;

/// How the test graph departs from ViT's pattern.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Variant {
    /// LayerNorm → Reshape view → two Denses (bias + GELU; residual, no
    /// bias), at fp16.
    Vit,
    /// The same at bf16.
    Bf16,
    /// The LayerNorm's output is also read by a Relu.
    OtherReader,
    /// The LayerNorm's output is also a graph output.
    GraphOutput,
    /// The graph is fp32.
    Fp32,
    /// 16 rows: fewer than `RowNorm::MIN_ROWS`.
    FewRows,
    /// γ is a graph input, not a constant.
    InputScale,
}

/// `x [1, M, K]` → LayerNorm → Reshape `[M, K]` → Dense `[M, 24]` (bias,
/// GELU) and Dense `[M, K]` (residual x), both graph outputs.
fn graph(variant: Variant) -> (Graph, Vec<Vec<f32>>) {
    let precision = match variant {
        Variant::Fp32 => Precision::Fp32,
        Variant::Bf16 => Precision::Bf16,
        _ => Precision::Fp16,
    };
    let mut b = Builder::with_precision(precision);
    let storage = precision.storage();
    let m = if variant == Variant::FewRows { 16 } else { 20 };
    let x = b.input("x", &[1, m, K]);
    let constant = |b: &mut Builder, name: &str, shape: &[usize], lo, hi, dtype: DType| {
        let n = shape.iter().product();
        let data = (0..n).map(|_| dtype.round(b.uniform(lo, hi))).collect();
        b.constant_as(name, shape, data, dtype, Layout::RowMajor)
    };
    let gamma = match variant {
        Variant::InputScale => b.input_as("gamma", &[K], DType::F32, Layout::RowMajor),
        _ => constant(&mut b, "gamma", &[K], 0.5, 1.5, DType::F32),
    };
    let beta = constant(&mut b, "beta", &[K], -0.5, 0.5, DType::F32);
    let ln = Op::LayerNorm {
        axis: 2,
        epsilon: 1e-6,
    };
    let y = b.node("norm", ln, &[x, gamma, beta]);
    let reshape = |shape: &[usize]| Op::Reshape {
        shape: shape.iter().map(|&d| d as i64).collect(),
        allowzero: false,
    };
    let y2 = b.node("y2d", reshape(&[m, K]), &[y]);
    let x2 = b.node("x2d", reshape(&[m, K]), &[x]);
    let w1 = constant(&mut b, "w1", &[24, K], -0.3, 0.3, storage);
    let b1 = constant(&mut b, "b1", &[24], -1.0, 1.0, DType::F32);
    let fc1 = Op::Dense {
        epilogue: Epilogue {
            bias: true,
            residual: false,
            activation: Activation::Gelu { tanh: false },
        },
        norm: None,
    };
    let d1 = b.node("fc1", fc1, &[y2, w1, b1]);
    let w2 = constant(&mut b, "w2", &[K, K], -0.3, 0.3, storage);
    let fc2 = Op::Dense {
        epilogue: Epilogue {
            residual: true,
            ..Epilogue::NONE
        },
        norm: None,
    };
    let d2 = b.node("fc2", fc2, &[y2, w2, x2]);
    b.output(d1);
    b.output(d2);
    match variant {
        Variant::OtherReader => {
            let relu = b.node("relu", Op::Unary(UnaryOp::Relu), &[y]);
            b.output(relu);
        }
        Variant::GraphOutput => b.output(y),
        _ => {}
    }
    let mut inputs = vec![b.data_for(x)];
    if variant == Variant::InputScale {
        inputs.push((0..K).map(|_| b.uniform(0.5, 1.5)).collect());
    }
    (b.finish(), inputs)
}

fn fuse(variant: Variant) -> (Graph, Graph, PassSummary, Vec<Vec<f32>>) {
    let (before, inputs) = graph(variant);
    let mut after = before.clone();
    let summary = fuse_dense_layer_norm(&mut after).expect("pass");
    (before, after, summary, inputs)
}

/// Rel. L2 of each output of the folded graph against the unfused one's.
fn folded_errors(before: &Graph, after: &Graph, inputs: &[Vec<f32>]) -> Vec<f64> {
    let inputs: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
    let opts = RunOptions::default();
    let want = run(before, &inputs, &opts).unwrap();
    let got = run(after, &inputs, &opts).unwrap();
    got.iter().zip(&want).map(|(g, w)| rel_l2(g, w)).collect()
}

fn constant_data(graph: &Graph, v: ValueId) -> Vec<f32> {
    graph.value(v).constant_data().unwrap().to_vec()
}

#[test]
fn vit_pattern_folds_into_both_denses_and_computes_the_same() {
    for variant in [Variant::Vit, Variant::Bf16] {
        let (before, after, summary, inputs) = fuse(variant);
        assert_eq!((summary.count(FOLDED), summary.count(DENSE)), (1, 2));
        let kinds: Vec<&str> = after.nodes.iter().map(|n| n.op.kind()).collect();
        assert_eq!(
            kinds,
            ["Reshape", "Reshape", "Dense", "Dense"],
            "{variant:?}"
        );
        // The view now reads the LayerNorm's input.
        assert_eq!(after.nodes[0].inputs, after.inputs);
        let storage = before.precision.storage();
        for dense in &after.nodes[2..] {
            let Op::Dense {
                epilogue,
                norm: Some(norm),
            } = dense.op
            else {
                panic!("{} carries no norm", dense.name);
            };
            assert!(epilogue.bias);
            assert_eq!(norm.epsilon, 1e-6);
            // x, w', b', [residual], s: s last, f32, the sums of w' as stored.
            let want_inputs = 4 + epilogue.residual as usize;
            assert_eq!(dense.inputs.len(), want_inputs, "{}", dense.name);
            let w = after.value(dense.inputs[1]);
            assert_eq!(w.dtype, storage);
            let w_data = constant_data(&after, dense.inputs[1]);
            assert!(w_data.iter().all(|&v| storage.round(v) == v));
            let s = *dense.inputs.last().unwrap();
            assert_eq!(after.value(s).dtype, DType::F32);
            let sums: Vec<f32> = w_data
                .chunks(K)
                .map(|r| r.iter().map(|&v| f64::from(v)).sum::<f64>() as f32)
                .collect();
            assert_eq!(constant_data(&after, s), sums);
            assert_eq!(after.value(dense.inputs[2]).dtype, DType::F32);
        }
        // fc2 keeps its residual, before s.
        assert_eq!(after.nodes[3].inputs[3], after.nodes[1].output);
        // The unfused graph rounds the normalized rows to the storage type.
        let bar = if variant == Variant::Bf16 {
            1.2e-2
        } else {
            1.5e-3
        };
        for err in folded_errors(&before, &after, &inputs) {
            assert!(err > 0.0 && err < bar, "{variant:?}: rel err {err}");
        }
    }
}

#[test]
fn other_patterns_are_left_alone() {
    for variant in [
        Variant::OtherReader,
        Variant::GraphOutput,
        Variant::Fp32,
        Variant::FewRows,
        Variant::InputScale,
    ] {
        let (before, after, summary, _) = fuse(variant);
        assert!(summary.is_noop(), "{variant:?}: {summary}");
        assert_eq!(before, after, "{variant:?}");
    }
}

/// Through `optimize`, the pass runs only when asked, after the weights
/// took their storage type.
#[test]
fn optimize_folds_only_when_asked() {
    let (before, _) = graph(Variant::Vit);
    for fuse_dense_norm in [false, true] {
        let mut g = before.clone();
        let options = super::super::PassOptions {
            precision: Precision::Fp16,
            fuse_dense_norm,
            ..Default::default()
        };
        let report = super::super::optimize(&mut g, &options).unwrap();
        let folded = report.count(PASS, FOLDED);
        let normed = g
            .nodes
            .iter()
            .filter(|n| matches!(n.op, Op::Dense { norm: Some(_), .. }))
            .count();
        assert_eq!((folded, normed), (fuse_dense_norm as usize, 2 * folded));
    }
}
