//! Turns every Conv into a `FusedConv` whose epilogue absorbs its bias, a
//! residual Add and a ReLU/Clip/GELU.
//!
//! First every `Add` (or two-input `Sum`) is offered to at most one conv: an
//! operand qualifies when a Conv produces it, the Add is its only reader,
//! and both operands and the Add's output have one shape, dtype and layout
//! (no broadcasting). When both operands qualify (ResNet's downsample block)
//! the conv produced later takes the Add, so the other conv's output is
//! already computed when it runs; the other operand becomes the residual,
//! the FusedConv's last input. Then each Conv follows its single-use chain:
//! its bias (always absorbed), the Add it was given, then a `Relu`, `Clip`
//! or `Gelu` that is the only reader of the chain's value so far. A value
//! that is a graph output or has several readers ends the chain. The FusedConv
//! (inputs x, w, [bias], [residual]) replaces the chain's last node and
//! writes its output value, so every reader and graph output stays
//! untouched; inputs are all produced before that position because they fed
//! earlier nodes of the chain.

use super::{PassError, PassSummary, Uses};
use crate::ir::{
    debug_verify, Activation, BinaryOp, Epilogue, Graph, Node, NodeId, Op, Patch, ValueId,
};
use std::collections::HashMap;

const PASS: &str = "fuse_epilogue";

/// Replaces every Conv by a FusedConv absorbing bias, residual Add and ReLU/Clip/GELU.
pub fn fuse_epilogue(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let uses = Uses::of(graph);
    let residual_adds = assign_residual_adds(graph, &uses);
    let mut patch = Patch::new(graph);
    let (mut fused, mut with_bias, mut with_residual, mut with_activation) = (0, 0, 0, 0);
    for id in graph.node_ids() {
        let node = graph.node(id);
        let Op::Conv(conv) = node.op else {
            continue;
        };
        let mut inputs = node.inputs.clone();
        let mut epilogue = Epilogue {
            bias: inputs.len() == 3,
            ..Epilogue::NONE
        };
        let mut last = id;
        if let Some(&(add, residual)) = residual_adds.get(&id) {
            epilogue.residual = true;
            inputs.push(residual);
            patch.remove_node(last);
            last = add;
        }
        let value = graph.node(last).output;
        if let Some((relu, activation)) = activation_after(graph, &uses, value) {
            epilogue.activation = activation;
            patch.remove_node(last);
            last = relu;
        }
        patch.replace_node(
            last,
            Node {
                name: node.name.clone(),
                op: Op::FusedConv {
                    conv,
                    epilogue,
                    shortcut: None,
                    pool: None,
                    norm: None,
                },
                inputs,
                output: graph.node(last).output,
            },
        );
        fused += 1;
        with_bias += epilogue.bias as usize;
        with_residual += epilogue.residual as usize;
        with_activation += (epilogue.activation != Activation::None) as usize;
    }
    patch.apply(graph);
    debug_verify(graph, PASS);
    let mut summary = PassSummary::new(PASS);
    summary.add(fused, "Conv fused");
    summary.add(with_bias, "with bias");
    summary.add(with_residual, "with residual Add");
    summary.add(with_activation, "with activation");
    Ok(summary)
}

/// For each Conv that absorbs a residual Add: the Add node and the residual.
fn assign_residual_adds(graph: &Graph, uses: &Uses) -> HashMap<NodeId, (NodeId, ValueId)> {
    let producers = graph.producers();
    let same_type = |a: ValueId, b: ValueId| {
        let (a, b) = (graph.value(a), graph.value(b));
        a.shape == b.shape && a.dtype == b.dtype && a.layout == b.layout
    };
    let mut assigned = HashMap::new();
    for id in graph.node_ids() {
        let node = graph.node(id);
        let is_add = matches!(node.op, Op::Binary(BinaryOp::Add) | Op::Sum);
        let &[p, q] = node.inputs.as_slice() else {
            continue;
        };
        if !is_add || !same_type(p, node.output) || !same_type(q, node.output) {
            continue;
        }
        let conv_of = |operand: ValueId| {
            let producer = *producers.get(&operand)?;
            let is_conv = matches!(graph.node(producer).op, Op::Conv(_));
            (is_conv && uses.sole_user(operand) == Some(id)).then_some(producer)
        };
        let candidates = [(conv_of(p), q), (conv_of(q), p)];
        let later = candidates
            .into_iter()
            .filter_map(|(conv, residual)| Some((conv?, residual)))
            .max_by_key(|&(conv, _)| conv);
        if let Some((conv, residual)) = later {
            assigned.insert(conv, (id, residual));
        }
    }
    assigned
}

