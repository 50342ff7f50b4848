//! GELU and LayerNorm recognition on the decomposed forms exporters write:
//! each is found in every operand order, replaced by one node, and the
//! graph computes the same as before.

use super::{fuse_gelu, fuse_layer_norm};
use crate::ir::{BinaryOp, Graph, Op, UnaryOp};
use crate::reference::{rel_l2, run, RunOptions};
use crate::test_graphs::{op_counts, Builder};

fn same_result(before: &Graph, after: &Graph, input: &[f32]) {
    let opts = RunOptions::default();
    let want = run(before, &[input], &opts).unwrap();
    let got = run(after, &[input], &opts).unwrap();
    assert!(rel_l2(&got[0], &want[0]) < 1e-6);
}

/// `x·0.5·(1+erf(x/√2))`, grouped as `order` says.
fn gelu_graph(order: usize, div: bool) -> (Graph, Vec<f32>) {
    let mut b = Builder::new();
    let x = b.input("x", &[2, 5]);
    let input = b.data_for(x);
    let scaled = if div {
        let c = b.constant("sqrt2", &[], vec![std::f32::consts::SQRT_2]);
        b.node("div", Op::Binary(BinaryOp::Div), &[x, c])
    } else {
        let c = b.constant("inv_sqrt2", &[1], vec![std::f32::consts::FRAC_1_SQRT_2]);
        b.node("mul_s", Op::Binary(BinaryOp::Mul), &[c, x])
    };
    let e = b.node("erf", Op::Unary(UnaryOp::Erf), &[scaled]);
    let one = b.constant("one", &[], vec![1.0]);
    let t = b.node("add", Op::Binary(BinaryOp::Add), &[e, one]);
    let half = b.constant("half", &[], vec![0.5]);
    let mul = |b: &mut Builder, n: &str, a, c| b.node(n, Op::Binary(BinaryOp::Mul), &[a, c]);
    let y = match order {
        0 => {
            let m = mul(&mut b, "m1", x, t);
            mul(&mut b, "m2", m, half)
        }
        1 => {
            let m = mul(&mut b, "m1", t, half);
            mul(&mut b, "m2", m, x)
        }
        _ => {
            let m = mul(&mut b, "m1", x, half);
            mul(&mut b, "m2", m, t)
        }
    };
    b.output(y);
    (b.finish(), input)
}

#[test]
fn every_erf_gelu_grouping_becomes_one_gelu() {
    for order in 0..3 {
        for div in [true, false] {
            let (before, input) = gelu_graph(order, div);
            let mut after = before.clone();
            let summary = fuse_gelu(&mut after).unwrap();
            assert_eq!(summary.count("GELU fused"), 1, "order {order} div {div}");
            assert_eq!(op_counts(&after), [("Gelu", 1)], "order {order} div {div}");
            same_result(&before, &after, &input);
        }
    }
}

#[test]
fn a_gelu_whose_inside_is_read_elsewhere_is_kept() {
    let (mut graph, _) = gelu_graph(0, true);
    // Expose erf's output: the chain can no longer go.
    let erf = graph
        .nodes
        .iter()
        .find(|n| n.op == Op::Unary(UnaryOp::Erf))
        .unwrap()
        .output;
    graph.outputs.push(erf);
    let summary = fuse_gelu(&mut graph).unwrap();
    assert_eq!(summary.count("GELU fused"), 0);
}

#[test]
fn a_decomposed_layer_norm_becomes_one_layer_norm() {
    for (square_by_pow, affine) in [(true, true), (false, true), (true, false)] {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 8]);
        let input = b.data_for(x);
        let mean = |b: &mut Builder, n: &str, v| {
            b.node(
                n,
                Op::ReduceMean {
                    axes: vec![2],
                    keepdims: true,
                },
                &[v],
            )
        };
        let m = mean(&mut b, "mean", x);
        let d = b.node("sub", Op::Binary(BinaryOp::Sub), &[x, m]);
        let sq = if square_by_pow {
            let two = b.constant("two", &[], vec![2.0]);
            b.node("pow", Op::Binary(BinaryOp::Pow), &[d, two])
        } else {
            b.node("sq", Op::Binary(BinaryOp::Mul), &[d, d])
        };
        let v = mean(&mut b, "var", sq);
        let eps = b.constant("eps", &[], vec![1e-6]);
        let ve = b.node("add_eps", Op::Binary(BinaryOp::Add), &[v, eps]);
        let s = b.node("sqrt", Op::Unary(UnaryOp::Sqrt), &[ve]);
        let mut y = b.node("div", Op::Binary(BinaryOp::Div), &[d, s]);
        if affine {
            let gamma = b.random("gamma", &[8], 0.5, 1.5);
            let beta = b.random("beta", &[8], -0.5, 0.5);
            y = b.node("scale", Op::Binary(BinaryOp::Mul), &[y, gamma]);
            y = b.node("shift", Op::Binary(BinaryOp::Add), &[y, beta]);
        }
        b.output(y);
        let before = b.finish();
        let mut after = before.clone();
        let summary = fuse_layer_norm(&mut after).unwrap();
        assert_eq!(
            summary.count("LayerNorm fused"),
            1,
            "pow {square_by_pow} affine {affine}"
        );
        assert_eq!(op_counts(&after), [("LayerNormalization", 1)]);
        assert!(matches!(after.nodes[0].op, Op::LayerNorm { axis: 2, epsilon } if epsilon == 1e-6));
        same_result(&before, &after, &input);
    }
}

