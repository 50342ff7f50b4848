//! Transpose canonicalisation: fewer Transposes and copies, more free views.
//!
//! A Transpose moves bytes only when it changes the relative order of its
//! input's non-unit axes; size-1 axes can sit anywhere without moving a
//! byte. So, in rounds until nothing changes:
//! - (a) a Transpose that only moves size-1 axes becomes a Reshape, which the
//!   memory plan aliases as a free view;
//! - (b) a chain `Transpose → (views that only insert or remove size-1 axes)
//!   → Transpose` becomes one Transpose of the chain's input, followed by a
//!   Reshape where the ranks differ, or only a Reshape (nothing) when the
//!   composition keeps the non-unit axes in order. Every value inside the
//!   chain must have the chain's next node as its only reader and not be a
//!   graph output, so removing the chain changes nothing else;
//! - (c) an identity Transpose is removed (its readers read its input); one
//!   whose output is a graph output becomes a same-shape Reshape instead, so
//!   the graph never returns one of its inputs or a value twice;
//! - (d) a Slice, Pad, Expand, Tile or Gather that copies its input
//!   unchanged (full range, zero pads, same shape, repeats of 1, every
//!   index in order: the TorchScript Swin export has such Pads and Slices in
//!   every block, the dynamo ConvNeXt such a Gather in its head) goes the
//!   way of (c), or becomes a Reshape where its output has another shape;
//! - (e) a Transpose of a view that only merges runs of adjacent axes (see
//!   [`merged_runs`]; ViT's patch embedding `[B, C, H, W] → [B, C, H·W]`
//!   then perm `[0, 2, 1]`) becomes a Transpose of the view's input, each
//!   merged axis replaced by its run, followed by a Reshape to the old
//!   output: `[B, C, H, W]` perm `[0, 2, 3, 1]`, then `[B, H·W, C]`. Every
//!   perm moves the runs as units, so it always applies when the view's
//!   output is read only by the Transpose and is not a graph output. Behind
//!   a channels-last conv, the Transpose is then a free byte view where it
//!   was a layout Convert and a Transpose kernel.
//!
//! Only row-major values of one dtype are rewritten (the pass runs before
//! layouts and precisions are assigned, where every value is such). Rewrites
//! (a) to (d) remove a Transpose or a copy, and (e) moves a Transpose ahead
//! of a view (never back), so the rounds terminate.

use super::{PassError, PassSummary, Uses};
use crate::ir::{debug_verify, is_row_major_bytes, Graph, Node, NodeId, Op, Patch, Value, ValueId};
use std::collections::{HashMap, HashSet};
use std::ops::Range;

const PASS: &str = "canonicalize_transpose";

/// What the rounds did, for the summary.
#[derive(Debug, Default)]
struct Counts {
    removed: usize,
    views: usize,
    composed: usize,
    unmerged: usize,
    noops: usize,
}

/// Removes identity Transposes, turns those that only move size-1 axes into
/// Reshapes, composes Transpose chains, and moves Transposes ahead of the
/// views that merge their input's axes.
pub fn canonicalize_transpose(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let mut counts = Counts::default();
    while round(graph, &mut counts) {}
    debug_verify(graph, PASS);
    let mut summary = PassSummary::new(PASS);
    summary.add(counts.removed, "identity Transpose removed");
    summary.add(counts.views, "Transpose of size-1 axes → Reshape");
    summary.add(counts.composed, "Transpose chains composed");
    summary.add(counts.unmerged, "Transpose moved ahead of a merging view");
    summary.add(counts.noops, "no-op Slice/Pad/Expand/Tile removed");
    Ok(summary)
}

/// The non-unit axes of `shape`, in order.
fn non_unit(shape: &[usize]) -> Vec<usize> {
    (0..shape.len()).filter(|&i| shape[i] != 1).collect()
}

/// True when `perm` applied to `shape` keeps the non-unit axes in order.
fn keeps_order(perm: &[usize], shape: &[usize]) -> bool {
    let moved: Vec<usize> = perm.iter().copied().filter(|&p| shape[p] != 1).collect();
    moved.windows(2).all(|w| w[0] < w[1])
}