/// The Relu/Clip/Gelu node that is the only reader of `value` (and keeps
/// its dtype and layout), with the activation it becomes. Dense uses it too.
pub(super) fn activation_after(
    graph: &Graph,
    uses: &Uses,
    value: ValueId,
) -> Option<(NodeId, Activation)> {
    let user = uses.sole_user(value)?;
    let node = graph.node(user);
    let Op::Unary(unary) = node.op else {
        return None;
    };
    let activation = Activation::of_unary(unary)?;
    let (x, y) = (graph.value(value), graph.value(node.output));
    (x.dtype == y.dtype && x.layout == y.layout).then_some((user, activation))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{print_graph, UnaryOp};
    use crate::passes::direct_eval;
    use crate::test_graphs::{rel_l2, Builder};

    #[test]
    fn downsample_block_fuses_add_into_later_conv() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 4, 4, 4]);
        let main = b.conv("main", x, 8, 1, 1, true);
        let down = b.conv("downsample", x, 8, 1, 1, true);
        let sum = b.node("add", Op::Binary(BinaryOp::Add), &[main, down]);
        let y = b.relu("relu", sum);
        b.output(y);
        let input = b.data_for(x);
        let mut g = b.finish();
        let before = direct_eval::evaluate(&g, &[&input]);
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,4,4,4]  # x
          const %1: f32[8,4,1,1]  # sum=2.475275e0
          const %2: f32[8]  # sum=-1.988473e-1
          const %4: f32[8,4,1,1]  # sum=-4.102297e-1
          const %5: f32[8]  # sum=3.058203e-1
          %3: f32[1,8,4,4] = Conv(%0, %1, %2) k=1x1 s=1x1 p=0,0,0,0 d=1x1 g=1  # main
          %6: f32[1,8,4,4] = Conv(%0, %4, %5) k=1x1 s=1x1 p=0,0,0,0 d=1x1 g=1  # downsample
          %7: f32[1,8,4,4] = Add(%3, %6)  # add
          %8: f32[1,8,4,4] = Relu(%7)  # relu
          return %8
        ");
        let summary = fuse_epilogue(&mut g).unwrap();
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,4,4,4]  # x
          const %1: f32[8,4,1,1]  # sum=2.475275e0
          const %2: f32[8]  # sum=-1.988473e-1
          const %4: f32[8,4,1,1]  # sum=-4.102297e-1
          const %5: f32[8]  # sum=3.058203e-1
          %3: f32[1,8,4,4] = FusedConv(%0, %1, %2) k=1x1 s=1x1 p=0,0,0,0 d=1x1 g=1 epilogue=bias  # main
          %6: f32[1,8,4,4] = FusedConv(%0, %4, %5, %3) k=1x1 s=1x1 p=0,0,0,0 d=1x1 g=1 epilogue=bias+residual+relu  # downsample
          return %6
        ");
        assert_eq!(
            summary.to_string(),
            "fuse_epilogue: 2 Conv fused, 2 with bias, 1 with residual Add, 1 with activation"
        );
        let after = direct_eval::evaluate(&g, &[&input]);
        assert!(rel_l2(&after[0], &before[0]) <= 1e-6);
    }

    #[test]
    fn identity_block_and_clip() {
        // conv → add(skip) → clip(0, 6); a second conv whose output is also a
        // graph output absorbs only its bias.
        let mut b = Builder::new();
        let x = b.input("x", &[1, 4, 3, 3]);
        let c = b.conv("conv", x, 4, 3, 1, false);
        let sum = b.node("sum", Op::Sum, &[x, c]);
        let clip = UnaryOp::Clip { min: 0.0, max: 6.0 };
        let y = b.node("relu6", Op::Unary(clip), &[sum]);
        let side = b.conv("side", y, 4, 1, 1, true);
        let z = b.relu("side_relu", side);
        b.output(z);
        b.output(side);
        let input = b.data_for(x);
        let mut g = b.finish();
        let before = direct_eval::evaluate(&g, &[&input]);
        fuse_epilogue(&mut g).unwrap();
        let after = direct_eval::evaluate(&g, &[&input]);
        for (a, b) in after.iter().zip(&before) {
            assert!(rel_l2(a, b) <= 1e-6);
        }
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,4,3,3]  # x
          const %1: f32[4,4,3,3]  # sum=7.214265e-1
          const %3: f32[4,4,1,1]  # sum=-8.307422e-1
          const %4: f32[4]  # sum=1.224397e-1
          %2: f32[1,4,3,3] = FusedConv(%0, %1, %0) k=3x3 s=1x1 p=1,1,1,1 d=1x1 g=1 epilogue=residual+clip(0,6)  # conv
          %5: f32[1,4,3,3] = FusedConv(%2, %3, %4) k=1x1 s=1x1 p=0,0,0,0 d=1x1 g=1 epilogue=bias  # side
          %6: f32[1,4,3,3] = Relu(%5)  # side_relu
          return %6, %5
        ");
    }

    /// A conv's GELU (either form) is its epilogue's activation, after a
    /// residual Add as ReLU is.
    #[test]
    fn gelu_after_a_conv_or_its_residual_add_is_absorbed() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 4, 3, 3]);
        let c = b.conv("conv", x, 4, 3, 1, true);
        let y = b.node("gelu", Op::Unary(UnaryOp::Gelu { tanh: false }), &[c]);
        b.output(y);
        let d = b.conv("res_conv", x, 4, 1, 1, true);
        let sum = b.node("add", Op::Binary(BinaryOp::Add), &[d, x]);
        let z = b.node("gelu_tanh", Op::Unary(UnaryOp::Gelu { tanh: true }), &[sum]);
        b.output(z);
        let input = b.data_for(x);
        let mut g = b.finish();
        let before = direct_eval::evaluate(&g, &[&input]);
        let summary = fuse_epilogue(&mut g).unwrap();
        assert_eq!(summary.count("with activation"), 2);
        let after = direct_eval::evaluate(&g, &[&input]);
        for (a, b) in after.iter().zip(&before) {
            assert!(rel_l2(a, b) <= 1e-6);
        }
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,4,3,3]  # x
          const %1: f32[4,4,3,3]  # sum=7.214265e-1
          const %2: f32[4]  # sum=-1.827866e-1
          const %4: f32[4,4,1,1]  # sum=1.812595e0
          const %5: f32[4]  # sum=8.419507e-2
          %3: f32[1,4,3,3] = FusedConv(%0, %1, %2) k=3x3 s=1x1 p=1,1,1,1 d=1x1 g=1 epilogue=bias+gelu  # conv
          %6: f32[1,4,3,3] = FusedConv(%0, %4, %5, %0) k=1x1 s=1x1 p=0,0,0,0 d=1x1 g=1 epilogue=bias+residual+gelu_tanh  # res_conv
          return %3, %6
        ");
    }

    #[test]
    fn broadcast_add_and_shared_outputs_are_not_fused() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 2, 3, 3]);
        let c = b.conv("conv", x, 2, 1, 1, false);
        let per_channel = b.constant("shift", &[2, 1, 1], vec![1.0, 2.0]);
        let shifted = b.node("shift", Op::Binary(BinaryOp::Add), &[c, per_channel]);
        let d = b.conv("twice", shifted, 2, 1, 1, false);
        let doubled = b.node("double", Op::Binary(BinaryOp::Add), &[d, d]);
        b.output(doubled);
        let mut g = b.finish();
        let summary = fuse_epilogue(&mut g).unwrap();
        assert_eq!(summary.count("Conv fused"), 2);
        assert_eq!(summary.count("with residual Add"), 0);
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,2,3,3]  # x
          const %1: f32[2,2,1,1]  # sum=-1.138546e0
          const %3: f32[2,1,1]  # sum=3.000000e0
          const %5: f32[2,2,1,1]  # sum=-1.179603e0
          %2: f32[1,2,3,3] = FusedConv(%0, %1) k=1x1 s=1x1 p=0,0,0,0 d=1x1 g=1 epilogue=none  # conv
          %4: f32[1,2,3,3] = Add(%2, %3)  # shift
          %6: f32[1,2,3,3] = FusedConv(%4, %5) k=1x1 s=1x1 p=0,0,0,0 d=1x1 g=1 epilogue=none  # twice
          %7: f32[1,2,3,3] = Add(%6, %6)  # double
          return %7
        ");
    }
}
