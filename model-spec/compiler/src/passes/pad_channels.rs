//! Zero channels for the stem: the input conversion writes the image with
//! its channel count padded to a multiple of 8, and the convolutions reading
//! it get weights with matching zero input channels.
//!
//! The tensor-core convolution moves A (the NHWC activation) in 16-byte
//! `cp.async` chunks only when C % 8 == 0, and B (the OHWI weight) only when
//! R·S·C % 8 == 0; an RGB stem (C = 3, 7×7) has neither and gathers both
//! element by element. Padding C to 8 makes both vector moves legal. It is
//! exact: the extra channels are zero in the activation and in the weight,
//! so every extra product is 0 and the sums are those of the unpadded
//! convolution (up to the order a GEMM adds them in).
//!
//! The rewrite applies to a `Convert` reading a graph input (the NCHW f32 →
//! NHWC conversion [`super::to_channels_last`] and [`super::apply_precision`]
//! leave at the input) when:
//! - its output is 4-D, channels-last, stored in a 16-bit type (f16/bf16:
//!   the storage types of the tensor-core path; f32 models run the SIMT
//!   kernel, for which the padding would only add FLOPs), with C % 8 != 0;
//! - its output is not a graph output, and every reader is a `FusedConv`
//!   with groups = 1 reading it as its data input (slot 0) only, with a
//!   constant channels-last (OHWI) weight.
//!
//! The `Convert` becomes a [`Op::PadChannels`] writing a new
//! `[N, C8, H, W]` value (C8 = C rounded up to 8); each reader reads it with
//! a new `[K, C8, R, S]` weight (one per original weight), whose channels
//! `C..C8` are zero. Logical shapes stay consistent, so the verifier, the
//! CPU reference and the memory plan (which sizes the padded buffer) need no
//! special case.

use super::{PassError, PassSummary, Uses};
use crate::ir::{
    debug_verify, DType, Graph, Layout, Node, NodeId, Op, Patch, Value, ValueId, ValueKind,
};
use std::collections::HashMap;
use std::sync::Arc;

const PASS: &str = "pad_channels";

/// Channel multiple that makes a 16-bit NHWC pixel a whole number of
/// 16-byte vectors.
pub const CHANNEL_MULTIPLE: usize = 8;

/// Pads the channels of input conversions read only by convolutions.
pub fn pad_input_channels(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let uses = Uses::of(graph);
    let mut patch = Patch::new(graph);
    let mut padded_weights: HashMap<ValueId, ValueId> = HashMap::new();
    let mut converts = 0;
    for id in graph.node_ids() {
        let Some(channels) = padded_channels(graph, &uses, id) else {
            continue;
        };
        let node = graph.node(id);
        let out = graph.value(node.output);
        let padded = patch.add_value(Value {
            name: format!("{}_pad{channels}", out.name),
            shape: vec![out.shape[0], channels, out.shape[2], out.shape[3]],
            ..out.clone()
        });
        patch.replace_node(
            id,
            Node {
                op: Op::PadChannels { channels },
                output: padded,
                ..node.clone()
            },
        );
        for &reader in uses.users(node.output) {
            let conv = graph.node(reader);
            let w = conv.inputs[1];
            let weight = *padded_weights
                .entry(w)
                .or_insert_with(|| patch.add_value(padded_weight(graph.value(w), channels)));
            let mut inputs = conv.inputs.clone();
            inputs[0] = padded;
            inputs[1] = weight;
            patch.replace_node(
                reader,
                Node {
                    inputs,
                    ..conv.clone()
                },
            );
        }
        converts += 1;
    }
    patch.apply(graph);
    debug_verify(graph, PASS);
    let mut summary = PassSummary::new(PASS);
    summary.add(
        converts,
        format!("input Convert padded to a multiple of {CHANNEL_MULTIPLE} channels"),
    );
    summary.add(padded_weights.len(), "weights padded");
    Ok(summary)
}

/// The padded channel count when node `id` is a conversion this pass rewrites.
fn padded_channels(graph: &Graph, uses: &Uses, id: NodeId) -> Option<usize> {
    let node = graph.node(id);
    if node.op != Op::Convert {
        return None;
    }
    let &[x] = node.inputs.as_slice() else {
        return None;
    };
    let out = graph.value(node.output);
    let reads_input = graph.value(x).kind == ValueKind::Input;
    let vectorizable = out.shape.len() == 4
        && out.layout == Layout::ChannelsLast
        && matches!(out.dtype, DType::F16 | DType::BF16)
        && out.shape[1] % CHANNEL_MULTIPLE != 0;
    if !reads_input || !vectorizable || uses.is_output(node.output) {
        return None;
    }
    let readers = uses.users(node.output);
    let all_convs = !readers.is_empty()
        && readers
            .iter()
            .all(|&r| reads_as_conv_data(graph, r, node.output));
    all_convs.then(|| out.shape[1].next_multiple_of(CHANNEL_MULTIPLE))
}

