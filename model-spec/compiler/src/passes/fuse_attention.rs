//! Attention recognition: the decomposed scaled dot-product attention that
//! exporters write becomes one [`Op::Attention`] node, so the GPU side has
//! one fused target per block.
//!
//! Matched, anchored on each Softmax over the last axis:
//! `MatMul(q', kᵀ') → [Mul/Div by a scalar] → [Add(mask)] → Softmax →
//! MatMul(·, v)`, where `q'` may be `q` times a scalar and `kᵀ'` may be `kᵀ`
//! times a scalar (the dynamo exporter splits the scale as √scale on each
//! side). `kᵀ` is the Transpose of `k` swapping its last two axes, possibly
//! behind a Reshape that changes nothing; otherwise a Transpose is inserted
//! to make `k`. q, k and v are 3-D `[N, S, D]` or 4-D `[B, H, S, D]` with
//! the same leading dimensions; the mask must broadcast to the scores.
//! Every removed intermediate has exactly one reader and is not a graph
//! output. The Attention node takes the second MatMul's place and output.

use super::fuse_gelu::{replace_chain, rewrite_matches, Matcher};
use super::{PassError, PassSummary};
use crate::ir::{BinaryOp, Graph, Node, NodeId, Op, Value, ValueId};

const PASS: &str = "fuse_attention";

/// Replaces every decomposed attention by one `Attention` node.
pub fn fuse_attention(graph: &mut Graph) -> Result<PassSummary, PassError> {
    rewrite_matches(
        graph,
        PASS,
        "attention fused",
        attention_at,
        |graph, patch, found| {
            let last = graph.node(found.last);
            let mut inputs = vec![found.q, found.k, found.v];
            if let Some(kt) = found.transpose_k {
                let rank = graph.value(kt).shape.len();
                let mut k_shape = graph.value(kt).shape.clone();
                k_shape.swap(rank - 2, rank - 1);
                let k = patch.add_value(Value::activation(format!("{}/k", last.name), k_shape));
                let mut perm: Vec<usize> = (0..rank).collect();
                perm.swap(rank - 2, rank - 1);
                patch.insert_before(
                    found.last,
                    Node {
                        name: format!("{}/k", last.name),
                        op: Op::Transpose { perm },
                        inputs: vec![kt],
                        output: k,
                    },
                );
                inputs[1] = k;
            }
            inputs.extend(found.mask);
            let op = Op::Attention {
                scale: found.scale,
                causal: false,
            };
            replace_chain(graph, patch, &found.chain, found.last, op, inputs);
        },
    )
}

/// One matched attention.
struct Found {
    q: ValueId,
    /// `k` itself, or (with `transpose_k`) a placeholder for it.
    k: ValueId,
    /// `kᵀ` when no Transpose could be absorbed: one is inserted.
    transpose_k: Option<ValueId>,
    v: ValueId,
    mask: Option<ValueId>,
    scale: f32,
    chain: Vec<NodeId>,
    last: NodeId,
}

