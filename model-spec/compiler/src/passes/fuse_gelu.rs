//! GELU recognition: the erf form exporters write for `nn.GELU()`,
//! `x · 0.5 · (1 + erf(x / √2))`, becomes one `Unary(Gelu)` node, so the GPU
//! side has one elementwise target instead of five.
//!
//! Matched, anchored on each Erf: its input is `x / √2` (a Div by √2 or a
//! Mul by 1/√2, constant either side of a Mul), its output plus the constant
//! 1, and that sum multiplied by `x` and by the constant 0.5 in any order and
//! grouping: `(x·t)·0.5`, `(t·x)·0.5`, `(t·0.5)·x`, `(x·0.5)·t`. Constants
//! must be scalars (every element equal) within 1e-6 relative of the exact
//! value, and every intermediate value must have exactly one reader (and not
//! be a graph output), so removing the chain changes nothing else. The GELU
//! node takes the last Mul's place and output value.

use super::{PassError, PassSummary, Uses};
use crate::ir::{debug_verify, BinaryOp, Graph, Node, NodeId, Op, Patch, UnaryOp, ValueId};
use std::collections::HashMap;

const PASS: &str = "fuse_gelu";

/// Replaces every erf-form GELU by one `Unary(Gelu)` node.
pub fn fuse_gelu(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let find = |m: &Matcher, id: NodeId| {
        (m.graph.node(id).op == Op::Unary(UnaryOp::Erf))
            .then(|| m.gelu_at(id))
            .flatten()
    };
    rewrite_matches(
        graph,
        PASS,
        "GELU fused",
        find,
        |graph, patch, found: Found| {
            let op = Op::Unary(UnaryOp::Gelu { tanh: false });
            replace_chain(graph, patch, &found.chain, found.last, op, vec![found.x]);
        },
    )
}

/// Removes the matched `chain` and puts one node computing `op` on
/// `inputs` in `last`'s place, with its name and output value.
pub(super) fn replace_chain(
    graph: &Graph,
    patch: &mut Patch,
    chain: &[NodeId],
    last: NodeId,
    op: Op,
    inputs: Vec<ValueId>,
) {
    for &dead in chain {
        patch.remove_node(dead);
    }
    let node = graph.node(last);
    patch.replace_node(
        last,
        Node {
            name: node.name.clone(),
            op,
            inputs,
            output: node.output,
        },
    );
}

/// Runs a pattern pass: `find` on every node in order, `rewrite` of each
/// match into one patch (matching sees the graph before any rewrite); the
/// summary counts the matches as `what`.
pub(super) fn rewrite_matches<F>(
    graph: &mut Graph,
    pass: &'static str,
    what: &str,
    find: impl Fn(&Matcher, NodeId) -> Option<F>,
    mut rewrite: impl FnMut(&Graph, &mut Patch, F),
) -> Result<PassSummary, PassError> {
    let uses = Uses::of(graph);
    let producers = graph.producers();
    let mut patch = Patch::new(graph);
    let mut matched = 0;
    let m = Matcher {
        graph,
        uses: &uses,
        producers: &producers,
    };
    for id in graph.node_ids() {
        if let Some(found) = find(&m, id) {
            rewrite(graph, &mut patch, found);
            matched += 1;
        }
    }
    patch.apply(graph);
    debug_verify(graph, pass);
    let mut summary = PassSummary::new(pass);
    summary.add(matched, what);
    Ok(summary)
}

/// One matched GELU: its input, the nodes to remove, the node it replaces.
struct Found {
    x: ValueId,
    chain: Vec<NodeId>,
    last: NodeId,
}

pub(super) struct Matcher<'g> {
    pub graph: &'g Graph,
    pub uses: &'g Uses,
    pub producers: &'g HashMap<ValueId, NodeId>,
}

impl Matcher<'_> {
    /// The scalar value of constant `v` (all elements equal), if it is one.
    pub fn scalar(&self, v: ValueId) -> Option<f32> {
        let data = self.graph.value(v).constant_data()?;
        let first = *data.first()?;
        data.iter().all(|&d| d == first).then_some(first)
    }

    /// Whether `v` is a scalar constant within 1e-6 relative of `want`.
    pub fn is_scalar(&self, v: ValueId, want: f64) -> bool {
        self.scalar(v)
            .is_some_and(|s| ((s as f64) - want).abs() <= 1e-6 * want.abs().max(1e-30))
    }

    /// The node producing `v` when `v` has no other reader than `reader`.
    pub fn sole_producer(&self, v: ValueId, reader: NodeId) -> Option<NodeId> {
        (self.uses.sole_user(v) == Some(reader)).then_some(*self.producers.get(&v)?)
    }

    /// The one reader of node `id`'s output (not a graph output).
    pub fn next(&self, id: NodeId) -> Option<NodeId> {
        self.uses.sole_user(self.graph.node(id).output)
    }

    /// For a binary node `id` of `op` with `known` as one operand, the other.
    pub fn other_operand(&self, id: NodeId, op: BinaryOp, known: ValueId) -> Option<ValueId> {
        let node = self.graph.node(id);
        if node.op != Op::Binary(op) || node.inputs.len() != 2 {
            return None;
        }
        match (node.inputs[0], node.inputs[1]) {
            (a, b) if a == known => Some(b),
            (a, b) if b == known => Some(a),
            _ => None,
        }
    }

    /// For a binary node `id` of `op` with a scalar constant `value` as one
    /// operand (either side when `commutes`), the other operand.
    pub fn with_scalar(&self, id: NodeId, op: BinaryOp, value: f64) -> Option<ValueId> {
        let node = self.graph.node(id);
        if node.op != Op::Binary(op) || node.inputs.len() != 2 {
            return None;
        }
        let commutes = matches!(op, BinaryOp::Add | BinaryOp::Mul);
        let (a, b) = (node.inputs[0], node.inputs[1]);
        if self.is_scalar(b, value) {
            Some(a)
        } else if commutes && self.is_scalar(a, value) {
            Some(b)
        } else {
            None
        }
    }

    fn gelu_at(&self, erf: NodeId) -> Option<Found> {
        let scaled = self.graph.node(erf).inputs[0];
        let div = self.sole_producer(scaled, erf)?;
        let x = self
            .with_scalar(div, BinaryOp::Div, std::f64::consts::SQRT_2)
            .or_else(|| self.with_scalar(div, BinaryOp::Mul, std::f64::consts::FRAC_1_SQRT_2))?;
        let add = self.next(erf)?;
        let t = self.graph.node(add).output;
        if self.with_scalar(add, BinaryOp::Add, 1.0)? != self.graph.node(erf).output {
            return None;
        }
        let mul1 = self.uses.sole_user(t)?;
        let other = self.other_operand(mul1, BinaryOp::Mul, t)?;
        let mut chain = vec![div, erf, add];
        let last = if other == x || self.is_scalar(other, 0.5) {
            // (x·t)·0.5 or (t·0.5)·x: one more Mul by what is missing.
            let mul2 = self.next(mul1)?;
            let want_x = other != x;
            let rest = self.other_operand(mul2, BinaryOp::Mul, self.graph.node(mul1).output)?;
            let fits = if want_x {
                rest == x
            } else {
                self.is_scalar(rest, 0.5)
            };
            if !fits {
                return None;
            }
            chain.push(mul1);
            mul2
        } else {
            // (x·0.5)·t: `other` is x·0.5, read only here.
            let half = self.sole_producer(other, mul1)?;
            if self.with_scalar(half, BinaryOp::Mul, 0.5)? != x {
                return None;
            }
            chain.push(half);
            mul1
        };
        Some(Found { x, chain, last })
    }
}
