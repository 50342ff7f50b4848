//! Output-shape inference for every [`Op`], on logical shapes.
//!
//! The importer builds values with these shapes and the verifier re-derives
//! them after every pass, so a pass that changes a shape by mistake fails at
//! once. Errors are plain strings; callers wrap them with the node's name.
//! An op imported from ONNX has its inference in its module of
//! [`crate::ops`]; the ops only passes create have theirs here.

use super::op::Op;
use crate::ops;

/// Largest element count accepted for one tensor (2^34, 64 GiB of f32).
pub const MAX_ELEMENTS: usize = 1 << 34;

/// Infers the output shape of `op` from its input shapes.
pub fn infer_shape(op: &Op, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    let shape = infer_unchecked(op, inputs)?;
    let elements = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| format!("output shape {shape:?} exceeds {MAX_ELEMENTS} elements"))?;
    if elements == 0 {
        return Err(format!("output shape {shape:?} has a zero dimension"));
    }
    Ok(shape)
}

/// Checks that an op has `min` to `max` inputs.
pub(crate) fn arity(inputs: &[&[usize]], min: usize, max: usize) -> Result<(), String> {
    if inputs.len() < min || inputs.len() > max {
        let want = if min == max {
            format!("{min}")
        } else {
            format!("{min} to {max}")
        };
        return Err(format!("expects {want} inputs, got {}", inputs.len()));
    }
    Ok(())
}

/// `shape`, which must be 4-D (`what` names it in the error).
pub(crate) fn rank4<'a>(shape: &'a [usize], what: &str) -> Result<&'a [usize], String> {
    if shape.len() != 4 {
        return Err(format!(
            "{what} must be 4-D (N, C, H, W), got shape {shape:?}"
        ));
    }
    Ok(shape)
}

/// Numpy broadcasting of two shapes.
pub fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(format!("shapes {a:?} and {b:?} do not broadcast")),
        };
    }
    Ok(out)
}

/// Output of a FusedConv with a [`super::op::Shortcut`]: the main conv is
/// 1×1 stride 1 unpadded over `x`'s C channels, the weight `[K, C + Cs, 1,
/// 1]`, and `xs [N, Cs, Hs, Ws]` subsampled by the shortcut's strides
/// lands on the same `H × W` grid.
fn shortcut_conv_shape(
    conv: &super::op::Conv2d,
    shortcut: &super::op::Shortcut,
    x: &[usize],
    w: &[usize],
    bias: Option<&[usize]>,
    xs: &[usize],
) -> Result<Vec<usize>, String> {
    let pointwise = super::op::Conv2d {
        kernel: [1, 1],
        strides: [1, 1],
        pads: [0; 4],
        dilations: [1, 1],
        groups: 1,
    };
    if *conv != pointwise {
        return Err("a shortcut needs a 1x1, stride-1, unpadded, ungrouped main conv".into());
    }
    let (x4, w4, xs4) = (
        rank4(x, "conv input")?,
        rank4(w, "conv weight")?,
        rank4(xs, "shortcut input")?,
    );
    let [sh, sw] = shortcut.strides;
    let lands = |size: usize, stride: usize, out: usize| {
        stride > 0 && size > 0 && (size - 1) / stride + 1 == out
    };
    if xs4[0] != x4[0] || !lands(xs4[2], sh, x4[2]) || !lands(xs4[3], sw, x4[3]) {
        return Err(format!(
            "shortcut input {xs:?} at stride {sh}x{sw} does not land on the input {x:?}"
        ));
    }
    if w4[1] != x4[1] + xs4[1] {
        return Err(format!(
            "weight {w:?} must have the input's {} plus the shortcut's {} input channels",
            x4[1], xs4[1]
        ));
    }
    let main_w = [w4[0], x4[1], 1, 1];
    ops::conv::conv_shape(conv, x, &main_w, bias)
}

