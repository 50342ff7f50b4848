//! ONNX `Pad` with constant pads (the `pads` attribute at opset 2, a
//! constant input from 11, with the `axes` input of opset 18) and a
//! constant fill value: [`Op::Pad`] in mode `constant`, `reflect` or
//! `edge`. Negative pads (cropping) and `wrap` are refused by onnx-ir
//! before this converter runs.

use super::{const_input, OpDef};
use crate::ir::{arity, Op, PadMode, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::node::pad::{ConstantValueInput, PadInput, PadMode as OnnxPadMode};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Pad"],
    summary: "Pad (constant pads, `axes`, constant value; modes constant, reflect, edge)",
    node_types: &[NodeType::Pad],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Pad(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let pads = match &n.config.pads {
        PadInput::Static(pads) => pads.clone(),
        PadInput::Runtime { input, axes: None } => {
            let flat = const_input::required_ints(cx, input.input_index, "pads")?;
            let half = flat.len() / 2;
            flat[..half]
                .iter()
                .zip(&flat[half..])
                .map(|(&b, &a)| Some((usize::try_from(b).ok()?, usize::try_from(a).ok()?)))
                .collect::<Option<_>>()
                .filter(|_| flat.len() % 2 == 0)
                .ok_or_else(|| {
                    cx.attr_error("pads", &flat, "needs begin/end pairs, none negative")
                })?
        }
        PadInput::Runtime { axes: Some(_), .. } => {
            return Err(cx.attr_error(
                "axes",
                "computed pads with axes",
                "give the pads for every axis, or make them an initializer",
            ))
        }
    };
    let mode = match n.config.mode {
        OnnxPadMode::Constant => PadMode::Constant {
            value: match &n.config.constant_value {
                ConstantValueInput::Static(v) => *v,
                ConstantValueInput::Runtime(r) => {
                    match const_input::floats(cx, r.input_index, "constant_value")?[..] {
                        [v] => v,
                        ref v => {
                            return Err(cx.attr_error(
                                "constant_value",
                                v,
                                "the fill value is one number",
                            ))
                        }
                    }
                }
            },
        },
        OnnxPadMode::Reflect => PadMode::Reflect,
        OnnxPadMode::Edge => PadMode::Edge,
    };
    let x = cx.input(0)?;
    let shape = cx.shape(x);
    if pads.len() != shape.len() {
        return Err(cx.attr_error("pads", &pads, "needs a pair per input axis"));
    }
    let reflects_too_far = |&((b, a), &d): &((usize, usize), &usize)| b.max(a) >= d;
    if mode == PadMode::Reflect
        && pads
            .iter()
            .copied()
            .zip(shape)
            .any(|p| reflects_too_far(&p))
    {
        return Err(cx.attr_error(
            "pads",
            &pads,
            "reflect pads must be smaller than the axis they pad",
        ));
    }
    cx.push(Op::Pad { pads, mode }, vec![x])
}

/// Output shape of [`Op::Pad`]: each axis grown by its two pads.
pub(crate) fn infer_shape(
    pads: &[(usize, usize)],
    inputs: &[&[usize]],
) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    if pads.len() != inputs[0].len() {
        return Err(format!(
            "{pads:?} has not a pair per axis of {:?}",
            inputs[0]
        ));
    }
    inputs[0]
        .iter()
        .zip(pads)
        .map(|(&d, &(b, a))| {
            d.checked_add(b)
                .and_then(|s| s.checked_add(a))
                .ok_or_else(|| format!("padding {d} by {b}+{a} overflows"))
        })
        .collect()
}

/// CPU reference of [`Op::Pad`].
pub(crate) fn reference(pads: &[(usize, usize)], mode: PadMode, inputs: &[Tensor]) -> OpResult {
    reference::pad::pad(pads, mode, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        // Opset 11+: pads and value as inputs.
        Example {
            op_type: "Pad",
            opset: 13,
            inputs: &[
                Data(&[1, 2, 3, 3]),
                Int64s(&[0, 0, 1, 2, 0, 0, 1, 0]),
                Scalar(0.5),
            ],
            attrs: &[],
            output: &[1, 2, 5, 5],
            ir: &["Pad"],
        },
        // Opset 18: pads of the given axes only.
        Example {
            op_type: "Pad",
            opset: 18,
            inputs: &[Data(&[2, 3]), Int64s(&[1, 2]), Omitted, Int64s(&[-1])],
            attrs: &[Str("mode", "edge")],
            output: &[2, 6],
            ir: &["Pad"],
        },
        // Opset 2: attributes.
        Example {
            op_type: "Pad",
            opset: 2,
            inputs: &[Data(&[3, 4])],
            attrs: &[Ints("pads", &[0, 2, 0, 1]), Str("mode", "reflect")],
            output: &[3, 7],
            ir: &["Pad"],
        },
    ];

    #[test]
    fn pads_grow_each_axis() {
        assert_eq!(infer_shape(&[(1, 2), (0, 0)], &[&[3, 4]]), Ok(vec![6, 4]));
        assert!(infer_shape(&[(1, 2)], &[&[3, 4]]).is_err());
    }
}
