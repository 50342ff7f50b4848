//! The TorchScript export's sequence-first attention block (torchvision's
//! ViT through `nn.MultiheadAttention`) loses both row-swapping Transposes,
//! its residual Add joins the output projection, and the result stays.

use super::super::{optimize, PassOptions};
use crate::ir::{BinaryOp, Graph, Op, ValueId};
use crate::reference::{rel_l2, run, RunOptions};
use crate::test_graphs::{op_counts, Builder};

const B: usize = 3;
const S: usize = 5;
const H: usize = 2;
const DH: usize = 8;
const E: usize = H * DH;

fn reshape(b: &mut Builder, x: ValueId, shape: &[usize]) -> ValueId {
    let op = Op::Reshape {
        shape: shape.iter().map(|&d| d as i64).collect(),
        allowzero: false,
    };
    b.op(op, &[x])
}

fn transpose(b: &mut Builder, x: ValueId, perm: &[usize]) -> ValueId {
    b.op(
        Op::Transpose {
            perm: perm.to_vec(),
        },
        &[x],
    )
}

fn linear(b: &mut Builder, name: &str, x: ValueId, k: usize, n: usize) -> ValueId {
    let w = b.random(&format!("{name}.w"), &[k, n], -0.3, 0.3);
    let bias = b.random(&format!("{name}.b"), &[n], -0.1, 0.1);
    let y = b.node(name, Op::MatMul, &[x, w]);
    b.op(Op::Binary(BinaryOp::Add), &[y, bias])
}

/// `x[B,S,E]` → sequence-first attention block → `+ x`, as the TorchScript
/// exporter writes it; `swap_back` false leaves the output sequence-first
/// (no second Transpose: nothing to rewrite).
fn legacy_block(swap_back: bool) -> (Graph, Vec<f32>) {
    let mut b = Builder::new();
    let x = b.input("x", &[B, S, E]);
    let input = b.data_for(x);
    let xt = transpose(&mut b, x, &[1, 0, 2]);
    let qkv = linear(&mut b, "in_proj", xt, E, 3 * E);
    let r = reshape(&mut b, qkv, &[S, B, 3, E]);
    let r = reshape(&mut b, r, &[1, S, B, 3, E]);
    let t = transpose(&mut b, r, &[3, 1, 2, 0, 4]);
    let stacked = reshape(&mut b, t, &[3, S, B, E]);
    let mut heads = Vec::new();
    for i in 0..3 {
        let op = Op::Gather {
            axis: 0,
            indices: vec![i],
            indices_shape: vec![],
        };
        let g = b.op(op, &[stacked]);
        let r = reshape(&mut b, g, &[S, B * H, DH]);
        let t = transpose(&mut b, r, &[1, 0, 2]);
        heads.push(reshape(&mut b, t, &[B, H, S, DH]));
    }
    let op = Op::Attention {
        scale: 0.35,
        causal: false,
        views: None,
    };
    let y = b.node("attention", op, &heads);
    let t = transpose(&mut b, y, &[2, 0, 1, 3]);
    let flat = reshape(&mut b, t, &[S * B, E]);
    let proj = linear(&mut b, "out_proj", flat, E, E);
    let seq_first = reshape(&mut b, proj, &[S, B, E]);
    let out = if swap_back {
        let back = transpose(&mut b, seq_first, &[1, 0, 2]);
        b.op(Op::Binary(BinaryOp::Add), &[back, x])
    } else {
        seq_first
    };
    b.output(out);
    (b.finish(), input)
}

fn optimized(before: &Graph, input: &[f32]) -> Graph {
    let mut after = before.clone();
    optimize(&mut after, &PassOptions::default()).unwrap();
    let opts = RunOptions::default();
    let want = run(before, &[input], &opts).unwrap();
    let got = run(&after, &[input], &opts).unwrap();
    let err = rel_l2(&got[0], &want[0]);
    assert!(err < 1e-6, "rel. L2 {err:e}");
    after
}

#[test]
fn a_sequence_first_block_runs_batch_first() {
    let (before, input) = legacy_block(true);
    let after = optimized(&before, &input);
    let counts = op_counts(&after);
    assert!(
        !counts
            .iter()
            .any(|(op, _)| matches!(*op, "Transpose" | "Gather" | "Add")),
        "{counts:?}"
    );
    let residual = after
        .nodes
        .iter()
        .any(|n| matches!(n.op, Op::Dense { epilogue, .. } if epilogue.residual && epilogue.bias));
    assert!(residual, "the residual Add joins the output projection");
    let views = after
        .nodes
        .iter()
        .find_map(|n| match &n.op {
            Op::Attention { views, .. } => views.clone(),
            _ => None,
        })
        .expect("attention views");
    // q of batch b, head h, token s at b·S·3E + s·3E + h·DH.
    assert_eq!(views.q.unwrap().strides, [S * 3 * E, DH, 3 * E, 1]);
    assert_eq!(views.out.unwrap().0.strides, [S * E, DH, E, 1]);
}

#[test]
fn a_block_that_stays_sequence_first_keeps_its_order() {
    let (before, input) = legacy_block(false);
    let after = optimized(&before, &input);
    let transposes = op_counts(&after)
        .iter()
        .filter(|(op, _)| *op == "Transpose")
        .map(|&(_, n)| n)
        .sum::<usize>();
    assert_eq!(transposes, 1, "the input Transpose stays");
}
