//! Storage types for a numeric mode: f16/bf16 activations and weights with
//! f32 inputs, outputs, biases and accumulation.
//!
//! [`apply_precision`] records the mode in `Graph::precision`. For `Fp32`
//! and `Tf32` nothing else changes (tf32 only tells the matrix kernels how to
//! round their operands). For `Fp16`/`Bf16`, with `s = precision.storage()`:
//! - constants read as a Conv/FusedConv/Dense weight (input 1) become `s`,
//!   their data rounded with [`crate::ir::DType::round`] (in place when every
//!   use is a weight use, else as a new constant);
//! - biases and every other constant (BatchNorm parameters, elementwise
//!   operands) stay f32: epilogues and elementwise kernels read them in f32,
//!   and a bias is tiny next to its weight, so rounding it buys nothing;
//! - graph inputs stay f32 (the user passes f32) and are read only by
//!   Converts: a Convert already reading an input (layout.rs's NHWC one) just
//!   gets an `s` output like every activation; other readers get a shared
//!   row-major `Convert` to `s`, inserted before the first of them;
//! - every activation becomes `s`, except that a view op (Flatten, Reshape,
//!   Identity) keeps its input's dtype, and graph outputs are f32: a graph
//!   output produced by `FusedConv`, `Dense` or `Convert` and read by no node
//!   simply stays f32 (the epilogue rounds once, to f32); any other producer
//!   writes a new `s` value, read by its node readers, and a Convert after it
//!   fills the f32 output.
//!
//! - a `Clip` with a positive lower bound that its f16 output would round to
//!   zero (F.normalize's `clamp_min(1e-12)` before a division) gets the
//!   smallest positive value of the storage type as its bound instead, so the
//!   division it guards still never sees a zero ([`positive_clip_floor`]).
//!
//! Nodes whose inputs or output change are replaced in place, with input
//! Converts before them and the output Convert after them.

use super::{PassError, PassSummary, Uses};
use crate::ir::{
    debug_verify, DType, Graph, Node, NodeId, Op, Patch, Precision, UnaryOp, Value, ValueId,
    ValueKind,
};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

const PASS: &str = "precision";

/// `op` with a `Clip`'s positive lower bound raised to the smallest
/// positive value of `dtype` when `dtype` would round it to zero: a bound
/// that keeps a divisor away from zero (`x / max(‖x‖, 1e-12)`) must stay
/// positive once stored, or a zero norm divides 0 by 0. Any other op as is.
fn positive_clip_floor(op: &Op, dtype: DType) -> Op {
    match *op {
        Op::Unary(UnaryOp::Clip { min, max }) if min > 0.0 && dtype.round(min) == 0.0 => {
            let smallest = match dtype {
                DType::F16 => half::f16::from_bits(1).to_f32(),
                DType::BF16 => half::bf16::from_bits(1).to_f32(),
                DType::F32 => f32::from_bits(1),
            };
            Op::Unary(UnaryOp::Clip { min: smallest, max })
        }
        _ => op.clone(),
    }
}

/// Sets `graph.precision` and, for fp16/bf16, the storage types it implies.
pub fn apply_precision(graph: &mut Graph, precision: Precision) -> Result<PassSummary, PassError> {
    graph.precision = precision;
    let storage = precision.storage();
    let mut summary = PassSummary::new(PASS);
    if storage == DType::F32 {
        debug_verify(graph, PASS);
        summary.add(0, "activations");
        return Ok(summary);
    }
    let mut walk = Walk {
        graph: &*graph,
        storage,
        uses: Uses::of(graph),
        patch: Patch::new(graph),
        dtype: HashMap::new(),
        weight_copy: HashMap::new(),
        input_copy: HashMap::new(),
        output_twin: HashMap::new(),
        activations: 0,
        weights: 0,
        converts: 0,
    };
    walk.round_weights_in_place();
    for id in graph.node_ids() {
        walk.visit(id);
    }
    let Walk {
        patch,
        activations,
        weights,
        converts,
        ..
    } = walk;
    patch.apply(graph);
    debug_verify(graph, PASS);
    summary.add(activations, format!("activations {storage}"));
    summary.add(weights, format!("weights {storage}"));
    summary.add(converts, "Convert inserted");
    Ok(summary)
}

/// Input slot `slot` of `op` holds a weight stored in the storage type.
fn is_weight_slot(op: &Op, slot: usize) -> bool {
    slot == 1 && matches!(op, Op::Conv(_) | Op::FusedConv { .. } | Op::Dense { .. })
}

