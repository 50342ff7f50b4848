//! Strided stems as stride-1 convolutions over a space-to-depth image: the
//! input conversion folds each `b × b` block of pixels into channels, and
//! the convolutions reading it become stride 1 with a `⌈R/b⌉ × ⌈S/b⌉`
//! kernel and no padding.
//!
//! The identity: a convolution of stride `b` (both axes, dilation 1,
//! groups 1, kernel `R × S`, pads `pt`/`pl` at the top/left) over `x
//! [N, C, H, W]` reads, for output pixel `(oh, ow)` and tap `(r, s)`,
//! `P[b·oh + r, b·ow + s]`, where `P` is `x` shifted by the pads (zero
//! outside the image). Writing `r = b·a + bh` (`bh < b`) and `s = b·a' + bw`, that is
//! `P[b·(oh + a) + bh, b·(ow + a') + bw]`: element `(oh + a, ow + a')` of
//! the space-to-depth image
//!
//! `Q[n, (bh·b + bw)·C + c, i, j] = P[n, c, b·i + bh, b·j + bw]`
//!
//! ([`Op::SpaceToDepth`]). So the convolution is a stride-1, unpadded one
//! with kernel `R' × S'` (`R' = ⌈R/b⌉`, `S' = ⌈S/b⌉`) over `Q`, with the
//! weight `W'[k, (bh·b + bw)·C + c, a, a'] = W[k, c, b·a + bh, b·a' + bw]`,
//! zero where `b·a + bh ≥ R` or `b·a' + bw ≥ S`. Its output size is the
//! original one when `Q` has `OH + R' − 1` rows and `OW + S' − 1` columns;
//! positions of `Q` past the image's bottom/right edge are zero, which
//! covers any bottom/right padding. The channel count is padded with zeros
//! to a multiple of 8 ([`CHANNEL_MULTIPLE`]) so that an NHWC pixel is whole
//! 16-byte vectors for the tensor-core loaders, and the weight gets
//! matching zero channels. Every extra product has a zero weight, so the
//! sums are the original ones up to the order a GEMM adds them in (a NaN
//! or infinity in the input can now meet a zero weight where the original
//! convolution did not read it, turning more outputs NaN).
//!
//! For the ResNet stem at f16 (224², C = 3, 7×7 s2 p3, OH = 112) `Q` is
//! `[N, 16, 115, 115]` and the GEMM's K is 4·4·16 = 256 instead of
//! 7·7·8 = 392 ([`super::pad_input_channels`]'s padded 3 → 8 channels),
//! with each im2col row of 64 k elements 128 contiguous bytes of `Q`.
//!
//! The rewrite applies to a `Convert` reading a graph input when:
//! - its output is 4-D, channels-last, stored in a 16-bit type (f16/bf16,
//!   the storage types of the tensor-core path — the conditions
//!   [`super::pad_input_channels`] uses) and not a graph output;
//! - every reader is a `FusedConv` reading it as its data input (slot 0)
//!   only, with a constant channels-last (OHWI) weight, groups = 1,
//!   dilation 1 and equal strides `b ≥ 2`;
//! - for every reader the rewrite shrinks the GEMM's K:
//!   `R'·S'·round8(b²·C) < R·S·round8(C)`.
//!
//! Otherwise nothing changes (and `pad_input_channels`, which runs next,
//! may pad the conversion's channels instead). The `Convert` becomes one
//! `SpaceToDepth` per distinct `(b, pads, output size)` among its readers
//! (one for a ResNet), each reader reads its own with a rearranged weight
//! (one per original weight and block).

use super::pad_channels::CHANNEL_MULTIPLE;
use super::{PassError, PassSummary, Uses};
use crate::ir::{
    debug_verify, Conv2d, DType, Graph, Layout, Node, NodeId, Op, Patch, Value, ValueId, ValueKind,
};
use std::collections::HashMap;
use std::sync::Arc;

const PASS: &str = "space_to_depth";

