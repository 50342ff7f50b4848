//! ONNX `GroupNormalization` (opset 18 and 21) and
//! `InstanceNormalization`: [`Op::GroupNorm`]. `x [N, C, ...]` splits its
//! channels into `num_groups` groups; each group of each image is
//! normalized over its channels and positions by its mean and variance
//! plus `epsilon`, then scaled and shifted. Opset 18 gives `scale` and
//! `bias` one value per group, opset 21 one per channel. InstanceNormalization
//! is the per-channel case with one group per channel. Statistics are in
//! the accumulation type, never below f32, so GroupNormalization's
//! `stash_type` must be 1 (float).

use super::OpDef;
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["GroupNormalization", "InstanceNormalization"],
    summary: "GroupNormalization (`num_groups`, `epsilon`, `stash_type` 1; per-group scale \
              at opset 18, per-channel from 21), InstanceNormalization (`epsilon`)",
    node_types: &[
        NodeType::GroupNormalization,
        NodeType::InstanceNormalization,
    ],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let ins = cx.inputs(3..=3)?;
    let x = cx.shape(ins[0]).to_vec();
    if x.len() < 2 {
        return Err(cx.input_error("X", format!("must be [N, C, ...], got {x:?}")));
    }
    let channels = x[1];
    let (groups, epsilon, per_group) = match cx.node {
        Node::GroupNormalization(n) => {
            if !n.config.full_precision {
                return Err(cx.attr_error(
                    "stash_type",
                    "not 1",
                    "statistics are computed in float (stash_type 1), the only defined value",
                ));
            }
            let groups = n.config.num_groups;
            if groups == 0 || channels % groups != 0 {
                return Err(cx.attr_error(
                    "num_groups",
                    groups,
                    &format!("must divide the {channels} channels"),
                ));
            }
            (groups, n.config.epsilon, cx.opset < 21)
        }
        Node::InstanceNormalization(n) => (channels, n.config.epsilon, false),
        _ => return Err(cx.unsupported()),
    };
    let want = if per_group { groups } else { channels };
    for (i, name) in [(1, "scale"), (2, "bias")] {
        if cx.shape(ins[i]) != [want] {
            return Err(cx.input_error(
                name,
                format!(
                    "must be [{want}] ({} at opset {}), got {:?}",
                    if per_group {
                        "per group"
                    } else {
                        "per channel"
                    },
                    cx.opset,
                    cx.shape(ins[i])
                ),
            ));
        }
    }
    let op = Op::GroupNorm {
        groups,
        epsilon: epsilon as f32,
    };
    cx.push(op, ins)
}

/// Output shape of [`Op::GroupNorm`]: x's; scale and bias `[C]` or
/// `[groups]`.
pub(crate) fn infer_shape(groups: usize, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 3, 3)?;
    let x = inputs[0];
    let &[_, c, ..] = x else {
        return Err(format!("GroupNorm input must be [N, C, ...], got {x:?}"));
    };
    if groups == 0 || c % groups != 0 {
        return Err(format!("{c} channels do not split into {groups} groups"));
    }
    for s in &inputs[1..] {
        if *s != [c] && *s != [groups] {
            return Err(format!(
                "GroupNorm scale/bias {s:?} must be [{c}] or [{groups}]"
            ));
        }
    }
    Ok(x.to_vec())
}

/// CPU reference of [`Op::GroupNorm`] (statistics in the accumulation type).
pub(crate) fn reference(ctx: &Ctx, groups: usize, epsilon: f32, inputs: &[Tensor]) -> OpResult {
    reference::normalize::group_norm(ctx, groups, epsilon, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        // Opset 21: per-channel scale and bias.
        Example {
            op_type: "GroupNormalization",
            opset: 21,
            inputs: &[Data(&[2, 6, 3, 3]), Weight(&[6]), Weight(&[6])],
            attrs: &[Int("num_groups", 3), Float("epsilon", 1e-5)],
            output: &[2, 6, 3, 3],
            ir: &["GroupNormalization"],
        },
        // Opset 18: per-group scale and bias.
        Example {
            op_type: "GroupNormalization",
            opset: 18,
            inputs: &[Data(&[2, 6, 4]), Data(&[2]), Data(&[2])],
            attrs: &[Int("num_groups", 2)],
            output: &[2, 6, 4],
            ir: &["GroupNormalization"],
        },
        Example {
            op_type: "InstanceNormalization",
            opset: 6,
            inputs: &[Data(&[2, 3, 4, 5]), Weight(&[3]), Weight(&[3])],
            attrs: &[Float("epsilon", 1e-3)],
            output: &[2, 3, 4, 5],
            ir: &["GroupNormalization"],
        },
    ];
}
