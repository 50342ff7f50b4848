//! Attention: [`Op::Attention`], scaled dot-product attention over heads
//! already split (`[B, H, S, D]`).
//!
//! Two sources: ONNX's `Attention` (opset 23) and, far more often, the
//! decomposed form exporters write — MatMul(q, kᵀ) → Div/Mul(scale) →
//! [Add(mask)] → Softmax(last axis) → MatMul(v) — which onnx-ir recognises
//! and hands over as the same node. Supported: 4-D q/k/v (grouped-query
//! heads included), an optional additive float mask, `is_causal`, any
//! `scale` (default `1/√D`). Refused with a reason: 3-D q/k/v (heads not
//! split), boolean masks, a past key/value cache, `softcap`.

use super::OpDef;
use crate::ir::{arity, AttentionViews, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, Tensor};
use onnx_ir::{ArgType, DType, Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Attention"],
    summary: "Attention (opset 23, and the decomposed MatMul → scale → Softmax → MatMul \
              form; 4-D heads, additive mask, causal)",
    node_types: &[NodeType::Attention],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Attention(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let args = n.inputs.clone();
    let present = |i: usize| args.get(i).is_some_and(|a| !a.is_optional());
    if present(4) || present(5) {
        return Err(cx.input_error(
            "past_key/past_value",
            "a key/value cache is not supported (aotune compiles stateless models)",
        ));
    }
    if n.config.softcap != 0.0 {
        return Err(cx.attr_error(
            "softcap",
            n.config.softcap,
            "only 0 (no softcap) is supported",
        ));
    }
    let mut inputs = vec![cx.input(0)?, cx.input(1)?, cx.input(2)?];
    let q_shape = cx.shape(inputs[0]).to_vec();
    if q_shape.len() != 4 {
        return Err(cx.input_error(
            "Q",
            format!(
                "is {q_shape:?}; aotune supports 4-D [batch, heads, sequence, head size] \
                 inputs (heads already split)"
            ),
        ));
    }
    if present(3) {
        if let ArgType::Tensor(t) = &args[3].ty {
            if t.dtype != DType::F32 {
                return Err(cx.input_error(
                    "attn_mask",
                    format!(
                        "has type {:?}; only an additive float mask is supported",
                        t.dtype
                    ),
                ));
            }
        }
        inputs.push(cx.input(3)?);
    }
    let scale = match n.config.scale {
        Some(s) => s as f32,
        None => 1.0 / (q_shape[3] as f32).sqrt(),
    };
    cx.push(
        Op::Attention {
            scale,
            causal: n.config.is_causal,
            views: None,
        },
        inputs,
    )
}

/// `[B, H, S, D]` for a 4-D shape, `[1, N, S, D]` for a 3-D one (heads
/// merged into the leading axis, as the attention pass may find them).
pub(crate) fn as_4d(shape: &[usize]) -> Option<[usize; 4]> {
    match *shape {
        [b, h, s, d] => Some([b, h, s, d]),
        [n, s, d] => Some([1, n, s, d]),
        _ => None,
    }
}

/// The logical `[B, H, S, D]` of q, k and v: each input's view, or its
/// shape read by [`as_4d`]. Fails for an input of another rank or one its
/// view reaches past.
pub(crate) fn operand_dims(
    views: Option<&AttentionViews>,
    inputs: &[&[usize]],
) -> Result<[[usize; 4]; 3], String> {
    let mut dims = [[0; 4]; 3];
    for (i, d) in dims.iter_mut().enumerate() {
        let shape = inputs.get(i).ok_or("attention takes q, k and v")?;
        *d = match views.and_then(|v| v.input(i)) {
            Some(view) => {
                view.check_within(shape.iter().product())?;
                view.dims
            }
            None => as_4d(shape).ok_or_else(|| {
                format!(
                    "input {i} {shape:?}: attention takes 4-D [B, H, S, D] (or 3-D [N, S, D]) inputs"
                )
            })?,
        };
    }
    Ok(dims)
}

/// Output shape of [`Op::Attention`]: `[B, H, Sq, Dv]` (`[N, Sq, Dv]` for
/// 3-D inputs), or the output view's value shape.
pub(crate) fn infer_shape(
    views: Option<&AttentionViews>,
    inputs: &[&[usize]],
) -> Result<Vec<usize>, String> {
    arity(inputs, 3, 4)?;
    let [q, k, v] = operand_dims(views, inputs)?;
    let fits = k[0] == q[0]
        && v[0] == q[0]
        && k[1] == v[1]
        && k[1] > 0
        && q[1] % k[1] == 0
        && k[2] == v[2]
        && k[3] == q[3];
    if !fits {
        return Err(format!(
            "q {q:?}, k {k:?}, v {v:?} do not fit one attention ([B, H, Sq, D], [B, Hkv, Skv, D], \
             [B, Hkv, Skv, Dv], H a multiple of Hkv)"
        ));
    }
    let scores = [q[0], q[1], q[2], k[2]];
    if let Some(mask) = inputs.get(3) {
        mask_4d(mask, scores)?;
    }
    let out = [q[0], q[1], q[2], v[3]];
    if let Some((view, shape)) = views.and_then(|v| v.out.as_ref()) {
        if view.dims != out {
            return Err(format!(
                "output view {:?} for an attention output {out:?}",
                view.dims
            ));
        }
        view.check_bijection(shape.iter().product())?;
        return Ok(shape.clone());
    }
    // Read directly, the output has the operands' rank (3 or 4, `as_4d`).
    if views.is_none_or(|v| v.q.is_none() && v.k.is_none() && v.v.is_none()) {
        let rank = inputs[0].len();
        if inputs[..3].iter().any(|s| s.len() != rank) {
            return Err(format!(
                "q {:?}, k {:?}, v {:?} have different ranks",
                inputs[0], inputs[1], inputs[2]
            ));
        }
        return Ok(out[4 - rank..].to_vec());
    }
    Ok(out.to_vec())
}

/// The mask's shape as the 4-D `[G, Hm, Sqm, Skvm]` it is read as against
/// the scores `[B, H, Sq, Skv]` (the contract of [`Op::Attention`]): a mask
/// of rank ≤ 4 aligned at the right, missing leading axes of size 1; `Hm`,
/// `Sqm` and `Skvm` are 1 (broadcast) or the scores' size, and `G` divides
/// `B`: batch `b` reads mask batch `b mod G` (`G = 1` or `B` is numpy
/// broadcasting; Swin's shifted windows give `G` = windows per image).
pub(crate) fn mask_4d(mask: &[usize], scores: [usize; 4]) -> Result<[usize; 4], String> {
    let bad = || {
        format!(
            "mask {mask:?} does not fit the scores {scores:?} (axes 1-3 must be 1 or equal; \
             axis 0 must divide the batch)"
        )
    };
    if mask.len() > 4 {
        return Err(bad());
    }
    let mut m = [1usize; 4];
    m[4 - mask.len()..].copy_from_slice(mask);
    let batch_fits = m[0] == scores[0] || (m[0] > 0 && scores[0] % m[0] == 0);
    let rest_fit = (1..4).all(|i| m[i] == 1 || m[i] == scores[i]);
    if batch_fits && rest_fit {
        Ok(m)
    } else {
        Err(bad())
    }
}

/// CPU reference of [`Op::Attention`].
pub(crate) fn reference(
    ctx: &Ctx,
    scale: f32,
    causal: bool,
    views: Option<&AttentionViews>,
    inputs: &[Tensor],
) -> OpResult {
    reference::attention::attention(ctx, scale, causal, views, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    #[test]
    fn masks_fit_by_broadcast_or_by_a_batch_period() {
        use super::mask_4d;
        let scores = [8, 3, 49, 49];
        assert_eq!(mask_4d(&[49, 49], scores), Ok([1, 1, 49, 49]));
        assert_eq!(mask_4d(&[3, 49, 49], scores), Ok([1, 3, 49, 49]));
        assert_eq!(mask_4d(&[4, 1, 49, 49], scores), Ok([4, 1, 49, 49]));
        assert_eq!(mask_4d(&[8, 3, 1, 49], scores), Ok([8, 3, 1, 49]));
        for bad in [
            &[3, 3, 49, 49][..],
            &[0, 3, 49, 49],
            &[2, 49, 49],
            &[1, 8, 3, 49, 49],
        ] {
            assert!(mask_4d(bad, scores).is_err(), "{bad:?}");
        }
    }

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Attention",
            opset: 23,
            inputs: &[
                Data(&[1, 2, 5, 4]),
                Data(&[1, 2, 6, 4]),
                Data(&[1, 2, 6, 3]),
            ],
            attrs: &[],
            output: &[1, 2, 5, 3],
            ir: &["Attention"],
        },
        // Grouped-query heads, causal, explicit scale.
        Example {
            op_type: "Attention",
            opset: 23,
            inputs: &[
                Data(&[2, 4, 3, 8]),
                Data(&[2, 2, 3, 8]),
                Data(&[2, 2, 3, 8]),
            ],
            attrs: &[Int("is_causal", 1), Float("scale", 0.25)],
            output: &[2, 4, 3, 8],
            ir: &["Attention"],
        },
    ];
}
