//! Fuses a projection shortcut into the convolution that adds it: ResNet's
//! downsample block computes `relu(conv1x1(h) + proj(x))`, where `proj` is
//! a 1×1 (possibly strided) conv whose output is read once, as the residual
//! of the block's last conv. Both are 1×1 convolutions onto the same output
//! pixels, so they are one GEMM over the concatenated K range
//! `[h channels | x channels]`: the pass rewrites the pair into one
//! `FusedConv` with a [`Shortcut`] (weights concatenated along the input
//! channels, biases summed), and the projection's output, as large as the
//! block's, is neither written nor read back.
//!
//! Runs right after [`super::fuse_epilogue`] (which gave the Add to the
//! later conv and made the projection's output its residual), on logical
//! row-major f32 weights; layout and precision passes treat the fused
//! weight like any other.
//!
//! The pair qualifies when the later conv is 1×1, stride 1, unpadded and
//! ungrouped with a residual and no shortcut yet, its residual comes from a
//! FusedConv that is 1×1, unpadded, undilated and ungrouped, has no
//! residual, activation or shortcut of its own, and is the residual's only
//! reader; both weights (and biases) are row-major constants.

use super::{PassError, PassSummary, Uses};
use crate::ir::{
    debug_verify, Activation, Conv2d, Epilogue, Graph, Layout, Node, NodeId, Op, Patch, Shortcut,
    Value, ValueId, ValueKind,
};
use std::sync::Arc;

const PASS: &str = "fuse_shortcut";

/// Fuses every projection shortcut into the conv that adds it.
pub fn fuse_shortcut(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let uses = Uses::of(graph);
    let producers = graph.producers();
    let mut patch = Patch::new(graph);
    let mut fused = 0;
    for id in graph.node_ids() {
        let Some(pair) = pair_of(graph, &uses, &producers, id) else {
            continue;
        };
        let (main, proj) = (graph.node(pair.main), graph.node(pair.shortcut));
        let adder = graph.node(id);
        let weight = patch.add_value(concat_weights(graph, main, proj));
        let mut inputs = vec![main.inputs[0], weight];
        let bias = sum_biases(graph, &pair.biases);
        let has_bias = bias.is_some();
        if let Some(bias) = bias {
            inputs.push(patch.add_value(bias));
        }
        inputs.push(proj.inputs[0]);
        // The node that added the two keeps its place and output; the other goes.
        patch.remove_node(if pair.main == id {
            pair.shortcut
        } else {
            pair.main
        });
        patch.replace_node(
            id,
            Node {
                name: main.name.clone(),
                op: Op::FusedConv {
                    conv: POINTWISE,
                    epilogue: Epilogue {
                        bias: has_bias,
                        residual: false,
                        activation: pair.activation,
                    },
                    shortcut: Some(Shortcut {
                        strides: pair.strides,
                    }),
                    pool: None,
                    norm: None,
                },
                inputs,
                output: adder.output,
            },
        );
        fused += 1;
    }
    patch.apply(graph);
    debug_verify(graph, PASS);
    let mut summary = PassSummary::new(PASS);
    summary.add(fused, "projection shortcut fused");
    Ok(summary)
}

const POINTWISE: Conv2d = Conv2d {
    kernel: [1, 1],
    strides: [1, 1],
    pads: [0; 4],
    dilations: [1, 1],
    groups: 1,
};

/// Two 1×1 convs summed by one node's epilogue: `main` (stride 1) reads
/// the input the output grid is made of, `shortcut` the strided one.
struct Pair {
    main: NodeId,
    shortcut: NodeId,
    strides: [usize; 2],
    activation: Activation,
    /// The biases the two convs have (none, either or both).
    biases: Vec<ValueId>,
}