/// True when node `reader` is a groups = 1 `FusedConv` with a constant OHWI
/// weight that reads `value` as its data input and nowhere else.
fn reads_as_conv_data(graph: &Graph, reader: NodeId, value: ValueId) -> bool {
    let node = graph.node(reader);
    let Op::FusedConv { conv, .. } = &node.op else {
        return false;
    };
    let weight = graph.value(node.inputs[1]);
    conv.groups == 1
        && node.inputs[0] == value
        && node.inputs[1..].iter().all(|&v| v != value)
        && weight.is_constant()
        && weight.layout == Layout::ChannelsLast
        && weight.shape.len() == 4
}

/// `w` (`[K, C, R, S]`, OHWI data) with zero input channels up to `channels`.
fn padded_weight(w: &Value, channels: usize) -> Value {
    let [k, c, r, s] = [w.shape[0], w.shape[1], w.shape[2], w.shape[3]];
    let data = w.constant_data().map_or(&[][..], |d| d.as_slice());
    let mut out = vec![0.0; k * r * s * channels];
    for (pixel, taps) in data.chunks_exact(c).enumerate() {
        out[pixel * channels..][..c].copy_from_slice(taps);
    }
    Value {
        name: format!("{}_pad{channels}", w.name),
        shape: vec![k, channels, r, s],
        kind: ValueKind::Constant(Arc::new(out)),
        ..w.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{print_graph, Precision};
    use crate::passes::direct_eval;
    use crate::reference::{self, Accumulate, RunOptions};
    use crate::test_graphs::{prepared, Builder};

    /// Two convolutions read the RGB input (the second one then adds the
    /// first's output as its residual): both read the padded image.
    fn two_stems() -> (Graph, Vec<f32>) {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 6, 6]);
        let a = b.conv("a", x, 4, 3, 2, true);
        let a = b.relu("a.relu", a);
        let c = b.conv("c", x, 4, 1, 2, false);
        let sum = b.node(
            "add",
            crate::ir::Op::Binary(crate::ir::BinaryOp::Add),
            &[a, c],
        );
        b.output(sum);
        let input = b.data_for(x);
        (b.finish(), input)
    }

    #[test]
    fn stem_convert_and_weights_get_zero_channels() {
        let (graph, input) = two_stems();
        let mut g = prepared(&graph, Precision::Fp16);
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp16
          input %0: f32[2,3,6,6]  # x
          const %1: f32[4]  # sum=-1.827125e-1
          const %5: f16[4,3,3,3] cl  # sum=-1.019287e-2
          const %6: f16[4,3,1,1] cl  # sum=3.050068e0
          %4: f16[2,3,6,6] cl = Convert(%0)  # x_to_nhwc
          %2: f16[2,4,3,3] cl = FusedConv(%4, %5, %1) k=3x3 s=2x2 p=1,1,1,1 d=1x1 g=1 epilogue=bias+relu  # a
          %7: f16[2,4,3,3] cl = FusedConv(%4, %6, %2) k=1x1 s=2x2 p=0,0,0,0 d=1x1 g=1 epilogue=residual  # c
          %3: f32[2,4,3,3] = Convert(%7)  # add_out_to_nchw
          return %3
        ");
        let before = g.clone();
        let summary = pad_input_channels(&mut g).unwrap();
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp16
          input %0: f32[2,3,6,6]  # x
          const %1: f32[4]  # sum=-1.827125e-1
          const %6: f16[4,8,3,3] cl  # sum=-1.019287e-2
          const %7: f16[4,8,1,1] cl  # sum=3.050068e0
          %5: f16[2,8,6,6] cl = PadChannels(%0) channels=8  # x_to_nhwc
          %2: f16[2,4,3,3] cl = FusedConv(%5, %6, %1) k=3x3 s=2x2 p=1,1,1,1 d=1x1 g=1 epilogue=bias+relu  # a
          %4: f16[2,4,3,3] cl = FusedConv(%5, %7, %2) k=1x1 s=2x2 p=0,0,0,0 d=1x1 g=1 epilogue=residual  # c
          %3: f32[2,4,3,3] = Convert(%4)  # add_out_to_nchw
          return %3
        ");
        insta::assert_snapshot!(summary.to_string(), @"pad_channels: 1 input Convert padded to a multiple of 8 channels, 2 weights padded");
        // The weights keep their values in channels 0..3 and are 0 beyond.
        let padded = g
            .values
            .iter()
            .find(|v| v.is_constant() && v.shape == [4, 8, 3, 3])
            .unwrap();
        let data = padded.constant_data().unwrap();
        assert!(data
            .chunks(8)
            .all(|taps| taps[3..].iter().all(|&v| v == 0.0)));
        // Exact on the reference (f64 sums: the order of the zero terms
        // cannot matter) and on the direct loops.
        let opts = RunOptions {
            accumulate: Accumulate::F64,
            ..RunOptions::default()
        };
        let want = reference::run(&before, &[&input], &opts).unwrap();
        let got = reference::run(&g, &[&input], &opts).unwrap();
        assert_eq!(got, want);
        assert_eq!(
            direct_eval::evaluate(&g, &[&input]),
            direct_eval::evaluate(&before, &[&input])
        );
        // Nothing left to pad.
        assert!(pad_input_channels(&mut g).unwrap().is_noop());
    }

    /// ResNet-50's topology on 32×32 images at f16: the padded stem
    /// computes what the unpadded one does.
    #[test]
    fn resnet50_outputs_do_not_change() {
        let (graph, input) = Builder::resnet50(32);
        let unpadded = prepared(&graph, Precision::Fp16);
        let mut padded = unpadded.clone();
        let summary = pad_input_channels(&mut padded).unwrap();
        assert_eq!(summary.count("weights padded"), 1);
        // f64 sums: the zero products cannot change a sum, so only the
        // rounding of the f64 sums to f32 could differ.
        let f64 = RunOptions {
            accumulate: Accumulate::F64,
            ..RunOptions::default()
        };
        let want = reference::run(&unpadded, &[&input], &f64).unwrap();
        let got = reference::run(&padded, &[&input], &f64).unwrap();
        let error = reference::rel_l2(&got[0], &want[0]);
        assert!(error <= 1e-6, "f64 sums: rel. L2 {error:e}");
        // f32 sums (what the GPU does): the GEMM adds the stem's terms in
        // another order, which moves some f16 roundings; the error against
        // the f32 model stays what it was.
        let opts = RunOptions::default();
        let exact = reference::run(&graph, &[&input], &opts).unwrap();
        let errors: Vec<f64> = [&unpadded, &padded]
            .iter()
            .map(|g| {
                let out = reference::run(g, &[&input], &opts).unwrap();
                reference::rel_l2(&out[0], &exact[0])
            })
            .collect();
        println!(
            "rel. L2 to f32: unpadded {:.3e}, padded {:.3e}",
            errors[0], errors[1]
        );
        assert!(errors[1] <= 1.25 * errors[0], "{errors:?}");
    }

    #[test]
    fn other_readers_fp32_and_multiples_of_eight_are_left_alone() {
        let (graph, _) = two_stems();
        let mut fp32 = prepared(&graph, Precision::Fp32);
        assert!(pad_input_channels(&mut fp32).unwrap().is_noop());

        // The converted image is also max-pooled: not only convolutions read it.
        let mut b = Builder::new();
        let x = b.input("x", &[1, 3, 6, 6]);
        let a = b.conv("a", x, 4, 3, 1, false);
        let pool = crate::ir::Pool2d {
            kernel: [1, 1],
            strides: [1, 1],
            pads: [0; 4],
            dilations: [1, 1],
            ceil_mode: false,
        };
        let p = b.node("pool", Op::MaxPool(pool), &[x]);
        let p = b.conv("p", p, 4, 1, 1, false);
        let sum = b.node("add", Op::Binary(crate::ir::BinaryOp::Add), &[a, p]);
        b.output(sum);
        let mut g = prepared(&b.finish(), Precision::Fp16);
        assert!(pad_input_channels(&mut g).unwrap().is_noop());

        // Eight channels are already vectors.
        let mut b = Builder::new();
        let x = b.input("x", &[1, 8, 4, 4]);
        let a = b.conv("a", x, 4, 3, 1, false);
        b.output(a);
        let mut g = prepared(&b.finish(), Precision::Bf16);
        assert!(pad_input_channels(&mut g).unwrap().is_noop());
    }
}
