//! The [`NormShape`] of LayerNormalization, Group/InstanceNormalization,
//! LpNormalization and MeanVarianceNormalization nodes; `reduce.rs` renders
//! them (a row kernel of `rows.cu` where the slices are rows of at least
//! 32 elements, else one thread per slice).
//!
//! - LayerNorm: the slices are the axes `axis..`; scale and bias broadcast
//!   to `x.shape[axis..]` and keep their stored dtype (f32 constants under
//!   every precision, see `passes/precision.rs`); one of as many elements
//!   as a row is read as vectors.
//! - GroupNorm: `x [N, C, ...]` viewed as `[N, groups, C / groups ·
//!   spatial]`, a slice per (image, group); scale and bias per channel
//!   (`[C]`) or per group (`[groups]`, both must be), as the reference reads
//!   them. InstanceNormalization is `groups = C`.
//! - LpNorm: the slices along `axis`, p 1 or 2.
//! - MeanVarianceNorm: the slices over `axes`, any of them.
//!
//! Every value must be row-major bytes (the layout pass converts
//! channels-last inputs before these ops) and non-empty.

use super::index_map::broadcast_src;
use super::reduce::{row_major_operands, NormShape};
use super::rows::{Affine, NormMode};
use crate::ir::{Graph, Layout, NodeId, Op};