/// The pair node `id` (a FusedConv with a residual) and its residual's
/// producer form, when they qualify (module doc); whichever of the two is
/// stride 1 is the main conv (node `id` when both are).
fn pair_of(
    graph: &Graph,
    uses: &Uses,
    producers: &std::collections::HashMap<ValueId, NodeId>,
    id: NodeId,
) -> Option<Pair> {
    let node = graph.node(id);
    let Op::FusedConv {
        conv,
        epilogue,
        shortcut: None,
        pool: None,
        norm: None,
    } = node.op
    else {
        return None;
    };
    if !epilogue.residual {
        return None;
    }
    let residual = *node.inputs.last()?;
    let other = *producers.get(&residual)?;
    let producer = graph.node(other);
    let Op::FusedConv {
        conv: pconv,
        epilogue: pepi,
        shortcut: None,
        pool: None,
        norm: None,
    } = producer.op
    else {
        return None;
    };
    let strided = |c: Conv2d| {
        c == Conv2d {
            strides: c.strides,
            ..POINTWISE
        }
    };
    let plain = !pepi.residual && pepi.activation == Activation::None;
    let sole = uses.sole_user(residual) == Some(id);
    let (main, shortcut, strides) = if conv == POINTWISE {
        (id, other, pconv.strides)
    } else if pconv == POINTWISE {
        (other, id, conv.strides)
    } else {
        return None;
    };
    // The main conv's bias first, as its weight is first.
    let (first, second) = if main == id {
        ((node, &epilogue), (producer, &pepi))
    } else {
        ((producer, &pepi), (node, &epilogue))
    };
    let biases: Vec<ValueId> = bias_of(first.0, first.1)
        .into_iter()
        .chain(bias_of(second.0, second.1))
        .collect();
    let constants = [main_weight(node), main_weight(producer)]
        .iter()
        .chain(&biases)
        .all(|&v| row_major_constant(graph, v));
    if !(strided(conv) && strided(pconv) && plain && sole && constants) {
        return None;
    }
    Some(Pair {
        main,
        shortcut,
        strides,
        activation: epilogue.activation,
        biases,
    })
}

fn main_weight(node: &Node) -> ValueId {
    node.inputs[1]
}

fn bias_of(node: &Node, epilogue: &Epilogue) -> Option<ValueId> {
    epilogue.bias.then(|| node.inputs[2])
}

fn row_major_constant(graph: &Graph, value: ValueId) -> bool {
    let v = graph.value(value);
    v.layout == Layout::RowMajor && matches!(v.kind, ValueKind::Constant(_))
}

fn data(graph: &Graph, value: ValueId) -> &[f32] {
    graph
        .value(value)
        .constant_data()
        .map_or(&[], |d| d.as_slice())
}

/// `[K, C + Cs, 1, 1]`: each output channel's main weights, then its
/// projection weights.
fn concat_weights(graph: &Graph, main: &Node, proj: &Node) -> Value {
    let (wm, wp) = (
        graph.value(main_weight(main)),
        graph.value(main_weight(proj)),
    );
    let (k, c, cs) = (wm.shape[0], wm.shape[1], wp.shape[1]);
    let (dm, dp) = (
        data(graph, main_weight(main)),
        data(graph, main_weight(proj)),
    );
    let mut out = Vec::with_capacity(k * (c + cs));
    for o in 0..k {
        out.extend_from_slice(&dm[o * c..(o + 1) * c]);
        out.extend_from_slice(&dp[o * cs..(o + 1) * cs]);
    }
    Value {
        name: format!("{}+{}", wm.name, wp.name),
        shape: vec![k, c + cs, 1, 1],
        kind: ValueKind::Constant(Arc::new(out)),
        ..wm.clone()
    }
}