/// True when `op` (a Slice, Pad, Expand, Tile or Gather) on an input of
/// `shape` copies it unchanged: a full-range step-1 slice, zero padding,
/// an expansion or tiling to the same shape, a gather of every index in
/// order along its axis (ConvNeXt's TorchScript head).
fn copies_unchanged(op: &Op, shape: &[usize]) -> bool {
    match op {
        Op::Slice {
            starts,
            ends,
            steps,
        } => {
            starts.len() == shape.len()
                && ends.len() == shape.len()
                && steps.len() == shape.len()
                && (0..shape.len()).all(|k| {
                    steps[k] == 1
                        && crate::ops::slice::axis_range(shape[k], starts[k], ends[k], 1)
                            == Ok((0, shape[k]))
                })
        }
        Op::Pad { pads, .. } => pads.len() == shape.len() && pads.iter().all(|&p| p == (0, 0)),
        Op::Expand { shape: to } => to == shape,
        Op::Tile { repeats } => repeats.len() == shape.len() && repeats.iter().all(|&r| r == 1),
        Op::Gather {
            axis,
            indices,
            indices_shape,
        } => {
            shape.get(*axis) == Some(&indices.len())
                && indices_shape.iter().product::<usize>() == indices.len()
                && indices.iter().enumerate().all(|(i, &x)| x == i as i64)
        }
        _ => false,
    }
}

/// True when the dims of `a` other than 1 are those of `b`, in order: a
/// view between them only inserts or removes size-1 axes.
fn same_non_unit_dims(a: &[usize], b: &[usize]) -> bool {
    let f = |s: &[usize]| s.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
    f(a) == f(b)
}

/// A Reshape node writing `output` (whose shape is the target).
fn reshape(name: String, input: ValueId, output: ValueId, shape: &[usize]) -> Node {
    Node {
        name,
        op: Op::Reshape {
            shape: shape.iter().map(|&d| d as i64).collect(),
            allowzero: false,
        },
        inputs: vec![input],
        output,
    }
}

/// One pass over the nodes; true when something was rewritten.
fn round(graph: &mut Graph, counts: &mut Counts) -> bool {
    let uses = Uses::of(graph);
    let producers = graph.producers();
    let mut patch = Patch::new(graph);
    // Nodes this round already rewrote or removed, and values it substituted
    // (new nodes read through this map: the patch leaves their inputs as
    // written).
    let mut taken: HashSet<NodeId> = HashSet::new();
    let mut subst: HashMap<ValueId, ValueId> = HashMap::new();
    let resolve = |subst: &HashMap<ValueId, ValueId>, mut v: ValueId| {
        while let Some(&next) = subst.get(&v) {
            v = next;
        }
        v
    };
    for id in graph.node_ids() {
        let node = graph.node(id);
        let [x] = node.inputs[..] else {
            continue;
        };
        if taken.contains(&id) || !plain(graph, x, node.output) {
            continue;
        }
        let x_shape = &graph.value(x).shape;
        let transpose = matches!(node.op, Op::Transpose { .. });
        let identity = match &node.op {
            Op::Transpose { perm } => {
                if let Some(chain) = chain_back(graph, &uses, &producers, id) {
                    if chain.iter().all(|n| !taken.contains(n)) {
                        let done = compose(graph, &uses, &mut patch, &chain, id, &subst);
                        if let Some((old, new)) = done {
                            subst.insert(old, new);
                        }
                        taken.extend(chain.iter().copied());
                        taken.insert(id);
                        counts.composed += 1;
                        continue;
                    }
                }
                if !keeps_order(perm, x_shape) {
                    let merge = merge_back(graph, &uses, &producers, id);
                    if let Some((view, runs)) = merge.filter(|(v, _)| !taken.contains(v)) {
                        let input = resolve(&subst, graph.node(view).inputs[0]);
                        let perm: Vec<usize> = perm.iter().flat_map(|&p| runs[p].clone()).collect();
                        unmerge(graph, &mut patch, view, id, input, perm);
                        taken.extend([view, id]);
                        counts.unmerged += 1;
                    }
                    continue;
                }
                perm.iter().enumerate().all(|(i, &p)| i == p)
            }
            // A copy into another shape (a Gather of every index with its
            // indices `[1, n]`) becomes a Reshape.
            op if copies_unchanged(op, x_shape) => graph.value(node.output).shape == *x_shape,
            _ => continue,
        };
        taken.insert(id);
        let input = resolve(&subst, x);
        if identity && !uses.is_output(node.output) {
            patch.substitute(node.output, input);
            subst.insert(node.output, input);
            patch.remove_node(id);
        } else {
            let out_shape = graph.value(node.output).shape.clone();
            let r = reshape(node.name.clone(), input, node.output, &out_shape);
            patch.replace_node(id, r);
        }
        match (transpose, identity) {
            (false, _) => counts.noops += 1,
            (true, true) if !uses.is_output(node.output) => counts.removed += 1,
            (true, _) => counts.views += 1,
        }
    }
    if patch.is_empty() {
        return false;
    }
    patch.apply(graph);
    true
}

