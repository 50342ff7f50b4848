//! Attention operands as strided views: no copies around the attention.
//!
//! Exporters split heads with data movement: the fused q/k/v projection's
//! output `[S, 3·E]` goes through Reshape → Transpose → Gather (one per
//! operand) → Reshape → Transpose before the attention, and the attention's
//! `[B, H, S, Dv]` output through Transpose → Reshape into the next
//! projection. Every step only renumbers elements, so each attention
//! operand is an affine view of the projection's output (an offset and a
//! stride per logical axis, [`StridedView`]), and the output an affine view
//! of the value after the last Transpose. This pass walks those chains and
//! hands the views to the attention ([`AttentionViews`]), so the copies die
//! (the final `dce` removes them when nothing else reads them).
//!
//! Backwards from q, k and v it follows row-major views (Reshape, Flatten,
//! Identity), Transpose, Gather with one constant index and Slice with a
//! positive step; forwards from the output, while each value has one
//! reader, row-major views and Transpose. A view is kept only when the
//! chain held a copy (Transpose, Gather, Slice), its head axis is
//! contiguous and its offset and strides are multiples of 8 elements (the
//! tensor-core kernel's 16-byte rows), so no kernel choice gets worse.
//!
//! Walking a step needs the view's flat positions split into per-axis
//! indices of the value it reads ([`Digits`]): each logical axis must step
//! along exactly one axis of that value, without carrying into the next
//! one. Chains where that fails stop there; the copies before stay.

use super::{PassError, PassSummary, Uses};
use crate::ir::{
    debug_verify, AttentionViews, Graph, Layout, Node, NodeId, Op, Patch, StridedView, ValueId,
};
use crate::ops::attention::as_4d;
use std::collections::HashMap;

const PASS: &str = "attention_views";

/// Element alignment the tensor-core attention kernel needs (16 bytes of
/// 16-bit elements).
const ALIGN: usize = 8;

/// Gives each attention the strided views of its operands' sources.
pub fn attention_views(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let producers = graph.producers();
    let uses = Uses::of(graph);
    let mut patch = Patch::new(graph);
    let (mut inputs, mut outputs) = (0, 0);
    for id in graph.node_ids() {
        let node = graph.node(id);
        let Op::Attention {
            scale,
            causal,
            views: None,
        } = node.op
        else {
            continue;
        };
        let mut views = AttentionViews::default();
        let mut new_inputs = node.inputs.clone();
        for (i, input) in new_inputs.iter_mut().enumerate().take(3) {
            if let Some((root, view)) = trace_back(graph, &producers, *input) {
                *input = root;
                inputs += 1;
                match i {
                    0 => views.q = Some(view),
                    1 => views.k = Some(view),
                    _ => views.v = Some(view),
                }
            }
        }
        let mut output = node.output;
        if let Some((last, view, chain)) = trace_forward(graph, &uses, node.output) {
            output = last;
            views.out = Some((view, graph.value(last).shape.clone()));
            for n in chain {
                patch.remove_node(n);
            }
            outputs += 1;
        }
        if views.is_empty() {
            continue;
        }
        patch.replace_node(
            id,
            Node {
                name: node.name.clone(),
                op: Op::Attention {
                    scale,
                    causal,
                    views: Some(Box::new(views)),
                },
                inputs: new_inputs,
                output,
            },
        );
    }
    patch.apply(graph);
    debug_verify(graph, PASS);
    let mut summary = PassSummary::new(PASS);
    summary.add(inputs, "attention operand read through a strided view");
    summary.add(outputs, "attention output written through a strided view");
    Ok(summary)
}

