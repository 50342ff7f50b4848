//! The head-splitting chains of ViT (both exporters) and Swin read through
//! strided views: the copies go, the results stay the same.

use super::super::{attention_views, dce};
use crate::ir::{Graph, Op, ValueId};
use crate::reference::{rel_l2, run, RunOptions};
use crate::test_graphs::{op_counts, Builder};

const S: usize = 5;
const H: usize = 2;
const DH: usize = 8;
const E: usize = H * DH;

fn reshape(b: &mut Builder, name: &str, x: ValueId, shape: &[usize]) -> ValueId {
    let op = Op::Reshape {
        shape: shape.iter().map(|&d| d as i64).collect(),
        allowzero: false,
    };
    b.node(name, op, &[x])
}

fn transpose(b: &mut Builder, name: &str, x: ValueId, perm: &[usize]) -> ValueId {
    b.node(
        name,
        Op::Transpose {
            perm: perm.to_vec(),
        },
        &[x],
    )
}

fn attention(b: &mut Builder, q: ValueId, k: ValueId, v: ValueId) -> ValueId {
    let op = Op::Attention {
        scale: 0.3,
        causal: false,
        views: None,
    };
    b.node("attention", op, &[q, k, v])
}

/// torchvision's ViT block as the dynamo exporter writes it: qkv `[S,
/// 3E]` → heads by Reshape/Transpose/Gather, output back by Transpose.
fn vit_block() -> (Graph, Vec<f32>) {
    let mut b = Builder::new();
    let qkv = b.input("qkv", &[S, 3 * E]);
    let input = b.data_for(qkv);
    let r = reshape(&mut b, "r1", qkv, &[1, S, 1, 3, E]);
    let t = transpose(&mut b, "t1", r, &[3, 1, 2, 0, 4]);
    let stacked = reshape(&mut b, "squeeze", t, &[3, S, 1, E]);
    let mut heads = Vec::new();
    for i in 0..3 {
        let op = Op::Gather {
            axis: 0,
            indices: vec![i],
            indices_shape: vec![],
        };
        let g = b.node(&format!("gather{i}"), op, &[stacked]);
        let r = reshape(&mut b, &format!("split{i}"), g, &[S, H, DH]);
        let t = transpose(&mut b, &format!("heads{i}"), r, &[1, 0, 2]);
        heads.push(reshape(&mut b, &format!("batch{i}"), t, &[1, H, S, DH]));
    }
    let y = attention(&mut b, heads[0], heads[1], heads[2]);
    let t = transpose(&mut b, "merge", y, &[2, 0, 1, 3]);
    let out = reshape(&mut b, "out", t, &[S, E]);
    b.output(out);
    (b.finish(), input)
}

fn same_result(before: &Graph, after: &Graph, input: &[f32]) {
    let opts = RunOptions::default();
    let want = run(before, &[input], &opts).unwrap();
    let got = run(after, &[input], &opts).unwrap();
    let err = rel_l2(&got[0], &want[0]);
    assert!(err < 1e-6, "rel. L2 {err:e}");
}

#[test]
fn vit_heads_are_read_and_written_in_place() {
    let (before, input) = vit_block();
    let mut after = before.clone();
    let summary = attention_views(&mut after).unwrap();
    assert_eq!(
        summary.count("attention operand read through a strided view"),
        3
    );
    assert_eq!(
        summary.count("attention output written through a strided view"),
        1
    );
    dce(&mut after).unwrap();
    let counts = op_counts(&after);
    assert!(
        !counts
            .iter()
            .any(|(op, _)| matches!(*op, "Transpose" | "Gather")),
        "{counts:?}"
    );
    let att = after
        .nodes
        .iter()
        .find(|n| matches!(n.op, Op::Attention { .. }))
        .unwrap();
    let Op::Attention {
        views: Some(views), ..
    } = &att.op
    else {
        panic!("no views");
    };
    let (q, k, v) = (views.q.unwrap(), views.k.unwrap(), views.v.unwrap());
    assert_eq!((q.offset, k.offset, v.offset), (0, E, 2 * E));
    assert_eq!(q.strides, [0, DH, 3 * E, 1]);
    assert_eq!(views.out.as_ref().unwrap().0.strides, [0, DH, E, 1]);
    same_result(&before, &after, &input);
}

/// Swin's window attention: qkv `[W, S, 3E]` → `[W, S, 3, H, DH]` →
/// Transpose(2, 0, 3, 1, 4) → one Gather per operand; the output
/// Transpose(0, 2, 1, 3) back to `[W, S, H, DH]`.
#[test]
fn swin_window_heads_are_read_and_written_in_place() {
    let w = 3;
    let mut b = Builder::new();
    let qkv = b.input("qkv", &[w, S, 3 * E]);
    let input = b.data_for(qkv);
    let r = reshape(&mut b, "r", qkv, &[w, S, 3, H, DH]);
    let t = transpose(&mut b, "t", r, &[2, 0, 3, 1, 4]);
    let heads: Vec<ValueId> = (0..3)
        .map(|i| {
            let op = Op::Gather {
                axis: 0,
                indices: vec![i],
                indices_shape: vec![],
            };
            b.node(&format!("g{i}"), op, &[t])
        })
        .collect();
    let y = attention(&mut b, heads[0], heads[1], heads[2]);
    let t = transpose(&mut b, "merge", y, &[0, 2, 1, 3]);
    let out = reshape(&mut b, "out", t, &[w, S, E]);
    b.output(out);
    let before = b.finish();
    let mut after = before.clone();
    let summary = attention_views(&mut after).unwrap();
    assert_eq!(
        summary.count("attention operand read through a strided view"),
        3
    );
    assert_eq!(
        summary.count("attention output written through a strided view"),
        1
    );
    dce(&mut after).unwrap();
    assert_eq!(op_counts(&after), [("Attention", 1)]);
    same_result(&before, &after, &input);
}

/// A Transpose that moves the head axis (the kernel reads it contiguous)
/// stays a copy; so does a chain whose strides break 16-byte rows.
#[test]
fn views_the_kernel_reads_slowly_are_not_taken() {
    let mut b = Builder::new();
    let x = b.input("x", &[1, H, DH, S]);
    let input = b.data_for(x);
    let q = transpose(&mut b, "qt", x, &[0, 1, 3, 2]);
    let y = attention(&mut b, q, q, q);
    b.output(y);
    let before = b.finish();
    let mut after = before.clone();
    let summary = attention_views(&mut after).unwrap();
    assert!(summary.is_noop(), "{summary:?}");
    same_result(&before, &after, &input);

    let mut b = Builder::new();
    let x = b.input("x", &[S, 3, H, 6]);
    let input = b.data_for(x);
    let t = transpose(&mut b, "t", x, &[1, 2, 0, 3]);
    let op = |i| Op::Gather {
        axis: 0,
        indices: vec![i],
        indices_shape: vec![],
    };
    let (q, k, v) = (
        b.node("gq", op(0), &[t]),
        b.node("gk", op(1), &[t]),
        b.node("gv", op(2), &[t]),
    );
    let y = attention(&mut b, q, k, v);
    b.output(y);
    let before = b.finish();
    let mut after = before.clone();
    assert!(attention_views(&mut after).unwrap().is_noop());
    same_result(&before, &after, &input);
}