fn attention_at(m: &Matcher, softmax: NodeId) -> Option<Found> {
    let g = m.graph;
    let node = g.node(softmax);
    let scores = node.inputs[0];
    let rank = g.value(scores).shape.len();
    if node.op
        != (Op::Softmax {
            axis: rank.checked_sub(1)?,
        })
        || !(3..=4).contains(&rank)
    {
        return None;
    }
    let last = m.next(softmax)?;
    let pv = g.node(last);
    if pv.op != Op::MatMul || pv.inputs[0] != node.output || pv.inputs[1] == node.output {
        return None;
    }
    let v = pv.inputs[1];
    let mut chain = vec![softmax];
    let mut scale = 1.0f32;
    // Back from the Softmax: an optional mask Add, an optional scale.
    let mut at = m.sole_producer(scores, softmax)?;
    let mut mask = None;
    if g.node(at).op == Op::Binary(BinaryOp::Add) {
        let [a, b] = g.node(at).inputs[..] else {
            return None;
        };
        let (s, other) = if is_scores(m, a, at) { (a, b) } else { (b, a) };
        mask = Some(other);
        chain.push(at);
        at = m.sole_producer(s, at)?;
    }
    if let Some((x, factor)) = scaled(m, at) {
        scale *= factor;
        chain.push(at);
        at = m.sole_producer(x, at)?;
    }
    let qk = g.node(at);
    if qk.op != Op::MatMul {
        return None;
    }
    chain.push(at);
    let (mut q, mut kt) = (qk.inputs[0], qk.inputs[1]);
    for side in [&mut q, &mut kt] {
        if let Some(producer) = m.sole_producer(*side, at) {
            if let Some((x, factor)) = scaled(m, producer) {
                scale *= factor;
                chain.push(producer);
                *side = x;
            }
        }
    }
    let (k, transpose_k) = match untransposed(m, kt, &mut chain, at) {
        Some(k) => (k, None),
        None => (kt, Some(kt)),
    };
    let shape = |v: ValueId| &g.value(v).shape;
    let (qs, vs) = (shape(q), shape(v));
    let ks = {
        let mut s = shape(kt).clone();
        let r = s.len();
        if r < 2 {
            return None;
        }
        if transpose_k.is_some() {
            s.swap(r - 2, r - 1);
            s
        } else {
            shape(k).clone()
        }
    };
    let fits = qs.len() == rank
        && ks.len() == rank
        && vs.len() == rank
        && qs[..rank - 2] == ks[..rank - 2]
        && vs[..rank - 2] == qs[..rank - 2]
        && ks[rank - 1] == qs[rank - 1]
        && vs[rank - 2] == ks[rank - 2];
    if !fits {
        return None;
    }
    if let Some(mask) = mask {
        let mut scores_shape = qs.clone();
        scores_shape[rank - 1] = ks[rank - 2];
        let mask_shape = shape(mask);
        if mask_shape.len() > rank
            || crate::ir::broadcast(&scores_shape, mask_shape).ok()? != scores_shape
        {
            return None;
        }
    }
    Some(Found {
        q,
        k,
        transpose_k,
        v,
        mask,
        scale,
        chain,
        last,
    })
}

/// Whether `v` (read by `reader`) comes from the scores: a MatMul, possibly
/// scaled.
fn is_scores(m: &Matcher, v: ValueId, reader: NodeId) -> bool {
    let Some(p) = m.sole_producer(v, reader) else {
        return false;
    };
    match scaled(m, p) {
        Some((x, _)) => m
            .sole_producer(x, p)
            .is_some_and(|q| m.graph.node(q).op == Op::MatMul),
        None => m.graph.node(p).op == Op::MatMul,
    }
}

/// For a Mul by a scalar constant (either side) or a Div by one, the other
/// operand and the factor it is multiplied by.
fn scaled(m: &Matcher, id: NodeId) -> Option<(ValueId, f32)> {
    let node = m.graph.node(id);
    let [a, b] = node.inputs[..] else {
        return None;
    };
    match node.op {
        Op::Binary(BinaryOp::Mul) => match (m.scalar(a), m.scalar(b)) {
            (_, Some(s)) if !m.graph.value(a).is_constant() => Some((a, s)),
            (Some(s), _) if !m.graph.value(b).is_constant() => Some((b, s)),
            _ => None,
        },
        Op::Binary(BinaryOp::Div) => {
            let s = m.scalar(b).filter(|&s| s != 0.0)?;
            (!m.graph.value(a).is_constant()).then_some((a, 1.0 / s))
        }
        _ => None,
    }
    .filter(|&(x, _)| m.graph.value(x).shape == m.graph.value(node.output).shape)
}

/// `k` for `kt` = Transpose(k) swapping the last two axes, through Reshapes
/// that change nothing; each absorbed node joins `chain`.
fn untransposed(
    m: &Matcher,
    kt: ValueId,
    chain: &mut Vec<NodeId>,
    reader: NodeId,
) -> Option<ValueId> {
    let g = m.graph;
    let mut at = kt;
    let mut reader = reader;
    let mut absorbed = Vec::new();
    loop {
        let p = m.sole_producer(at, reader)?;
        let node = g.node(p);
        match &node.op {
            Op::Reshape { .. } if g.value(node.inputs[0]).shape == g.value(at).shape => {
                absorbed.push(p);
                (at, reader) = (node.inputs[0], p);
            }
            Op::Transpose { perm } => {
                let r = perm.len();
                let swaps_last_two = r >= 2
                    && perm[r - 2] == r - 1
                    && perm[r - 1] == r - 2
                    && perm[..r - 2].iter().enumerate().all(|(i, &p)| i == p);
                if !swaps_last_two {
                    return None;
                }
                absorbed.push(p);
                chain.extend(absorbed);
                return Some(node.inputs[0]);
            }
            _ => return None,
        }
    }
}
