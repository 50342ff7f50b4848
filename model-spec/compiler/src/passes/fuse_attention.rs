//! Attention recognition: the decomposed scaled dot-product attention that
//! exporters write becomes one [`Op::Attention`] node, so the GPU side has
//! one fused target per block.
//!
//! Matched, anchored on each Softmax over the last axis:
//! `MatMul(q', kᵀ') → [steps] → Softmax → MatMul(·, v)`, where `q'` may be
//! `q` times a scalar and `kᵀ'` may be `kᵀ` times a scalar (the dynamo
//! exporter splits the scale as √scale on each side). `kᵀ` is the Transpose
//! of `k` swapping its last two axes, possibly behind a Reshape that changes
//! nothing; otherwise a Transpose is inserted to make `k`. The steps between
//! the scores and the Softmax are any sequence of Mul/Div by a scalar
//! constant, Adds of a mask, and Reshapes that keep the last two axes
//! `[Sq, Skv]` (Swin's shifted windows:
//! `Add(bias) → Reshape [N, nW, H, S, S] → Add(window mask) → Reshape back`),
//! as long as the Softmax reads the scores' own shape. The Attention takes
//! one mask:
//! - the Add's other operand itself when there is one Add, after every
//!   scalar factor and with no Reshape (a constant or a runtime mask that
//!   broadcasts to the scores);
//! - otherwise every added operand must be a constant, and they are folded
//!   at compile time (each multiplied by the scalar factors after it) into
//!   one constant `[G, Hm, Sqm, Skvm]` (`Op::Attention`'s mask contract,
//!   `ops::attention::mask_4d`): `Hm`, `Sqm`, `Skvm` are 1 where no operand
//!   varies along that axis, and `G` is the smallest period along the
//!   batch, found from the Reshapes' axes — for Swin, the windows per image,
//!   so the constant does not grow with the batch. An operand whose axis
//!   straddles batch and heads of the scores (a Reshape regrouping them
//!   otherwise) is not folded: the chain stays unfused.
//!
//! q, k and v are 3-D `[N, S, D]` or 4-D `[B, H, S, D]` with the same
//! leading dimensions. Every removed intermediate has exactly one reader
//! and is not a graph output. The Attention node takes the second MatMul's
//! place and output.
//!
//! A second rule folds a scalar Mul/Div on an existing Attention's q or k
//! (onnx-ir coalesces TorchScript's attention with the `q · scale` Mul left
//! in front) into its `scale`.

use super::fuse_gelu::{replace_chain, rewrite_matches, Matcher};
use super::{PassError, PassSummary};
use crate::ir::{is_row_major_bytes, BinaryOp, Graph, Node, NodeId, Op, Value, ValueId};
use crate::ops::attention::{as_4d, mask_4d};
use std::sync::Arc;

const PASS: &str = "fuse_attention";

/// Longest chain of steps between the scores and the Softmax looked at.
const MAX_STEPS: usize = 8;

/// Replaces every decomposed attention by one `Attention` node, then folds
/// scalar factors on an Attention's q or k into its scale.
pub fn fuse_attention(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let mut summary = rewrite_matches(
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
            match found.mask {
                Some(Mask::Value(mask)) => inputs.push(mask),
                Some(Mask::Folded { shape, data }) => {
                    let name = format!("{}/mask", last.name);
                    inputs.push(patch.add_value(Value::constant(name, shape.to_vec(), data)));
                }
                None => {}
            }
            let op = Op::Attention {
                scale: found.scale,
                causal: false,
                views: None,
            };
            replace_chain(graph, patch, &found.chain, found.last, op, inputs);
        },
    )?;
    let folded = rewrite_matches(
        graph,
        PASS,
        "attention scale folded",
        scaled_operands_at,
        |graph, patch, fold: ScaleFold| {
            let node = graph.node(fold.attention);
            let mut inputs = node.inputs.clone();
            inputs[0] = fold.q;
            inputs[1] = fold.k;
            let op = Op::Attention {
                scale: fold.scale,
                causal: fold.causal,
                views: None,
            };
            replace_chain(graph, patch, &fold.chain, fold.attention, op, inputs);
        },
    )?;
    summary.changes.extend(folded.changes);
    Ok(summary)
}

/// The Attention's mask.
enum Mask {
    /// A value of the graph, as it is.
    Value(ValueId),
    /// Constants folded into one, `[G, Hm, Sqm, Skvm]`.
    Folded { shape: [usize; 4], data: Vec<f32> },
}

