//! Sequence-first attention blocks run batch-first: the two row-permuting
//! Transposes around them become strides.
//!
//! `nn.MultiheadAttention` computes sequence-first, so a batch-first model's
//! TorchScript export wraps every attention block in `Transpose [1, 0, 2]`
//! (`[B, S, E] → [S, B, E]`) before the q/k/v projection and back after the
//! output projection. A Dense is row-wise: permuting its input rows permutes
//! its output rows the same way. And once [`super::attention_views`] has
//! given the attention strided views of the projection's output and of its
//! own output, the order of the rows is only a choice of strides. So the
//! chain
//!
//! ```text
//! x[A,B,E] → Transpose[1,0,2] → Reshape[B·A,E] → Dense → Reshape[B,A,N] → Attention (views)
//!          → Dense → Reshape[B,A,F] → Transpose[1,0,2] → z[A,B,F]
//! ```
//!
//! becomes `x → Reshape[A·B,E] → Dense → Reshape[A,B,N] → Attention (row
//! strides exchanged) → Dense → Reshape[A,B,F] = z`: two copies fewer, and
//! the residual `Add` that usually reads `z` reaches the second Dense
//! through a Reshape view, where [`super::dense_epilogue`] absorbs it.
//!
//! Every value of the chain has one reader (the q/k/v value: the attention
//! alone, through views on every use), neither Dense has a residual yet,
//! and every view steps over the two row axes with exactly their strides
//! (the other axes stay inside one row). Otherwise the chain stays.

use super::dense_epilogue::reshape_to;
use super::Uses;
use crate::ir::{AttentionViews, Graph, Node, NodeId, Op, Patch, StridedView, ValueId};

const SWAP: [usize; 3] = [1, 0, 2];

/// The chain's nodes and its row dims `A` (the first axis of `x`) and `B`.
struct Chain {
    t1: NodeId,
    r1: NodeId,
    r2: NodeId,
    attention: NodeId,
    r3: NodeId,
    t2: NodeId,
    a: usize,
    b: usize,
}

/// Removes the row-swapping Transposes around each attention block it can;
/// returns how many blocks changed. Runs on Dense nodes before their
/// epilogues absorb what follows them.
pub(super) fn sink_row_swaps(graph: &mut Graph) -> usize {
    let uses = Uses::of(graph);
    let chains: Vec<Chain> = graph
        .node_ids()
        .filter_map(|id| match_chain(graph, &uses, id))
        .collect();
    if chains.is_empty() {
        return 0;
    }
    let mut patch = Patch::new(graph);
    let mut done = 0;
    for c in &chains {
        if rewrite(graph, &mut patch, c).is_some() {
            done += 1;
        }
    }
    patch.apply(graph);
    done
}

fn is_swap(op: &Op) -> bool {
    matches!(op, Op::Transpose { perm } if perm.as_slice() == SWAP)
}

fn is_reshape(op: &Op) -> bool {
    matches!(op, Op::Reshape { .. })
}

/// A Dense without a residual or row norm whose first input is `x` and no
/// other.
fn plain_dense_of(graph: &Graph, id: NodeId, x: ValueId) -> bool {
    let node = graph.node(id);
    matches!(node.op, Op::Dense { epilogue, norm: None } if !epilogue.residual)
        && node.inputs[0] == x
        && node.inputs[1..].iter().all(|&v| v != x)
}

