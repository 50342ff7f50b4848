//! Independent validation of a [`MemoryPlan`] against its graph.
//!
//! The checker shares no code with the planner's liveness or placement: it
//! re-derives from the graph which values need a buffer, how many bytes, and
//! the steps between their write and their last read, and then checks the
//! plan's claims. Buffers must be sorted by value id, one per planned value
//! and none for constants; sizes must match; each planned lifetime must cover
//! the true one; offsets must be aligned and buffers inside the arena. A
//! buffer declaring `alias_of` must be the output of a view op whose input is
//! the root or another alias of it, with row-major bytes of the same dtype and
//! size, at the root's offset. Finally, any two buffers that overlap both in
//! address range and in lifetime must belong to the same alias group: this is
//! the property that makes running the graph in the arena equal to running it
//! with one allocation per value. Overlaps are found by sorting buffers by
//! offset and sweeping, so the check stays fast on large graphs.

use super::error::PlanError;
use super::MemoryPlan;
use crate::ir::{is_byte_view, Graph, ValueId, ValueKind};

fn name(graph: &Graph, id: ValueId) -> String {
    graph
        .values
        .get(id.index())
        .map_or_else(|| "?".to_string(), |v| v.name.clone())
}

/// Write step and last read of every value that needs a buffer, or `None`.
fn needed_lifetimes(graph: &Graph) -> Vec<Option<(usize, usize)>> {
    let n = graph.values.len();
    let mut life: Vec<Option<(usize, usize)>> = vec![None; n];
    let in_range = |id: ValueId| id.index() < n;
    for &input in graph.inputs.iter().filter(|&&v| in_range(v)) {
        life[input.index()] = Some((0, 0));
    }
    for (i, node) in graph.nodes.iter().enumerate() {
        let step = i + 1;
        for &input in node.inputs.iter().filter(|&&v| in_range(v)) {
            if let Some((_, last)) = &mut life[input.index()] {
                *last = (*last).max(step);
            }
        }
        if in_range(node.output) && life[node.output.index()].is_none() {
            life[node.output.index()] = Some((step, step));
        }
    }
    for &output in graph.outputs.iter().filter(|&&v| in_range(v)) {
        if let Some((_, last)) = &mut life[output.index()] {
            *last = graph.nodes.len() + 1;
        }
    }
    for (i, v) in graph.values.iter().enumerate() {
        if matches!(v.kind, ValueKind::Constant(_)) {
            life[i] = None;
        }
    }
    life
}

