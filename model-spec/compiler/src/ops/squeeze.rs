//! ONNX `Squeeze` and `Unsqueeze` with constant axes (an attribute before
//! opset 13, a constant input from 13): both only change the shape, so
//! they import as [`Op::Reshape`] to the resolved output shape (a view).
//! Negative axes count from the end (of the output, for Unsqueeze);
//! Squeeze without axes drops every axis of size 1, and rejects an axis
//! whose size is not 1.

use super::{const_input, OpDef};
use crate::ir::{Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use onnx_ir::node::squeeze::SqueezeInput;
use onnx_ir::node::unsqueeze::UnsqueezeConfig;
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Squeeze", "Unsqueeze"],
    summary: "Squeeze, Unsqueeze (constant axes, attribute or input)",
    node_types: &[NodeType::Squeeze, NodeType::Unsqueeze],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let x = cx.input(0)?;
    let input = cx.shape(x).to_vec();
    let shape = match cx.node {
        Node::Squeeze(n) => {
            let axes = match &n.config.axes {
                None => None,
                Some(SqueezeInput::Static(axes)) => Some(axes.clone()),
                Some(SqueezeInput::Runtime(r)) => {
                    Some(const_input::required_ints(cx, r.input_index, "axes")?)
                }
            };
            squeezed(&input, axes.as_deref()).map_err(|e| cx.attr_error("axes", &axes, &e))?
        }
        Node::Unsqueeze(n) => {
            let axes = match &n.config {
                UnsqueezeConfig::Static(axes) => axes.clone(),
                UnsqueezeConfig::Runtime(r) => {
                    const_input::required_ints(cx, r.input_index, "axes")?
                }
            };
            unsqueezed(&input, &axes).map_err(|e| cx.attr_error("axes", &axes, &e))?
        }
        _ => return Err(cx.unsupported()),
    };
    let op = Op::Reshape {
        shape: shape.iter().map(|&d| d as i64).collect(),
        allowzero: false,
    };
    cx.push(op, vec![x])
}

/// `axes` (negative from the end of a rank-`rank` shape) as distinct
/// non-negative axes.
fn resolve_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let r = if a < 0 { a + rank as i64 } else { a };
        match usize::try_from(r).ok().filter(|&r| r < rank) {
            Some(r) if !out.contains(&r) => out.push(r),
            _ => return Err(format!("axes must be distinct axes of a rank-{rank} shape")),
        }
    }
    Ok(out)
}

/// Squeeze's output shape: `input` without `axes` (each of size 1), or
/// without every axis of size 1.
pub(crate) fn squeezed(input: &[usize], axes: Option<&[i64]>) -> Result<Vec<usize>, String> {
    let drop = match axes {
        None => (0..input.len()).filter(|&a| input[a] == 1).collect(),
        Some(axes) => resolve_axes(axes, input.len())?,
    };
    if let Some(&a) = drop.iter().find(|&&a| input[a] != 1) {
        return Err(format!(
            "axis {a} of {input:?} has size {}, not 1",
            input[a]
        ));
    }
    Ok((0..input.len())
        .filter(|a| !drop.contains(a))
        .map(|a| input[a])
        .collect())
}

/// Unsqueeze's output shape: `input` with a 1 at each of `axes` (axes of
/// the output).
pub(crate) fn unsqueezed(input: &[usize], axes: &[i64]) -> Result<Vec<usize>, String> {
    let rank = input.len() + axes.len();
    let ones = resolve_axes(axes, rank)?;
    let mut dims = input.iter();
    Ok((0..rank)
        .map(|a| {
            if ones.contains(&a) {
                1
            } else {
                dims.next().copied().unwrap_or(1)
            }
        })
        .collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Squeeze",
            opset: 13,
            inputs: &[Data(&[1, 3, 1, 2]), Int64s(&[-2])],
            attrs: &[],
            output: &[1, 3, 2],
            ir: &["Reshape"],
        },
        Example {
            op_type: "Squeeze",
            opset: 11,
            inputs: &[Data(&[1, 3, 1, 2])],
            attrs: &[],
            output: &[3, 2],
            ir: &["Reshape"],
        },
        Example {
            op_type: "Unsqueeze",
            opset: 13,
            inputs: &[Data(&[3, 2]), Int64s(&[0, -1])],
            attrs: &[],
            output: &[1, 3, 2, 1],
            ir: &["Reshape"],
        },
        Example {
            op_type: "Unsqueeze",
            opset: 11,
            inputs: &[Data(&[3, 2])],
            attrs: &[Ints("axes", &[1])],
            output: &[3, 1, 2],
            ir: &["Reshape"],
        },
    ];

    #[test]
    fn squeeze_and_unsqueeze_shapes() {
        assert_eq!(squeezed(&[1, 3, 1], None), Ok(vec![3]));
        assert_eq!(squeezed(&[1, 3, 1], Some(&[0])), Ok(vec![3, 1]));
        assert!(squeezed(&[1, 3, 1], Some(&[1])).is_err());
        assert!(squeezed(&[1, 3, 1], Some(&[0, -3])).is_err());
        assert_eq!(unsqueezed(&[3, 4], &[2, 0]), Ok(vec![1, 3, 1, 4]));
        assert_eq!(unsqueezed(&[3], &[-1]), Ok(vec![3, 1]));
        assert!(unsqueezed(&[3], &[2]).is_err());
    }
}