/// The earliest value `input` is a strided view of through a chain holding
/// at least one copy, and that view.
fn trace_back(
    graph: &Graph,
    producers: &HashMap<ValueId, NodeId>,
    input: ValueId,
) -> Option<(ValueId, StridedView)> {
    let value = graph.value(input);
    let mut view = StridedView::contiguous(as_4d(&value.shape)?);
    let mut cur = input;
    let mut best = None;
    while let Some(&p) = producers.get(&cur) {
        let node = graph.node(p);
        let Some(&src) = node.inputs.first() else {
            break;
        };
        let (x, y) = (graph.value(cur), graph.value(src));
        if x.layout != Layout::RowMajor
            || y.layout != Layout::RowMajor
            || x.dtype != y.dtype
            || y.is_constant()
        {
            break;
        }
        let Some((next, copy)) = step_back(&node.op, &view, &x.shape, &y.shape) else {
            break;
        };
        view = next;
        cur = src;
        if copy || best.is_some() {
            best = Some((cur, view));
        }
    }
    best.filter(|(_, v)| kernel_friendly(v))
}

/// The view of `x` (of `x_shape`, written by `op` from its first input of
/// `y_shape`) as a view of that input, and whether `op` copies; `None`
/// where the chain stops.
fn step_back(
    op: &Op,
    view: &StridedView,
    x_shape: &[usize],
    y_shape: &[usize],
) -> Option<(StridedView, bool)> {
    if op.is_view() {
        return Some((*view, false));
    }
    let d = Digits::split(view, x_shape)?;
    let next = match op {
        Op::Transpose { perm } => d.remap(y_shape, |j| perm[j], |_| 0),
        Op::Gather {
            axis,
            indices,
            indices_shape,
        } if indices.len() == 1 => {
            let n = y_shape[*axis] as i64;
            let c = if indices[0] < 0 {
                indices[0] + n
            } else {
                indices[0]
            };
            if !(0..n).contains(&c) {
                return None;
            }
            let (axis, c) = (*axis, c as usize);
            if indices_shape.is_empty() {
                // A scalar index drops the axis.
                d.remap(
                    y_shape,
                    |j| if j >= axis { j + 1 } else { j },
                    |b| if b == axis { c } else { 0 },
                )
            } else {
                // A `[1]` index keeps it at size 1, where x's index is 0.
                let mut v = d.remap(y_shape, |j| j, |_| 0);
                v.offset += c * Layout::RowMajor.strides(y_shape)[axis];
                v
            }
        }
        Op::Slice {
            starts,
            ends,
            steps,
        } if steps.iter().all(|&s| s > 0) && starts.len() == y_shape.len() => {
            let mut first = Vec::with_capacity(starts.len());
            for a in 0..starts.len() {
                let (f, _) =
                    crate::ops::slice::axis_range(y_shape[a], starts[a], ends[a], steps[a]).ok()?;
                first.push(f);
            }
            d.remap_scaled(y_shape, steps, &first)
        }
        _ => return None,
    };
    Some((next, true))
}

/// The last value of the single-reader chain of row-major views and
/// Transposes after `output` that holds a Transpose, the attention output's
/// view into it, and the chain's nodes.
fn trace_forward(
    graph: &Graph,
    uses: &Uses,
    output: ValueId,
) -> Option<(ValueId, StridedView, Vec<NodeId>)> {
    let value = graph.value(output);
    let mut view = StridedView::contiguous(as_4d(&value.shape)?);
    let (mut cur, mut chain, mut best) = (output, Vec::new(), None);
    while let Some(user) = uses.sole_user(cur) {
        let node = graph.node(user);
        let (x, y) = (graph.value(cur), graph.value(node.output));
        if node.inputs.len() != 1
            || x.layout != Layout::RowMajor
            || y.layout != Layout::RowMajor
            || x.dtype != y.dtype
        {
            break;
        }
        let copy = match &node.op {
            op if op.is_view() => false,
            Op::Transpose { perm } => {
                let Some(d) = Digits::split(&view, &x.shape) else {
                    break;
                };
                let mut to = vec![0; perm.len()];
                for (j, &a) in perm.iter().enumerate() {
                    to[a] = j;
                }
                view = d.remap(&y.shape, |a| to[a], |_| 0);
                true
            }
            _ => break,
        };
        chain.push(user);
        cur = node.output;
        if copy || best.is_some() {
            best = Some((cur, view, chain.clone()));
        }
    }
    best.filter(|(last, v, _)| {
        kernel_friendly(v) && v.check_bijection(graph.value(*last).numel()).is_ok()
    })
}