/// Rewrites the strided convolutions that read an input conversion as
/// stride-1 convolutions over its space-to-depth image.
pub fn space_to_depth_input(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let uses = Uses::of(graph);
    let mut patch = Patch::new(graph);
    let mut weights: HashMap<(ValueId, usize), ValueId> = HashMap::new();
    let (mut converts, mut images, mut convs) = (0, 0, 0);
    for id in graph.node_ids() {
        let Some(groups) = rewrite_groups(graph, &uses, id) else {
            continue;
        };
        let node = graph.node(id);
        let out = graph.value(node.output);
        for (index, (op, readers)) in groups.iter().enumerate() {
            let Op::SpaceToDepth {
                block,
                channels,
                height,
                width,
                ..
            } = *op
            else {
                continue;
            };
            let suffix = if index == 0 {
                String::new()
            } else {
                format!("_{index}")
            };
            let image = patch.add_value(Value {
                name: format!("{}_s2d{block}{suffix}", out.name),
                shape: vec![out.shape[0], channels, height, width],
                ..out.clone()
            });
            patch.insert_before(
                id,
                Node {
                    name: format!("{}{suffix}", node.name),
                    op: op.clone(),
                    inputs: node.inputs.clone(),
                    output: image,
                },
            );
            images += 1;
            for &reader in readers {
                let conv = graph.node(reader);
                let Op::FusedConv {
                    conv: geometry,
                    epilogue,
                    shortcut,
                    pool,
                    norm,
                } = conv.op
                else {
                    continue;
                };
                let w = conv.inputs[1];
                let weight = *weights.entry((w, block)).or_insert_with(|| {
                    patch.add_value(rearranged_weight(graph.value(w), block, channels))
                });
                let mut inputs = conv.inputs.clone();
                inputs[0] = image;
                inputs[1] = weight;
                let folded = Conv2d {
                    kernel: geometry.kernel.map(|k| k.div_ceil(block)),
                    strides: [1, 1],
                    pads: [0; 4],
                    dilations: [1, 1],
                    groups: 1,
                };
                patch.replace_node(
                    reader,
                    Node {
                        op: Op::FusedConv {
                            conv: folded,
                            epilogue,
                            shortcut,
                            pool,
                            norm,
                        },
                        inputs,
                        ..conv.clone()
                    },
                );
                convs += 1;
            }
        }
        patch.remove_node(id);
        converts += 1;
    }
    patch.apply(graph);
    debug_verify(graph, PASS);
    let mut summary = PassSummary::new(PASS);
    summary.add(converts, "input Convert rewritten");
    summary.add(images, "SpaceToDepth");
    summary.add(convs, "convolutions made stride 1");
    summary.add(weights.len(), "weights rearranged");
    Ok(summary)
}

/// The `SpaceToDepth` ops replacing node `id` and the convolutions reading
/// each, when `id` is a conversion this pass rewrites.
fn rewrite_groups(graph: &Graph, uses: &Uses, id: NodeId) -> Option<Vec<(Op, Vec<NodeId>)>> {
    let node = graph.node(id);
    if node.op != Op::Convert {
        return None;
    }
    let &[x] = node.inputs.as_slice() else {
        return None;
    };
    let out = graph.value(node.output);
    let reads_input = graph.value(x).kind == ValueKind::Input;
    let tensor_core_storage = out.shape.len() == 4
        && out.layout == Layout::ChannelsLast
        && matches!(out.dtype, DType::F16 | DType::BF16);
    if !reads_input || !tensor_core_storage || uses.is_output(node.output) {
        return None;
    }
    let readers = uses.users(node.output);
    if readers.is_empty() {
        return None;
    }
    let mut groups: Vec<(Op, Vec<NodeId>)> = Vec::new();
    for &reader in readers {
        let op = folded_image(graph, reader, node.output)?;
        match groups.iter_mut().find(|(o, _)| *o == op) {
            Some((_, nodes)) => nodes.push(reader),
            None => groups.push((op, vec![reader])),
        }
    }
    Some(groups)
}