/// One matched attention.
struct Found {
    q: ValueId,
    /// `k` itself, or (with `transpose_k`) a placeholder for it.
    k: ValueId,
    /// `kᵀ` when no Transpose could be absorbed: one is inserted.
    transpose_k: Option<ValueId>,
    v: ValueId,
    mask: Option<Mask>,
    scale: f32,
    chain: Vec<NodeId>,
    last: NodeId,
}

/// What lies between the scores MatMul and the Softmax.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Times a scalar.
    Scale(f32),
    /// Plus this operand, broadcast to the step's output.
    Add(ValueId),
    /// A Reshape keeping the last two axes.
    Reshape,
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
    // Back from the Softmax to the scores MatMul.
    let mut steps: Vec<(NodeId, Step)> = Vec::new();
    let (mut at, mut reader) = (scores, softmax);
    let qk_id = loop {
        if steps.len() > MAX_STEPS {
            return None;
        }
        let p = m.sole_producer(at, reader)?;
        let n = g.node(p);
        match &n.op {
            Op::MatMul => break p,
            Op::Reshape { .. } if keeps_last_two(g, n) => {
                steps.push((p, Step::Reshape));
                at = n.inputs[0];
            }
            Op::Binary(BinaryOp::Add) => {
                let (s, other) = scores_side(m, p)?;
                steps.push((p, Step::Add(other)));
                at = s;
            }
            _ => {
                let (x, factor) = scaled(m, p)?;
                steps.push((p, Step::Scale(factor)));
                at = x;
            }
        }
        reader = p;
    };
    let qk = g.node(qk_id);
    if g.value(qk.output).shape != g.value(scores).shape {
        return None;
    }
    steps.reverse();
    chain.extend(steps.iter().map(|&(id, _)| id));
    chain.push(qk_id);
    let scores4 = as_4d(&g.value(scores).shape)?;
    let mask = mask_of(m, &steps, scores4)?;
    let mut scale: f32 = steps
        .iter()
        .map(|(_, s)| match s {
            Step::Scale(f) => *f,
            _ => 1.0,
        })
        .product();
    let (mut q, mut kt) = (qk.inputs[0], qk.inputs[1]);
    for side in [&mut q, &mut kt] {
        if let Some(producer) = m.sole_producer(*side, qk_id) {
            if let Some((x, factor)) = scaled(m, producer) {
                scale *= factor;
                chain.push(producer);
                *side = x;
            }
        }
    }
    let (k, transpose_k) = match untransposed(m, kt, &mut chain, qk_id) {
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

/// A Reshape whose input and output end in the same two axes (it only
/// regroups the leading ones).
fn keeps_last_two(g: &Graph, reshape: &Node) -> bool {
    let (x, y) = (
        &g.value(reshape.inputs[0]).shape,
        &g.value(reshape.output).shape,
    );
    x.len() >= 2 && y.len() >= 2 && x[x.len() - 2..] == y[y.len() - 2..]
}

/// For an Add on the path from the scores: (the operand the scores come
/// through, the added one). The scores' side has the Add's own shape and is
/// not a constant; when both operands qualify, the one that leads back to
/// a MatMul.
fn scores_side(m: &Matcher, add: NodeId) -> Option<(ValueId, ValueId)> {
    let node = m.graph.node(add);
    let [a, b] = node.inputs[..] else {
        return None;
    };
    let out = &m.graph.value(node.output).shape;
    let candidate = |v: ValueId| {
        let value = m.graph.value(v);
        !value.is_constant() && &value.shape == out
    };
    match (candidate(a), candidate(b)) {
        (true, false) => Some((a, b)),
        (false, true) => Some((b, a)),
        (true, true) if leads_to_scores(m, a, add) => Some((a, b)),
        (true, true) if leads_to_scores(m, b, add) => Some((b, a)),
        _ => None,
    }
}

/// Whether `v` (read by `reader`) comes from a MatMul through the steps
/// [`attention_at`] accepts.
fn leads_to_scores(m: &Matcher, v: ValueId, reader: NodeId) -> bool {
    let (mut at, mut reader) = (v, reader);
    for _ in 0..=MAX_STEPS {
        let Some(p) = m.sole_producer(at, reader) else {
            return false;
        };
        let n = m.graph.node(p);
        at = match &n.op {
            Op::MatMul => return true,
            Op::Reshape { .. } if keeps_last_two(m.graph, n) => n.inputs[0],
            Op::Binary(BinaryOp::Add) => match scores_side_by_shape(m, p) {
                Some(s) => s,
                None => return false,
            },
            _ => match scaled(m, p) {
                Some((x, _)) => x,
                None => return false,
            },
        };
        reader = p;
    }
    false
}

/// [`scores_side`] without the look-back: the only non-constant operand of
/// the Add's shape.
fn scores_side_by_shape(m: &Matcher, add: NodeId) -> Option<ValueId> {
    let node = m.graph.node(add);
    let out = &m.graph.value(node.output).shape;
    let mut sides = node.inputs.iter().copied().filter(|&v| {
        let value = m.graph.value(v);
        !value.is_constant() && &value.shape == out
    });
    let side = sides.next()?;
    sides.next().is_none().then_some(side)
}

/// The Attention's mask for `steps` (scores side first) over the scores
/// `[B, H, Sq, Skv]`; `None` when the steps cannot become one mask.
fn mask_of(m: &Matcher, steps: &[(NodeId, Step)], scores: [usize; 4]) -> Option<Option<Mask>> {
    let adds: Vec<usize> = (0..steps.len())
        .filter(|&i| matches!(steps[i].1, Step::Add(_)))
        .collect();
    let reshaped = steps.iter().any(|(_, s)| matches!(s, Step::Reshape));
    match adds[..] {
        [] => Some(None),
        [i] if !reshaped && i + 1 == steps.len() => {
            let Step::Add(mask) = steps[i].1 else {
                return None;
            };
            mask_4d(&m.graph.value(mask).shape, scores).ok()?;
            Some(Some(Mask::Value(mask)))
        }
        _ => fold_masks(m, steps, scores).map(Some),
    }
}

/// One added constant as a function of the scores' coordinates.
struct Term {
    data: Arc<Vec<f32>>,
    /// `(extent, stride in the flat batch·head index, stride in data)` of
    /// each leading axis of the Add's shape the constant varies along.
    lead: Vec<(usize, usize, usize)>,
    /// Data strides along Sq and Skv (0 where broadcast).
    sq: usize,
    skv: usize,
}

impl Term {
    fn at(&self, batch_head: usize, i: usize, j: usize) -> f32 {
        let lead: usize = self
            .lead
            .iter()
            .map(|&(extent, stride, step)| (batch_head / stride) % extent * step)
            .sum();
        self.data[lead + i * self.sq + j * self.skv]
    }
}

/// Folds the added constants of `steps` (each scaled by the factors after
/// it) into one `[G, Hm, Sqm, Skvm]` constant over the scores `[B, H, Sq,
/// Skv]`. `None` when an added operand is not a row-major constant, or
/// varies along an axis that mixes batch and heads.
fn fold_masks(m: &Matcher, steps: &[(NodeId, Step)], scores: [usize; 4]) -> Option<Mask> {
    let [b, h, sq, skv] = scores;
    let (mut period, mut by_head, mut by_query, mut by_key) = (1usize, false, false, false);
    let mut terms: Vec<Option<Term>> = Vec::with_capacity(steps.len());
    for &(id, step) in steps {
        let Step::Add(operand) = step else {
            terms.push(None);
            continue;
        };
        let value = m.graph.value(operand);
        if !is_row_major_bytes(&value.shape, value.layout) {
            return None;
        }
        let data = value.constant_data()?.clone();
        let frame = &m.graph.value(m.graph.node(id).output).shape;
        let r = frame.len();
        if value.shape.len() > r || frame[r - 2..] != [sq, skv] {
            return None;
        }
        let mut shape = vec![1; r - value.shape.len()];
        shape.extend_from_slice(&value.shape);
        let mut data_strides = vec![0; r];
        let mut stride = 1;
        for axis in (0..r).rev() {
            data_strides[axis] = if shape[axis] == 1 { 0 } else { stride };
            stride *= shape[axis];
        }
        let mut lead = Vec::new();
        let mut flat_stride = 1;
        for axis in (0..r - 2).rev() {
            let extent = frame[axis];
            if shape[axis] != 1 && extent != 1 {
                if flat_stride % h == 0 {
                    period = lcm(period, flat_stride / h * extent);
                } else if h % (flat_stride * extent) == 0 {
                    by_head = true;
                } else {
                    return None;
                }
                lead.push((extent, flat_stride, data_strides[axis]));
            }
            flat_stride *= extent;
        }
        by_query |= data_strides[r - 2] != 0;
        by_key |= data_strides[r - 1] != 0;
        terms.push(Some(Term {
            data,
            lead,
            sq: data_strides[r - 2],
            skv: data_strides[r - 1],
        }));
    }
    if b % period != 0 {
        return None;
    }
    let pick = |varies: bool, n: usize| if varies { n } else { 1 };
    let shape = [
        period,
        pick(by_head, h),
        pick(by_query, sq),
        pick(by_key, skv),
    ];
    let mut data = Vec::with_capacity(shape.iter().product());
    for g in 0..shape[0] {
        for head in 0..shape[1] {
            for i in 0..shape[2] {
                for j in 0..shape[3] {
                    let mut x = 0.0f32;
                    for (&(_, step), term) in steps.iter().zip(&terms) {
                        match (step, term) {
                            (Step::Add(_), Some(t)) => x += t.at(g * h + head, i, j),
                            (Step::Scale(f), _) => x *= f,
                            _ => {}
                        }
                    }
                    data.push(x);
                }
            }
        }
    }
    Some(Mask::Folded { shape, data })
}

fn lcm(a: usize, b: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    a / gcd(a, b) * b
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

/// An Attention whose q and/or k is a scalar multiple read only by it.
struct ScaleFold {
    attention: NodeId,
    q: ValueId,
    k: ValueId,
    scale: f32,
    causal: bool,
    chain: Vec<NodeId>,
}

fn scaled_operands_at(m: &Matcher, id: NodeId) -> Option<ScaleFold> {
    let node = m.graph.node(id);
    let Op::Attention {
        scale,
        causal,
        views: None,
    } = node.op
    else {
        return None;
    };
    let mut fold = ScaleFold {
        attention: id,
        q: node.inputs[0],
        k: node.inputs[1],
        scale,
        causal,
        chain: Vec::new(),
    };
    for side in [&mut fold.q, &mut fold.k] {
        let Some(producer) = m.sole_producer(*side, id) else {
            continue;
        };
        if let Some((x, factor)) = scaled(m, producer) {
            fold.scale *= factor;
            fold.chain.push(producer);
            *side = x;
        }
    }
    (!fold.chain.is_empty()).then_some(fold)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{print_graph, UnaryOp};
    use crate::passes::direct_eval;
    use crate::reference::{run, RunOptions};
    use crate::test_graphs::{rel_l2, Builder};

    fn reshape(shape: &[i64]) -> Op {
        Op::Reshape {
            shape: shape.to_vec(),
            allowzero: false,
        }
    }

    fn op_count(g: &Graph, kind: &str) -> usize {
        g.nodes.iter().filter(|n| n.op.kind() == kind).count()
    }

    /// Where the scale of a Swin window attention sits.
    #[derive(Clone, Copy, PartialEq)]
    enum ScaleAt {
        /// `Mul(q, scale)` before the product (both torchvision exports).
        Query,
        /// On the scores after the bias Add (the bias is scaled too).
        AfterBias,
    }

    /// torchvision's shifted-window attention over `x [N·nW, H, S, D]`
    /// (q = x, k = −x, v = sigmoid(x)): `scores + bias [H, S, S]` →
    /// Reshape `[N, nW, H, S, S]` → `+ window_mask` → Reshape back →
    /// Softmax → `· v`.
    fn shifted_window(
        [n, nw, h, s, d]: [usize; 5],
        scale_at: ScaleAt,
        window_mask: &[usize],
    ) -> (Graph, Vec<f32>) {
        let mut b = Builder::new();
        let x = b.input("x", &[n * nw, h, s, d]);
        let input = b.data_for(x);
        let scale = b.constant("scale", &[], vec![(d as f32).powf(-0.5)]);
        let q = match scale_at {
            ScaleAt::Query => b.node("q", Op::Binary(BinaryOp::Mul), &[x, scale]),
            ScaleAt::AfterBias => x,
        };
        let k = b.node("k", Op::Unary(UnaryOp::Neg), &[x]);
        let v = b.node("v", Op::Unary(UnaryOp::Sigmoid), &[x]);
        let kt = b.node(
            "kt",
            Op::Transpose {
                perm: vec![0, 1, 3, 2],
            },
            &[k],
        );
        let qk = b.node("qk", Op::MatMul, &[q, kt]);
        let bias = b.random("bias", &[h, s, s], -1.0, 1.0);
        let mut scores = b.node("add_bias", Op::Binary(BinaryOp::Add), &[qk, bias]);
        if scale_at == ScaleAt::AfterBias {
            scores = b.node("scaled", Op::Binary(BinaryOp::Mul), &[scores, scale]);
        }
        let (n, nw, h, s) = (n as i64, nw as i64, h as i64, s as i64);
        let split = b.node("split", reshape(&[n, nw, h, s, s]), &[scores]);
        // Masked positions as Swin writes them (-100), the rest 0.
        let size = window_mask.iter().product::<usize>();
        let data = (0..size)
            .map(|i| if i % 7 < 2 { -100.0 } else { 0.0 })
            .collect();
        let mask = b.constant("window_mask", window_mask, data);
        let masked = b.node("add_mask", Op::Binary(BinaryOp::Add), &[split, mask]);
        let merged = b.node("merge", reshape(&[-1, h, s, s]), &[masked]);
        let p = b.node("softmax", Op::Softmax { axis: 3 }, &[merged]);
        let y = b.node("pv", Op::MatMul, &[p, v]);
        b.output(y);
        (b.finish(), input)
    }

    /// Runs the pass; checks that the graph computes the same (the direct
    /// evaluator and the CPU reference) and returns the summary.
    fn fuse_same(g: &mut Graph, input: &[f32]) -> PassSummary {
        let before = direct_eval::evaluate(g, &[input]);
        let reference = run(g, &[input], &RunOptions::default()).unwrap();
        let summary = fuse_attention(g).unwrap();
        let after = direct_eval::evaluate(g, &[input]);
        let err = rel_l2(&after[0], &before[0]);
        assert!(err <= 1e-6, "direct evaluation: rel. L2 {err:e}");
        let got = run(g, &[input], &RunOptions::default()).unwrap();
        let err = rel_l2(&got[0], &reference[0]);
        assert!(err <= 1e-5, "CPU reference: rel. L2 {err:e}");
        summary
    }

    #[test]
    fn shifted_window_attention_gets_one_mask_per_window() {
        let (mut g, input) = shifted_window([2, 4, 3, 5, 4], ScaleAt::Query, &[1, 4, 1, 5, 5]);
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[8,3,5,4]  # x
          const %1: f32[]  # sum=5.000000e-1
          const %7: f32[3,5,5]  # sum=-7.741751e0
          const %10: f32[1,4,1,5,5]  # sum=-3.000000e3
          %2: f32[8,3,5,4] = Mul(%0, %1)  # q
          %3: f32[8,3,5,4] = Neg(%0)  # k
          %4: f32[8,3,5,4] = Sigmoid(%0)  # v
          %5: f32[8,3,4,5] = Transpose(%3) perm=[0, 1, 3, 2]  # kt
          %6: f32[8,3,5,5] = MatMul(%2, %5)  # qk
          %8: f32[8,3,5,5] = Add(%6, %7)  # add_bias
          %9: f32[2,4,3,5,5] = Reshape(%8) shape=[2, 4, 3, 5, 5]  # split
          %11: f32[2,4,3,5,5] = Add(%9, %10)  # add_mask
          %12: f32[8,3,5,5] = Reshape(%11) shape=[-1, 3, 5, 5]  # merge
          %13: f32[8,3,5,5] = Softmax(%12) axis=3  # softmax
          %14: f32[8,3,5,4] = MatMul(%13, %4)  # pv
          return %14
        ");
        let summary = fuse_same(&mut g, &input);
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[8,3,5,4]  # x
          const %4: f32[4,3,5,5]  # sum=-9.030967e3
          %1: f32[8,3,5,4] = Neg(%0)  # k
          %2: f32[8,3,5,4] = Sigmoid(%0)  # v
          %3: f32[8,3,5,4] = Attention(%0, %1, %2, %4) scale=0.5  # pv
          return %3
        ");
        assert_eq!(summary.to_string(), "fuse_attention: 1 attention fused");
        // The mask is one constant per window and head, whatever the batch.
        let att = g.nodes.iter().find(|n| n.op.kind() == "Attention").unwrap();
        assert_eq!(g.value(att.inputs[3]).shape, [4, 3, 5, 5]);
    }

    #[test]
    fn a_scale_after_the_bias_scales_the_folded_mask() {
        let (mut g, input) = shifted_window([3, 2, 2, 6, 8], ScaleAt::AfterBias, &[1, 2, 1, 6, 6]);
        fuse_same(&mut g, &input);
        assert_eq!(op_count(&g, "Attention"), 1);
        assert_eq!(
            g.nodes.len(),
            3,
            "Neg, Sigmoid, Attention: {}",
            print_graph(&g)
        );
        let att = g.nodes.iter().find(|n| n.op.kind() == "Attention").unwrap();
        assert!(matches!(att.op, Op::Attention { scale, .. } if scale == 8f32.powf(-0.5)));
        assert_eq!(g.value(att.inputs[3]).shape, [2, 2, 6, 6]);
    }

    #[test]
    fn window_masks_varying_by_head_or_over_all_batches_fold() {
        // [1, nW, H, S, S]: per window and head; [N, nW, 1, 1, S]: the
        // period is the whole batch, constant along the queries.
        for (mask, folded) in [
            (&[1, 4, 3, 5, 5][..], [4, 3, 5, 5]),
            (&[2, 4, 1, 1, 5][..], [8, 3, 5, 5]),
        ] {
            let (mut g, input) = shifted_window([2, 4, 3, 5, 4], ScaleAt::Query, mask);
            fuse_same(&mut g, &input);
            let att = g.nodes.iter().find(|n| n.op.kind() == "Attention").unwrap();
            assert_eq!(g.value(att.inputs[3]).shape, folded, "{mask:?}");
        }
    }

    #[test]
    fn a_reshape_that_mixes_batch_and_heads_is_not_folded() {
        // Scores [6, 2, S, S] (B = 2·3 windows·heads would be fine) seen as
        // [4, 3, S, S] = B·H regrouped: a mask along the 4 is no window mask.
        let mut b = Builder::new();
        let x = b.input("x", &[6, 2, 5, 4]);
        let input = b.data_for(x);
        let k = b.node("k", Op::Unary(UnaryOp::Neg), &[x]);
        let kt = b.node(
            "kt",
            Op::Transpose {
                perm: vec![0, 1, 3, 2],
            },
            &[k],
        );
        let qk = b.node("qk", Op::MatMul, &[x, kt]);
        let split = b.node("split", reshape(&[4, 3, 5, 5]), &[qk]);
        let mask = b.random("mask", &[4, 1, 5, 5], -1.0, 1.0);
        let masked = b.node("add_mask", Op::Binary(BinaryOp::Add), &[split, mask]);
        let merged = b.node("merge", reshape(&[6, 2, 5, 5]), &[masked]);
        let p = b.node("softmax", Op::Softmax { axis: 3 }, &[merged]);
        let y = b.node("pv", Op::MatMul, &[p, x]);
        b.output(y);
        let mut g = b.finish();
        let summary = fuse_same(&mut g, &input);
        assert_eq!(summary.count("attention fused"), 0);
        assert_eq!(op_count(&g, "Softmax"), 1);
    }

    #[test]
    fn a_scalar_on_an_attentions_query_joins_its_scale() {
        // What onnx-ir makes of TorchScript's Swin: Attention(q·s, k, v, bias).
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 5, 4]);
        let input = b.data_for(x);
        let s = b.constant("s", &[], vec![0.5]);
        let q = b.node("q", Op::Binary(BinaryOp::Mul), &[x, s]);
        let k = b.node("k", Op::Unary(UnaryOp::Neg), &[x]);
        let two = b.constant("two", &[1], vec![2.0]);
        let k2 = b.node("k2", Op::Binary(BinaryOp::Div), &[k, two]);
        let bias = b.random("bias", &[3, 5, 5], -1.0, 1.0);
        let attention = Op::Attention {
            scale: 1.0,
            causal: true,
            views: None,
        };
        let y = b.node("attention", attention, &[q, k2, x, bias]);
        b.output(y);
        let mut g = b.finish();
        let summary = fuse_same(&mut g, &input);
        assert_eq!(summary.count("attention scale folded"), 1);
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[2,3,5,4]  # x
          const %2: f32[3,5,5]  # sum=-1.369131e0
          %1: f32[2,3,5,4] = Neg(%0)  # k
          %3: f32[2,3,5,4] = Attention(%0, %1, %0, %2) scale=0.25 causal  # attention
          return %3
        ");
    }
}
