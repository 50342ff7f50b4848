//! ONNX `Reshape` with a constant target shape (an initializer or a
//! `Constant`, or folded at import): [`Op::Reshape`]. A 0 copies the input's dimension at that
//! position, one −1 is inferred. A view: it copies its row-major input and
//! the memory plan may alias it.

use super::{const_input, OpDef};
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::node::reshape::ReshapeInput;
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Reshape"],
    summary: "Reshape (constant shape)",
    node_types: &[NodeType::Reshape],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Reshape(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let shape = match &n.config.shape {
        ReshapeInput::Static(s) => s.clone(),
        ReshapeInput::Runtime(r) => const_input::required_ints(cx, r.input_index, "shape")?,
    };
    let x = cx.input(0)?;
    let op = Op::Reshape {
        shape,
        allowzero: false,
    };
    cx.push(op, vec![x])
}

/// Output shape of [`Op::Reshape`].
pub(crate) fn infer_shape(
    target: &[i64],
    allowzero: bool,
    inputs: &[&[usize]],
) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    reshape_shape(inputs[0], target, allowzero)
}

pub(crate) fn reshape_shape(
    input: &[usize],
    target: &[i64],
    allowzero: bool,
) -> Result<Vec<usize>, String> {
    let total: usize = input.iter().product();
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, &d) in target.iter().enumerate() {
        match d {
            -1 if infer_at.is_none() => {
                infer_at = Some(i);
                out.push(1);
            }
            -1 => return Err(format!("reshape target {target:?} has more than one -1")),
            0 if !allowzero => out.push(*input.get(i).ok_or_else(|| {
                format!("reshape target {target:?}: 0 at axis {i} has no input dim")
            })?),
            d if d >= 0 => out.push(d as usize),
            d => return Err(format!("reshape target {target:?} has invalid dim {d}")),
        }
    }
    let known: usize = out.iter().product();
    if let Some(i) = infer_at {
        if known == 0 || total % known != 0 {
            return Err(format!("cannot reshape {input:?} to {target:?}"));
        }
        out[i] = total / known;
    } else if known != total {
        return Err(format!(
            "cannot reshape {input:?} ({total} elements) to {target:?}"
        ));
    }
    Ok(out)
}

/// CPU reference of [`Op::Reshape`]: a row-major copy.
pub(crate) fn reference(inputs: &[Tensor]) -> OpResult {
    reference::shape_ops::copy(inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[Example {
        op_type: "Reshape",
        opset: 14,
        inputs: &[Data(&[2, 3, 4]), Int64s(&[0, -1])],
        attrs: &[],
        output: &[2, 12],
        ir: &["Reshape"],
    }];

    #[test]
    fn reshape_handles_zero_and_minus_one() {
        assert_eq!(reshape_shape(&[2, 3, 4], &[0, -1], false), Ok(vec![2, 12]));
        assert_eq!(
            reshape_shape(&[2, 3, 4], &[4, 0, 2], false),
            Ok(vec![4, 3, 2])
        );
        assert!(reshape_shape(&[2, 3, 4], &[5, -1], false).is_err());
    }
}