/// The sum of `biases` (a copy of the one there is when only one conv has
/// a bias), or `None` when neither has.
fn sum_biases(graph: &Graph, biases: &[ValueId]) -> Option<Value> {
    let template = graph.value(*biases.first()?);
    let mut sum = vec![0.0f32; template.shape[0]];
    for &b in biases {
        for (s, v) in sum.iter_mut().zip(data(graph, b)) {
            *s += v;
        }
    }
    let names: Vec<&str> = biases
        .iter()
        .map(|&b| graph.value(b).name.as_str())
        .collect();
    Some(Value {
        name: names.join("+"),
        kind: ValueKind::Constant(Arc::new(sum)),
        ..template.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::BinaryOp;
    use crate::passes::direct_eval;
    use crate::passes::fuse_epilogue;
    use crate::reference::{self, RunOptions};
    use crate::test_graphs::{rel_l2, Builder};

    /// A downsample block's tail: `relu(conv1x1(h) + proj(x))`, the
    /// projection 1×1 at `stride` over `x` (`cs` channels, `size`² pixels).
    fn block(stride: usize, bias: bool, proj_last: bool) -> (Graph, Vec<f32>) {
        let mut b = Builder::new();
        let size = 4 * stride;
        let x = b.input("x", &[2, 8, size, size]);
        let h = b.conv("reduce", x, 16, 1, stride, bias);
        // torchvision's order: the projection first, so the expand conv
        // takes the Add; `proj_last` swaps them.
        let (main, proj) = if proj_last {
            let main = b.conv("expand", h, 24, 1, 1, bias);
            (main, b.conv("proj", x, 24, 1, stride, bias))
        } else {
            let proj = b.conv("proj", x, 24, 1, stride, bias);
            (b.conv("expand", h, 24, 1, 1, bias), proj)
        };
        let sum = b.node("add", Op::Binary(BinaryOp::Add), &[main, proj]);
        let y = b.relu("relu", sum);
        b.output(y);
        let input = b.data_for(x);
        (b.finish(), input)
    }

    fn fused(g: &mut Graph) -> PassSummary {
        fuse_epilogue(g).unwrap();
        fuse_shortcut(g).unwrap()
    }

    #[test]
    fn projection_joins_the_expand_conv_and_values_agree() {
        for (stride, bias, proj_last) in [
            (1, true, false),
            (2, true, false),
            (2, false, false),
            (2, true, true),
        ] {
            let (mut g, input) = block(stride, bias, proj_last);
            let original = g.clone();
            let before = direct_eval::evaluate(&g, &[&input]);
            let summary = fused(&mut g);
            assert_eq!(summary.count("projection shortcut fused"), 1);
            let convs: Vec<&Node> = g
                .nodes
                .iter()
                .filter(|n| matches!(n.op, Op::FusedConv { .. }))
                .collect();
            assert_eq!(convs.len(), 2, "reduce + expand-with-shortcut");
            let Op::FusedConv {
                epilogue, shortcut, ..
            } = convs[1].op
            else {
                unreachable!()
            };
            assert_eq!(
                shortcut,
                Some(Shortcut {
                    strides: [stride, stride]
                })
            );
            assert!(!epilogue.residual && epilogue.bias == bias);
            assert_eq!(epilogue.activation, Activation::Relu);
            assert_eq!(g.value(convs[1].inputs[1]).shape, vec![24, 16 + 8, 1, 1]);
            // The CPU reference runs the fused op (row-major here; NHWC in
            // the pipeline's tests) as the original graph's two convs.
            let opts = RunOptions::default();
            let want = reference::run(&original, &[&input], &opts).unwrap();
            let got = reference::run(&g, &[&input], &opts).unwrap();
            assert!(reference::rel_l2(&got[0], &want[0]) < 1e-5);
            let after = direct_eval::evaluate(&g, &[&input]);
            assert!(
                rel_l2(&after[0], &before[0]) < 1e-6,
                "stride {stride} bias {bias} proj_last {proj_last}"
            );
        }
    }

    #[test]
    fn a_projection_with_other_readers_or_an_activation_stays() {
        // The projection's output also feeds a graph output.
        let mut b = Builder::new();
        let x = b.input("x", &[1, 8, 4, 4]);
        let main = b.conv("expand", x, 8, 1, 1, true);
        let proj = b.conv("proj", x, 8, 1, 1, true);
        let sum = b.node("add", Op::Binary(BinaryOp::Add), &[main, proj]);
        b.output(sum);
        b.output(proj);
        let mut g = b.finish();
        assert_eq!(fused(&mut g).count("projection shortcut fused"), 0);

        // A 3×3 projection is not a 1×1 GEMM operand.
        let mut b = Builder::new();
        let x = b.input("x", &[1, 8, 4, 4]);
        let main = b.conv("expand", x, 8, 1, 1, true);
        let proj = b.conv("proj", x, 8, 3, 1, true);
        let sum = b.node("add", Op::Binary(BinaryOp::Add), &[main, proj]);
        b.output(sum);
        let mut g = b.finish();
        assert_eq!(fused(&mut g).count("projection shortcut fused"), 0);
    }
}
