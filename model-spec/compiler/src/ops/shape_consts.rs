//! ONNX `Shape`, `Size`, `ConstantOfShape` and `Range`: values known at
//! import once shapes are static, so each imports as a constant computed
//! there (a graph output that is one is copied out by an `Identity`).
//! onnx-ir folds most of them away already; these are the ones it leaves.
//! Their integer outputs are held as f32 like every constant (exact below
//! 2²⁴). Refused: an empty output (aotune values have no zero-sized
//! dimensions) and runtime inputs to ConstantOfShape or Range.

use super::{const_input, OpDef};
use crate::ir::ValueId;
use crate::onnx::{ImportError, NodeImport};
use onnx_ir::node::constant_of_shape::ConstantOfShapeShape;
use onnx_ir::node::range::RangeInput;
use onnx_ir::{Node, NodeType, TensorDataExt};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["ConstantOfShape", "Range", "Shape", "Size"],
    summary: "Shape, Size, ConstantOfShape, Range (constants computed at import)",
    node_types: &[
        NodeType::Shape,
        NodeType::Size,
        NodeType::ConstantOfShape,
        NodeType::Range,
    ],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let (shape, data) = match cx.node {
        Node::Shape(n) => {
            let x = cx.input(0)?;
            let (mut start, mut end) = (n.config.start, n.config.end);
            // onnx-ir types a shape vector of n elements as `Shape(n)` and
            // reads n as its rank: the whole vector is its shape `[n]`.
            if let Some(onnx_ir::ArgType::Shape(len)) = n.inputs.first().map(|a| &a.ty) {
                if (start, end) == (0, *len) {
                    (start, end) = (0, 1);
                }
            }
            let Some(dims) = cx.shape(x).get(start..end).map(<[usize]>::to_vec) else {
                return Err(cx.attr_error(
                    "start",
                    (start, end),
                    &format!("out of range for the input's shape {:?}", cx.shape(x)),
                ));
            };
            if dims.is_empty() {
                return Err(cx.attr_error(
                    "start",
                    (n.config.start, n.config.end),
                    "selects no dimension; aotune values have no zero-sized dimensions",
                ));
            }
            (vec![dims.len()], dims.iter().map(|&d| d as f32).collect())
        }
        Node::Size(_) => {
            let x = cx.input(0)?;
            (
                Vec::new(),
                vec![cx.shape(x).iter().product::<usize>() as f32],
            )
        }
        Node::ConstantOfShape(n) => constant_of_shape(cx, n)?,
        Node::Range(n) => {
            let read = |cx: &mut NodeImport, what: &str, input: &RangeInput| match input {
                RangeInput::Static(v) => Ok(*v as f64),
                RangeInput::StaticFloat(v) => Ok(*v),
                RangeInput::Runtime(r) => match const_input::floats(cx, r.input_index, what)?[..] {
                    [v] => Ok(v as f64),
                    ref v => Err(cx.attr_error(what, v, "Range's inputs are scalars")),
                },
            };
            let start = read(cx, "start", &n.config.start)?;
            let limit = read(cx, "limit", &n.config.limit)?;
            let delta = read(cx, "delta", &n.config.delta)?;
            let count = range_len(start, limit, delta)
                .map_err(|e| cx.attr_error("delta", (start, limit, delta), &e))?;
            let data = (0..count)
                .map(|i| (start + i as f64 * delta) as f32)
                .collect();
            (vec![count], data)
        }
        _ => return Err(cx.unsupported()),
    };
    let name = cx.output_name().to_string();
    Ok(cx.add_constant(name, shape, data))
}

/// ConstantOfShape: the shape and its fill (0 unless `value` is given).
fn constant_of_shape(
    cx: &mut NodeImport,
    n: &onnx_ir::node::constant_of_shape::ConstantOfShapeNode,
) -> Result<(Vec<usize>, Vec<f32>), ImportError> {
    let dims = match &n.config.shape {
        ConstantOfShapeShape::Static(dims) => dims.clone(),
        ConstantOfShapeShape::Runtime(_) => match const_input::ints(cx, 0, "input")? {
            Some((_, dims)) => dims,
            None => return Err(cx.input_error("input", "ConstantOfShape needs its shape")),
        },
    };
    let shape: Vec<usize> = dims
        .iter()
        .map(|&d| usize::try_from(d).ok().filter(|&d| d > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            cx.attr_error(
                "input",
                &dims,
                "dimensions must be at least 1; aotune values have no zero-sized dimensions",
            )
        })?;
    let fill = match &n.config.value {
        None => 0.0,
        Some(value) => *value
            .to_f32_vec()
            .map_err(|e| cx.attr_error("value", "(tensor)", &format!("unreadable: {e:?}")))?
            .first()
            .ok_or_else(|| cx.attr_error("value", "(empty)", "needs one element"))?,
    };
    let count = crate::ir::numel(&shape);
    if count > crate::ir::MAX_ELEMENTS {
        return Err(cx.attr_error("input", &dims, "the constant is absurdly large"));
    }
    Ok((shape, vec![fill; count]))
}

/// Range's element count `max(⌈(limit − start) / delta⌉, 0)`, at least 1.
fn range_len(start: f64, limit: f64, delta: f64) -> Result<usize, String> {
    if delta == 0.0 || !delta.is_finite() {
        return Err("delta must be finite and not 0".into());
    }
    let n = ((limit - start) / delta).ceil();
    // (NaN, from infinite bounds, is no count either.)
    if n.is_nan() || n < 1.0 {
        return Err("the range is empty; aotune values have no zero-sized dimensions".into());
    }
    if n > crate::ir::MAX_ELEMENTS as f64 {
        return Err("the range is absurdly long".into());
    }
    Ok(n as usize)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Shape",
            opset: 15,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[Int("start", 1)],
            output: &[2],
            ir: &["Identity"],
        },
        Example {
            op_type: "Size",
            opset: 13,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[],
            output: &[],
            ir: &["Identity"],
        },
        Example {
            op_type: "ConstantOfShape",
            opset: 9,
            inputs: &[Int64s(&[2, 3])],
            attrs: &[],
            output: &[2, 3],
            ir: &["Identity"],
        },
        Example {
            op_type: "Range",
            opset: 11,
            inputs: &[Scalar(1.0), Scalar(4.0), Scalar(0.5)],
            attrs: &[],
            output: &[6],
            ir: &["Identity"],
        },
    ];

    #[test]
    fn range_counts_like_onnx() {
        assert_eq!(range_len(3.0, 9.0, 3.0), Ok(2));
        assert_eq!(range_len(10.0, 4.0, -2.0), Ok(3));
        assert_eq!(range_len(1.0, 4.0, 0.5), Ok(6));
        assert!(range_len(1.0, 4.0, -1.0).is_err());
        assert!(range_len(1.0, 4.0, 0.0).is_err());
    }
}
