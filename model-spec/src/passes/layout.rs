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
//! - `Conv` and `Convert` read their inputs through the declared layouts and
//!   keep their output's.
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
                if epilogue.residual {
                    let last = inputs.len() - 1;
                    inputs[last] = self.channels_last(inputs[last]);
                }
                out_layout = Layout::ChannelsLast;
            }
            Op::MaxPool(_)
            | Op::AveragePool { .. }
            | Op::GlobalAveragePool
            | Op::GlobalMaxPool => {
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
            Op::Conv(_) | Op::Convert => {}
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
