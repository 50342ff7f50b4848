//! Folds inference-mode BatchNormalization into the convolution before it.
//!
//! `BN(y) = (y − mean)·s + beta` with `s = scale / sqrt(var + eps)` is affine
//! per channel, so for `y = conv(x, W) + b` it equals `conv(x, W') + b'` with
//! `W'[k] = W[k]·s[k]` and `b'[k] = (b[k] − mean[k])·s[k] + beta[k]` (b = 0
//! when the conv had no bias). A BatchNorm is folded when its input is a Conv
//! output read by nothing else (not even a graph output), the conv's weight
//! and bias and all four BatchNorm parameters are constants, and the conv
//! output and the BatchNorm output have the same dtype and layout. The
//! arithmetic is done in f64 and stored as f32 rounded to the weight's dtype
//! (biases are f32). A weight's output channel `k` is one contiguous block in
//! both OIHW and OHWI order, so the scaling does not depend on its layout.
//! The new Conv, which always has a bias, takes the BatchNorm's place and
//! output value; the old Conv and its constants disappear. Any other
//! BatchNorm stays as it is.

use super::{PassError, PassSummary, Uses};
use crate::ir::{debug_verify, DType, Graph, Node, NodeId, Op, Patch, Value, ValueId};
use std::sync::Arc;

const PASS: &str = "fold_batch_norm";

/// Folds every BatchNormalization that follows a foldable Conv.
pub fn fold_batch_norm(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let uses = Uses::of(graph);
    let producers = graph.producers();
    let mut patch = Patch::new(graph);
    let (mut folded, mut kept) = (0, 0);
    for id in graph.node_ids() {
        let bn = graph.node(id);
        let Op::BatchNorm { epsilon } = bn.op else {
            continue;
        };
        let Some(conv_id) = foldable_conv(graph, &uses, &producers, id) else {
            kept += 1;
            continue;
        };
        let conv = graph.node(conv_id);
        let (weight, bias) = fold(graph, conv, bn, epsilon)?;
        let weight = patch.add_value(weight);
        let bias = patch.add_value(bias);
        patch.remove_node(conv_id);
        patch.replace_node(
            id,
            Node {
                name: conv.name.clone(),
                op: conv.op.clone(),
                inputs: vec![conv.inputs[0], weight, bias],
                output: bn.output,
            },
        );
        folded += 1;
    }
    patch.apply(graph);
    debug_verify(graph, PASS);
    let mut summary = PassSummary::new(PASS);
    summary.add(folded, "BatchNormalization folded");
    summary.add(kept, "BatchNormalization kept");
    Ok(summary)
}

/// The Conv whose output is BatchNorm `bn`'s input and can absorb it.
fn foldable_conv(
    graph: &Graph,
    uses: &Uses,
    producers: &std::collections::HashMap<ValueId, NodeId>,
    bn: NodeId,
) -> Option<NodeId> {
    let node = graph.node(bn);
    let (&x, params) = node.inputs.split_first()?;
    if uses.sole_user(x) != Some(bn) || params.len() != 4 {
        return None;
    }
    let conv_id = *producers.get(&x)?;
    let conv = graph.node(conv_id);
    if !matches!(conv.op, Op::Conv(_)) || conv.inputs.len() < 2 {
        return None;
    }
    let all_constant = conv.inputs[1..]
        .iter()
        .chain(params)
        .all(|&v| graph.value(v).is_constant());
    let (y, out) = (graph.value(x), graph.value(node.output));
    (all_constant && y.dtype == out.dtype && y.layout == out.layout).then_some(conv_id)
}

