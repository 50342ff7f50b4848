//! Channels-last (NHWC) activations and OHWI weight pre-packing.
//!
//! One forward walk over the nodes decides each value's layout, recording
//! the changes in a patch:
//! - *NHWC ops* (`FusedConv`, `MaxPool`, `AveragePool`, `GlobalAveragePool`,
//!   `GlobalMaxPool`) read their 4-D data input (and a FusedConv its
//!   residual) channels-last and write a channels-last output. A row-major
//!   4-D input is read through a `Convert` to a new channels-last value: one
//!   per source value, placed before its first NHWC reader and shared by all
//!   later ones. A constant FusedConv weight is re-packed from OIHW to OHWI
//!   (a new constant, data permuted, layout `ChannelsLast`); a runtime weight
//!   goes through a `Convert` like data.
//! - `Unary` and `BatchNorm` read any layout and write their input's.
//! - `Conv`, `Convert`, `PadChannels` and `SpaceToDepth` read their inputs
//!   through the declared layouts and keep their output's.
//! - A Transpose `[0, 2, 3, 1]` of a channels-last value writes the
//!   row-major NHWC value of the same bytes; a Transpose `[0, 3, 1, 2]` of a
//!   row-major `[N, H, W, C]` writes a channels-last value of its bytes.
//!   Both are free views in the plan (`ir::is_byte_view`): ConvNeXt's
//!   per-block NCHW ⇄ NHWC permutes around its LayerNorm and MLP.
//! - `Binary` and `Sum` whose inputs are all activations of the output's
//!   shape in one layout keep that layout (a residual Add between
//!   channels-last values stays channels-last).
//! - Every other op needs row-major bytes ([`crate::ir::is_row_major_bytes`]):
//!   a channels-last input whose bytes differ from row-major order goes
//!   through a shared `Convert` back to row-major. A `[N,C,1,1]` value needs
//!   none (its NHWC and NCHW bytes are equal), so the head's
//!   `GlobalAveragePool → Flatten` stays a view.
//! - Graph inputs and outputs stay row-major: a node whose output is a graph
//!   output and would be channels-last writes a new channels-last value
//!   instead, followed by a `Convert` into the row-major output; its NHWC
//!   readers use the channels-last value.
//!
//! A rewritten node is replaced in place, with its input Converts before it
//! and its output Convert after it, so topological order is kept.

use super::{PassError, PassSummary};
use crate::ir::{
    debug_verify, is_row_major_bytes, Graph, Layout, Node, NodeId, Op, Patch, Value, ValueId,
    ValueKind,
};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

const PASS: &str = "layout";

/// Assigns channels-last layouts, re-packs conv weights, inserts Converts.
pub fn to_channels_last(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let mut walk = Walk {
        graph: &*graph,
        patch: Patch::new(graph),
        layout: HashMap::new(),
        channels_last_copy: HashMap::new(),
        row_major_copy: HashMap::new(),
        packed: HashMap::new(),
        outputs: graph.outputs.iter().copied().collect(),
        pending: Vec::new(),
        to_nhwc: 0,
        to_nchw: 0,
        activations: 0,
    };
    for id in graph.node_ids() {
        walk.visit(id);
    }
    let Walk {
        patch,
        packed,
        to_nhwc,
        to_nchw,
        activations,
        ..
    } = walk;
    patch.apply(graph);
    debug_verify(graph, PASS);
    let mut summary = PassSummary::new(PASS);
    summary.add(activations, "activations channels-last");
    summary.add(packed.len(), "weights packed OHWI");
    summary.add(to_nhwc, "Convert to NHWC");
    summary.add(to_nchw, "Convert to NCHW");
    Ok(summary)
}

struct Walk<'g> {
    graph: &'g Graph,
    patch: Patch,
    /// Layout decided for each original value whose layout changed.
    layout: HashMap<ValueId, Layout>,
    /// Channels-last twin of a row-major value (a Convert's output, or the
    /// value a graph-output producer writes before its Convert).
    channels_last_copy: HashMap<ValueId, ValueId>,
    /// Row-major twin of a channels-last value.
    row_major_copy: HashMap<ValueId, ValueId>,
    /// OHWI copy of each OIHW constant weight.
    packed: HashMap<ValueId, ValueId>,
    outputs: HashSet<ValueId>,
    /// Converts to insert before the node being visited.
    pending: Vec<Node>,
    to_nhwc: usize,
    to_nchw: usize,
    activations: usize,
}

