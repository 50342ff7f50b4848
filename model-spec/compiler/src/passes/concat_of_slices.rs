//! A Concat of Slices of one value along the Concat's axis is one Gather.
//!
//! `torch.roll` exports as `Concat(Slice(x, a:), Slice(x, :a))`: Swin's
//! shifted windows roll the feature map twice (height, then width) before
//! the attention and twice back after it, three copies per roll. When every
//! input of a Concat is a Slice of the same value that cuts only the
//! Concat's axis, the output is that value gathered along the axis at the
//! concatenated slice positions: one Gather (one copy kernel with a table
//! of offsets) replaces them.
//!
//! Swin's patch merging is the other form: `cat([x[:, 0::2, 0::2], x[:,
//! 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)`, strided Slices
//! (chained, one axis each) of one value that cut other axes than the
//! Concat's, their offsets covering the whole grid of strides. That is a
//! space-to-depth: Reshape (each cut axis split into `[n, stride]`) →
//! one Transpose (the stride axes moved before the Concat's axis, in the
//! order the Concat lists them) → Reshape, instead of six Slices and the
//! Concat. Slices nothing else reads die in the final `dce`.

use super::{PassError, PassSummary};
use crate::ir::{debug_verify, Graph, Node, NodeId, Op, Patch, ValueId};
use crate::ops::slice::axis_range;
use std::collections::HashMap;

const PASS: &str = "concat_of_slices";

/// Replaces each Concat of Slices of one value along its axis by a Gather.
pub fn concat_of_slices(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let producers = graph.producers();
    let mut patch = Patch::new(graph);
    let mut count = 0;
    for id in graph.node_ids() {
        let node = graph.node(id);
        let Op::Concat { axis } = node.op else {
            continue;
        };
        if let Some(nodes) = space_to_depth(graph, &mut patch, &producers, node, axis) {
            for n in nodes {
                patch.insert_before(id, n);
            }
            patch.remove_node(id);
            count += 1;
            continue;
        }
        let Some((source, indices)) = gathered(graph, &producers, node, axis) else {
            continue;
        };
        let n = indices.len();
        patch.replace_node(
            id,
            Node {
                name: node.name.clone(),
                op: Op::Gather {
                    axis,
                    indices,
                    indices_shape: vec![n],
                },
                inputs: vec![source],
                output: node.output,
            },
        );
        count += 1;
    }
    patch.apply(graph);
    debug_verify(graph, PASS);
    let mut summary = PassSummary::new(PASS);
    summary.add(count, "Concat of Slices → Gather or Transpose");
    Ok(summary)
}

/// Per axis of a Slice's input: the first position, the step and the
/// count it keeps.
type Cut = Vec<(usize, i64, usize)>;

/// The input of the Slice that writes `v`, and what it keeps of each axis;
/// `None` unless a Slice writes `v`.
fn slice_of(
    graph: &Graph,
    producers: &HashMap<ValueId, NodeId>,
    v: ValueId,
) -> Option<(ValueId, Cut)> {
    let node = graph.node(*producers.get(&v)?);
    let Op::Slice {
        starts,
        ends,
        steps,
    } = &node.op
    else {
        return None;
    };
    let x = *node.inputs.first()?;
    let (xv, yv) = (graph.value(x), graph.value(v));
    let shape = &xv.shape;
    if starts.len() != shape.len()
        || ends.len() != shape.len()
        || steps.len() != shape.len()
        || xv.dtype != yv.dtype
        || xv.layout != yv.layout
    {
        return None;
    }
    let mut cut = Vec::with_capacity(shape.len());
    for k in 0..shape.len() {
        let (first, n) = axis_range(shape[k], starts[k], ends[k], steps[k]).ok()?;
        cut.push((first, steps[k], n));
    }
    Some((x, cut))
}