/// A view the tensor-core kernel reads as fast as a contiguous operand.
fn kernel_friendly(v: &StridedView) -> bool {
    (v.strides[3] == 1 || v.dims[3] == 1)
        && v.offset % ALIGN == 0
        && (0..3).all(|k| v.dims[k] == 1 || v.strides[k] % ALIGN == 0)
}

/// A view's positions split into per-axis indices of a row-major value:
/// axis `a`'s index is `offset[a] + Σ mult[k]·i_k` over the logical axes
/// `k` with `axis[k] == Some(a)`.
struct Digits {
    dims: [usize; 4],
    offset: Vec<usize>,
    axis: [Option<usize>; 4],
    mult: [usize; 4],
}

impl Digits {
    /// Splits `view` over a value of `shape`; `None` for an empty value, or
    /// when a logical axis would step across two of its axes or an index
    /// could carry.
    fn split(view: &StridedView, shape: &[usize]) -> Option<Digits> {
        let rank = shape.len();
        let rs = Layout::RowMajor.strides(shape);
        let numel: usize = shape.iter().product();
        if numel == 0 || view.offset >= numel {
            return None;
        }
        let offset: Vec<usize> = (0..rank)
            .map(|a| (view.offset / rs[a]) % shape[a])
            .collect();
        let mut digits = Digits {
            dims: view.dims,
            offset,
            axis: [None; 4],
            mult: [0; 4],
        };
        let mut reach = digits.offset.clone();
        for k in 0..4 {
            if view.dims[k] == 1 {
                continue;
            }
            let s = view.strides[k];
            // The axis the stride steps along: the outermost one whose
            // row-major stride divides it and is at most it.
            let a = (0..rank).find(|&a| s >= rs[a] && shape[a] > 1 && s % rs[a] == 0)?;
            let m = s / rs[a];
            digits.axis[k] = Some(a);
            digits.mult[k] = m;
            reach[a] += m * (view.dims[k] - 1);
        }
        (0..rank).all(|a| reach[a] < shape[a]).then_some(digits)
    }

    /// The view over a row-major value of `shape` whose axis `to(a)` holds
    /// this value's axis `a`, plus `fixed(b)` on its axes no axis maps to.
    fn remap(
        &self,
        shape: &[usize],
        to: impl Fn(usize) -> usize,
        fixed: impl Fn(usize) -> usize,
    ) -> StridedView {
        let rs = Layout::RowMajor.strides(shape);
        let mut hit = vec![false; shape.len()];
        let mut offset = 0;
        for (a, &o) in self.offset.iter().enumerate() {
            let b = to(a);
            hit[b] = true;
            offset += o * rs[b];
        }
        for (b, &h) in hit.iter().enumerate() {
            if !h {
                offset += fixed(b) * rs[b];
            }
        }
        let strides = std::array::from_fn(|k| match self.axis[k] {
            Some(a) => self.mult[k] * rs[to(a)],
            None => 0,
        });
        StridedView {
            dims: self.dims,
            offset,
            strides,
        }
    }

    /// The view over a value of `shape` that this value is the slice
    /// `first[a] + step[a]·i` of, axis for axis.
    fn remap_scaled(&self, shape: &[usize], step: &[i64], first: &[usize]) -> StridedView {
        let rs = Layout::RowMajor.strides(shape);
        let offset = (0..shape.len())
            .map(|a| (first[a] + step[a] as usize * self.offset[a]) * rs[a])
            .sum();
        let strides = std::array::from_fn(|k| match self.axis[k] {
            Some(a) => self.mult[k] * step[a] as usize * rs[a],
            None => 0,
        });
        StridedView {
            dims: self.dims,
            offset,
            strides,
        }
    }
}

#[cfg(test)]
#[path = "attention_views_tests.rs"]
mod tests;
