//! Moves a LayerNormalization over channels into the epilogue of the
//! depthwise convolution that produces its input ([`ChannelNorm`]):
//! ConvNeXt's block is a 7×7 depthwise conv, then a LayerNorm over each
//! pixel's channels, and both PyTorch exporters write it as
//!
//! `y = FusedConv(x, w, [b])` (channels-last) → `t = Transpose(y)` with perm
//! `[0, 2, 3, 1]` (a free view of y's NHWC bytes) → `z = LayerNorm(t, γ, β)`
//! over the last axis.
//!
//! The conv then normalizes each output pixel itself (`norm`, γ and β
//! appended to its inputs) and writes y normalized; the LayerNorm goes and
//! its readers read `t` (or `y`, when the LayerNorm read y directly). The
//! normalization saves a launch and a round trip of y through memory.
//!
//! A LayerNorm qualifies when
//! - it reads y directly, or through such a Transpose, each value read by
//!   nothing else and no graph output;
//! - y comes from a FusedConv that [`ChannelNorm::supports`] (depthwise,
//!   whole 4-channel vectors, at most 1024 channels and 49 taps, dilation 1)
//!   with no residual, shortcut, pool or norm and activation none (a bias
//!   stays: it is added before the norm), laid out channels-last;
//! - the axes it normalizes are exactly the channel axis, apart from axes
//!   of size 1;
//! - its scale and bias are constants of K or 1 elements (a missing bias is
//!   zeros), and its output has y's dtype and the bytes of the value it
//!   read.
//!
//! It runs at every precision. At f32 storage the norm reads exactly the
//! values the LayerNorm would have read (the conv's f32 store is exact), so
//! the result is the unfused graph's; at f16/bf16 the norm reads the f32
//! accumulators where the LayerNorm read them rounded, so the fused result
//! is the more accurate one by up to that rounding.

use super::{PassError, PassSummary, Uses};
use crate::ir::{
    debug_verify, is_byte_view, is_row_major_bytes, Activation, ChannelNorm, DType, Graph, Layout,
    Node, NodeId, Op, Patch, Value, ValueId,
};
use std::collections::HashMap;

const PASS: &str = "fuse_conv_layer_norm";
const FUSED: &str = "LayerNormalization fused into a depthwise conv";

/// A LayerNorm and the conv (and view) it fuses with.
struct Match {
    conv: NodeId,
    /// The value the LayerNorm read: the Transpose view of the conv's
    /// output, or that output itself. The LayerNorm's readers read it.
    read: ValueId,
    epsilon: f32,
    /// γ and β, from the LayerNorm's scale and bias.
    affine: [Affine; 2],
}

/// One of the LayerNorm's affine parameters as the norm takes it.
enum Affine {
    /// A `[K]` constant the conv can read as it is.
    Value(ValueId),
    /// Its K elements (broadcast from one, or zeros for a missing bias) as a
    /// new `[K]` constant of this dtype.
    New(Vec<f32>, DType),
}

/// Fuses each qualifying LayerNormalization into its depthwise conv.
pub fn fuse_conv_layer_norm(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let mut summary = PassSummary::new(PASS);
    let uses = Uses::of(graph);
    let producers = graph.producers();
    let mut patch = Patch::new(graph);
    let mut fused = 0;
    for id in graph.node_ids() {
        let Some(m) = qualifies(graph, &uses, &producers, id) else {
            continue;
        };
        let conv = graph.node(m.conv);
        let Op::FusedConv {
            conv: geometry,
            epilogue,
            ..
        } = conv.op
        else {
            continue;
        };
        let k = graph.value(conv.output).shape[1];
        let mut inputs = conv.inputs.clone();
        for (affine, what) in m.affine.into_iter().zip(["scale", "shift"]) {
            inputs.push(match affine {
                Affine::Value(v) => v,
                Affine::New(data, dtype) => patch.add_value(Value {
                    dtype,
                    ..Value::constant(format!("{}/norm_{what}", conv.name), vec![k], data)
                }),
            });
        }
        patch.replace_node(
            m.conv,
            Node {
                op: Op::FusedConv {
                    conv: geometry,
                    epilogue,
                    shortcut: None,
                    pool: None,
                    norm: Some(ChannelNorm { epsilon: m.epsilon }),
                },
                inputs,
                ..conv.clone()
            },
        );
        patch.remove_node(id);
        patch.substitute(graph.node(id).output, m.read);
        fused += 1;
    }
    patch.apply(graph);
    debug_verify(graph, PASS);
    summary.add(fused, FUSED);
    Ok(summary)
}