impl Walk<'_> {
    fn layout_of(&self, v: ValueId) -> Layout {
        self.layout
            .get(&v)
            .copied()
            .unwrap_or(self.graph.value(v).layout)
    }

    /// `v` as a channels-last value, through a shared Convert if it is row-major.
    fn channels_last(&mut self, v: ValueId) -> ValueId {
        let value = self.graph.value(v);
        if value.shape.len() != 4 || self.layout_of(v) == Layout::ChannelsLast {
            return v;
        }
        if let Some(&copy) = self.channels_last_copy.get(&v) {
            return copy;
        }
        let copy = self.convert(v, Layout::ChannelsLast, "nhwc");
        self.channels_last_copy.insert(v, copy);
        self.to_nhwc += 1;
        copy
    }

    /// `v` with row-major bytes, through a shared Convert if it has none.
    fn row_major(&mut self, v: ValueId) -> ValueId {
        let layout = self.layout_of(v);
        if is_row_major_bytes(&self.graph.value(v).shape, layout) {
            return v;
        }
        if let Some(&copy) = self.row_major_copy.get(&v) {
            return copy;
        }
        let copy = self.convert(v, Layout::RowMajor, "nchw");
        self.row_major_copy.insert(v, copy);
        self.to_nchw += 1;
        copy
    }

    /// A new value: `v` converted to `layout`, by a Convert queued before
    /// the node being visited.
    fn convert(&mut self, v: ValueId, layout: Layout, suffix: &str) -> ValueId {
        let value = self.graph.value(v);
        let copy = self.patch.add_value(Value {
            name: format!("{}_{suffix}", value.name),
            layout,
            kind: ValueKind::Activation,
            ..value.clone()
        });
        self.pending.push(Node {
            name: format!("{}_to_{suffix}", value.name),
            op: Op::Convert,
            inputs: vec![v],
            output: copy,
        });
        copy
    }

    /// True when every input is an activation of `shape` (no broadcast) and
    /// all share one layout: elementwise over their bytes in that layout.
    fn same_layout_operands(&self, inputs: &[ValueId], shape: &[usize]) -> bool {
        let Some(&first) = inputs.first() else {
            return false;
        };
        let layout = self.layout_of(first);
        inputs.iter().all(|&v| {
            let value = self.graph.value(v);
            !value.is_constant() && value.shape == shape && self.layout_of(v) == layout
        })
    }

    /// The OHWI form of FusedConv weight `w`.
    fn packed_weight(&mut self, w: ValueId) -> ValueId {
        let value = self.graph.value(w);
        let Some(data) = value.constant_data() else {
            return self.channels_last(w);
        };
        if value.layout == Layout::ChannelsLast || value.shape.len() != 4 {
            return w;
        }
        if let Some(&packed) = self.packed.get(&w) {
            return packed;
        }
        let packed = self.patch.add_value(Value {
            layout: Layout::ChannelsLast,
            kind: ValueKind::Constant(Arc::new(oihw_to_ohwi(data, &value.shape))),
            ..value.clone()
        });
        self.packed.insert(w, packed);
        packed
    }

    fn visit(&mut self, id: NodeId) {
        let node = self.graph.node(id);
        let mut inputs = node.inputs.clone();
        let output = self.graph.value(node.output);
        let mut out_layout = output.layout;
        match &node.op {
            Op::FusedConv { epilogue, .. } => {
                inputs[0] = self.channels_last(inputs[0]);
                inputs[1] = self.packed_weight(inputs[1]);
                // The residual and the shortcut's input, when present, follow
                // the bias.
                for input in inputs.iter_mut().skip(2 + usize::from(epilogue.bias)) {
                    *input = self.channels_last(*input);
                }
                out_layout = Layout::ChannelsLast;
            }
            Op::MaxPool(_) | Op::AveragePool { .. } | Op::GlobalAveragePool | Op::GlobalMaxPool => {
                if output.shape.len() == 4 {
                    inputs[0] = self.channels_last(inputs[0]);
                    out_layout = Layout::ChannelsLast;
                }
            }
            Op::Unary(_) | Op::BatchNorm { .. } => {
                if output.shape.len() == 4 {
                    out_layout = self.layout_of(inputs[0]);
                }
            }
            Op::Conv(_) | Op::Convert | Op::PadChannels { .. } | Op::SpaceToDepth { .. } => {}
            // NCHW channels-last read as NHWC row-major, and back: the same
            // bytes, so the plan aliases them (`ir::is_byte_view`).
            Op::Transpose { perm }
                if perm == &[0, 2, 3, 1] && self.layout_of(inputs[0]) == Layout::ChannelsLast => {}
            Op::Transpose { perm } if perm == &[0, 3, 1, 2] && output.shape.len() == 4 => {
                inputs[0] = self.row_major(inputs[0]);
                out_layout = Layout::ChannelsLast;
            }
            Op::Binary(_) | Op::Sum if self.same_layout_operands(&inputs, &output.shape) => {
                out_layout = self.layout_of(inputs[0]);
            }
            _ => {
                for input in &mut inputs {
                    *input = self.row_major(*input);
                }
            }
        }

        let mut out = node.output;
        let mut after = None;
        if out_layout != output.layout {
            self.activations += 1;
            if self.outputs.contains(&node.output) {
                // Write a channels-last twin; a Convert fills the row-major output.
                out = self.patch.add_value(Value {
                    name: format!("{}_nhwc", output.name),
                    layout: out_layout,
                    ..output.clone()
                });
                self.channels_last_copy.insert(node.output, out);
                self.to_nchw += 1;
                after = Some(Node {
                    name: format!("{}_to_nchw", output.name),
                    op: Op::Convert,
                    inputs: vec![out],
                    output: node.output,
                });
            } else {
                self.layout.insert(node.output, out_layout);
                let changed = Value {
                    layout: out_layout,
                    ..output.clone()
                };
                self.patch.set_value(node.output, changed);
            }
        }

        let pending = std::mem::take(&mut self.pending);
        if pending.is_empty() && inputs == node.inputs && after.is_none() {
            return;
        }
        for convert in pending {
            self.patch.insert_before(id, convert);
        }
        self.patch.insert_before(
            id,
            Node {
                inputs,
                output: out,
                ..node.clone()
            },
        );
        if let Some(convert) = after {
            self.patch.insert_before(id, convert);
        }
        self.patch.remove_node(id);
    }
}

