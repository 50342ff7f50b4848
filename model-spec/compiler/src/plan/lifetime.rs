//! Lifetimes of planned values and their alias groups.
//!
//! Steps are numbered as the executor runs them: step 0 is the copy of the
//! graph inputs into the arena, step `i + 1` runs node `i`, and step
//! `nodes.len() + 1` is the copy of the graph outputs out of it. Every
//! non-constant value gets an interval `[first, last]`: `first` is the step
//! that writes it (0 for inputs, `i + 1` for the output of node `i`), `last`
//! the last step that reads it (the output copy for graph outputs; `first`
//! itself for a value nobody reads, which still needs room to be written).
//! A node's inputs and output are live at the same step, so they never share
//! memory: the planner assumes no kernel works in place.
//!
//! One forward pass over the nodes also forms the alias groups. The output of
//! a view op (Flatten, Reshape, Identity) joins its input's group when the
//! bytes need no reordering: both row-major in memory, same dtype, same byte
//! count. A group is placed as one block whose lifetime is the union of its
//! members' and whose size is the largest member's, rounded up to the
//! alignment. Malformed graphs (dangling ids, reads before writes, values
//! written twice) are errors, never panics.

use super::error::PlanError;
use crate::ir::{is_byte_view, Graph, Op, Value, ValueId, ValueKind};

/// A planned value: one per graph input and per node output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LiveValue {
    pub value: ValueId,
    /// Bytes in the value's storage type.
    pub bytes: usize,
    pub first: usize,
    pub last: usize,
    /// Index into [`Liveness::groups`].
    pub group: usize,
    /// Root of the group when this value is an aliasing view.
    pub alias_of: Option<ValueId>,
}

/// An alias group, placed as one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    /// The value whose producer writes the group's bytes.
    pub root: ValueId,
    /// Largest member, rounded up to the alignment.
    pub size: usize,
    pub first: usize,
    pub last: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Liveness {
    /// Sorted by value id.
    pub values: Vec<LiveValue>,
    /// In order of their roots' first step.
    pub groups: Vec<Group>,
}

/// Bytes of a value in its storage type, or `None` when they do not fit an
/// address (`isize::MAX`, the largest allocation Rust or CUDA will make).
pub(crate) fn checked_bytes(value: &Value) -> Option<usize> {
    value
        .shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .and_then(|n| n.checked_mul(value.dtype.size()))
        .filter(|&b| b <= isize::MAX as usize)
}

/// `x` rounded up to a multiple of `alignment` (a power of two).
pub(crate) fn align_up(x: usize, alignment: usize) -> Option<usize> {
    x.checked_add(alignment - 1).map(|y| y & !(alignment - 1))
}

/// True when `out`, produced by `op` from `x`, may share `x`'s bytes
/// ([`is_byte_view`]).
pub(crate) fn may_alias(op: &Op, x: &Value, out: &Value) -> bool {
    checked_bytes(x) == checked_bytes(out) && is_byte_view(op, x, out)
}

fn too_large(graph: &Graph, id: ValueId) -> PlanError {
    let v = graph.value(id);
    let dims: Vec<String> = v.shape.iter().map(|d| d.to_string()).collect();
    PlanError::TooLarge {
        value: id,
        name: v.name.clone(),
        detail: format!("{}[{}]", v.dtype, dims.join(",")),
    }
}

fn invalid(location: impl Into<String>, message: impl Into<String>) -> PlanError {
    PlanError::InvalidGraph {
        location: location.into(),
        message: message.into(),
    }
}

/// State of the forward pass of [`analyze`].
struct Analysis<'g> {
    graph: &'g Graph,
    alignment: usize,
    /// Index into `values` of each planned value.
    slot: Vec<Option<usize>>,
    values: Vec<LiveValue>,
    /// Root value of each group.
    roots: Vec<ValueId>,
}