/// The `SpaceToDepth` whose output node `reader` would read, when it is a
/// convolution this pass folds: a groups = 1, dilation-1 `FusedConv` with
/// equal strides ≥ 2 and a constant OHWI weight, reading `value` as its
/// data input and nowhere else, whose GEMM K the rewrite shrinks.
fn folded_image(graph: &Graph, reader: NodeId, value: ValueId) -> Option<Op> {
    let node = graph.node(reader);
    let Op::FusedConv { conv, .. } = &node.op else {
        return None;
    };
    let weight = graph.value(node.inputs[1]);
    let x = graph.value(value);
    let y = graph.value(node.output);
    let block = conv.strides[0];
    let foldable = conv.groups == 1
        && conv.dilations == [1, 1]
        && conv.strides == [block, block]
        && block >= 2
        && node.inputs[0] == value
        && node.inputs[1..].iter().all(|&v| v != value)
        && weight.is_constant()
        && weight.layout == Layout::ChannelsLast
        && weight.shape.len() == 4
        && y.shape.len() == 4;
    if !foldable {
        return None;
    }
    let c = x.shape[1];
    let [r, s] = conv.kernel;
    let [r2, s2] = conv.kernel.map(|k| k.div_ceil(block));
    let channels = (block * block * c).next_multiple_of(CHANNEL_MULTIPLE);
    let k_now = r * s * c.next_multiple_of(CHANNEL_MULTIPLE);
    if r2 * s2 * channels >= k_now {
        return None;
    }
    Some(Op::SpaceToDepth {
        block,
        pad_top: conv.pads[0],
        pad_left: conv.pads[1],
        channels,
        height: y.shape[2] + r2 - 1,
        width: y.shape[3] + s2 - 1,
    })
}