/// The source of the chain of positive-step Slices that ends in `v`, and
/// what the chain keeps of each of its axes; `None` unless `v` is a Slice.
fn slice_chain(
    graph: &Graph,
    producers: &HashMap<ValueId, NodeId>,
    v: ValueId,
) -> Option<(ValueId, Cut)> {
    let (x, own) = slice_of(graph, producers, v)?;
    if own.iter().any(|&(_, step, _)| step <= 0) {
        return None;
    }
    match slice_chain(graph, producers, x) {
        // x = outer[f + s·i]; v = x[f2 + s2·j] = outer[f + s·f2 + s·s2·j].
        Some((source, outer)) => {
            let cut = outer
                .iter()
                .zip(&own)
                .map(|(&(f, s, _), &(f2, s2, n))| (f + s as usize * f2, s * s2, n))
                .collect();
            Some((source, cut))
        }
        None => Some((x, own)),
    }
}

/// Swin's patch merging (module doc) as Reshape → Transpose → Reshape
/// nodes writing the Concat's output, when `concat` is one.
fn space_to_depth(
    graph: &Graph,
    patch: &mut Patch,
    producers: &HashMap<ValueId, NodeId>,
    concat: &Node,
    axis: usize,
) -> Option<Vec<Node>> {
    let mut source = None;
    let mut cuts = Vec::new();
    for &input in &concat.inputs {
        let (x, cut) = slice_chain(graph, producers, input)?;
        if source.is_some_and(|s| s != x) {
            return None;
        }
        source = Some(x);
        cuts.push(cut);
    }
    let x = source?;
    let xv = graph.value(x);
    let shape = xv.shape.clone();
    if xv.layout != graph.value(concat.output).layout
        || xv.dtype != graph.value(concat.output).dtype
    {
        return None;
    }
    // Steps as strides (`slice_chain` keeps positive ones only).
    let cuts: Vec<Vec<(usize, usize, usize)>> = cuts
        .iter()
        .map(|c| c.iter().map(|&(f, s, n)| (f, s as usize, n)).collect())
        .collect();
    // The cut axes: stride > 1, the same stride and count in every input,
    // the dim a multiple of the stride; the Concat's axis and the rest whole.
    let rank = shape.len();
    let mut cut_axes = Vec::new();
    for k in 0..rank {
        let (_, s, n) = cuts[0][k];
        let whole = cuts.iter().all(|c| c[k] == (0, 1, shape[k]));
        if whole {
            continue;
        }
        let regular = s > 1
            && shape[k] == s * n
            && cuts
                .iter()
                .all(|c| c[k].1 == s && c[k].2 == n && c[k].0 < s);
        if !regular || k == axis {
            return None;
        }
        cut_axes.push(k);
    }
    let grid: usize = cut_axes.iter().map(|&k| cuts[0][k].1).product();
    if cut_axes.is_empty() || grid != cuts.len() {
        return None;
    }
    // The order of the stride axes in which the inputs enumerate the grid
    // row-major.
    let order = permutations(&cut_axes).into_iter().find(|order| {
        cuts.iter().enumerate().all(|(q, c)| {
            let mut index = 0;
            for &k in order {
                index = index * cuts[0][k].1 + c[k].0;
            }
            index == q
        })
    })?;
    // Split shape: each cut axis k becomes [n_k, s_k] (position of k's n,
    // then its s); the Transpose keeps the other axes and the n's in place
    // and puts the s's, in `order`, just before the Concat's axis.
    let mut split = Vec::new();
    let mut n_at = vec![0; rank];
    let mut s_at = vec![usize::MAX; rank];
    for k in 0..rank {
        n_at[k] = split.len();
        if cut_axes.contains(&k) {
            let (_, s, n) = cuts[0][k];
            split.push(n);
            s_at[k] = split.len();
            split.push(s);
        } else {
            split.push(shape[k]);
        }
    }
    let mut perm = Vec::new();
    for (k, &n) in n_at.iter().enumerate() {
        if k == axis {
            perm.extend(order.iter().map(|&a| s_at[a]));
        }
        perm.push(n);
    }
    let moved: Vec<usize> = perm.iter().map(|&p| split[p]).collect();
    let value = |patch: &mut Patch, name: String, shape: Vec<usize>| {
        patch.add_value(crate::ir::Value {
            name,
            shape,
            kind: crate::ir::ValueKind::Activation,
            ..xv.clone()
        })
    };
    let (a, b) = (
        value(patch, format!("{}.split", concat.name), split.clone()),
        value(patch, format!("{}.moved", concat.name), moved.clone()),
    );
    let reshape = |to: &[usize]| Op::Reshape {
        shape: to.iter().map(|&d| d as i64).collect(),
        allowzero: false,
    };
    let out_shape = graph.value(concat.output).shape.clone();
    Some(vec![
        Node {
            name: format!("{}/split", concat.name),
            op: reshape(&split),
            inputs: vec![x],
            output: a,
        },
        Node {
            name: format!("{}/transpose", concat.name),
            op: Op::Transpose { perm },
            inputs: vec![a],
            output: b,
        },
        Node {
            name: concat.name.clone(),
            op: reshape(&out_shape),
            inputs: vec![b],
            output: concat.output,
        },
    ])
}