/// The match of LayerNorm node `id` when it qualifies (module doc).
fn qualifies(
    graph: &Graph,
    uses: &Uses,
    producers: &HashMap<ValueId, NodeId>,
    id: NodeId,
) -> Option<Match> {
    let node = graph.node(id);
    let Op::LayerNorm { axis, epsilon } = node.op else {
        return None;
    };
    let read = node.inputs[0];
    if uses.sole_user(read) != Some(id) {
        return None;
    }
    // The conv's output y, and the axis of `read` that holds its channels.
    let mut conv = *producers.get(&read)?;
    let (y, channel_axis) = match &graph.node(conv).op {
        Op::Transpose { perm } if perm.as_slice() == [0, 2, 3, 1] => {
            let view = graph.node(conv);
            let y = view.inputs[0];
            if !is_byte_view(&view.op, graph.value(y), graph.value(read))
                || uses.sole_user(y) != Some(conv)
            {
                return None;
            }
            conv = *producers.get(&y)?;
            (y, 3)
        }
        _ => (read, 1),
    };
    let Op::FusedConv {
        conv: geometry,
        epilogue,
        shortcut: None,
        pool: None,
        norm: None,
    } = &graph.node(conv).op
    else {
        return None;
    };
    let (x, yv) = (graph.value(graph.node(conv).inputs[0]), graph.value(y));
    let k = yv.shape[1];
    if epilogue.residual
        || epilogue.activation != Activation::None
        || !ChannelNorm::supports(geometry, x.shape[1], k)
        || yv.layout != Layout::ChannelsLast
    {
        return None;
    }
    // The normalized axes `axis..` of `read` are its channel axis and axes
    // of size 1.
    let shape = &graph.value(read).shape;
    let only_channels =
        axis <= channel_axis && (axis..shape.len()).all(|a| a == channel_axis || shape[a] == 1);
    let (rv, out) = (graph.value(read), graph.value(node.output));
    let same_bytes = rv.layout == out.layout
        || (is_row_major_bytes(&rv.shape, rv.layout) && is_row_major_bytes(&out.shape, out.layout));
    if !only_channels || out.dtype != yv.dtype || !same_bytes {
        return None;
    }
    let gamma = affine(graph, node.inputs.get(1).copied(), k)?;
    let beta = affine(graph, node.inputs.get(2).copied(), k)?;
    Some(Match {
        conv,
        read,
        epsilon,
        affine: [gamma, beta],
    })
}