impl Analysis<'_> {
    fn check_id(&self, id: ValueId, location: impl FnOnce() -> String) -> Result<(), PlanError> {
        if id.index() < self.graph.values.len() {
            Ok(())
        } else {
            Err(invalid(
                location(),
                format!("refers to missing value %{}", id.0),
            ))
        }
    }

    /// Plans `id`, written at step `first`, sharing the group of the planned
    /// value at index `alias` when given.
    fn add(&mut self, id: ValueId, first: usize, alias: Option<usize>) -> Result<(), PlanError> {
        let graph = self.graph;
        let bytes = checked_bytes(graph.value(id)).ok_or_else(|| too_large(graph, id))?;
        align_up(bytes, self.alignment).ok_or_else(|| too_large(graph, id))?;
        let (group, alias_of) = match alias {
            Some(source) => {
                let group = self.values[source].group;
                (group, Some(self.roots[group]))
            }
            None => {
                self.roots.push(id);
                (self.roots.len() - 1, None)
            }
        };
        self.slot[id.index()] = Some(self.values.len());
        self.values.push(LiveValue {
            value: id,
            bytes,
            first,
            last: first,
            group,
            alias_of,
        });
        Ok(())
    }

    /// Records a read of planned value `id` at `step`.
    fn read(
        &mut self,
        id: ValueId,
        step: usize,
        location: impl FnOnce() -> String,
    ) -> Result<(), PlanError> {
        let s = self.slot[id.index()].ok_or_else(|| {
            invalid(
                location(),
                format!(
                    "reads %{} '{}' before it is produced",
                    id.0,
                    self.graph.value(id).name
                ),
            )
        })?;
        self.values[s].last = self.values[s].last.max(step);
        Ok(())
    }
}