/// Decomposed attention over `x` (q = x, k = −x, v = sigmoid(x)), in the
/// spelling `form` names: 0 the dynamo exporter's (√scale on q and on kᵀ),
/// 1 the TorchScript exporter's (Div after the product, an additive mask),
/// 2 a kᵀ that is no Transpose (one is inserted).
fn attention_graph(form: usize, shape: &[usize]) -> (Graph, Vec<f32>) {
    let mut b = Builder::new();
    let x = b.input("x", shape);
    let input = b.data_for(x);
    let rank = shape.len();
    let d = shape[rank - 1];
    let mut swap: Vec<usize> = (0..rank).collect();
    swap.swap(rank - 2, rank - 1);
    let k = b.node("k", Op::Unary(UnaryOp::Neg), &[x]);
    let v = b.node("v", Op::Unary(UnaryOp::Sigmoid), &[x]);
    let transpose = Op::Transpose { perm: swap };
    let scores = match form {
        0 => {
            let s = b.constant("s", &[], vec![(d as f32).powf(-0.25)]);
            let q = b.node("q_s", Op::Binary(BinaryOp::Mul), &[x, s]);
            let kt = b.node("kt", transpose, &[k]);
            let kt = b.node("kt_s", Op::Binary(BinaryOp::Mul), &[kt, s]);
            b.node("qk", Op::MatMul, &[q, kt])
        }
        1 => {
            let kt = b.node("kt", transpose, &[k]);
            let qk = b.node("qk", Op::MatMul, &[x, kt]);
            let sqrt_d = b.constant("sqrt_d", &[], vec![(d as f32).sqrt()]);
            let scaled = b.node("div", Op::Binary(BinaryOp::Div), &[qk, sqrt_d]);
            let s = shape[rank - 2];
            let mask = b.constant(
                "mask",
                &[s, s],
                (0..s * s).map(|i| -((i % 3) as f32)).collect(),
            );
            b.node("masked", Op::Binary(BinaryOp::Add), &[scaled, mask])
        }
        _ => {
            // kᵀ behind a Neg: no Transpose to absorb.
            let kt = b.node("kt", transpose, &[x]);
            let kt = b.node("kt_neg", Op::Unary(UnaryOp::Neg), &[kt]);
            b.node("qk", Op::MatMul, &[x, kt])
        }
    };
    let p = b.node("softmax", Op::Softmax { axis: rank - 1 }, &[scores]);
    let y = b.node("pv", Op::MatMul, &[p, v]);
    b.output(y);
    (b.finish(), input)
}

#[test]
fn decomposed_attention_becomes_one_attention() {
    for (form, shape) in [
        (0, &[2, 3, 5, 8][..]),
        (1, &[2, 3, 5, 8]),
        (1, &[6, 5, 8]),
        (2, &[2, 3, 5, 8]),
    ] {
        let (before, input) = attention_graph(form, shape);
        let mut after = before.clone();
        let summary = super::fuse_attention(&mut after).unwrap();
        assert_eq!(summary.count("attention fused"), 1, "form {form} {shape:?}");
        let counts = op_counts(&after);
        assert!(
            counts.contains(&("Attention", 1)) && !counts.iter().any(|c| c.0 == "Softmax"),
            "form {form}: {counts:?}"
        );
        same_result(&before, &after, &input);
    }
}

#[test]
fn a_softmax_over_another_axis_is_no_attention() {
    let (mut graph, _) = attention_graph(1, &[2, 3, 5, 5]);
    for node in &mut graph.nodes {
        if let Op::Softmax { axis } = &mut node.op {
            *axis = 2;
        }
    }
    let summary = super::fuse_attention(&mut graph).unwrap();
    assert_eq!(summary.count("attention fused"), 0);
}