fn match_chain(graph: &Graph, uses: &Uses, t1: NodeId) -> Option<Chain> {
    let t1n = graph.node(t1);
    if !is_swap(&t1n.op) {
        return None;
    }
    let x_shape = &graph.value(t1n.inputs[0]).shape;
    let &[a, b, e] = x_shape.as_slice() else {
        return None;
    };
    if a < 2 || b < 2 {
        return None;
    }
    let next = |v: ValueId, want: &dyn Fn(&Node) -> bool| -> Option<NodeId> {
        let id = uses.sole_user(v)?;
        want(graph.node(id)).then_some(id)
    };
    let shape_is = |v: ValueId, s: &[usize]| graph.value(v).shape.as_slice() == s;
    let r1 = next(t1n.output, &|n| is_reshape(&n.op))?;
    let r1_out = graph.node(r1).output;
    if !shape_is(r1_out, &[b * a, e]) {
        return None;
    }
    let d1 = next(r1_out, &|_| true)?;
    if !plain_dense_of(graph, d1, r1_out) {
        return None;
    }
    let y1 = graph.node(d1).output;
    let n = *graph.value(y1).shape.last()?;
    let r2 = next(y1, &|n| is_reshape(&n.op))?;
    let qkv = graph.node(r2).output;
    if !shape_is(qkv, &[b, a, n]) || uses.is_output(qkv) {
        return None;
    }
    let attention = *uses.users(qkv).first()?;
    let att = graph.node(attention);
    let Op::Attention {
        views: Some(views), ..
    } = &att.op
    else {
        return None;
    };
    let every_use_viewed = uses.users(qkv).iter().all(|&u| u == attention)
        && att
            .inputs
            .iter()
            .enumerate()
            .all(|(i, &v)| v != qkv || (i < 3 && views.input(i).is_some()));
    let (_, out_shape) = views.out.as_ref()?;
    if !every_use_viewed || out_shape.len() != 2 || out_shape[0] != b * a {
        return None;
    }
    let d2 = next(att.output, &|_| true)?;
    if !plain_dense_of(graph, d2, att.output) {
        return None;
    }
    let y2 = graph.node(d2).output;
    let f = *graph.value(y2).shape.last()?;
    let r3 = next(y2, &|n| is_reshape(&n.op))?;
    let r3_out = graph.node(r3).output;
    if !shape_is(r3_out, &[b, a, f]) {
        return None;
    }
    let t2 = next(r3_out, &|n| is_swap(&n.op))?;
    Some(Chain {
        t1,
        r1,
        r2,
        attention,
        r3,
        t2,
        a,
        b,
    })
}

/// `view` of a row-major `[B, A, n]` value as the same elements of the
/// `[A, B, n]` value holding them with the row axes exchanged: the view's
/// axis stepping `A` (stride `n`) and the one stepping `B` (stride `A·n`)
/// trade strides; every other axis must stay inside one row.
fn swap_row_strides(view: &StridedView, a: usize, b: usize, n: usize) -> Option<StridedView> {
    let mut out = *view;
    let (mut a_axis, mut b_axis) = (None, None);
    let mut reach = view.offset;
    for k in 0..4 {
        let (d, s) = (view.dims[k], view.strides[k]);
        if d <= 1 {
            continue;
        }
        if d == a && s == n && a_axis.is_none() {
            a_axis = Some(k);
        } else if d == b && s == a * n && b_axis.is_none() {
            b_axis = Some(k);
        } else {
            reach += (d - 1) * s;
        }
    }
    let (ka, kb) = (a_axis?, b_axis?);
    if reach >= n {
        return None;
    }
    out.strides[ka] = b * n;
    out.strides[kb] = n;
    Some(out)
}

/// Records the rewrite of one chain; `None` (nothing recorded) when a view
/// does not fit.
fn rewrite(graph: &Graph, patch: &mut Patch, c: &Chain) -> Option<()> {
    let (a, b) = (c.a, c.b);
    let att = graph.node(c.attention);
    let qkv = graph.node(c.r2).output;
    let n = *graph.value(qkv).shape.last()?;
    let Op::Attention {
        scale,
        causal,
        views: Some(views),
    } = &att.op
    else {
        return None;
    };
    let swap = |v: &Option<StridedView>, n| match v {
        Some(v) => swap_row_strides(v, a, b, n).map(Some),
        None => Some(None),
    };
    let (out_view, out_shape) = views.out.clone()?;
    let new_views = AttentionViews {
        q: swap(&views.q, n)?,
        k: swap(&views.k, n)?,
        v: swap(&views.v, n)?,
        out: Some((swap_row_strides(&out_view, a, b, out_shape[1])?, out_shape)),
    };

    let t1 = graph.node(c.t1);
    let r1 = graph.node(c.r1);
    patch.remove_node(c.t1);
    patch.replace_node(
        c.r1,
        Node {
            inputs: vec![t1.inputs[0]],
            ..r1.clone()
        },
    );
    let mut qkv_value = graph.value(qkv).clone();
    qkv_value.shape = vec![a, b, n];
    patch.set_value(qkv, qkv_value);
    let r2 = graph.node(c.r2);
    patch.replace_node(
        c.r2,
        Node {
            op: reshape_to(&[a, b, n]),
            ..r2.clone()
        },
    );
    patch.replace_node(
        c.attention,
        Node {
            op: Op::Attention {
                scale: *scale,
                causal: *causal,
                views: Some(Box::new(new_views)),
            },
            ..att.clone()
        },
    );
    let r3 = graph.node(c.r3);
    let t2 = graph.node(c.t2);
    let f = graph.value(t2.output).shape[2];
    patch.remove_node(c.t2);
    patch.replace_node(
        c.r3,
        Node {
            op: reshape_to(&[a, b, f]),
            output: t2.output,
            ..r3.clone()
        },
    );
    Some(())
}

#[cfg(test)]
#[path = "token_order_tests.rs"]
mod tests;