/// Computes lifetimes and alias groups. `alignment` must be a power of two.
pub(crate) fn analyze(graph: &Graph, alignment: usize) -> Result<Liveness, PlanError> {
    let mut a = Analysis {
        graph,
        alignment,
        slot: vec![None; graph.values.len()],
        values: Vec::new(),
        roots: Vec::new(),
    };

    for &input in &graph.inputs {
        a.check_id(input, || "graph inputs".to_string())?;
        if a.slot[input.index()].is_some() {
            continue; // listed twice: one buffer
        }
        if graph.value(input).kind != ValueKind::Input {
            return Err(invalid(
                "graph inputs",
                format!(
                    "%{} '{}' is not an input value",
                    input.0,
                    graph.value(input).name
                ),
            ));
        }
        a.add(input, 0, None)?;
    }

    for (i, node) in graph.nodes.iter().enumerate() {
        let step = i + 1;
        let location = || format!("node {i} '{}' ({})", node.name, node.op.kind());
        for &input in &node.inputs {
            a.check_id(input, location)?;
            if !graph.value(input).is_constant() {
                a.read(input, step, location)?;
            }
        }
        let out = node.output;
        a.check_id(out, location)?;
        if graph.value(out).kind != ValueKind::Activation || a.slot[out.index()].is_some() {
            return Err(invalid(
                location(),
                format!(
                    "output %{} '{}' is not a fresh activation (an input, a constant, or produced twice)",
                    out.0,
                    graph.value(out).name
                ),
            ));
        }
        let alias = match node.inputs.as_slice() {
            [x] if may_alias(&node.op, graph.value(*x), graph.value(out)) => a.slot[x.index()],
            _ => None,
        };
        a.add(out, step, alias)?;
    }

    let output_copy = graph.nodes.len() + 1;
    for &output in &graph.outputs {
        a.check_id(output, || "graph outputs".to_string())?;
        if !graph.value(output).is_constant() {
            // weights live outside the arena; everything else is read by the copy out
            a.read(output, output_copy, || "graph outputs".to_string())?;
        }
    }

    let mut groups: Vec<Group> = a
        .roots
        .iter()
        .map(|&root| Group {
            root,
            size: 0,
            first: usize::MAX,
            last: 0,
        })
        .collect();
    for v in &a.values {
        let g = &mut groups[v.group];
        // Cannot saturate: checked when the value was added.
        let size = align_up(v.bytes, alignment).unwrap_or(usize::MAX);
        g.size = g.size.max(size);
        g.first = g.first.min(v.first);
        g.last = g.last.max(v.last);
    }
    let mut values = a.values;
    values.sort_by_key(|v| v.value);
    Ok(Liveness { values, groups })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{verify, BinaryOp, DType, Layout, Node, Op, Precision, UnaryOp};

    fn node(name: &str, op: Op, inputs: &[u32], output: u32) -> Node {
        Node {
            name: name.into(),
            op,
            inputs: inputs.iter().map(|&i| ValueId(i)).collect(),
            output: ValueId(output),
        }
    }

    fn input(name: &str, shape: Vec<usize>) -> Value {
        Value {
            kind: ValueKind::Input,
            ..Value::activation(name, shape)
        }
    }

    #[test]
    fn lifetimes_follow_reads() {
        // %0 → relu %1 → relu %2; add(%0, %2) → %3 (output)
        let graph = Graph {
            values: vec![
                input("x", vec![4]),
                Value::activation("a", vec![4]),
                Value::activation("b", vec![4]),
                Value::activation("y", vec![4]),
            ],
            nodes: vec![
                node("r1", Op::Unary(UnaryOp::Relu), &[0], 1),
                node("r2", Op::Unary(UnaryOp::Relu), &[1], 2),
                node("add", Op::Binary(BinaryOp::Add), &[0, 2], 3),
            ],
            inputs: vec![ValueId(0)],
            outputs: vec![ValueId(3)],
            precision: Precision::Fp32,
        };
        verify(&graph).unwrap();
        let live = analyze(&graph, 1).unwrap();
        let spans: Vec<(usize, usize)> = live.values.iter().map(|v| (v.first, v.last)).collect();
        assert_eq!(spans, vec![(0, 3), (1, 2), (2, 3), (3, 4)]);
        assert_eq!(live.groups.len(), 4);
    }

    #[test]
    fn view_joins_its_input_group_and_extends_it() {
        // %0 → relu %1 → flatten %2 → relu %3 (output)
        let graph = Graph {
            values: vec![
                input("x", vec![1, 2, 2, 2]),
                Value::activation("a", vec![1, 2, 2, 2]),
                Value::activation("f", vec![1, 8]),
                Value::activation("y", vec![1, 8]),
            ],
            nodes: vec![
                node("r1", Op::Unary(UnaryOp::Relu), &[0], 1),
                node("flat", Op::Flatten { axis: 1 }, &[1], 2),
                node("r2", Op::Unary(UnaryOp::Relu), &[2], 3),
            ],
            inputs: vec![ValueId(0)],
            outputs: vec![ValueId(3)],
            precision: Precision::Fp32,
        };
        verify(&graph).unwrap();
        let live = analyze(&graph, 16).unwrap();
        assert_eq!(live.values[2].alias_of, Some(ValueId(1)));
        assert_eq!(live.values[1].group, live.values[2].group);
        let group = &live.groups[live.values[1].group];
        assert_eq!((group.first, group.last, group.size), (1, 3, 32));
    }

    #[test]
    fn view_of_reordered_bytes_is_not_aliased() {
        // A channels-last input with H*W > 1 cannot be flattened in place.
        // (The verifier rejects this graph; the planner must still be safe.)
        let mut x = input("x", vec![1, 2, 2, 2]);
        x.layout = Layout::ChannelsLast;
        let graph = Graph {
            values: vec![x, Value::activation("f", vec![1, 8])],
            nodes: vec![node("flat", Op::Flatten { axis: 1 }, &[0], 1)],
            inputs: vec![ValueId(0)],
            outputs: vec![ValueId(1)],
            precision: Precision::Fp32,
        };
        let live = analyze(&graph, 1).unwrap();
        assert_eq!(live.values[1].alias_of, None);
        assert_eq!(live.groups.len(), 2);
    }

    #[test]
    fn dtype_sets_bytes() {
        let mut x = input("x", vec![3, 5]);
        x.dtype = DType::F16;
        let graph = Graph {
            values: vec![x],
            nodes: vec![],
            inputs: vec![ValueId(0)],
            outputs: vec![ValueId(0)],
            precision: Precision::Fp16,
        };
        let live = analyze(&graph, 256).unwrap();
        assert_eq!(live.values[0].bytes, 30);
        assert_eq!(live.groups[0].size, 256);
        assert_eq!((live.values[0].first, live.values[0].last), (0, 1));
    }

    #[test]
    fn malformed_graphs_are_errors() {
        let graph = Graph {
            values: vec![input("x", vec![4]), Value::activation("a", vec![4])],
            nodes: vec![node("r", Op::Unary(UnaryOp::Relu), &[1], 1)],
            inputs: vec![ValueId(0)],
            outputs: vec![ValueId(1)],
            precision: Precision::Fp32,
        };
        let err = analyze(&graph, 1).unwrap_err();
        assert!(err.to_string().contains("before it is produced"), "{err}");

        let dangling = Graph {
            outputs: vec![ValueId(7)],
            nodes: vec![],
            ..graph
        };
        assert!(matches!(
            analyze(&dangling, 1),
            Err(PlanError::InvalidGraph { .. })
        ));
    }

    #[test]
    fn unaddressable_value_is_named() {
        let graph = Graph {
            values: vec![input("huge", vec![1 << 40, 1 << 40])],
            nodes: vec![],
            inputs: vec![ValueId(0)],
            outputs: vec![ValueId(0)],
            precision: Precision::Fp32,
        };
        let err = analyze(&graph, 256).unwrap_err();
        assert!(matches!(
            err,
            PlanError::TooLarge {
                value: ValueId(0),
                ..
            }
        ));
        assert!(err.to_string().contains("'huge'"), "{err}");
    }
}
