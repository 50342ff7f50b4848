//! LayerNorm recognition: the decomposed form older exporters and
//! hand-written norms produce becomes one `LayerNorm` node:
//!
//! ```text
//! m = ReduceMean(x, trailing axes, keepdims)   d = x − m
//! v = ReduceMean(d², same axes, keepdims)      (d² as Pow(d, 2) or d·d)
//! y = d / Sqrt(v + ε)   [· γ]   [+ β]
//! ```
//!
//! The axes must be the last `k` axes (LayerNormalization's `axis = rank −
//! k`), ε, γ and β constants, γ and β shaped like the normalized axes (with
//! leading 1s allowed). Every intermediate value must be read only inside
//! the pattern (d by the square and the division; everything else once),
//! so the chain can go. The LayerNorm takes the place and output of the
//! last node matched; a missing γ or β becomes a constant of ones or zeros.

use super::fuse_gelu::{replace_chain, rewrite_matches, Matcher};
use super::{PassError, PassSummary};
use crate::ir::{BinaryOp, Graph, NodeId, Op, UnaryOp, Value, ValueId};

const PASS: &str = "fuse_layer_norm";

/// Replaces every decomposed LayerNorm by one `LayerNorm` node.
pub fn fuse_layer_norm(graph: &mut Graph) -> Result<PassSummary, PassError> {
    rewrite_matches(
        graph,
        PASS,
        "LayerNorm fused",
        layer_norm_at,
        |graph, patch, found| {
            let last = graph.node(found.last);
            let normalized = graph.value(found.x).shape[found.axis..].to_vec();
            let n: usize = normalized.iter().product();
            let mut param = |p: Option<ValueId>, fill: f32, name: &str| match p {
                Some(v) => {
                    let data = graph
                        .value(v)
                        .constant_data()
                        .expect("matched constant")
                        .clone();
                    patch.add_value(Value::constant(
                        format!("{}_{name}", last.name),
                        normalized.clone(),
                        data.to_vec(),
                    ))
                }
                None => patch.add_value(Value::constant(
                    format!("{}_{name}", last.name),
                    normalized.clone(),
                    vec![fill; n],
                )),
            };
            let (gamma, beta) = (
                param(found.gamma, 1.0, "scale"),
                param(found.beta, 0.0, "bias"),
            );
            let op = Op::LayerNorm {
                axis: found.axis,
                epsilon: found.epsilon,
            };
            let inputs = vec![found.x, gamma, beta];
            replace_chain(graph, patch, &found.chain, found.last, op, inputs);
        },
    )
}

struct Found {
    x: ValueId,
    axis: usize,
    epsilon: f32,
    gamma: Option<ValueId>,
    beta: Option<ValueId>,
    chain: Vec<NodeId>,
    last: NodeId,
}

/// The trailing axes' start of a keepdims mean over the last axes of its input.
fn trailing_mean(graph: &Graph, id: NodeId) -> Option<usize> {
    let node = graph.node(id);
    let Op::ReduceMean { axes, keepdims } = &node.op else {
        return None;
    };
    let rank = graph.value(node.inputs[0]).shape.len();
    let start = rank.checked_sub(axes.len())?;
    (*keepdims && !axes.is_empty() && axes.iter().copied().eq(start..rank)).then_some(start)
}

/// Whether constant `v` fits the normalized shape `tail` (leading 1s allowed).
fn fits_tail(graph: &Graph, v: ValueId, tail: &[usize]) -> bool {
    let value = graph.value(v);
    let shape = &value.shape;
    value.is_constant()
        && shape.len() >= tail.len()
        && shape[shape.len() - tail.len()..] == *tail
        && shape[..shape.len() - tail.len()].iter().all(|&d| d == 1)
}

fn layer_norm_at(m: &Matcher, mean: NodeId) -> Option<Found> {
    let g = m.graph;
    let axis = trailing_mean(g, mean)?;
    let x = g.node(mean).inputs[0];
    let tail = g.value(x).shape[axis..].to_vec();
    // d = x − mean, read by the square and the division only.
    let sub = m.next(mean)?;
    let sub_node = g.node(sub);
    if sub_node.op != Op::Binary(BinaryOp::Sub) || sub_node.inputs != [x, g.node(mean).output] {
        return None;
    }
    let d = sub_node.output;
    let readers = m.uses.users(d);
    if m.uses.is_output(d) || !(2..=3).contains(&readers.len()) {
        return None;
    }
    let mut square = None;
    let mut div = None;
    for &r in readers {
        let node = g.node(r);
        match node.op {
            Op::Binary(BinaryOp::Pow)
                if node.inputs[0] == d && m.is_scalar(node.inputs[1], 2.0) =>
            {
                square = Some(r)
            }
            Op::Binary(BinaryOp::Mul) if node.inputs == [d, d] => square = Some(r),
            Op::Binary(BinaryOp::Div) if node.inputs[0] == d => div = Some(r),
            _ => return None,
        }
    }
    let (square, div) = (square?, div?);
    let expected_readers = if g.node(square).inputs == [d, d] {
        3
    } else {
        2
    };
    if readers.len() != expected_readers {
        return None;
    }
    let var = m.next(square)?;
    if trailing_mean(g, var)? != axis {
        return None;
    }
    let add = m.next(var)?;
    let var_out = g.node(var).output;
    let eps = g.node(add).inputs.iter().copied().find(|&v| v != var_out)?;
    if m.other_operand(add, BinaryOp::Add, var_out)? != eps {
        return None;
    }
    let epsilon = m.scalar(eps)?;
    let sqrt = m.next(add)?;
    if g.node(sqrt).op != Op::Unary(UnaryOp::Sqrt) || m.next(sqrt)? != div {
        return None;
    }
    if g.node(div).inputs != [d, g.node(sqrt).output] {
        return None;
    }
    let mut chain = vec![mean, sub, square, var, add, sqrt];
    let mut last = div;
    let mut gamma = None;
    let mut beta = None;
    if let Some(mul) = m.next(last) {
        if let Some(v) = m.other_operand(mul, BinaryOp::Mul, g.node(last).output) {
            if fits_tail(g, v, &tail) {
                gamma = Some(v);
                chain.push(last);
                last = mul;
            }
        }
    }
    if let Some(add) = m.next(last) {
        if let Some(v) = m.other_operand(add, BinaryOp::Add, g.node(last).output) {
            if fits_tail(g, v, &tail) {
                beta = Some(v);
                chain.push(last);
                last = add;
            }
        }
    }
    Some(Found {
        x,
        axis,
        epsilon,
        gamma,
        beta,
        chain,
        last,
    })
}
