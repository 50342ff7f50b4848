//! Dead-code elimination: removes `Identity` nodes and nodes whose output
//! nothing reads.
//!
//! Identities are visited in node order; each one's uses are substituted by
//! its (already resolved) input. An Identity whose output is a graph output is
//! removed only when its resolved input is an activation that is not itself a
//! graph output: otherwise the graph would return one of its inputs, a
//! constant, or the same buffer twice, so the Identity stays as the copy that
//! gives the output its own value. When a graph output moves to the input
//! value, that value takes the output's name (names are for humans, but the
//! output's is the one a user knows). Dead nodes are then found in one
//! backward sweep over the topological order (a node is live when its output
//! is a graph output or read by a live node), which is already the fixed
//! point; constants nothing reads vanish when the patch compacts the values.

use super::{PassError, PassSummary, Uses};
use crate::ir::{debug_verify, Graph, Op, Patch, Value, ValueId, ValueKind};
use std::collections::{HashMap, HashSet};

const PASS: &str = "dce";

/// Removes Identity nodes and dead nodes; unused constants are dropped.
pub fn dce(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let constants_before = graph.values.iter().filter(|v| v.is_constant()).count();
    let uses = Uses::of(graph);
    let mut patch = Patch::new(graph);

    // Identity outputs resolved to the value they alias.
    let mut alias: HashMap<ValueId, ValueId> = HashMap::new();
    let resolve = |alias: &HashMap<ValueId, ValueId>, v: ValueId| *alias.get(&v).unwrap_or(&v);
    // Values a graph output refers to, after the substitutions decided so far.
    let mut output_values: HashSet<ValueId> = graph.outputs.iter().copied().collect();
    let mut renamed: HashMap<ValueId, String> = HashMap::new();
    let mut identities = 0;
    let mut removed = HashSet::new();
    for id in graph.node_ids() {
        let node = graph.node(id);
        if node.op != Op::Identity {
            continue;
        }
        let Some(&input) = node.inputs.first() else {
            continue;
        };
        let source = resolve(&alias, input);
        let (from, to) = (graph.value(node.output), graph.value(source));
        if from.dtype != to.dtype || from.layout != to.layout {
            continue;
        }
        if uses.is_output(node.output) {
            if to.kind != ValueKind::Activation || output_values.contains(&source) {
                continue;
            }
            output_values.insert(source);
            renamed.insert(source, from.name.clone());
        }
        alias.insert(node.output, source);
        patch.substitute(node.output, source);
        patch.remove_node(id);
        removed.insert(id);
        identities += 1;
    }

    // Backward liveness sweep over the nodes that survive the Identity removal.
    let mut live: HashSet<ValueId> = graph.outputs.iter().map(|&v| resolve(&alias, v)).collect();
    let mut dead = 0;
    for id in graph.node_ids().rev() {
        if removed.contains(&id) {
            continue;
        }
        let node = graph.node(id);
        if live.contains(&node.output) {
            live.extend(node.inputs.iter().map(|&v| resolve(&alias, v)));
        } else {
            patch.remove_node(id);
            dead += 1;
        }
    }

    for (value, name) in renamed {
        let renamed = Value {
            name,
            ..graph.value(value).clone()
        };
        patch.set_value(value, renamed);
    }
    patch.apply(graph);
    debug_verify(graph, PASS);

    let constants_after = graph.values.iter().filter(|v| v.is_constant()).count();
    let mut summary = PassSummary::new(PASS);
    summary.add(identities, "Identity removed");
    summary.add(dead, "dead nodes removed");
    summary.add(
        constants_before - constants_after,
        "unused constants dropped",
    );
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{print_graph, BinaryOp, UnaryOp};
    use crate::test_graphs::Builder;

    #[test]
    fn removes_identities_and_dead_nodes() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3]);
        let c = b.constant("c", &[3], vec![1.0, 2.0, 3.0]);
        let unused = b.constant("unused", &[3], vec![4.0, 5.0, 6.0]);
        let i1 = b.node("id1", Op::Identity, &[x]);
        let i2 = b.node("id2", Op::Identity, &[i1]);
        let y = b.node("add", Op::Binary(BinaryOp::Add), &[i2, c]);
        let dead = b.node("dead_add", Op::Binary(BinaryOp::Add), &[x, unused]);
        b.node("dead_relu", Op::Unary(UnaryOp::Relu), &[dead]);
        let out = b.node("out", Op::Identity, &[y]);
        b.output(out);
        let mut g = b.finish();
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[2,3]  # x
          const %1: f32[3]  # sum=6.000000e0
          const %2: f32[3]  # sum=1.500000e1
          %3: f32[2,3] = Identity(%0)  # id1
          %4: f32[2,3] = Identity(%3)  # id2
          %5: f32[2,3] = Add(%4, %1)  # add
          %6: f32[2,3] = Add(%0, %2)  # dead_add
          %7: f32[2,3] = Relu(%6)  # dead_relu
          %8: f32[2,3] = Identity(%5)  # out
          return %8
        ");
        let summary = dce(&mut g).unwrap();
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[2,3]  # x
          const %1: f32[3]  # sum=6.000000e0
          %2: f32[2,3] = Add(%0, %1)  # add
          return %2
        ");
        // The output kept the name the user knows.
        assert_eq!(g.value(g.outputs[0]).name, "out_out");
        assert_eq!(
            summary.to_string(),
            "dce: 3 Identity removed, 2 dead nodes removed, 1 unused constants dropped"
        );
    }

    #[test]
    fn identity_keeps_graph_outputs_distinct() {
        // y = x passed through; z = relu(x) returned twice via an identity.
        let mut b = Builder::new();
        let x = b.input("x", &[4]);
        let y = b.node("pass", Op::Identity, &[x]);
        let r = b.node("relu", Op::Unary(UnaryOp::Relu), &[x]);
        let z = b.node("copy", Op::Identity, &[r]);
        b.output(y);
        b.output(r);
        b.output(z);
        let mut g = b.finish();
        let before = print_graph(&g);
        let summary = dce(&mut g).unwrap();
        assert!(summary.is_noop(), "{summary}");
        assert_eq!(print_graph(&g), before);
    }

    #[test]
    fn dead_chain_needs_one_sweep() {
        let mut b = Builder::new();
        let x = b.input("x", &[4]);
        let mut v = x;
        for i in 0..5 {
            v = b.node(&format!("relu{i}"), Op::Unary(UnaryOp::Relu), &[v]);
        }
        let y = b.node("sigmoid", Op::Unary(UnaryOp::Sigmoid), &[x]);
        b.output(y);
        let mut g = b.finish();
        let summary = dce(&mut g).unwrap();
        assert_eq!(summary.count("dead nodes removed"), 5);
        assert_eq!(g.nodes.len(), 1);
        let again = dce(&mut g).unwrap();
        assert!(again.is_noop());
    }
}