/// Validates `plan` for `graph`; see the module documentation.
pub fn check_plan(graph: &Graph, plan: &MemoryPlan) -> Result<(), PlanError> {
    let alignment = plan.alignment;
    if alignment == 0 || !alignment.is_power_of_two() {
        return Err(PlanError::BadAlignment { alignment });
    }
    if plan.lower_bound > plan.arena_bytes {
        return Err(PlanError::LowerBoundAboveArena {
            lower_bound: plan.lower_bound,
            arena_bytes: plan.arena_bytes,
        });
    }
    let needed = needed_lifetimes(graph);

    // Each buffer: planned, sorted, sized, long-lived enough, aligned, inside.
    let mut index_of: Vec<Option<usize>> = vec![None; graph.values.len()];
    for (k, buf) in plan.buffers.iter().enumerate() {
        let id = buf.value;
        if k > 0 && plan.buffers[k - 1].value >= id {
            return Err(PlanError::Unsorted {
                value: id,
                previous: plan.buffers[k - 1].value,
            });
        }
        let Some(&Some((need_first, need_last))) = needed.get(id.index()) else {
            let reason = match graph.values.get(id.index()) {
                None => "no such value".to_string(),
                Some(v) if v.is_constant() => "a constant".to_string(),
                Some(_) => "neither a graph input nor a node output".to_string(),
            };
            return Err(PlanError::UnexpectedBuffer { value: id, reason });
        };
        index_of[id.index()] = Some(k);
        let value = graph.value(id);
        let bytes = value
            .shape
            .iter()
            .try_fold(value.dtype.size(), |acc, &d| acc.checked_mul(d));
        if bytes != Some(buf.bytes) {
            return Err(PlanError::WrongSize {
                value: id,
                name: value.name.clone(),
                planned: buf.bytes,
                needed: bytes.unwrap_or(usize::MAX),
            });
        }
        if buf.first > need_first || buf.last < need_last {
            return Err(PlanError::LifetimeTooShort {
                value: id,
                name: value.name.clone(),
                first: buf.first,
                last: buf.last,
                need_first,
                need_last,
            });
        }
        if buf.offset & (alignment - 1) != 0 {
            return Err(PlanError::Misaligned {
                value: id,
                name: value.name.clone(),
                offset: buf.offset,
                alignment,
            });
        }
        if buf
            .offset
            .checked_add(buf.bytes)
            .is_none_or(|end| end > plan.arena_bytes)
        {
            return Err(PlanError::OutsideArena {
                value: id,
                name: value.name.clone(),
                offset: buf.offset,
                bytes: buf.bytes,
                arena_bytes: plan.arena_bytes,
            });
        }
    }
    for (i, need) in needed.iter().enumerate() {
        let id = ValueId(i as u32);
        if need.is_some() && index_of[i].is_none() {
            return Err(PlanError::MissingBuffer {
                value: id,
                name: name(graph, id),
            });
        }
    }

    // Declared aliases must be legal views of their root.
    let producer: Vec<Option<usize>> = {
        let mut p = vec![None; graph.values.len()];
        for (i, node) in graph.nodes.iter().enumerate() {
            if let Some(slot) = p.get_mut(node.output.index()) {
                slot.get_or_insert(i);
            }
        }
        p
    };
    for buf in &plan.buffers {
        let Some(root) = buf.alias_of else { continue };
        let illegal = |reason: &str| PlanError::IllegalAlias {
            value: buf.value,
            name: name(graph, buf.value),
            root,
            reason: reason.to_string(),
        };
        let root_buf = plan
            .buffer(root)
            .ok_or_else(|| illegal("the root has no buffer"))?;
        if root_buf.alias_of.is_some() {
            return Err(illegal("the root is itself an alias"));
        }
        if root_buf.offset != buf.offset {
            return Err(illegal("the offsets differ"));
        }
        let node = producer[buf.value.index()]
            .map(|i| &graph.nodes[i])
            .ok_or_else(|| illegal("the value is not produced by a node"))?;
        let [x] = node.inputs.as_slice() else {
            return Err(illegal("the producer does not have exactly one input"));
        };
        let via = plan
            .buffer(*x)
            .ok_or_else(|| illegal("the view's input has no buffer"))?;
        if *x != root && via.alias_of != Some(root) {
            return Err(illegal("the view's input is not in the root's group"));
        }
        let (xv, out) = (graph.value(*x), graph.value(buf.value));
        if via.bytes != buf.bytes {
            return Err(illegal("the view changes size"));
        }
        if !is_byte_view(&node.op, xv, out) {
            return Err(illegal(
                "the producer is not a view of its input's bytes, it needs a copy",
            ));
        }
    }

    // No two groups may share bytes while both are live.
    let group = |k: usize| {
        let b = &plan.buffers[k];
        b.alias_of.unwrap_or(b.value)
    };
    let mut by_offset: Vec<usize> = (0..plan.buffers.len())
        .filter(|&k| plan.buffers[k].bytes > 0)
        .collect();
    by_offset.sort_by_key(|&k| (plan.buffers[k].offset, k));
    for (n, &a) in by_offset.iter().enumerate() {
        let ba = &plan.buffers[a];
        let end = ba.offset + ba.bytes; // checked above
        for &b in &by_offset[n + 1..] {
            let bb = &plan.buffers[b];
            if bb.offset >= end {
                break;
            }
            let live_together = ba.first <= bb.last && bb.first <= ba.last;
            if live_together && group(a) != group(b) {
                return Err(PlanError::Overlap {
                    a: ba.value,
                    a_name: name(graph, ba.value),
                    b: bb.value,
                    b_name: name(graph, bb.value),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{plan_memory, Buffer};
    use super::*;
    use crate::ir::{Op, UnaryOp};
    use crate::test_graphs::{chain, diamond, Builder};

    fn planned(graph: &Graph) -> MemoryPlan {
        let plan = plan_memory(graph).unwrap();
        check_plan(graph, &plan).unwrap();
        plan
    }

    fn buffer_mut(plan: &mut MemoryPlan, value: u32) -> &mut Buffer {
        plan.buffers
            .iter_mut()
            .find(|b| b.value == ValueId(value))
            .unwrap()
    }

    #[test]
    fn catches_overlapping_offsets() {
        // Diamond: a (%1) lives [1, 4], c (%3) lives [3, 4]. Put c on a.
        let graph = diamond(&[1, 1000]);
        let mut plan = planned(&graph);
        let a_offset = plan.buffer(ValueId(1)).unwrap().offset;
        buffer_mut(&mut plan, 3).offset = a_offset;
        let err = check_plan(&graph, &plan).unwrap_err();
        assert!(matches!(err, PlanError::Overlap { .. }), "{err}");
        assert!(
            err.to_string().contains("'a'") && err.to_string().contains("'c'"),
            "{err}"
        );
    }

    #[test]
    fn catches_partial_overlap() {
        let graph = chain(3, &[1, 1000]);
        let mut plan = planned(&graph);
        // %1 and %2 are live together at step 2; shift %2 half onto %1.
        let b1 = plan.buffer(ValueId(1)).unwrap().clone();
        plan.arena_bytes += 8192;
        buffer_mut(&mut plan, 2).offset = b1.offset + 2048;
        assert!(matches!(
            check_plan(&graph, &plan),
            Err(PlanError::Overlap { .. })
        ));
    }

    #[test]
    fn catches_misalignment_and_arena_overflow() {
        let graph = chain(3, &[1, 1000]);
        let mut plan = planned(&graph);
        buffer_mut(&mut plan, 0).offset += 4;
        assert!(matches!(
            check_plan(&graph, &plan),
            Err(PlanError::Misaligned { .. })
        ));

        let mut plan = planned(&graph);
        buffer_mut(&mut plan, 0).offset = plan.arena_bytes;
        assert!(matches!(
            check_plan(&graph, &plan),
            Err(PlanError::OutsideArena { .. })
        ));
    }

    #[test]
    fn catches_shortened_lifetime() {
        let graph = diamond(&[1, 1000]);
        let mut plan = planned(&graph);
        buffer_mut(&mut plan, 1).last = 2; // the Add at step 4 still reads a
        let err = check_plan(&graph, &plan).unwrap_err();
        assert!(
            matches!(err, PlanError::LifetimeTooShort { need_last: 4, .. }),
            "{err}"
        );
    }

    #[test]
    fn catches_missing_extra_unsorted_and_resized_buffers() {
        let graph = chain(3, &[1, 1000]);
        let plan = planned(&graph);

        let mut missing = plan.clone();
        missing.buffers.remove(2);
        assert!(matches!(
            check_plan(&graph, &missing),
            Err(PlanError::MissingBuffer {
                value: ValueId(2),
                ..
            })
        ));

        let mut extra = plan.clone();
        let mut ghost = extra.buffers[3].clone();
        ghost.value = ValueId(9);
        extra.buffers.push(ghost);
        assert!(matches!(
            check_plan(&graph, &extra),
            Err(PlanError::UnexpectedBuffer { .. })
        ));

        let mut unsorted = plan.clone();
        unsorted.buffers.swap(0, 1);
        assert!(matches!(
            check_plan(&graph, &unsorted),
            Err(PlanError::Unsorted { .. })
        ));

        let mut resized = plan;
        buffer_mut(&mut resized, 1).bytes = 16;
        assert!(matches!(
            check_plan(&graph, &resized),
            Err(PlanError::WrongSize { needed: 4000, .. })
        ));
    }

    #[test]
    fn catches_an_alias_that_is_not_a_view() {
        // chain: %2 = relu(%1) at step 2 may not share %1's bytes.
        let graph = chain(3, &[1, 1000]);
        let mut plan = planned(&graph);
        let offset = plan.buffer(ValueId(1)).unwrap().offset;
        let b2 = buffer_mut(&mut plan, 2);
        b2.offset = offset;
        b2.alias_of = Some(ValueId(1));
        let err = check_plan(&graph, &plan).unwrap_err();
        assert!(matches!(err, PlanError::IllegalAlias { .. }), "{err}");
    }

    #[test]
    fn accepts_a_view_that_is_not_aliased() {
        // A plan may give a view its own buffer (a copy): still valid.
        let mut b = Builder::new().outputs_named_as_nodes();
        let x = b.input("x", &[1, 2, 2, 2]);
        let a = b.node("a", Op::Unary(UnaryOp::Relu), &[x]);
        let f = b.node("f", Op::Flatten { axis: 1 }, &[a]);
        b.output(f);
        let graph = b.finish();
        let mut plan = planned(&graph);
        let fb = buffer_mut(&mut plan, f.0);
        fb.alias_of = None;
        fb.offset = 512;
        plan.arena_bytes = 768;
        // a [1, 2] and f [2, 3]: a lives at 256 or 0, never at 512.
        check_plan(&graph, &plan).unwrap();
    }

    #[test]
    fn constants_may_not_be_planned() {
        let mut b = Builder::new().outputs_named_as_nodes();
        let x = b.input("x", &[1, 8]);
        let c = b.zeros("c", &[1, 8]);
        let y = b.node("y", Op::Binary(crate::ir::BinaryOp::Add), &[x, c]);
        b.output(y);
        let graph = b.finish();
        let mut plan = planned(&graph);
        plan.buffers.insert(
            1,
            Buffer {
                value: c,
                offset: 0,
                bytes: 32,
                first: 0,
                last: 1,
                alias_of: None,
            },
        );
        let err = check_plan(&graph, &plan).unwrap_err();
        assert!(matches!(err, PlanError::UnexpectedBuffer { .. }), "{err}");
        assert!(err.to_string().contains("constant"), "{err}");
    }
}