/// True when `a` and `b` are row-major values of one dtype.
fn plain(graph: &Graph, a: ValueId, b: ValueId) -> bool {
    let (a, b) = (graph.value(a), graph.value(b));
    a.dtype == b.dtype
        && is_row_major_bytes(&a.shape, a.layout)
        && is_row_major_bytes(&b.shape, b.layout)
}

/// For Transpose `last`, the nodes of a chain `Transpose → views that only
/// insert or remove size-1 axes → last`, first Transpose first, each value
/// in it read only by the next node.
fn chain_back(
    graph: &Graph,
    uses: &Uses,
    producers: &HashMap<ValueId, NodeId>,
    last: NodeId,
) -> Option<Vec<NodeId>> {
    let mut chain = Vec::new();
    let (mut v, mut reader) = (graph.node(last).inputs[0], last);
    loop {
        if uses.sole_user(v) != Some(reader) {
            return None;
        }
        let p = *producers.get(&v)?;
        let node = graph.node(p);
        let input = *node.inputs.first()?;
        if !plain(graph, input, v) {
            return None;
        }
        match &node.op {
            Op::Transpose { .. } => {
                chain.push(p);
                chain.reverse();
                return Some(chain);
            }
            op if op.is_view()
                && node.inputs.len() == 1
                && same_non_unit_dims(&graph.value(input).shape, &graph.value(v).shape) =>
            {
                chain.push(p);
                (v, reader) = (input, p);
            }
            _ => return None,
        }
    }
}

/// For a view from shape `from` to shape `to` that only merges runs of
/// adjacent axes, the run of `from` axes behind each axis of `to`, in order.
///
/// Runs are taken greedily from the left: each is the shortest (at least
/// one axis) whose dims multiply to its `to` dim, so a size-1 axis of
/// `from` joins the run that follows it. `None` when the runs do not use up
/// `from` exactly (a split, a regrouping, trailing size-1 axes), or when no
/// run holds two axes of size other than 1 (the view only inserts or
/// removes size-1 axes: nothing moves, and (b) composes such chains).
fn merged_runs(from: &[usize], to: &[usize]) -> Option<Vec<Range<usize>>> {
    let mut runs = Vec::with_capacity(to.len());
    let mut start = 0;
    for &d in to {
        let (mut end, mut product) = (start, 1);
        while end < from.len() && (end == start || product < d) {
            product *= from[end];
            end += 1;
        }
        if end == start || product != d {
            return None;
        }
        runs.push(start..end);
        start = end;
    }
    let merges = |r: &Range<usize>| from[r.clone()].iter().filter(|&&d| d != 1).count() > 1;
    (start == from.len() && runs.iter().any(merges)).then_some(runs)
}

/// For Transpose `transpose`, the single-input view writing its input and
/// that view's [`merged_runs`], when it only merges runs of adjacent axes,
/// its output is read only by the Transpose and is not a graph output, and
/// both its values are plain.
fn merge_back(
    graph: &Graph,
    uses: &Uses,
    producers: &HashMap<ValueId, NodeId>,
    transpose: NodeId,
) -> Option<(NodeId, Vec<Range<usize>>)> {
    let merged = graph.node(transpose).inputs[0];
    if uses.sole_user(merged) != Some(transpose) {
        return None;
    }
    let view = *producers.get(&merged)?;
    let node = graph.node(view);
    let [x] = node.inputs[..] else {
        return None;
    };
    let (from, to) = (&graph.value(x).shape, &graph.value(merged).shape);
    if !node.op.is_view() || !plain(graph, x, merged) {
        return None;
    }
    Some((view, merged_runs(from, to)?))
}

/// Rewrites `view → transpose` ([`merge_back`] found it) as a Transpose of
/// `x` (the view's input, after this round's substitutions) by `perm` (the
/// old perm with each merged axis replaced by its run), then a Reshape
/// writing the old Transpose's output. The view's output, read only by the
/// old Transpose, becomes the new Transpose's (renamed, reshaped).
fn unmerge(
    graph: &Graph,
    patch: &mut Patch,
    view: NodeId,
    transpose: NodeId,
    x: ValueId,
    perm: Vec<usize>,
) {
    let node = graph.node(transpose);
    let merged = node.inputs[0];
    let x_shape = &graph.value(graph.node(view).inputs[0]).shape;
    let name = node.name.clone();
    let value = Value {
        name: format!("{name}/transposed"),
        shape: perm.iter().map(|&p| x_shape[p]).collect(),
        ..graph.value(merged).clone()
    };
    patch.set_value(merged, value);
    patch.remove_node(view);
    let new = Node {
        name: name.clone(),
        op: Op::Transpose { perm },
        inputs: vec![x],
        output: merged,
    };
    patch.insert_before(transpose, new);
    let out_shape = &graph.value(node.output).shape;
    let r = reshape(format!("{name}/view"), merged, node.output, out_shape);
    patch.replace_node(transpose, r);
}