/// Every ordering of `items`.
fn permutations(items: &[usize]) -> Vec<Vec<usize>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for i in 0..items.len() {
        let mut rest = items.to_vec();
        let first = rest.remove(i);
        for mut p in permutations(&rest) {
            p.insert(0, first);
            out.push(p);
        }
    }
    out
}

/// The value every input of `concat` slices along `axis` only, and the
/// positions along `axis` the Concat's output reads, in order.
fn gathered(
    graph: &Graph,
    producers: &HashMap<ValueId, NodeId>,
    concat: &Node,
    axis: usize,
) -> Option<(ValueId, Vec<i64>)> {
    if concat.inputs.len() < 2 {
        return None;
    }
    let mut source = None;
    let mut indices = Vec::new();
    for input in &concat.inputs {
        let (x, cut) = slice_of(graph, producers, *input)?;
        if source.is_some_and(|s| s != x) {
            return None;
        }
        source = Some(x);
        let shape = &graph.value(x).shape;
        for (k, &(first, step, n)) in cut.iter().enumerate() {
            if k == axis {
                indices.extend((0..n as i64).map(|i| first as i64 + i * step));
            } else if first != 0 || n != shape[k] || (n > 1 && step != 1) {
                return None;
            }
        }
    }
    Some((source?, indices))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::{rel_l2, run, RunOptions};
    use crate::test_graphs::{op_counts, Builder};

    fn slice(b: &mut Builder, name: &str, x: ValueId, starts: [i64; 3], ends: [i64; 3]) -> ValueId {
        let op = Op::Slice {
            starts: starts.to_vec(),
            ends: ends.to_vec(),
            steps: vec![1; 3],
        };
        b.node(name, op, &[x])
    }

    /// `torch.roll(x, 2, dims=1)` as exported, and a roll back by a
    /// negative shift: each becomes one Gather with the same result.
    #[test]
    fn a_roll_becomes_one_gather() {
        const END: i64 = i64::MAX;
        let mut b = Builder::new();
        let x = b.input("x", &[2, 5, 3]);
        let input = b.data_for(x);
        let tail = slice(&mut b, "tail", x, [0, 3, 0], [END, END, END]);
        let head = slice(&mut b, "head", x, [0, 0, 0], [END, 3, END]);
        let rolled = b.node("roll", Op::Concat { axis: 1 }, &[tail, head]);
        let back_tail = slice(&mut b, "back_tail", rolled, [0, -3, 0], [END, END, END]);
        let back_head = slice(&mut b, "back_head", rolled, [0, 0, 0], [END, -3, END]);
        let back = b.node("unroll", Op::Concat { axis: 1 }, &[back_tail, back_head]);
        b.output(rolled);
        b.output(back);
        let before = b.finish();
        let mut after = before.clone();
        let summary = concat_of_slices(&mut after).unwrap();
        assert_eq!(summary.count("Concat of Slices → Gather or Transpose"), 2);
        super::super::dce(&mut after).unwrap();
        assert_eq!(op_counts(&after), [("Gather", 2)]);
        let Op::Gather { indices, .. } = &after.nodes[0].op else {
            panic!("{:?}", after.nodes[0].op);
        };
        assert_eq!(indices, &[3, 4, 0, 1, 2]);
        let opts = RunOptions::default();
        let (want, got) = (
            run(&before, &[&input], &opts).unwrap(),
            run(&after, &[&input], &opts).unwrap(),
        );
        for (g, w) in got.iter().zip(&want) {
            assert!(rel_l2(g, w) == 0.0);
        }
    }

    /// Slices of two different values, or a Slice that also cuts another
    /// axis, stay as they are.
    #[test]
    fn other_concats_stay() {
        const END: i64 = i64::MAX;
        let mut b = Builder::new();
        let x = b.input("x", &[2, 5, 3]);
        let y = b.input("y", &[2, 5, 3]);
        let a = slice(&mut b, "a", x, [0, 0, 0], [END, 2, END]);
        let c = slice(&mut b, "c", y, [0, 2, 0], [END, END, END]);
        let two = b.node("two_sources", Op::Concat { axis: 1 }, &[a, c]);
        let d = slice(&mut b, "d", x, [0, 2, 0], [END, END, 2]);
        let e = slice(&mut b, "e", x, [0, 0, 0], [END, 2, 2]);
        let cut = b.node("other_axis_cut", Op::Concat { axis: 1 }, &[d, e]);
        b.output(two);
        b.output(cut);
        let mut g = b.finish();
        assert!(concat_of_slices(&mut g).unwrap().is_noop());
    }

    /// Swin's patch merging: four 2×2-strided Slice chains concatenated
    /// along the channels become Reshape → Transpose → Reshape.
    #[test]
    fn patch_merging_becomes_one_transpose() {
        const END: i64 = i64::MAX;
        let mut b = Builder::new();
        let x = b.input("x", &[1, 4, 6, 3]);
        let input = b.data_for(x);
        let strided = |b: &mut Builder, name: &str, v, axis: usize, start: i64| {
            let mut starts = vec![0; 4];
            let mut steps = vec![1; 4];
            starts[axis] = start;
            steps[axis] = 2;
            let op = Op::Slice {
                starts,
                ends: vec![END; 4],
                steps,
            };
            b.node(name, op, &[v])
        };
        let rows0 = strided(&mut b, "rows0", x, 1, 0);
        let rows1 = strided(&mut b, "rows1", x, 1, 1);
        let parts = [
            strided(&mut b, "x0", rows0, 2, 0),
            strided(&mut b, "x1", rows1, 2, 0),
            strided(&mut b, "x2", rows0, 2, 1),
            strided(&mut b, "x3", rows1, 2, 1),
        ];
        let merged = b.node("merge", Op::Concat { axis: 3 }, &parts);
        b.output(merged);
        let before = b.finish();
        let mut after = before.clone();
        let summary = concat_of_slices(&mut after).unwrap();
        assert_eq!(summary.count("Concat of Slices → Gather or Transpose"), 1);
        super::super::dce(&mut after).unwrap();
        assert_eq!(op_counts(&after), [("Reshape", 2), ("Transpose", 1)]);
        let opts = RunOptions::default();
        let (want, got) = (
            run(&before, &[&input], &opts).unwrap(),
            run(&after, &[&input], &opts).unwrap(),
        );
        assert!(rel_l2(&got[0], &want[0]) == 0.0);
    }
}