/// The folded weight and bias values for `conv` followed by `bn`.
fn fold(graph: &Graph, conv: &Node, bn: &Node, epsilon: f32) -> Result<(Value, Value), PassError> {
    let error = |message: String| PassError {
        pass: PASS,
        node: bn.name.clone(),
        op: bn.op.kind(),
        message,
    };
    let data = |v: ValueId| {
        graph
            .value(v)
            .constant_data()
            .map(|d| d.as_slice())
            .unwrap_or(&[])
    };
    let weight = graph.value(conv.inputs[1]);
    let channels = weight.shape.first().copied().unwrap_or(0);
    let [scale, beta, mean, var] = [1, 2, 3, 4].map(|i| data(bn.inputs[i]));
    let old_bias = conv.inputs.get(2).map(|&b| data(b));
    let w = data(conv.inputs[1]);
    let lengths_ok = [scale, beta, mean, var]
        .iter()
        .chain(old_bias.as_ref())
        .all(|p| p.len() == channels);
    if channels == 0 || !lengths_ok || w.len() % channels != 0 {
        return Err(error(format!(
            "parameters do not match the conv's {channels} output channels"
        )));
    }
    let block = w.len() / channels;
    let mut new_w = Vec::with_capacity(w.len());
    let mut new_b = Vec::with_capacity(channels);
    for k in 0..channels {
        let denominator = var[k] as f64 + epsilon as f64;
        let s = scale[k] as f64 / denominator.sqrt();
        if !(denominator > 0.0 && s.is_finite()) {
            return Err(error(format!(
                "channel {k}: var + epsilon = {denominator} gives no finite scale"
            )));
        }
        let b = old_bias.map_or(0.0, |b| b[k] as f64);
        new_b.push(((b - mean[k] as f64) * s + beta[k] as f64) as f32);
        new_w.extend(
            w[k * block..(k + 1) * block]
                .iter()
                .map(|&x| weight.dtype.round((x as f64 * s) as f32)),
        );
    }
    let bias_name = match conv.inputs.get(2) {
        Some(&b) => graph.value(b).name.clone(),
        None => format!("{}.bias", conv.name),
    };
    let folded_weight = Value {
        kind: crate::ir::ValueKind::Constant(Arc::new(new_w)),
        ..weight.clone()
    };
    let folded_bias = Value {
        dtype: DType::F32,
        ..Value::constant(bias_name, vec![channels], new_b)
    };
    Ok((folded_weight, folded_bias))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::print_graph;
    use crate::test_graphs::Builder;

    /// A 1x1 conv over 2 channels, by direct loops.
    fn conv1x1(x: &[f32], w: &[f32], b: &[f32]) -> Vec<f32> {
        let hw = x.len() / 2;
        (0..2 * hw)
            .map(|i| {
                let (k, p) = (i / hw, i % hw);
                w[2 * k] * x[p] + w[2 * k + 1] * x[hw + p] + b[k]
            })
            .collect()
    }

    /// Inference BatchNorm over 2 channels, by direct loops.
    fn batch_norm(y: &[f32], [scale, beta, mean, var]: &[Vec<f32>; 4]) -> Vec<f32> {
        let hw = y.len() / 2;
        (0..y.len())
            .map(|i| {
                let k = i / hw;
                (y[i] - mean[k]) / (var[k] + 1e-5).sqrt() * scale[k] + beta[k]
            })
            .collect()
    }

    #[test]
    fn conv_with_bias_absorbs_batch_norm() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 2, 2, 2]);
        let w_data = vec![1.0, -2.0, 0.5, 3.0];
        let b_data = vec![0.25, -1.0];
        let bn_data: [Vec<f32>; 4] = [
            vec![2.0, 0.5],
            vec![0.1, -0.3],
            vec![0.5, 1.5],
            vec![4.0, 0.25],
        ];
        let w = b.constant("w", &[2, 2, 1, 1], w_data.clone());
        let bias = b.constant("b", &[2], b_data.clone());
        let conv = crate::ir::Conv2d {
            kernel: [1, 1],
            strides: [1, 1],
            pads: [0; 4],
            dilations: [1, 1],
            groups: 1,
        };
        let y = b.node("conv", Op::Conv(conv), &[x, w, bias]);
        let names = ["scale", "beta", "mean", "var"];
        let params: Vec<ValueId> = names
            .iter()
            .zip(&bn_data)
            .map(|(n, d)| b.constant(n, &[2], d.clone()))
            .collect();
        let z = b.node(
            "bn",
            Op::BatchNorm { epsilon: 1e-5 },
            &[y, params[0], params[1], params[2], params[3]],
        );
        b.output(z);
        let mut g = b.finish();
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,2,2,2]  # x
          const %1: f32[2,2,1,1]  # sum=2.500000e0
          const %2: f32[2]  # sum=-7.500000e-1
          const %4: f32[2]  # sum=2.500000e0
          const %5: f32[2]  # sum=-2.000000e-1
          const %6: f32[2]  # sum=2.000000e0
          const %7: f32[2]  # sum=4.250000e0
          %3: f32[1,2,2,2] = Conv(%0, %1, %2) k=1x1 s=1x1 p=0,0,0,0 d=1x1 g=1  # conv
          %8: f32[1,2,2,2] = BatchNormalization(%3, %4, %5, %6, %7) eps=1e-5  # bn
          return %8
        ");
        let summary = fold_batch_norm(&mut g).unwrap();
        assert_eq!(
            summary.to_string(),
            "fold_batch_norm: 1 BatchNormalization folded"
        );
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,2,2,2]  # x
          const %2: f32[2,2,1,1]  # sum=2.499931e0
          const %3: f32[2]  # sum=-2.949950e0
          %1: f32[1,2,2,2] = Conv(%0, %2, %3) k=1x1 s=1x1 p=0,0,0,0 d=1x1 g=1  # conv
          return %1
        ");

        // W'[k] = W[k]·s[k], b'[k] = (b[k] − mean[k])·s[k] + beta[k].
        let s: Vec<f64> = (0..2)
            .map(|k| bn_data[0][k] as f64 / (bn_data[3][k] as f64 + 1e-5).sqrt())
            .collect();
        let want_w: Vec<f32> = (0..4)
            .map(|i| (w_data[i] as f64 * s[i / 2]) as f32)
            .collect();
        let want_b: Vec<f32> = (0..2)
            .map(|k| {
                ((b_data[k] as f64 - bn_data[2][k] as f64) * s[k] + bn_data[1][k] as f64) as f32
            })
            .collect();
        let conv = &g.nodes[0];
        assert_eq!(**g.value(conv.inputs[1]).constant_data().unwrap(), want_w);
        assert_eq!(**g.value(conv.inputs[2]).constant_data().unwrap(), want_b);

        // The folded conv computes what conv + BN computed.
        let x_data = [0.5, -1.0, 2.0, 0.0, 1.5, 0.25, -0.5, 1.0];
        let before = batch_norm(&conv1x1(&x_data, &w_data, &b_data), &bn_data);
        let after = conv1x1(&x_data, &want_w, &want_b);
        for (a, b) in after.iter().zip(&before) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
        }
    }

    #[test]
    fn conv_without_bias_gets_one() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 3, 5, 5]);
        let y = b.conv("conv", x, 4, 3, 1, false);
        let z = b.batch_norm("bn", y);
        b.output(z);
        let mut g = b.finish();
        fold_batch_norm(&mut g).unwrap();
        assert_eq!(g.nodes.len(), 1);
        let conv = &g.nodes[0];
        assert!(matches!(conv.op, Op::Conv(_)));
        assert_eq!(conv.inputs.len(), 3);
        assert_eq!(g.value(conv.inputs[2]).name, "conv.bias");
        assert_eq!(g.outputs, vec![conv.output]);
    }

    #[test]
    fn batch_norm_not_after_a_foldable_conv_stays() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 2, 3, 3]);
        // BN on an input, BN after a conv whose output is also a graph output,
        // BN after a conv with a runtime weight.
        let bn_in = b.batch_norm("bn_input", x);
        let shared = b.conv("shared", bn_in, 2, 1, 1, true);
        let bn_shared = b.batch_norm("bn_shared", shared);
        let w = b.input("w", &[2, 2, 1, 1]);
        let conv = crate::ir::Conv2d {
            kernel: [1, 1],
            strides: [1, 1],
            pads: [0; 4],
            dilations: [1, 1],
            groups: 1,
        };
        let dynamic = b.node("dynamic", Op::Conv(conv), &[bn_shared, w]);
        let bn_dynamic = b.batch_norm("bn_dynamic", dynamic);
        b.output(shared);
        b.output(bn_dynamic);
        let mut g = b.finish();
        let before = print_graph(&g);
        let summary = fold_batch_norm(&mut g).unwrap();
        assert_eq!(summary.count("BatchNormalization folded"), 0);
        assert_eq!(summary.count("BatchNormalization kept"), 3);
        assert_eq!(print_graph(&g), before);
    }

    #[test]
    fn non_positive_variance_is_an_error() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 1, 2, 2]);
        let y = b.conv("conv", x, 1, 1, 1, false);
        let params: Vec<ValueId> = [1.0, 0.0, 0.0, -1.0]
            .iter()
            .enumerate()
            .map(|(i, &v)| b.constant(&format!("p{i}"), &[1], vec![v]))
            .collect();
        let z = b.node(
            "bad_bn",
            Op::BatchNorm { epsilon: 1e-5 },
            &[y, params[0], params[1], params[2], params[3]],
        );
        b.output(z);
        let mut g = b.finish();
        let error = fold_batch_norm(&mut g).unwrap_err();
        assert_eq!(error.pass, PASS);
        assert_eq!(error.node, "bad_bn");
        assert!(error.to_string().contains("var + epsilon"), "{error}");
    }
}