fn infer_unchecked(op: &Op, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    match op {
        Op::Conv(conv) => ops::conv::infer_shape(conv, inputs),
        Op::BatchNorm { .. } => ops::batch_norm::infer_shape(inputs),
        Op::Unary(_) => ops::activation::infer_shape(inputs),
        Op::Binary(_) => ops::arithmetic::infer_binary_shape(inputs),
        Op::Sum => ops::arithmetic::infer_sum_shape(inputs),
        Op::Where => ops::where_op::infer_shape(inputs),
        Op::MaxPool(pool) | Op::AveragePool { pool, .. } => ops::pool::infer_shape(pool, inputs),
        Op::GlobalAveragePool | Op::GlobalMaxPool => ops::global_pool::infer_shape(inputs),
        Op::ReduceMean { axes, keepdims } => ops::reduce::infer_shape(axes, *keepdims, inputs),
        Op::Flatten { axis } => ops::flatten::infer_shape(*axis, inputs),
        Op::Reshape { shape, allowzero } => ops::reshape::infer_shape(shape, *allowzero, inputs),
        Op::Gemm {
            trans_a, trans_b, ..
        } => ops::gemm::infer_gemm_shape(*trans_a, *trans_b, inputs),
        Op::MatMul => ops::gemm::infer_matmul_shape(inputs),
        Op::Identity => ops::identity::infer_shape(inputs),
        Op::Concat { axis } => ops::concat::infer_shape(*axis, inputs),
        Op::Attention { views, .. } => ops::attention::infer_shape(views.as_deref(), inputs),
        Op::Transpose { perm } => ops::transpose::infer_shape(perm, inputs),
        Op::Slice {
            starts,
            ends,
            steps,
        } => ops::slice::infer_shape(starts, ends, steps, inputs),
        Op::Gather {
            axis,
            indices,
            indices_shape,
        } => ops::gather::infer_shape(*axis, indices, indices_shape, inputs),
        Op::GatherNd {
            indices,
            indices_shape,
        } => ops::gather_nd::infer_shape(indices, indices_shape, inputs),
        Op::ScatterNd {
            indices,
            indices_shape,
            ..
        } => ops::scatter_nd::infer_shape(indices, indices_shape, inputs),
        Op::Expand { shape } => ops::expand::infer_shape(shape, inputs),
        Op::Tile { repeats } => ops::tile::infer_shape(repeats, inputs),
        Op::Pad { pads, .. } => ops::pad::infer_shape(pads, inputs),
        Op::Resize(resize) => ops::resize::infer_shape(resize, inputs),
        Op::Softmax { axis } | Op::LogSoftmax { axis } | Op::Hardmax { axis } => {
            ops::softmax::infer_shape(*axis, inputs)
        }
        Op::Reduce { axes, keepdims, .. } => ops::reduce::infer_shape(axes, *keepdims, inputs),
        Op::LayerNorm { axis, .. } => ops::layer_norm::infer_shape(*axis, inputs),
        Op::GroupNorm { groups, .. } => ops::group_norm::infer_shape(*groups, inputs),
        Op::LpNorm { axis, .. } => ops::lp_norm::infer_lp_shape(*axis, inputs),
        Op::MeanVarianceNorm { axes } => ops::lp_norm::infer_mvn_shape(axes, inputs),
        Op::Einsum { equation } => ops::einsum::infer_shape(equation, inputs),
        Op::FusedConv {
            conv,
            epilogue,
            shortcut,
            pool,
            norm,
        } => {
            let res = 2 + epilogue.bias as usize;
            // Inputs before the norm's γ and β.
            let conv_inputs = res + epilogue.residual as usize + shortcut.is_some() as usize;
            let want = conv_inputs + 2 * norm.is_some() as usize;
            arity(inputs, want, want)?;
            let bias = epilogue.bias.then(|| inputs[2]);
            let out = match shortcut {
                None => ops::conv::conv_shape(conv, inputs[0], inputs[1], bias)?,
                Some(sc) => shortcut_conv_shape(
                    conv,
                    sc,
                    inputs[0],
                    inputs[1],
                    bias,
                    inputs[conv_inputs - 1],
                )?,
            };
            if epilogue.residual && inputs[res] != out.as_slice() {
                return Err(format!(
                    "residual shape {:?} differs from output {out:?}",
                    inputs[res]
                ));
            }
            if norm.is_some() {
                for (what, shape) in [("scale", inputs[conv_inputs]), ("shift", inputs[want - 1])] {
                    if shape != [out[1]] {
                        return Err(format!(
                            "the channel norm's {what} {shape:?} must be [{}]",
                            out[1]
                        ));
                    }
                }
            }
            Ok(match pool {
                None => out,
                Some(_) => vec![out[0], out[1], 1, 1],
            })
        }
        Op::Dense { epilogue, norm } => {
            let residual = 2 + epilogue.bias as usize;
            let want = residual + epilogue.residual as usize + norm.is_some() as usize;
            arity(inputs, want, want)?;
            let (x, w) = (inputs[0], inputs[1]);
            if x.len() != 2 || w.len() != 2 || x[1] != w[1] {
                return Err(format!(
                    "Dense needs x [M,K] and w [N,K], got {x:?} and {w:?}"
                ));
            }
            let out = vec![x[0], w[0]];
            if epilogue.bias && inputs[2] != [w[0]] {
                return Err(format!("Dense bias {:?} must be [{}]", inputs[2], w[0]));
            }
            if epilogue.residual && inputs[residual] != out.as_slice() {
                return Err(format!(
                    "Dense residual {:?} must be {out:?}",
                    inputs[residual]
                ));
            }
            if norm.is_some() && (!epilogue.bias || inputs[want - 1] != [w[0]]) {
                return Err(format!(
                    "a Dense with a row norm needs a bias and the column sums [{}] last, got {:?}",
                    w[0],
                    inputs[want - 1]
                ));
            }
            Ok(out)
        }
        Op::Convert => {
            arity(inputs, 1, 1)?;
            Ok(inputs[0].to_vec())
        }
        Op::PadChannels { channels } => {
            arity(inputs, 1, 1)?;
            let x = rank4(inputs[0], "PadChannels input")?;
            if *channels < x[1] {
                return Err(format!(
                    "PadChannels to {channels} channels would drop some of {x:?}"
                ));
            }
            Ok(vec![x[0], *channels, x[2], x[3]])
        }
        Op::SpaceToDepth {
            block,
            channels,
            height,
            width,
            ..
        } => {
            arity(inputs, 1, 1)?;
            let x = rank4(inputs[0], "SpaceToDepth input")?;
            if *block == 0 {
                return Err("SpaceToDepth block must be at least 1".into());
            }
            let moved = block
                .checked_mul(*block)
                .and_then(|b2| b2.checked_mul(x[1]))
                .ok_or_else(|| format!("SpaceToDepth block {block} overflows"))?;
            if *channels < moved {
                return Err(format!(
                    "SpaceToDepth to {channels} channels would drop some of the \
                     {block}²·{} = {moved} channels of {x:?}",
                    x[1]
                ));
            }
            Ok(vec![x[0], *channels, *height, *width])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_follows_numpy() {
        assert_eq!(broadcast(&[3, 4, 5], &[5]), Ok(vec![3, 4, 5]));
        assert_eq!(broadcast(&[3, 1, 5], &[4, 1]), Ok(vec![3, 4, 5]));
        assert!(broadcast(&[3], &[4]).is_err());
    }

    #[test]
    fn a_shortcut_lands_on_the_main_grid_and_owns_the_weights_last_channels() {
        use crate::ir::{Conv2d, Epilogue, Shortcut};
        let pointwise = Conv2d {
            kernel: [1, 1],
            strides: [1, 1],
            pads: [0; 4],
            dilations: [1, 1],
            groups: 1,
        };
        let op = |conv: Conv2d| Op::FusedConv {
            conv,
            epilogue: Epilogue {
                bias: true,
                ..Epilogue::NONE
            },
            shortcut: Some(Shortcut { strides: [2, 2] }),
            pool: None,
            norm: None,
        };
        let (x, bias, xs): (&[usize], &[usize], &[usize]) =
            (&[2, 64, 7, 7], &[256], &[2, 32, 14, 14]);
        let w: &[usize] = &[256, 96, 1, 1];
        assert_eq!(
            infer_shape(&op(pointwise), &[x, w, bias, xs]),
            Ok(vec![2, 256, 7, 7])
        );
        // 13 rows at stride 2 land on 7 too; 15 do not.
        assert!(infer_shape(&op(pointwise), &[x, w, bias, &[2, 32, 13, 13]]).is_ok());
        let err = infer_shape(&op(pointwise), &[x, w, bias, &[2, 32, 15, 14]]).unwrap_err();
        assert!(err.contains("does not land"), "{err}");
        let err = infer_shape(&op(pointwise), &[x, &[256, 64, 1, 1], bias, xs]).unwrap_err();
        assert!(err.contains("plus the shortcut's 32"), "{err}");
        let err = infer_shape(&op(pointwise), &[x, w, bias]).unwrap_err();
        assert!(err.contains("inputs"), "{err}");
        let three = Conv2d {
            kernel: [3, 3],
            pads: [1; 4],
            ..pointwise
        };
        let err = infer_shape(&op(three), &[x, &[256, 96, 3, 3], bias, xs]).unwrap_err();
        assert!(err.contains("1x1, stride-1"), "{err}");
    }

    #[test]
    fn pad_channels_grows_only_the_channel_axis() {
        let pad = Op::PadChannels { channels: 8 };
        assert_eq!(infer_shape(&pad, &[&[2, 3, 5, 7]]), Ok(vec![2, 8, 5, 7]));
        assert!(infer_shape(&pad, &[&[2, 9, 5, 7]]).is_err());
        assert!(infer_shape(&pad, &[&[2, 3, 5]]).is_err());
    }

    #[test]
    fn space_to_depth_takes_its_output_size_and_keeps_every_channel() {
        let s2d = |block, channels| Op::SpaceToDepth {
            block,
            pad_top: 3,
            pad_left: 3,
            channels,
            height: 115,
            width: 114,
        };
        assert_eq!(
            infer_shape(&s2d(2, 16), &[&[2, 3, 224, 224]]),
            Ok(vec![2, 16, 115, 114])
        );
        // Exactly 4·C channels need no padding.
        assert_eq!(
            infer_shape(&s2d(2, 12), &[&[1, 3, 9, 9]]),
            Ok(vec![1, 12, 115, 114])
        );
        let err = |op: Op, x: &[usize]| infer_shape(&op, &[x]).unwrap_err();
        let fewer = err(s2d(2, 11), &[1, 3, 9, 9]);
        assert!(fewer.contains("drop") && fewer.contains("12"), "{fewer}");
        let zero = err(s2d(0, 16), &[1, 3, 9, 9]);
        assert!(zero.contains("block must be at least 1"), "{zero}");
        let rank = err(s2d(2, 16), &[3, 9, 9]);
        assert!(rank.contains("SpaceToDepth input must be 4-D"), "{rank}");
        let huge = err(s2d(usize::MAX, 16), &[1, 3, 9, 9]);
        assert!(huge.contains("overflows"), "{huge}");
        let empty = Op::SpaceToDepth {
            block: 2,
            pad_top: 0,
            pad_left: 0,
            channels: 16,
            height: 0,
            width: 4,
        };
        assert!(err(empty, &[1, 3, 9, 9]).contains("zero dimension"));
        assert!(infer_shape(&s2d(2, 16), &[&[1, 3, 9, 9], &[1]])
            .unwrap_err()
            .contains("expects 1 inputs"));
    }

    #[test]
    fn huge_shapes_are_rejected() {
        let op = Op::Unary(super::super::op::UnaryOp::Relu);
        let big = [1usize << 20, 1 << 20];
        assert!(infer_shape(&op, &[&big]).is_err());
    }
}