struct Walk<'g> {
    graph: &'g Graph,
    storage: DType,
    uses: Uses,
    patch: Patch,
    /// New dtype of original values that changed, and of values the pass made.
    dtype: HashMap<ValueId, DType>,
    /// Rounded copy of a weight constant that also has non-weight uses.
    weight_copy: HashMap<ValueId, ValueId>,
    /// Storage-type Convert output of a graph input.
    input_copy: HashMap<ValueId, ValueId>,
    /// Storage-type value written in place of an f32 graph output.
    output_twin: HashMap<ValueId, ValueId>,
    activations: usize,
    weights: usize,
    converts: usize,
}

impl Walk<'_> {
    fn dtype_of(&self, v: ValueId) -> DType {
        self.dtype
            .get(&v)
            .copied()
            .unwrap_or_else(|| self.graph.value(v).dtype)
    }

    fn rounded(&self, value: &Value, data: &[f32]) -> Value {
        let storage = self.storage;
        Value {
            dtype: storage,
            kind: ValueKind::Constant(Arc::new(data.iter().map(|&x| storage.round(x)).collect())),
            ..value.clone()
        }
    }

    /// Rounds, in place, the weight constants that are used only as weights.
    fn round_weights_in_place(&mut self) {
        let mut weight_use = HashSet::new();
        let mut other_use = HashSet::new();
        for node in &self.graph.nodes {
            for (slot, &v) in node.inputs.iter().enumerate() {
                if is_weight_slot(&node.op, slot) {
                    weight_use.insert(v);
                } else {
                    other_use.insert(v);
                }
            }
        }
        let mut in_place: Vec<ValueId> = weight_use.difference(&other_use).copied().collect();
        in_place.sort();
        for v in in_place {
            let value = self.graph.value(v);
            let Some(data) = value.constant_data() else {
                continue;
            };
            if value.dtype != self.storage {
                let rounded = self.rounded(value, data);
                self.patch.set_value(v, rounded);
                self.dtype.insert(v, self.storage);
                self.weights += 1;
            }
        }
    }

    /// The storage-type form of weight `w`.
    fn weight(&mut self, w: ValueId) -> ValueId {
        let value = self.graph.value(w);
        let Some(data) = value.constant_data() else {
            return w;
        };
        if self.dtype_of(w) == self.storage {
            return w;
        }
        if let Some(&copy) = self.weight_copy.get(&w) {
            return copy;
        }
        let rounded = self.rounded(value, data);
        let copy = self.patch.add_value(rounded);
        self.weight_copy.insert(w, copy);
        self.dtype.insert(copy, self.storage);
        self.weights += 1;
        copy
    }

    /// Graph input `x` in the storage type, through a shared Convert queued
    /// in `before`.
    fn input(&mut self, x: ValueId, before: &mut Vec<Node>) -> ValueId {
        if let Some(&copy) = self.input_copy.get(&x) {
            return copy;
        }
        let value = self.graph.value(x);
        let copy = self.patch.add_value(Value {
            name: format!("{}_{}", value.name, self.storage),
            dtype: self.storage,
            kind: ValueKind::Activation,
            ..value.clone()
        });
        before.push(Node {
            name: format!("{}_to_{}", value.name, self.storage),
            op: Op::Convert,
            inputs: vec![x],
            output: copy,
        });
        self.input_copy.insert(x, copy);
        self.dtype.insert(copy, self.storage);
        self.converts += 1;
        copy
    }

    fn visit(&mut self, id: NodeId) {
        let node = self.graph.node(id);
        let mut before = Vec::new();
        let mut inputs = node.inputs.clone();
        for (slot, input) in inputs.iter_mut().enumerate() {
            let value = self.graph.value(*input);
            if is_weight_slot(&node.op, slot) {
                *input = self.weight(*input);
            } else if value.kind == ValueKind::Input {
                let converts = matches!(
                    node.op,
                    Op::Convert | Op::PadChannels { .. } | Op::SpaceToDepth { .. }
                );
                if !converts && value.dtype != self.storage {
                    *input = self.input(*input, &mut before);
                }
            } else if let Some(&twin) = self.output_twin.get(input) {
                *input = twin;
            }
        }

        let output = self.graph.value(node.output);
        let out_dtype = match inputs.first() {
            Some(&x) if node.op.is_view() => self.dtype_of(x),
            _ => self.storage,
        };
        let op = positive_clip_floor(&node.op, out_dtype);
        let mut out = node.output;
        let mut after = None;
        if out_dtype != output.dtype {
            self.activations += 1;
            let writes_f32 = matches!(
                node.op,
                Op::FusedConv { .. }
                    | Op::Dense { .. }
                    | Op::Convert
                    | Op::PadChannels { .. }
                    | Op::SpaceToDepth { .. }
            );
            if !self.uses.is_output(node.output) {
                self.patch.set_value(
                    node.output,
                    Value {
                        dtype: out_dtype,
                        ..output.clone()
                    },
                );
                self.dtype.insert(node.output, out_dtype);
            } else if writes_f32 && self.uses.users(node.output).is_empty() {
                // The epilogue (or Convert) writes the f32 graph output directly.
                self.activations -= 1;
            } else {
                out = self.patch.add_value(Value {
                    name: format!("{}_{out_dtype}", output.name),
                    dtype: out_dtype,
                    ..output.clone()
                });
                self.dtype.insert(out, out_dtype);
                self.output_twin.insert(node.output, out);
                self.converts += 1;
                after = Some(Node {
                    name: format!("{}_to_f32", output.name),
                    op: Op::Convert,
                    inputs: vec![out],
                    output: node.output,
                });
            }
        }

        if before.is_empty() && inputs == node.inputs && after.is_none() && op == node.op {
            return;
        }
        for convert in before {
            self.patch.insert_before(id, convert);
        }
        self.patch.insert_before(
            id,
            Node {
                op,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{print_graph, BinaryOp, ReduceKind};
    use crate::passes::{direct_eval, fuse_epilogue, lower_dense, to_channels_last};
    use crate::test_graphs::{rel_l2, Builder};

    /// conv → relu → GAP → flatten → fc, fused and channels-last.
    fn small_net() -> (Graph, Vec<f32>) {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 3, 4, 4]);
        let conv = b.conv("conv", x, 4, 3, 1, true);
        let relu = b.relu("relu", conv);
        let gap = b.node("avgpool", Op::GlobalAveragePool, &[relu]);
        let flat = b.node("flatten", Op::Flatten { axis: 1 }, &[gap]);
        let w = b.random("fc.weight", &[2, 4], -1.0, 1.0);
        let bias = b.random("fc.bias", &[2], -1.0, 1.0);
        let gemm = Op::Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: true,
        };
        let logits = b.node("fc", gemm, &[flat, w, bias]);
        b.output(logits);
        let input = b.data_for(x);
        let mut g = b.finish();
        fuse_epilogue(&mut g).unwrap();
        lower_dense(&mut g).unwrap();
        to_channels_last(&mut g).unwrap();
        (g, input)
    }

    #[test]
    fn fp16_rounds_weights_and_activations_keeps_edges_and_biases_f32() {
        let (mut g, input) = small_net();
        let want = direct_eval::evaluate(&g, &[&input]);
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,3,4,4]  # x
          const %1: f32[4]  # sum=-1.827125e-1
          const %5: f32[2,4]  # sum=2.648803e0
          const %7: f32[2]  # sum=6.339009e-1
          const %9: f32[4,3,3,3] cl  # sum=-1.077759e-2
          %8: f32[1,3,4,4] cl = Convert(%0)  # x_to_nhwc
          %2: f32[1,4,4,4] cl = FusedConv(%8, %9, %1) k=3x3 s=1x1 p=1,1,1,1 d=1x1 g=1 epilogue=bias+relu  # conv
          %3: f32[1,4,1,1] cl = GlobalAveragePool(%2)  # avgpool
          %4: f32[1,4] = Flatten(%3) axis=1  # flatten
          %6: f32[1,2] = Dense(%4, %5, %7) epilogue=bias  # fc
          return %6
        ");
        let summary = apply_precision(&mut g, Precision::Fp16).unwrap();
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp16
          input %0: f32[1,3,4,4]  # x
          const %1: f32[4]  # sum=-1.827125e-1
          const %5: f16[2,4]  # sum=2.648579e0
          const %7: f32[2]  # sum=6.339009e-1
          const %9: f16[4,3,3,3] cl  # sum=-1.019287e-2
          %8: f16[1,3,4,4] cl = Convert(%0)  # x_to_nhwc
          %2: f16[1,4,4,4] cl = FusedConv(%8, %9, %1) k=3x3 s=1x1 p=1,1,1,1 d=1x1 g=1 epilogue=bias+relu  # conv
          %3: f16[1,4,1,1] cl = GlobalAveragePool(%2)  # avgpool
          %4: f16[1,4] = Flatten(%3) axis=1  # flatten
          %6: f32[1,2] = Dense(%4, %5, %7) epilogue=bias  # fc
          return %6
        ");
        insta::assert_snapshot!(summary.to_string(), @r"precision: 4 activations f16, 2 weights f16");
        for (v, value) in g.values.iter().enumerate() {
            if value.dtype == DType::F16 {
                if let Some(data) = value.constant_data() {
                    assert!(data.iter().all(|&x| DType::F16.round(x) == x), "%{v}");
                }
            }
        }
        let got = direct_eval::evaluate(&g, &[&input]);
        let error = rel_l2(&got[0], &want[0]);
        assert!(error > 0.0 && error <= 1e-2, "rel. L2 {error:e}");
    }

    #[test]
    fn inputs_and_outputs_get_converts_without_layout() {
        // y = relu(x) reads the input; z = y + c is a graph output that a
        // sigmoid also reads; a Flatten view of the input is an output too.
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3]);
        let c = b.constant("c", &[3], vec![0.1, 0.2, 0.3]);
        let y = b.relu("relu", x);
        let z = b.node("add", Op::Binary(BinaryOp::Add), &[y, c]);
        let s = b.node("sigmoid", Op::Unary(UnaryOp::Sigmoid), &[z]);
        let flat_x = b.node("flatten_x", Op::Flatten { axis: 0 }, &[x]);
        b.output(z);
        b.output(s);
        b.output(flat_x);
        let input = b.data_for(x);
        let mut g = b.finish();
        let want = direct_eval::evaluate(&g, &[&input]);
        let summary = apply_precision(&mut g, Precision::Bf16).unwrap();
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=bf16
          input %0: f32[2,3]  # x
          const %1: f32[3]  # sum=6.000000e-1
          %6: bf16[2,3] = Convert(%0)  # x_to_bf16
          %2: bf16[2,3] = Relu(%6)  # relu
          %7: bf16[2,3] = Add(%2, %1)  # add
          %3: f32[2,3] = Convert(%7)  # add_out_to_f32
          %8: bf16[2,3] = Sigmoid(%7)  # sigmoid
          %4: f32[2,3] = Convert(%8)  # sigmoid_out_to_f32
          %9: bf16[1,6] = Flatten(%6) axis=0  # flatten_x
          %5: f32[1,6] = Convert(%9)  # flatten_x_out_to_f32
          return %3, %4, %5
        ");
        assert_eq!(summary.count("Convert inserted"), 4);
        let got = direct_eval::evaluate(&g, &[&input]);
        for (a, b) in got.iter().zip(&want) {
            assert!(rel_l2(a, b) <= 1e-2);
        }
    }

    #[test]
    fn fp32_and_tf32_only_set_the_mode() {
        for precision in [Precision::Tf32, Precision::Fp32] {
            let (mut g, _) = small_net();
            let mut want = g.clone();
            apply_precision(&mut g, precision).unwrap();
            want.precision = precision;
            assert_eq!(g, want);
        }
    }

    /// `x / max(‖x‖₂, 1e-12)` over rows, one row all zeros (Swin V2's keys
    /// of padded tokens): at fp16 the bound would round to 0 and the zero
    /// row become 0 / 0; raised to f16's smallest subnormal it stays 0.
    #[test]
    fn fp16_keeps_a_tiny_positive_clip_bound_positive() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 4]);
        let norm = Op::Reduce {
            kind: ReduceKind::L2,
            axes: vec![1],
            keepdims: true,
        };
        let n = b.node("norm", norm, &[x]);
        let clip = Op::Unary(UnaryOp::Clip {
            min: 1e-12,
            max: f32::INFINITY,
        });
        let c = b.node("clamp", clip, &[n]);
        let y = b.node("div", Op::Binary(BinaryOp::Div), &[x, c]);
        b.output(y);
        let mut g = b.finish();
        apply_precision(&mut g, Precision::Fp16).unwrap();
        let clip_min = g.nodes.iter().find_map(|node| match node.op {
            Op::Unary(UnaryOp::Clip { min, .. }) => Some(min),
            _ => None,
        });
        assert_eq!(clip_min, Some(half::f16::from_bits(1).to_f32()));
        let input = [0.0, 0.0, 0.0, 0.0, 3.0, 0.0, 4.0, 0.0];
        let out = crate::reference::run(&g, &[&input], &Default::default()).unwrap();
        assert_eq!(
            out[0],
            [0.0, 0.0, 0.0, 0.0, 0.6, 0.0, 0.8, 0.0]
                .iter()
                .map(|&v| DType::F16.round(v))
                .collect::<Vec<_>>()
        );
        // A bound f16 can hold stays as written.
        assert_eq!(
            positive_clip_floor(
                &Op::Unary(UnaryOp::Clip {
                    min: 1e-3,
                    max: 6.0
                }),
                DType::F16
            ),
            Op::Unary(UnaryOp::Clip {
                min: 1e-3,
                max: 6.0
            })
        );
    }
}