/// Rewrites `chain → last` (a chain [`chain_back`] found) as one Transpose
/// of the first Transpose's input, with a Reshape where needed; returns the
/// substitution `(old, new)` it made when the chain vanished entirely.
fn compose(
    graph: &Graph,
    uses: &Uses,
    patch: &mut Patch,
    chain: &[NodeId],
    last: NodeId,
    subst: &HashMap<ValueId, ValueId>,
) -> Option<(ValueId, ValueId)> {
    let first = graph.node(chain[0]);
    let (Op::Transpose { perm: p1 }, Op::Transpose { perm: p2 }) =
        (&first.op, &graph.node(last).op)
    else {
        return None;
    };
    let mut x = first.inputs[0];
    while let Some(&next) = subst.get(&x) {
        x = next;
    }
    let x_shape = graph.value(first.inputs[0]).shape.clone();
    let a_shape = &graph.value(first.output).shape;
    let b = graph.node(last).inputs[0];
    let b_shape = &graph.value(b).shape;
    let out = graph.node(last).output;
    let c_shape = graph.value(out).shape.clone();
    // The x axis behind each non-unit axis of a, hence of b (same order).
    let a_axes: Vec<usize> = non_unit(a_shape).into_iter().map(|i| p1[i]).collect();
    let mut b_axis = vec![usize::MAX; b_shape.len()];
    for (k, i) in non_unit(b_shape).into_iter().enumerate() {
        b_axis[i] = a_axes[k];
    }
    // The x axes behind c's non-unit axes, in c's order.
    let order: Vec<usize> = non_unit(&c_shape)
        .into_iter()
        .map(|i| b_axis[p2[i]])
        .collect();
    for &dead in chain {
        patch.remove_node(dead);
    }
    let name = graph.node(last).name.clone();
    if order.windows(2).all(|w| w[0] < w[1]) {
        // The non-unit axes stay in order: no byte moves.
        if c_shape == x_shape && !uses.is_output(out) {
            patch.substitute(out, x);
            patch.remove_node(last);
            return Some((out, x));
        }
        patch.replace_node(last, reshape(name, x, out, &c_shape));
        return None;
    }
    let units: Vec<usize> = (0..x_shape.len()).filter(|&i| x_shape[i] == 1).collect();
    // Where the ranks agree, x's unit axes fill c's unit positions, so the
    // Transpose writes c itself; otherwise they go first and a Reshape
    // follows.
    let in_place = (c_shape.len() == x_shape.len()).then(|| {
        let (mut units, mut moved) = (units.iter(), order.iter());
        c_shape
            .iter()
            .map(|&d| if d == 1 { units.next() } else { moved.next() }.copied())
            .collect::<Option<Vec<usize>>>()
    });
    let perm = in_place
        .flatten()
        .unwrap_or_else(|| units.iter().chain(&order).copied().collect());
    let t_shape: Vec<usize> = perm.iter().map(|&p| x_shape[p]).collect();
    let transpose = |output| Node {
        name: name.clone(),
        op: Op::Transpose { perm: perm.clone() },
        inputs: vec![x],
        output,
    };
    if t_shape == c_shape {
        patch.replace_node(last, transpose(out));
    } else {
        // The first Transpose's output, read only inside the removed chain,
        // becomes the new Transpose's (keeping the value numbering in node
        // order).
        let tmp = first.output;
        let value = Value {
            name: format!("{name}/transposed"),
            shape: t_shape,
            ..graph.value(tmp).clone()
        };
        patch.set_value(tmp, value);
        patch.insert_before(last, transpose(tmp));
        let r = reshape(format!("{name}/view"), tmp, out, &c_shape);
        patch.replace_node(last, r);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{print_graph, UnaryOp};
    use crate::passes::direct_eval;
    use crate::test_graphs::{op_counts, Builder};

    fn transpose(b: &mut Builder, name: &str, x: ValueId, perm: &[usize]) -> ValueId {
        b.node(
            name,
            Op::Transpose {
                perm: perm.to_vec(),
            },
            &[x],
        )
    }

    fn view(b: &mut Builder, name: &str, x: ValueId, shape: &[i64]) -> ValueId {
        let op = Op::Reshape {
            shape: shape.to_vec(),
            allowzero: false,
        };
        b.node(name, op, &[x])
    }

    /// Runs the pass on `graph`, checks it computes the same (bit for bit:
    /// only copies) on the direct evaluator and the CPU reference, and
    /// returns the result and its summary.
    fn run(graph: &Graph) -> (Graph, PassSummary) {
        run_checked(graph, true)
    }

    /// [`run`], on the CPU reference only unless `direct` (the direct
    /// evaluator knows Transpose, not Slice, Pad, Expand or Tile).
    fn run_checked(graph: &Graph, direct: bool) -> (Graph, PassSummary) {
        let mut after = graph.clone();
        let summary = canonicalize_transpose(&mut after).unwrap();
        let inputs: Vec<Vec<f32>> = graph
            .inputs
            .iter()
            .map(|&v| {
                (0..graph.value(v).numel())
                    .map(|i| i as f32 * 0.25 - 3.0)
                    .collect()
            })
            .collect();
        let refs: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        if direct {
            let want = direct_eval::evaluate(graph, &refs);
            let got = direct_eval::evaluate(&after, &refs);
            assert_eq!(got, want, "{}", print_graph(&after));
        }
        let opts = crate::reference::RunOptions::default();
        let want = crate::reference::run(graph, &refs, &opts).unwrap();
        let got = crate::reference::run(&after, &refs, &opts).unwrap();
        assert_eq!(got, want);
        (after, summary)
    }

    #[test]
    fn a_transpose_of_a_unit_axis_becomes_a_reshape() {
        // ViT's [1,197,768] → [197,1,768]: the same bytes.
        let mut b = Builder::new();
        let x = b.input("x", &[1, 197, 768]);
        let r = b.node("relu", Op::Unary(UnaryOp::Relu), &[x]);
        let t = transpose(&mut b, "t", r, &[1, 0, 2]);
        let y = b.node("out", Op::Unary(UnaryOp::Relu), &[t]);
        b.output(y);
        let g = b.finish();
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,197,768]  # x
          %1: f32[1,197,768] = Relu(%0)  # relu
          %2: f32[197,1,768] = Transpose(%1) perm=[1, 0, 2]  # t
          %3: f32[197,1,768] = Relu(%2)  # out
          return %3
        ");
        let (after, summary) = run(&g);
        insta::assert_snapshot!(print_graph(&after), @r"
        graph precision=fp32
          input %0: f32[1,197,768]  # x
          %1: f32[1,197,768] = Relu(%0)  # relu
          %2: f32[197,1,768] = Reshape(%1) shape=[197, 1, 768]  # t
          %3: f32[197,1,768] = Relu(%2)  # out
          return %3
        ");
        assert_eq!(
            summary.to_string(),
            "canonicalize_transpose: 1 Transpose of size-1 axes → Reshape"
        );
    }

    #[test]
    fn transposes_that_cancel_through_a_unit_reshape_vanish() {
        // ViT's kᵀ: [12,197,64] → [12,64,197] → [1,12,64,197] → [1,12,197,64].
        let mut b = Builder::new();
        let x = b.input("x", &[12, 197, 64]);
        let k = b.node("k", Op::Unary(UnaryOp::Relu), &[x]);
        let kt = transpose(&mut b, "kt", k, &[0, 2, 1]);
        let v = view(&mut b, "view", kt, &[1, 12, 64, 197]);
        let back = transpose(&mut b, "back", v, &[0, 1, 3, 2]);
        let y = b.node("out", Op::Unary(UnaryOp::Relu), &[back]);
        b.output(y);
        let (after, summary) = run(&b.finish());
        insta::assert_snapshot!(print_graph(&after), @r"
        graph precision=fp32
          input %0: f32[12,197,64]  # x
          %1: f32[12,197,64] = Relu(%0)  # k
          %2: f32[1,12,197,64] = Reshape(%1) shape=[1, 12, 197, 64]  # back
          %3: f32[1,12,197,64] = Relu(%2)  # out
          return %3
        ");
        assert_eq!(summary.count("Transpose chains composed"), 1);
    }

    #[test]
    fn two_transposes_compose_into_one() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 4]);
        let t1 = transpose(&mut b, "t1", x, &[1, 0, 2]);
        let t2 = transpose(&mut b, "t2", t1, &[0, 2, 1]);
        b.output(t2);
        let (after, _) = run(&b.finish());
        insta::assert_snapshot!(print_graph(&after), @r"
        graph precision=fp32
          input %0: f32[2,3,4]  # x
          %1: f32[3,4,2] = Transpose(%0) perm=[1, 2, 0]  # t2
          return %1
        ");
    }

    #[test]
    fn a_composition_across_ranks_is_a_transpose_and_a_view() {
        // [2,3,4] → [3,2,4] → [3,1,2,4] → [4,1,3,2]: one transpose of x,
        // then the unit axis comes back by a Reshape.
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 4]);
        let t1 = transpose(&mut b, "t1", x, &[1, 0, 2]);
        let v = view(&mut b, "unsqueeze", t1, &[3, 1, 2, 4]);
        let t2 = transpose(&mut b, "t2", v, &[3, 1, 0, 2]);
        b.output(t2);
        let (after, summary) = run(&b.finish());
        insta::assert_snapshot!(print_graph(&after), @r"
        graph precision=fp32
          input %0: f32[2,3,4]  # x
          %1: f32[4,3,2] = Transpose(%0) perm=[2, 1, 0]  # t2
          %2: f32[4,1,3,2] = Reshape(%1) shape=[4, 1, 3, 2]  # t2/view
          return %2
        ");
        assert_eq!(summary.count("Transpose chains composed"), 1);
    }

    #[test]
    fn identities_are_removed_except_as_graph_outputs() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3]);
        let t = transpose(&mut b, "t", x, &[0, 1]);
        let y = b.node("relu", Op::Unary(UnaryOp::Relu), &[t]);
        let z = transpose(&mut b, "z", y, &[0, 1]);
        b.output(z);
        let (after, summary) = run(&b.finish());
        insta::assert_snapshot!(print_graph(&after), @r"
        graph precision=fp32
          input %0: f32[2,3]  # x
          %1: f32[2,3] = Relu(%0)  # relu
          %2: f32[2,3] = Reshape(%1) shape=[2, 3]  # z
          return %2
        ");
        assert_eq!(
            summary.to_string(),
            "canonicalize_transpose: 1 identity Transpose removed, 1 Transpose of size-1 axes → Reshape"
        );
    }

    #[test]
    fn copies_that_change_nothing_vanish() {
        // Swin (TorchScript): a zero Pad, then full-range Slices.
        let mut b = Builder::new();
        let x = b.input("x", &[1, 8, 8, 4]);
        let r = b.node("relu", Op::Unary(UnaryOp::Relu), &[x]);
        let pad = Op::Pad {
            pads: vec![(0, 0); 4],
            mode: crate::ir::PadMode::Constant { value: 0.0 },
        };
        let p = b.node("pad", pad, &[r]);
        let full = Op::Slice {
            starts: vec![0, 0, -100, 0],
            ends: vec![i64::MAX, 8, i64::MAX, 8],
            steps: vec![1; 4],
        };
        let s = b.node("slice", full, &[p]);
        // A full range walked backwards reverses: it stays.
        let reverse = Op::Slice {
            starts: vec![0, -1, 0, 0],
            ends: vec![i64::MAX, i64::MIN, i64::MAX, i64::MAX],
            steps: vec![1, -1, 1, 1],
        };
        let rev = b.node("reverse", reverse, &[s]);
        let e = b.node(
            "expand",
            Op::Expand {
                shape: vec![1, 8, 8, 4],
            },
            &[rev],
        );
        let t = b.node(
            "tile",
            Op::Tile {
                repeats: vec![1; 4],
            },
            &[e],
        );
        b.output(t);
        let (after, summary) = run_checked(&b.finish(), false);
        // The Tile writes the graph output: a same-shape view, not removed.
        insta::assert_snapshot!(print_graph(&after), @r"
        graph precision=fp32
          input %0: f32[1,8,8,4]  # x
          %1: f32[1,8,8,4] = Relu(%0)  # relu
          %2: f32[1,8,8,4] = Slice(%1) starts=[0, -1, 0, 0] ends=[9223372036854775807, -9223372036854775808, 9223372036854775807, 9223372036854775807] steps=[1, -1, 1, 1]  # reverse
          %3: f32[1,8,8,4] = Reshape(%2) shape=[1, 8, 8, 4]  # tile
          return %3
        ");
        assert_eq!(summary.count("no-op Slice/Pad/Expand/Tile removed"), 4);
    }

    #[test]
    fn chains_of_three_converge_over_rounds() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 4, 5]);
        let t1 = transpose(&mut b, "t1", x, &[3, 2, 1, 0]);
        let t2 = transpose(&mut b, "t2", t1, &[1, 0, 3, 2]);
        let t3 = transpose(&mut b, "t3", t2, &[2, 3, 0, 1]);
        let y = b.node("relu", Op::Unary(UnaryOp::Relu), &[t3]);
        b.output(y);
        let (after, _) = run(&b.finish());
        // [3,2,1,0] then [1,0,3,2] then [2,3,0,1] is the identity.
        assert_eq!(op_counts(&after), [("Relu", 1)]);
        assert_eq!(after.nodes[0].inputs, after.inputs);
    }

    #[test]
    fn shared_intermediates_and_real_transposes_stay() {
        let mut b = Builder::new();
        // ViT's q/k/v split: [1,197,1,3,768] perm [3,1,2,0,4] moves the 3.
        let x = b.input("x", &[1, 197, 1, 3, 768]);
        let qkv = transpose(&mut b, "qkv", x, &[3, 1, 2, 0, 4]);
        b.output(qkv);
        // t1 is read twice: the chain cannot be removed.
        let y = b.input("y", &[2, 3, 4]);
        let t1 = transpose(&mut b, "t1", y, &[1, 0, 2]);
        let t2 = transpose(&mut b, "t2", t1, &[0, 2, 1]);
        let s = b.node("sum", Op::Sum, &[t1, t1]);
        b.output(t2);
        b.output(s);
        let g = b.finish();
        let (after, summary) = run(&g);
        assert!(summary.is_noop(), "{summary}");
        assert_eq!(after, g);
    }

    #[test]
    fn the_pass_is_idempotent() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 4]);
        let t1 = transpose(&mut b, "t1", x, &[1, 0, 2]);
        let v = view(&mut b, "unsqueeze", t1, &[3, 1, 2, 4]);
        let t2 = transpose(&mut b, "t2", v, &[3, 1, 0, 2]);
        b.output(t2);
        let (once, _) = run(&b.finish());
        let (twice, summary) = run(&once);
        assert!(summary.is_noop(), "{summary}");
        assert_eq!(twice, once);
    }

    /// ViT's patch embedding: `[B, C, H, W]` merged to `[B, C, H·W]`, then
    /// perm `[0, 2, 1]`.
    fn patch_embedding(b: &mut Builder, x: ValueId) -> ValueId {
        let shape = b.shape(x).to_vec();
        let (n, c, hw) = (shape[0] as i64, shape[1] as i64, shape[2] * shape[3]);
        let flat = view(b, "flatten", x, &[n, c, hw as i64]);
        transpose(b, "t", flat, &[0, 2, 1])
    }

    #[test]
    fn a_transpose_of_merged_axes_moves_ahead_of_the_merge() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 4, 5]);
        let r = b.node("conv", Op::Unary(UnaryOp::Relu), &[x]);
        let t = patch_embedding(&mut b, r);
        let y = b.node("out", Op::Unary(UnaryOp::Relu), &[t]);
        b.output(y);
        let (after, summary) = run(&b.finish());
        insta::assert_snapshot!(print_graph(&after), @r"
        graph precision=fp32
          input %0: f32[2,3,4,5]  # x
          %1: f32[2,3,4,5] = Relu(%0)  # conv
          %2: f32[2,4,5,3] = Transpose(%1) perm=[0, 2, 3, 1]  # t
          %3: f32[2,20,3] = Reshape(%2) shape=[2, 20, 3]  # t/view
          %4: f32[2,20,3] = Relu(%3)  # out
          return %4
        ");
        assert_eq!(
            summary.to_string(),
            "canonicalize_transpose: 1 Transpose moved ahead of a merging view"
        );
        let (again, summary) = run(&after);
        assert!(summary.is_noop(), "{summary}");
        assert_eq!(again, after);
    }

    /// Behind a conv, channels-last, the moved Transpose reads the conv's
    /// bytes as they are: no Convert, and no kernel for the Transpose.
    #[test]
    fn a_patch_embedding_behind_a_conv_needs_no_convert() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 8, 8]);
        let conv = b.conv("proj", x, 6, 2, 2, true);
        let t = patch_embedding(&mut b, conv);
        let y = b.node("out", Op::Unary(UnaryOp::Relu), &[t]);
        b.output(y);
        let (mut g, _) = run(&b.finish());
        crate::passes::fuse_epilogue(&mut g).unwrap();
        let layout = crate::passes::to_channels_last(&mut g).unwrap();
        assert_eq!(layout.count("Convert to NCHW"), 0, "{}", print_graph(&g));
        let n = g.nodes.iter().find(|n| n.name == "t").unwrap();
        let (x, y) = (g.value(n.inputs[0]), g.value(n.output));
        assert!(crate::ir::is_byte_view(&n.op, x, y), "{}", print_graph(&g));
    }

    #[test]
    fn merges_of_the_wrong_shape_or_with_other_readers_stay() {
        let mut b = Builder::new();
        // A split: [6, 4] → [2, 3, 4].
        let x = b.input("x", &[6, 4]);
        let split = view(&mut b, "split", x, &[2, 3, 4]);
        let t = transpose(&mut b, "t_split", split, &[2, 0, 1]);
        b.output(t);
        // A regrouping: [2, 6] → [3, 4], whose axes straddle the input's,
        // so no perm of them moves whole runs of input axes.
        let y = b.input("y", &[2, 6]);
        let regroup = view(&mut b, "regroup", y, &[3, 4]);
        let t = transpose(&mut b, "t_regroup", regroup, &[1, 0]);
        b.output(t);
        // A merge whose output has a second reader.
        let z = b.input("z", &[2, 3, 4, 5]);
        let merged = view(&mut b, "merge", z, &[2, 3, 20]);
        let t = transpose(&mut b, "t_shared", merged, &[0, 2, 1]);
        let s = b.node("sum", Op::Sum, &[merged, merged]);
        b.output(t);
        b.output(s);
        // A merge that is a graph output.
        let w = b.input("w", &[2, 3, 4]);
        let merged = view(&mut b, "merge_out", w, &[6, 4]);
        let t = transpose(&mut b, "t_out", merged, &[1, 0]);
        b.output(merged);
        b.output(t);
        let g = b.finish();
        let (after, summary) = run(&g);
        assert!(summary.is_noop(), "{summary}");
        assert_eq!(after, g);
    }

    #[test]
    fn a_merge_between_transposes_unfolds_and_composes() {
        // [2,3,4,5] → [2,4,5,3] → [2,20,3] → [2,3,20]: the second Transpose
        // moves ahead of the merge, then composes with the first into the
        // identity, leaving one view.
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 4, 5]);
        let r = b.node("relu", Op::Unary(UnaryOp::Relu), &[x]);
        let nhwc = transpose(&mut b, "nhwc", r, &[0, 2, 3, 1]);
        let merged = view(&mut b, "merge", nhwc, &[2, 20, 3]);
        let t = transpose(&mut b, "t", merged, &[0, 2, 1]);
        let y = b.node("out", Op::Unary(UnaryOp::Relu), &[t]);
        b.output(y);
        let (after, summary) = run(&b.finish());
        insta::assert_snapshot!(print_graph(&after), @r"
        graph precision=fp32
          input %0: f32[2,3,4,5]  # x
          %1: f32[2,3,4,5] = Relu(%0)  # relu
          %2: f32[2,3,20] = Reshape(%1) shape=[2, 3, 20]  # t/view
          %3: f32[2,3,20] = Relu(%2)  # out
          return %3
        ");
        assert_eq!(summary.count("Transpose moved ahead of a merging view"), 1);
        assert_eq!(summary.count("Transpose chains composed"), 1);
    }

    #[test]
    fn merged_runs_are_greedy_and_exact() {
        let runs = |from: &[usize], to: &[usize]| merged_runs(from, to);
        assert_eq!(
            runs(&[8, 3, 14, 14], &[8, 3, 196]),
            Some(vec![0..1, 1..2, 2..4])
        );
        // A size-1 axis joins the run after it.
        assert_eq!(runs(&[2, 1, 3, 4], &[2, 12]), Some(vec![0..1, 1..4]));
        assert_eq!(
            runs(&[2, 1, 3, 4], &[2, 1, 12]),
            Some(vec![0..1, 1..2, 2..4])
        );
        // Trailing size-1 axes, splits, regroupings, unit-only views: none.
        assert_eq!(runs(&[2, 3, 4, 1], &[2, 12]), None);
        assert_eq!(runs(&[6, 4], &[2, 3, 4]), None);
        assert_eq!(runs(&[2, 6], &[3, 4]), None);
        assert_eq!(runs(&[1, 197, 768], &[197, 768]), None);
        assert_eq!(runs(&[2, 3], &[2, 3]), None);
    }

    #[test]
    fn order_checks() {
        assert!(keeps_order(&[1, 0, 2], &[1, 197, 768]));
        assert!(!keeps_order(&[3, 1, 2, 0, 4], &[1, 197, 1, 3, 768]));
        assert!(keeps_order(&[0, 1, 3, 2], &[2, 3, 1, 1]));
        assert!(same_non_unit_dims(&[12, 64, 197], &[1, 12, 64, 1, 197]));
        assert!(!same_non_unit_dims(&[12, 64, 197], &[768, 197]));
    }
}