/// The [`NormShape`] of a LayerNorm, GroupNorm, LpNorm or
/// MeanVarianceNorm node.
pub fn norm_shape(graph: &Graph, node: NodeId) -> Result<NormShape, String> {
    let n = graph.node(node);
    row_major_operands(graph, node)?;
    let x = graph.value(n.inputs[0]);
    let y = graph.value(n.output);
    let rank = x.shape.len();
    let operand = |k: usize| n.inputs.get(k).map(|&v| graph.value(v));
    let mut shape = NormShape {
        family: "",
        shape: x.shape.clone(),
        axes: Vec::new(),
        mode: NormMode::Affine,
        epsilon: 0.0,
        scale: None,
        bias: None,
        in_dtype: x.dtype,
        out_dtype: y.dtype,
    };
    match n.op {
        Op::LayerNorm { axis, epsilon } => {
            if axis >= rank {
                return Err(format!("axis {axis} out of range for {:?}", x.shape));
            }
            let normalized = &x.shape[axis..];
            let len: usize = normalized.iter().product();
            let affine = |k: usize| {
                operand(k).map(|v| Affine {
                    dtype: v.dtype,
                    index: broadcast_src(normalized, Layout::RowMajor, &v.shape, Layout::RowMajor),
                    contiguous: v.numel() == len,
                })
            };
            shape.family = "layernorm";
            shape.axes = (axis..rank).collect();
            shape.epsilon = epsilon;
            shape.scale = affine(1);
            shape.bias = affine(2);
            if shape.scale.is_none() {
                return Err("LayerNorm has no scale input".into());
            }
        }
        Op::GroupNorm { groups, epsilon } => {
            let (Some(scale), Some(bias)) = (operand(1), operand(2)) else {
                return Err("GroupNorm needs x, scale and bias".into());
            };
            let &[images, channels, ..] = x.shape.as_slice() else {
                return Err(format!("input {:?} is not [N, C, ...]", x.shape));
            };
            if groups == 0 || channels % groups != 0 {
                return Err(format!(
                    "{channels} channels do not split into {groups} groups"
                ));
            }
            let spatial: usize = x.shape[2..].iter().product();
            let per_group = scale.numel() == groups && bias.numel() == groups;
            if !per_group && (scale.numel() != channels || bias.numel() != channels) {
                return Err(format!(
                    "scale {:?} and bias {:?} must have {channels} (per channel) or {groups} \
                     (per group) elements",
                    scale.shape, bias.shape
                ));
            }
            let per_group_channels = channels / groups;
            let index = if per_group {
                format!("return row % {groups};")
            } else if groups == 1 && spatial == 1 {
                "return j;".to_string()
            } else {
                format!("return row % {groups} * {per_group_channels} + j / {spatial};")
            };
            let affine = |dtype| Affine {
                dtype,
                index: index.clone(),
                contiguous: index == "return j;",
            };
            shape.family = "groupnorm";
            shape.shape = vec![images, groups, per_group_channels * spatial];
            shape.axes = vec![2];
            shape.epsilon = epsilon;
            shape.scale = Some(affine(scale.dtype));
            shape.bias = Some(affine(bias.dtype));
        }
        Op::LpNorm { axis, p } => {
            if axis >= rank {
                return Err(format!("axis {axis} out of range for {:?}", x.shape));
            }
            shape.family = "lpnorm";
            shape.axes = vec![axis];
            shape.mode = match p {
                1 => NormMode::L1,
                2 => NormMode::L2,
                other => return Err(format!("p = {other}: only 1 and 2 have a kernel")),
            };
        }
        Op::MeanVarianceNorm { ref axes } => {
            if let Some(bad) = axes.iter().find(|&&a| a >= rank) {
                return Err(format!("axis {bad} out of range for {:?}", x.shape));
            }
            let mut axes = axes.clone();
            axes.sort_unstable();
            axes.dedup();
            shape.family = "mvn";
            shape.axes = axes;
            shape.mode = NormMode::MeanVariance;
        }
        ref other => return Err(format!("{} is not a normalization", other.kind())),
    }
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::cuda::index_map::tests::eval;
    use crate::ir::{DType, Precision};
    use crate::test_graphs::{one_op, In};

    fn shape_of(op: Op, inputs: &[In]) -> Result<NormShape, String> {
        let (graph, _) = one_op(op, inputs, DType::F16, Layout::RowMajor, Precision::Fp16);
        norm_shape(&graph, NodeId(0))
    }

    fn act(shape: &[usize]) -> In {
        In::act(shape, DType::F16, Layout::RowMajor)
    }

    fn constant(shape: &[usize]) -> In {
        In::constant(shape, DType::F32, Layout::RowMajor, 3)
    }

    #[test]
    fn layer_norm_rows_and_broadcast_scales() {
        let op = Op::LayerNorm {
            axis: 2,
            epsilon: 1e-6,
        };
        let s = shape_of(op.clone(), &[act(&[1, 197, 768]), constant(&[768])]).unwrap();
        let rows = s.rows().unwrap();
        assert_eq!((rows.rows, rows.len), (197, 768));
        let scale = rows.scale.unwrap();
        assert!(scale.contiguous && scale.dtype == DType::F32);
        assert_eq!(rows.bias, None);
        // ConvNeXt's channels-last LayerNorm over axis 3; a [1, C] scale
        // over two normalized axes broadcasts along the first.
        let op = Op::LayerNorm {
            axis: 2,
            epsilon: 1e-5,
        };
        let s = shape_of(
            op,
            &[act(&[2, 7, 7, 96]), constant(&[1, 96]), constant(&[96])],
        )
        .unwrap();
        let rows = s.rows().unwrap();
        assert_eq!((rows.rows, rows.len), (14, 7 * 96));
        let scale = rows.scale.unwrap();
        assert!(!scale.contiguous);
        assert_eq!(eval(&scale.index, 96 + 5), 5);
        assert!(!rows.bias.unwrap().contiguous);
    }

    #[test]
    fn group_norm_is_a_row_per_image_and_group() {
        let op = Op::GroupNorm {
            groups: 4,
            epsilon: 1e-5,
        };
        let x = act(&[2, 8, 4, 5]);
        let per_channel =
            shape_of(op.clone(), &[x.clone(), constant(&[8]), constant(&[8])]).unwrap();
        let rows = per_channel.rows().unwrap();
        assert_eq!((rows.rows, rows.len), (8, 2 * 20));
        assert_eq!(rows.scale.unwrap().index, "return row % 4 * 2 + j / 20;");
        let per_group = shape_of(op.clone(), &[x.clone(), constant(&[4]), constant(&[4])]).unwrap();
        assert_eq!(per_group.scale.unwrap().index, "return row % 4;");
        let mixed = shape_of(op, &[x, constant(&[4]), constant(&[8])]);
        assert!(mixed.unwrap_err().contains("per channel"));
        // Instance norm over 4 pixels: slices too short for a warp.
        let instance = Op::GroupNorm {
            groups: 8,
            epsilon: 1e-5,
        };
        let s = shape_of(
            instance,
            &[act(&[1, 8, 2, 2]), constant(&[8]), constant(&[8])],
        )
        .unwrap();
        assert_eq!(s.rows(), None);
        assert_eq!((s.slices(), s.count()), (8, 4));
    }

    #[test]
    fn lp_and_mean_variance_norms_pick_rows_or_slices() {
        let lp = |axis, p| shape_of(Op::LpNorm { axis, p }, &[act(&[2, 64, 40])]);
        assert!(lp(2, 2).unwrap().rows().is_some());
        let middle = lp(1, 1).unwrap();
        assert_eq!(middle.mode, NormMode::L1);
        assert_eq!(middle.rows(), None);
        assert!(lp(2, 3).unwrap_err().contains("p = 3"));
        let mvn = |axes: &[usize]| {
            shape_of(
                Op::MeanVarianceNorm {
                    axes: axes.to_vec(),
                },
                &[act(&[2, 3, 8, 8])],
            )
            .unwrap()
        };
        assert_eq!(mvn(&[0, 2, 3]).rows(), None);
        assert_eq!(mvn(&[0, 2, 3]).slices(), 3);
        assert_eq!(mvn(&[2, 3]).rows().map(|r| (r.rows, r.len)), Some((6, 64)));
    }

    #[test]
    fn channels_last_operands_are_an_error() {
        let op = Op::LpNorm { axis: 1, p: 2 };
        let (mut graph, _) = one_op(
            op,
            &[act(&[1, 8, 3, 3])],
            DType::F16,
            Layout::RowMajor,
            Precision::Fp16,
        );
        // What the verifier refuses, codegen refuses too (by name).
        graph.values[0].layout = Layout::ChannelsLast;
        let err = norm_shape(&graph, NodeId(0)).unwrap_err();
        assert!(err.contains("row-major"), "{err}");
    }
}