/// A LayerNorm scale or bias (`None`: no bias) as K per-channel values, when
/// it is a constant of K or 1 elements.
fn affine(graph: &Graph, value: Option<ValueId>, k: usize) -> Option<Affine> {
    let Some(id) = value else {
        return Some(Affine::New(vec![0.0; k], DType::F32));
    };
    let v = graph.value(id);
    let data = v.constant_data()?;
    if !is_row_major_bytes(&v.shape, v.layout) {
        return None;
    }
    match v.numel() {
        n if n == k && v.shape == [k] => Some(Affine::Value(id)),
        n if n == k => Some(Affine::New(data.to_vec(), v.dtype)),
        1 => Some(Affine::New(vec![data[0]; k], v.dtype)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{print_graph, Conv2d, Epilogue, Precision};
    use crate::reference::{rel_l2, run, RunOptions};
    use crate::test_graphs::Builder;

    /// How the test graph departs from ConvNeXt's pattern.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Variant {
        /// conv → Transpose view → LayerNorm over the last axis.
        Convnext,
        /// The same without a conv bias or LayerNorm bias, γ a scalar.
        Bare,
        /// The Transpose view is also a graph output.
        ReadTwice,
        /// The LayerNorm normalizes the last two axes (columns and channels).
        OtherAxis,
        /// groups = 2 over 8 channels: grouped, not depthwise.
        Grouped,
        /// The conv adds a residual.
        Residual,
        /// A 1×1 map: the LayerNorm reads the conv's output directly, over
        /// axes 1.. (the channels and two axes of size 1).
        Direct,
    }

    /// `x [1, 8, 5, 6]` (NHWC, f16) → 3×3 conv → Transpose → LayerNorm
    /// → Relu, laid out as the passes before this one leave ConvNeXt.
    fn graph(variant: Variant) -> (Graph, Vec<f32>) {
        let mut b = Builder::with_precision(Precision::Fp16);
        let (c, f16, cl) = (8, DType::F16, Layout::ChannelsLast);
        let hw = if variant == Variant::Direct {
            [1, 1]
        } else {
            [5, 6]
        };
        let x = b.input_as("x", &[1, c, hw[0], hw[1]], f16, cl);
        let groups = if variant == Variant::Grouped { 2 } else { c };
        let w = b.random("w", &[c, c / groups, 3, 3], -0.5, 0.5);
        b.set(w, cl, f16);
        let bias = variant != Variant::Bare;
        let mut inputs = vec![x, w];
        if bias {
            inputs.push(b.random("b", &[c], -1.0, 1.0));
            b.set(inputs[2], Layout::RowMajor, DType::F32);
        }
        let residual = variant == Variant::Residual;
        if residual {
            inputs.push(x);
        }
        let op = Op::FusedConv {
            conv: Conv2d {
                kernel: [3, 3],
                strides: [1, 1],
                pads: [1; 4],
                dilations: [1, 1],
                groups,
            },
            epilogue: Epilogue {
                bias,
                residual,
                ..Epilogue::NONE
            },
            shortcut: None,
            pool: None,
            norm: None,
        };
        let y = b.node_as("conv", op, &inputs, f16, cl);
        let t = if variant == Variant::Direct {
            y
        } else {
            let perm = vec![0, 2, 3, 1];
            b.node("view", Op::Transpose { perm }, &[y])
        };
        let (gamma, beta) = if variant == Variant::Bare {
            (
                b.constant_as("gamma", &[1], vec![1.5], DType::F32, Layout::RowMajor),
                None,
            )
        } else {
            // Shaped as the normalized axes: [C] or, over axes 1.., [C, 1, 1].
            let shape: &[usize] = if variant == Variant::Direct {
                &[c, 1, 1]
            } else {
                &[c]
            };
            let g = b.random("gamma", shape, 0.5, 1.5);
            let be = b.random("beta", shape, -0.5, 0.5);
            b.set(g, Layout::RowMajor, DType::F32);
            b.set(be, Layout::RowMajor, DType::F32);
            (g, Some(be))
        };
        let axis = match variant {
            Variant::OtherAxis => 2,
            Variant::Direct => 1,
            _ => 3,
        };
        let ln = Op::LayerNorm {
            axis,
            epsilon: 1e-6,
        };
        let mut ln_inputs = vec![t, gamma];
        ln_inputs.extend(beta);
        let z = b.node("norm", ln, &ln_inputs);
        let relu = b.node("relu", Op::Unary(crate::ir::UnaryOp::Relu), &[z]);
        b.output(relu);
        if variant == Variant::ReadTwice {
            b.output(t);
        }
        let data = b.data_for(x);
        (b.finish(), data)
    }

    /// The fused graph's output against the unfused one's (rel. L2), on `x`.
    fn fused_error(before: &Graph, after: &Graph, x: &[f32]) -> f64 {
        let opts = RunOptions::default();
        rel_l2(
            &run(after, &[x], &opts).unwrap()[0],
            &run(before, &[x], &opts).unwrap()[0],
        )
    }

    fn fuse(variant: Variant) -> (Graph, Graph, PassSummary, Vec<f32>) {
        let (before, x) = graph(variant);
        let mut after = before.clone();
        let summary = fuse_conv_layer_norm(&mut after).expect("pass");
        (before, after, summary, x)
    }

    #[test]
    fn convnext_pattern_fuses_and_computes_the_same() {
        let (before, after, summary, x) = fuse(Variant::Convnext);
        assert_eq!(summary.count(FUSED), 1);
        insta::assert_snapshot!(print_graph(&before), @r"
        graph precision=fp16
          input %0: f16[1,8,5,6] cl  # x
          const %1: f16[8,1,3,3] cl  # sum=1.980180e-1
          const %2: f32[8]  # sum=3.058203e0
          const %5: f32[8]  # sum=7.063406e0
          const %6: f32[8]  # sum=-9.874218e-1
          %3: f16[1,8,5,6] cl = FusedConv(%0, %1, %2) k=3x3 s=1x1 p=1,1,1,1 d=1x1 g=8 epilogue=bias  # conv
          %4: f16[1,5,6,8] = Transpose(%3) perm=[0, 2, 3, 1]  # view
          %7: f16[1,5,6,8] = LayerNormalization(%4, %5, %6) axis=3 eps=1e-6  # norm
          %8: f16[1,5,6,8] = Relu(%7)  # relu
          return %8
        ");
        insta::assert_snapshot!(print_graph(&after), @r"
        graph precision=fp16
          input %0: f16[1,8,5,6] cl  # x
          const %1: f16[8,1,3,3] cl  # sum=1.980180e-1
          const %2: f32[8]  # sum=3.058203e0
          const %5: f32[8]  # sum=7.063406e0
          const %6: f32[8]  # sum=-9.874218e-1
          %3: f16[1,8,5,6] cl = FusedConv(%0, %1, %2, %5, %6) k=3x3 s=1x1 p=1,1,1,1 d=1x1 g=8 epilogue=bias+layernorm(eps=1e-6)  # conv
          %4: f16[1,5,6,8] = Transpose(%3) perm=[0, 2, 3, 1]  # view
          %7: f16[1,5,6,8] = Relu(%4)  # relu
          return %7
        ");
        // The unfused LayerNorm reads the conv's output rounded to f16.
        let err = fused_error(&before, &after, &x);
        assert!(err > 0.0 && err < 2e-3, "rel err {err}");
    }

    /// On a 1×1 map the LayerNorm over axes 1.. of the conv's own output
    /// normalizes each pixel's channels too; its readers then read the
    /// conv's output (channels-last, bytes in row-major order).
    #[test]
    fn a_layer_norm_of_the_conv_output_itself_fuses_on_a_1x1_map() {
        let (before, after, summary, x) = fuse(Variant::Direct);
        assert_eq!(summary.count(FUSED), 1);
        let kinds: Vec<&str> = after.nodes.iter().map(|n| n.op.kind()).collect();
        assert_eq!(kinds, ["FusedConv", "Relu"]);
        assert_eq!(after.nodes[1].inputs, [after.nodes[0].output]);
        let err = fused_error(&before, &after, &x);
        assert!(err < 2e-3, "rel err {err}");
    }

    /// No conv bias, a scalar γ, no β: the norm takes K copies of γ and zeros.
    #[test]
    fn a_scalar_scale_and_a_missing_bias_become_channel_vectors() {
        let (before, after, summary, x) = fuse(Variant::Bare);
        assert_eq!(summary.count(FUSED), 1);
        let conv = &after.nodes[0];
        assert!(matches!(conv.op, Op::FusedConv { norm: Some(_), .. }));
        let gamma = after.value(conv.inputs[2]);
        let beta = after.value(conv.inputs[3]);
        assert_eq!(gamma.constant_data().unwrap().as_slice(), &[1.5; 8]);
        assert_eq!(beta.constant_data().unwrap().as_slice(), &[0.0; 8]);
        let err = fused_error(&before, &after, &x);
        assert!(err < 2e-3, "rel err {err}");
    }

    #[test]
    fn other_patterns_are_left_alone() {
        for variant in [
            Variant::ReadTwice,
            Variant::OtherAxis,
            Variant::Grouped,
            Variant::Residual,
        ] {
            let (before, after, summary, _) = fuse(variant);
            assert!(summary.is_noop(), "{variant:?}: {summary}");
            assert_eq!(before, after, "{variant:?}");
        }
    }

    /// At f32 storage the fused conv normalizes exactly the values the
    /// LayerNorm read: the same bits.
    #[test]
    fn at_f32_the_fused_graph_is_the_unfused_one_bit_for_bit() {
        let (mut before, x) = graph(Variant::Convnext);
        before.precision = Precision::Fp32;
        for v in &mut before.values {
            v.dtype = DType::F32;
        }
        let mut after = before.clone();
        assert_eq!(fuse_conv_layer_norm(&mut after).unwrap().count(FUSED), 1);
        let opts = RunOptions::default();
        let bits = |g: &Graph| -> Vec<u32> {
            run(g, &[&x], &opts).unwrap()[0]
                .iter()
                .map(|v| v.to_bits())
                .collect()
        };
        assert_eq!(bits(&after), bits(&before));
    }
}