/// Permutes a `[O, I, H, W]` row-major tensor to `[O, H, W, I]` order.
fn oihw_to_ohwi(data: &[f32], shape: &[usize]) -> Vec<f32> {
    let [o, i, h, w] = [shape[0], shape[1], shape[2], shape[3]];
    let mut out = vec![0.0; data.len()];
    for a in 0..o {
        for c in 0..i {
            for y in 0..h {
                for x in 0..w {
                    out[((a * h + y) * w + x) * i + c] = data[((a * i + c) * h + y) * w + x];
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{is_byte_view, print_graph, BinaryOp, Conv2d, Epilogue, UnaryOp};
    use crate::passes::{direct_eval, fuse_epilogue, lower_dense};
    use crate::test_graphs::{rel_l2, Builder};

    #[test]
    fn ohwi_packing_moves_input_channels_last() {
        // [O=1, I=2, H=1, W=2]: OIHW (i0w0, i0w1, i1w0, i1w1) → OHWI (i0w0, i1w0, i0w1, i1w1).
        assert_eq!(
            oihw_to_ohwi(&[1.0, 2.0, 3.0, 4.0], &[1, 2, 1, 2]),
            [1.0, 3.0, 2.0, 4.0]
        );
    }

    #[test]
    fn stem_block_and_head_go_channels_last() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 3, 8, 8]);
        let stem = b.conv("stem", x, 4, 3, 2, true);
        let stem = b.relu("stem.relu", stem);
        let pool = crate::ir::Pool2d {
            kernel: [2, 2],
            strides: [2, 2],
            pads: [0; 4],
            dilations: [1, 1],
            ceil_mode: false,
        };
        let pooled = b.node("maxpool", Op::MaxPool(pool), &[stem]);
        let conv = b.conv("block", pooled, 4, 3, 1, true);
        let sum = b.node("add", Op::Binary(BinaryOp::Add), &[conv, pooled]);
        let gap = b.node("avgpool", Op::GlobalAveragePool, &[sum]);
        let flat = b.node("flatten", Op::Flatten { axis: 1 }, &[gap]);
        let w = b.random("fc.weight", &[3, 4], -1.0, 1.0);
        let gemm = Op::Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: true,
        };
        let logits = b.node("fc", gemm, &[flat, w]);
        b.output(logits);
        let input = b.data_for(x);
        let mut g = b.finish();
        fuse_epilogue(&mut g).unwrap();
        lower_dense(&mut g).unwrap();
        let before = direct_eval::evaluate(&g, &[&input]);
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,3,8,8]  # x
          const %1: f32[4,3,3,3]  # sum=-1.077759e-2
          const %2: f32[4]  # sum=-1.827125e-1
          const %5: f32[4,4,3,3]  # sum=1.654195e0
          const %6: f32[4]  # sum=-2.027063e-1
          const %10: f32[3,4]  # sum=-1.988657e0
          %3: f32[1,4,4,4] = FusedConv(%0, %1, %2) k=3x3 s=2x2 p=1,1,1,1 d=1x1 g=1 epilogue=bias+relu  # stem
          %4: f32[1,4,2,2] = MaxPool(%3) k=2x2 s=2x2 p=0,0,0,0 d=1x1  # maxpool
          %7: f32[1,4,2,2] = FusedConv(%4, %5, %6, %4) k=3x3 s=1x1 p=1,1,1,1 d=1x1 g=1 epilogue=bias+residual  # block
          %8: f32[1,4,1,1] = GlobalAveragePool(%7)  # avgpool
          %9: f32[1,4] = Flatten(%8) axis=1  # flatten
          %11: f32[1,3] = Dense(%9, %10) epilogue=none  # fc
          return %11
        ");
        let summary = to_channels_last(&mut g).unwrap();
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,3,8,8]  # x
          const %1: f32[4]  # sum=-1.827125e-1
          const %4: f32[4]  # sum=-2.027063e-1
          const %8: f32[3,4]  # sum=-1.988657e0
          const %11: f32[4,3,3,3] cl  # sum=-1.077759e-2
          const %12: f32[4,4,3,3] cl  # sum=1.654195e0
          %10: f32[1,3,8,8] cl = Convert(%0)  # x_to_nhwc
          %2: f32[1,4,4,4] cl = FusedConv(%10, %11, %1) k=3x3 s=2x2 p=1,1,1,1 d=1x1 g=1 epilogue=bias+relu  # stem
          %3: f32[1,4,2,2] cl = MaxPool(%2) k=2x2 s=2x2 p=0,0,0,0 d=1x1  # maxpool
          %5: f32[1,4,2,2] cl = FusedConv(%3, %12, %4, %3) k=3x3 s=1x1 p=1,1,1,1 d=1x1 g=1 epilogue=bias+residual  # block
          %6: f32[1,4,1,1] cl = GlobalAveragePool(%5)  # avgpool
          %7: f32[1,4] = Flatten(%6) axis=1  # flatten
          %9: f32[1,3] = Dense(%7, %8) epilogue=none  # fc
          return %9
        ");
        insta::assert_snapshot!(summary.to_string(), @r"layout: 4 activations channels-last, 2 weights packed OHWI, 1 Convert to NHWC");
        let after = direct_eval::evaluate(&g, &[&input]);
        assert!(rel_l2(&after[0], &before[0]) <= 1e-6);
    }

    #[test]
    fn row_major_readers_and_outputs_get_converts() {
        // a = conv(x, w) with a runtime weight; s = sigmoid(a) is a graph
        // output; m = a·s and d = a − s need row-major bytes.
        let mut b = Builder::new();
        let x = b.input("x", &[1, 2, 3, 3]);
        let w = b.input("w", &[2, 2, 1, 1]);
        let conv = Conv2d {
            kernel: [1, 1],
            strides: [1, 1],
            pads: [0; 4],
            dilations: [1, 1],
            groups: 1,
        };
        let fused = Op::FusedConv {
            conv,
            epilogue: Epilogue::NONE,
            shortcut: None,
            pool: None,
            norm: None,
        };
        let a = b.node("conv", fused, &[x, w]);
        let s = b.node("sigmoid", Op::Unary(UnaryOp::Sigmoid), &[a]);
        let m = b.node("mul", Op::Binary(BinaryOp::Mul), &[a, s]);
        let d = b.node("sub", Op::Binary(BinaryOp::Sub), &[a, s]);
        b.output(s);
        b.output(m);
        b.output(d);
        let inputs = [b.data_for(x), b.data_for(w)];
        let mut g = b.finish();
        let inputs: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        let before = direct_eval::evaluate(&g, &inputs);
        let summary = to_channels_last(&mut g).unwrap();
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,2,3,3]  # x
          input %1: f32[2,2,1,1]  # w
          %6: f32[1,2,3,3] cl = Convert(%0)  # x_to_nhwc
          %7: f32[2,2,1,1] cl = Convert(%1)  # w_to_nhwc
          %2: f32[1,2,3,3] cl = FusedConv(%6, %7) k=1x1 s=1x1 p=0,0,0,0 d=1x1 g=1 epilogue=none  # conv
          %8: f32[1,2,3,3] cl = Sigmoid(%2)  # sigmoid
          %3: f32[1,2,3,3] = Convert(%8)  # sigmoid_out_to_nchw
          %9: f32[1,2,3,3] = Convert(%2)  # conv_out_to_nchw
          %4: f32[1,2,3,3] = Mul(%9, %3)  # mul
          %5: f32[1,2,3,3] = Sub(%9, %3)  # sub
          return %3, %4, %5
        ");
        assert_eq!(summary.count("Convert to NHWC"), 2);
        assert_eq!(summary.count("Convert to NCHW"), 2);
        assert_eq!(direct_eval::evaluate(&g, &inputs), before);
        for &v in g.inputs.iter().chain(&g.outputs) {
            assert_eq!(g.value(v).layout, Layout::RowMajor);
        }
        // A second run finds nothing to do.
        let again = to_channels_last(&mut g).unwrap();
        assert!(again.is_noop(), "{again}");
    }

    /// ConvNeXt's block: conv → Transpose to NHWC → LayerNorm → Transpose
    /// back → residual Add → conv. Channels-last, both Transposes are free
    /// views of the convs' bytes and the Add stays channels-last: no
    /// Convert, and the plan aliases each Transpose's output to its input.
    #[test]
    fn nhwc_permutes_around_a_layer_norm_are_free_views() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 8, 4, 4]);
        let conv = b.conv("dw", x, 8, 3, 1, true);
        let nhwc = b.node(
            "to_nhwc",
            Op::Transpose {
                perm: vec![0, 2, 3, 1],
            },
            &[conv],
        );
        let (scale, bias) = (
            b.random("ln.scale", &[8], 0.5, 1.5),
            b.random("ln.bias", &[8], -0.5, 0.5),
        );
        let ln = Op::LayerNorm {
            axis: 3,
            epsilon: 1e-6,
        };
        let normed = b.node("ln", ln, &[nhwc, scale, bias]);
        let nchw = b.node(
            "to_nchw",
            Op::Transpose {
                perm: vec![0, 3, 1, 2],
            },
            &[normed],
        );
        let sum = b.node("add", Op::Binary(BinaryOp::Add), &[nchw, conv]);
        let out = b.conv("next", sum, 8, 3, 1, true);
        b.output(out);
        let input = b.data_for(x);
        let mut g = b.finish();
        fuse_epilogue(&mut g).unwrap();
        let opts = crate::reference::RunOptions::default();
        let before = crate::reference::run(&g, &[&input], &opts).unwrap();
        let summary = to_channels_last(&mut g).unwrap();
        // Only the graph's input and output are converted.
        assert_eq!(summary.count("Convert to NCHW"), 1, "{summary}");
        assert_eq!(summary.count("Convert to NHWC"), 1, "{summary}");
        let views: Vec<&Node> = g
            .nodes
            .iter()
            .filter(|n| matches!(n.op, Op::Transpose { .. }))
            .collect();
        assert_eq!(views.len(), 2);
        for n in &views {
            let (x, y) = (g.value(n.inputs[0]), g.value(n.output));
            assert!(is_byte_view(&n.op, x, y), "{}", print_graph(&g));
        }
        let plan = crate::plan::plan_memory(&g).unwrap();
        for n in &views {
            assert!(
                plan.buffer(n.output).is_some_and(|b| b.alias_of.is_some()),
                "{} is not aliased",
                n.name
            );
        }
        let after = crate::reference::run_planned(&g, &plan, &[&input], &opts).unwrap();
        assert!(rel_l2(&after[0], &before[0]) < 1e-6);
    }
}