/// `w` (`[K, C, R, S]`, OHWI data) as the weight of the folded
/// convolution: `[K, channels, ⌈R/b⌉, ⌈S/b⌉]`, OHWI, channel
/// `(bh·b + bw)·C + c` of tap `(a, a')` holding tap `(b·a + bh, b·a' + bw)`
/// of channel `c`, zero beyond the kernel and in channels past `b²·C`.
fn rearranged_weight(w: &Value, block: usize, channels: usize) -> Value {
    let [k, c, r, s] = [w.shape[0], w.shape[1], w.shape[2], w.shape[3]];
    let [r2, s2] = [r.div_ceil(block), s.div_ceil(block)];
    let data = w.constant_data().map_or(&[][..], |d| d.as_slice());
    let mut out = vec![0.0; k * r2 * s2 * channels];
    for (tap, taps) in data.chunks_exact(c).enumerate() {
        let (o, rest) = (tap / (r * s), tap % (r * s));
        let (row, col) = (rest / s, rest % s);
        let (a, bh) = (row / block, row % block);
        let (a2, bw) = (col / block, col % block);
        let pixel = (o * r2 + a) * s2 + a2;
        out[pixel * channels + (bh * block + bw) * c..][..c].copy_from_slice(taps);
    }
    Value {
        name: format!("{}_s2d{block}", w.name),
        shape: vec![k, channels, r2, s2],
        kind: ValueKind::Constant(Arc::new(out)),
        ..w.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{print_graph, BinaryOp, Epilogue, Precision};
    use crate::passes::{direct_eval, pad_input_channels};
    use crate::reference::{self, Accumulate, RunOptions};
    use crate::test_graphs::{prepared, Builder};

    fn f64_sums() -> RunOptions {
        RunOptions {
            accumulate: Accumulate::F64,
            ..RunOptions::default()
        }
    }

    /// One convolution over an `[n, c, h, w]` input: kernel `r × s`,
    /// stride `stride`, pads (top, left, bottom, right), bias and ReLU.
    fn strided_conv(
        [n, c, h, w]: [usize; 4],
        [r, s]: [usize; 2],
        stride: usize,
        pads: [usize; 4],
    ) -> (Graph, Vec<f32>) {
        let mut b = Builder::new();
        let x = b.input("x", &[n, c, h, w]);
        let weight = b.random("conv.weight", &[5, c, r, s], -0.5, 0.5);
        let bias = b.random("conv.bias", &[5], -0.1, 0.1);
        let conv = Conv2d {
            kernel: [r, s],
            strides: [stride, stride],
            pads,
            dilations: [1, 1],
            groups: 1,
        };
        let y = b.node("conv", Op::Conv(conv), &[x, weight, bias]);
        let y = b.relu("relu", y);
        b.output(y);
        let input = b.data_for(x);
        (b.finish(), input)
    }

    /// Runs the pass on `graph` prepared at `precision`; checks it folded
    /// every convolution, and that the result computes what the unfolded
    /// graph does on the reference (f64 sums) and on the direct loops.
    fn fold_and_compare(graph: &Graph, input: &[f32], precision: Precision, label: &str) -> Graph {
        let before = prepared(graph, precision);
        let mut after = before.clone();
        let summary = space_to_depth_input(&mut after).unwrap();
        assert_eq!(summary.count("input Convert rewritten"), 1, "{label}");
        for node in &after.nodes {
            if let Op::FusedConv { conv, .. } = node.op {
                assert_eq!((conv.strides, conv.pads), ([1, 1], [0; 4]), "{label}");
            }
        }
        let want = reference::run(&before, &[input], &f64_sums()).unwrap();
        let got = reference::run(&after, &[input], &f64_sums()).unwrap();
        for (g, w) in got.iter().zip(&want) {
            let error = reference::rel_l2(g, w);
            assert!(error <= 1e-6, "{label}: rel. L2 {error:e}");
        }
        let want = direct_eval::evaluate(&before, &[input]);
        let got = direct_eval::evaluate(&after, &[input]);
        for (g, w) in got.iter().zip(&want) {
            let error = reference::rel_l2(g, w);
            assert!(error <= 1e-6, "{label}: direct loops: rel. L2 {error:e}");
        }
        after
    }

    #[test]
    fn stem_becomes_a_stride_one_conv_over_the_space_to_depth_image() {
        let (graph, input) = strided_conv([2, 3, 10, 9], [7, 7], 2, [3; 4]);
        let mut g = prepared(&graph, Precision::Fp16);
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp16
          input %0: f32[2,3,10,9]  # x
          const %1: f32[5]  # sum=-2.188000e-2
          const %4: f16[5,3,7,7] cl  # sum=-1.283527e1
          %3: f16[2,3,10,9] cl = Convert(%0)  # x_to_nhwc
          %5: f16[2,5,5,5] cl = FusedConv(%3, %4, %1) k=7x7 s=2x2 p=3,3,3,3 d=1x1 g=1 epilogue=bias+relu  # conv
          %2: f32[2,5,5,5] = Convert(%5)  # relu_out_to_nchw
          return %2
        ");
        let before = g.clone();
        let summary = space_to_depth_input(&mut g).unwrap();
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp16
          input %0: f32[2,3,10,9]  # x
          const %1: f32[5]  # sum=-2.188000e-2
          const %5: f16[5,16,4,4] cl  # sum=-1.283527e1
          %4: f16[2,16,8,8] cl = SpaceToDepth(%0) block=2 pad=3,3 channels=16 out=8x8  # x_to_nhwc
          %3: f16[2,5,5,5] cl = FusedConv(%4, %5, %1) k=4x4 s=1x1 p=0,0,0,0 d=1x1 g=1 epilogue=bias+relu  # conv
          %2: f32[2,5,5,5] = Convert(%3)  # relu_out_to_nchw
          return %2
        ");
        insta::assert_snapshot!(summary.to_string(), @"space_to_depth: 1 input Convert rewritten, 1 SpaceToDepth, 1 convolutions made stride 1, 1 weights rearranged");
        // Each of the 5·3·49 taps lands once in the 5·16·16 slots; the rest
        // are zero (taps of row or column 7, channels 12..16).
        let w = g.values.iter().find(|v| v.shape == [5, 16, 4, 4]).unwrap();
        let data = w.constant_data().unwrap();
        assert_eq!(data.len(), 5 * 16 * 16);
        let original = before
            .values
            .iter()
            .find(|v| v.shape == [5, 3, 7, 7])
            .unwrap();
        let mut want: Vec<f32> = original.constant_data().unwrap().to_vec();
        let mut got: Vec<f32> = data.iter().copied().filter(|&v| v != 0.0).collect();
        want.sort_by(f32::total_cmp);
        got.sort_by(f32::total_cmp);
        assert_eq!(got, want);
        // OHWI tap (a, a') = (3, 3) holds original taps (6|7, 6|7): only
        // (6, 6) exists, in channels (0·2 + 0)·3 + c.
        let tap = |o: usize, a: usize, a2: usize| &data[((o * 4 + a) * 4 + a2) * 16..][..16];
        let orig = original.constant_data().unwrap();
        let orig_tap = |o: usize, r: usize, s: usize| &orig[((o * 7 + r) * 7 + s) * 3..][..3];
        assert_eq!(&tap(2, 3, 3)[..3], orig_tap(2, 6, 6));
        assert!(tap(2, 3, 3)[3..].iter().all(|&v| v == 0.0));
        // Tap (1, 2), block (1, 0): original (3, 4).
        assert_eq!(&tap(4, 1, 2)[6..9], orig_tap(4, 3, 4));
        // Exact with f64 sums, on both oracles.
        let want = reference::run(&before, &[&input], &f64_sums()).unwrap();
        let got = reference::run(&g, &[&input], &f64_sums()).unwrap();
        assert!(reference::rel_l2(&got[0], &want[0]) <= 1e-6);
        assert_eq!(
            direct_eval::evaluate(&g, &[&input]),
            direct_eval::evaluate(&before, &[&input])
        );
        // Nothing left to fold, and nothing for pad_channels.
        assert!(space_to_depth_input(&mut g).unwrap().is_noop());
        assert!(pad_input_channels(&mut g).unwrap().is_noop());
    }

    /// Odd channel counts, kernels, image sizes and pads (asymmetric too),
    /// at f16 and bf16, and a 4×4 stride-4 patchify conv: the folded graph
    /// computes what the strided one does.
    #[test]
    fn odd_shapes_fold_exactly() {
        // Input shape, kernel, stride, pads (top, left, bottom, right).
        type Case = ([usize; 4], [usize; 2], usize, [usize; 4]);
        let cases: [Case; 12] = [
            ([2, 3, 13, 11], [7, 7], 2, [3; 4]),
            ([1, 1, 9, 9], [3, 3], 2, [1; 4]),
            ([1, 1, 8, 7], [5, 5], 2, [2; 4]),
            ([2, 3, 7, 12], [5, 5], 2, [2, 1, 0, 2]),
            ([1, 5, 15, 9], [7, 7], 2, [3, 2, 1, 3]),
            ([3, 3, 5, 5], [3, 3], 2, [1, 1, 0, 0]),
            ([1, 3, 11, 6], [3, 5], 2, [3, 2, 3, 2]),
            ([1, 3, 7, 7], [2, 2], 2, [0; 4]),
            ([1, 3, 6, 9], [4, 4], 2, [1, 2, 1, 2]),
            ([1, 2, 10, 10], [3, 3], 2, [0; 4]),
            ([1, 3, 17, 13], [4, 4], 4, [0; 4]),
            ([1, 1, 12, 10], [7, 7], 3, [3; 4]),
        ];
        for (shape, kernel, stride, pads) in cases {
            let (graph, input) = strided_conv(shape, kernel, stride, pads);
            for precision in [Precision::Fp16, Precision::Bf16] {
                let label = format!("{shape:?} k{kernel:?} s{stride} p{pads:?} {precision}");
                let g = fold_and_compare(&graph, &input, precision, &label);
                let s2d = g
                    .nodes
                    .iter()
                    .find(|n| matches!(n.op, Op::SpaceToDepth { .. }))
                    .unwrap();
                let y = g.value(s2d.output);
                assert_eq!(y.shape[1] % CHANNEL_MULTIPLE, 0, "{label}");
                assert_eq!(y.layout, Layout::ChannelsLast, "{label}");
            }
        }
    }

    /// Two strided convolutions of different geometry read the input: each
    /// geometry gets its own space-to-depth image; a weight shared by two
    /// convolutions of one geometry is rearranged once.
    #[test]
    fn readers_of_different_geometry_get_their_own_image() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 3, 12, 11]);
        let a = b.conv("a", x, 4, 7, 2, true);
        let c = b.conv("c", x, 4, 3, 2, false);
        let shared = b.graph.nodes[0].inputs[1];
        let stem = Conv2d {
            kernel: [7, 7],
            strides: [2, 2],
            pads: [3; 4],
            dilations: [1, 1],
            groups: 1,
        };
        let twin = b.node("twin", Op::Conv(stem), &[x, shared]);
        let sum = b.node("add", Op::Binary(BinaryOp::Add), &[a, c]);
        let sum = b.node("add2", Op::Binary(BinaryOp::Add), &[sum, twin]);
        b.output(sum);
        let input = b.data_for(x);
        let graph = b.finish();
        let before = prepared(&graph, Precision::Fp16);
        let mut g = before.clone();
        let summary = space_to_depth_input(&mut g).unwrap();
        insta::assert_snapshot!(summary.to_string(), @"space_to_depth: 1 input Convert rewritten, 2 SpaceToDepth, 3 convolutions made stride 1, 2 weights rearranged");
        let images: Vec<String> = g
            .nodes
            .iter()
            .filter(|n| matches!(n.op, Op::SpaceToDepth { .. }))
            .map(|n| format!("{} {}", n.name, n.op.attrs()))
            .collect();
        assert_eq!(
            images,
            [
                "x_to_nhwc block=2 pad=3,3 channels=16 out=9x9",
                "x_to_nhwc_1 block=2 pad=1,1 channels=16 out=7x7",
            ]
        );
        let want = reference::run(&before, &[&input], &f64_sums()).unwrap();
        let got = reference::run(&g, &[&input], &f64_sums()).unwrap();
        assert!(reference::rel_l2(&got[0], &want[0]) <= 1e-6);
    }

    /// Every condition the pass checks, one broken at a time: the graph is
    /// left as it was.
    #[test]
    fn other_storage_readers_and_geometries_are_left_alone() {
        let unchanged = |graph: &Graph, precision: Precision, label: &str| {
            let mut g = prepared(graph, precision);
            let before = g.clone();
            assert!(space_to_depth_input(&mut g).unwrap().is_noop(), "{label}");
            assert_eq!(g, before, "{label}");
        };
        // The stem at f32 and tf32 storage (the SIMT and tf32 kernels).
        let (stem, _) = strided_conv([1, 3, 16, 16], [7, 7], 2, [3; 4]);
        for precision in [Precision::Fp32, Precision::Tf32] {
            unchanged(&stem, precision, &format!("stem {precision}"));
        }
        // Stride 1, unequal strides, dilation 2, groups 3.
        let (stride1, _) = strided_conv([1, 3, 16, 16], [7, 7], 1, [3; 4]);
        unchanged(&stride1, Precision::Fp16, "stride 1");
        let with = |edit: fn(&mut Conv2d)| {
            let (mut g, _) = strided_conv([1, 3, 16, 16], [3, 3], 2, [1; 4]);
            let node = &mut g.nodes[0];
            let Op::Conv(conv) = &mut node.op else {
                unreachable!()
            };
            edit(conv);
            let shapes: Vec<&[usize]> = node
                .inputs
                .iter()
                .map(|&v| g.values[v.index()].shape.as_slice())
                .collect();
            let shape = crate::ir::infer_shape(&node.op, &shapes).unwrap();
            let out = node.output;
            g.values[out.index()].shape = shape.clone();
            let relu = g.nodes[1].output;
            g.values[relu.index()].shape = shape;
            crate::ir::verify(&g).unwrap();
            g
        };
        unchanged(&with(|c| c.strides = [2, 1]), Precision::Fp16, "2x1");
        unchanged(&with(|c| c.dilations = [2, 2]), Precision::Fp16, "dilated");
        // K would not shrink: C = 8 (already vectors), C = 5 at 5×5
        // (9·24 = 216 ≥ 25·8), a 1×1 stride-2 conv (16 ≥ 8).
        for (label, shape, kernel) in [
            ("c8", [1, 8, 16, 16], [7, 7]),
            ("c5 5x5", [1, 5, 16, 16], [5, 5]),
            ("1x1", [1, 3, 16, 16], [1, 1]),
        ] {
            let (g, _) = strided_conv(shape, kernel, 2, [kernel[0] / 2; 4]);
            unchanged(&g, Precision::Fp16, label);
        }
        // One reader of two would not shrink (the 1×1): neither is folded,
        // and pad_channels pads the conversion as before.
        let mut b = Builder::new();
        let x = b.input("x", &[1, 3, 12, 12]);
        let a = b.conv("a", x, 4, 7, 2, true);
        let c = b.conv("c", x, 4, 1, 2, false);
        let sum = b.node("add", Op::Binary(BinaryOp::Add), &[a, c]);
        b.output(sum);
        let mixed = b.finish();
        unchanged(&mixed, Precision::Fp16, "with a 1x1 reader");
        let mut g = prepared(&mixed, Precision::Fp16);
        assert_eq!(
            pad_input_channels(&mut g).unwrap().count("weights padded"),
            2
        );
        // A max pool reads the converted input too.
        let mut b = Builder::new();
        let x = b.input("x", &[1, 3, 12, 12]);
        let a = b.conv("a", x, 4, 7, 2, true);
        let p = b.node("pool", Op::MaxPool(pool_3x3_s2()), &[x]);
        let p = b.conv("p", p, 4, 1, 1, false);
        let sum = b.node("add", Op::Binary(BinaryOp::Add), &[a, p]);
        b.output(sum);
        unchanged(&b.finish(), Precision::Fp16, "pool reader");
        // A grouped stem (groups = 3, one channel each).
        let mut b = Builder::new();
        let x = b.input("x", &[1, 3, 12, 12]);
        let w = b.random("w", &[6, 1, 7, 7], -0.5, 0.5);
        let grouped = Conv2d {
            kernel: [7, 7],
            strides: [2, 2],
            pads: [3; 4],
            dilations: [1, 1],
            groups: 3,
        };
        let y = b.node("grouped", Op::Conv(grouped), &[x, w]);
        b.output(y);
        unchanged(&b.finish(), Precision::Fp16, "grouped");
    }

    /// The ResNet-like test graph (stem, two bottlenecks, head) at f16:
    /// the folded stem computes what the padded one does (f64 sums), and
    /// with f32 sums its error against the f32 model stays what it was.
    #[test]
    fn resnet_like_outputs_do_not_change() {
        let (graph, input) = Builder::resnet_like(2, 40, 10, false);
        let before = prepared(&graph, Precision::Fp16);
        let mut folded = before.clone();
        let summary = space_to_depth_input(&mut folded).unwrap();
        assert_eq!(summary.count("convolutions made stride 1"), 1);
        let mut padded = before.clone();
        pad_input_channels(&mut padded).unwrap();
        let want = reference::run(&before, &[&input], &f64_sums()).unwrap();
        let got = reference::run(&folded, &[&input], &f64_sums()).unwrap();
        let error = reference::rel_l2(&got[0], &want[0]);
        assert!(error <= 1e-6, "f64 sums: rel. L2 {error:e}");
        let opts = RunOptions::default();
        let exact = reference::run(&graph, &[&input], &opts).unwrap();
        let errors: Vec<f64> = [&padded, &folded]
            .iter()
            .map(|g| {
                let out = reference::run(g, &[&input], &opts).unwrap();
                reference::rel_l2(&out[0], &exact[0])
            })
            .collect();
        println!(
            "rel. L2 to f32: padded {:.3e}, space-to-depth {:.3e}",
            errors[0], errors[1]
        );
        assert!(errors[1] <= 1.25 * errors[0].max(1e-4), "{errors:?}");
        // The stem's data input is the image, its epilogue unchanged.
        let stem = folded
            .nodes
            .iter()
            .find(|n| n.name.starts_with("stem"))
            .unwrap();
        let image = folded.value(stem.inputs[0]);
        assert_eq!(image.shape, [2, 16, 23, 23]);
        assert!(matches!(
            stem.op,
            Op::FusedConv {
                epilogue: Epilogue { bias: true, .. },
                ..
            }
        ));
    }

    fn pool_3x3_s2() -> crate::ir::Pool2d {
        crate::ir::Pool2d {
            kernel: [3, 3],
            strides: [2, 2],
            pads: [1; 4],
            dilations: [1, 1],
            ceil_mode: false,
        }
    }
}
