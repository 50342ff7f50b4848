//! ONNX `Gather` with constant indices: [`Op::Gather`], the input indexed
//! along `axis` by the indices (any shape; a scalar index drops the axis;
//! negative indices count from the end). The data may be a runtime value
//! or a constant. Indices out of range are rejected at import.

use super::{const_input, OpDef};
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Gather"],
    summary: "Gather (constant indices, any axis, negative indices)",
    node_types: &[NodeType::Gather],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Gather(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let x = cx.input(0)?;
    let (indices_shape, indices) = const_input::ints(cx, 1, "indices")?
        .ok_or_else(|| cx.input_error("indices", "Gather needs its indices"))?;
    let shape = cx.shape(x);
    let axis = n.config.axis;
    let Some(&dim) = shape.get(axis) else {
        return Err(cx.attr_error("axis", axis, "out of range for the input"));
    };
    if let Some(bad) = indices.iter().find(|&&i| resolve(i, dim).is_none()) {
        return Err(cx.input_error(
            "indices",
            format!("index {bad} is out of range for axis {axis} of {dim} elements"),
        ));
    }
    let op = Op::Gather {
        axis,
        indices,
        indices_shape,
    };
    cx.push(op, vec![x])
}

/// Index `i` of an axis of `dim` elements (negative counts from the end).
pub(crate) fn resolve(i: i64, dim: usize) -> Option<usize> {
    let i = if i < 0 { i + dim as i64 } else { i };
    usize::try_from(i).ok().filter(|&i| i < dim)
}

/// Output shape of [`Op::Gather`]: `x[..axis] ++ indices_shape ++ x[axis + 1..]`.
pub(crate) fn infer_shape(
    axis: usize,
    indices: &[i64],
    indices_shape: &[usize],
    inputs: &[&[usize]],
) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    let x = inputs[0];
    if axis >= x.len() {
        return Err(format!("Gather axis {axis} out of range for {x:?}"));
    }
    if indices.len() != indices_shape.iter().product::<usize>() {
        return Err(format!(
            "{} indices for an index shape {indices_shape:?}",
            indices.len()
        ));
    }
    if let Some(bad) = indices.iter().find(|&&i| resolve(i, x[axis]).is_none()) {
        return Err(format!("index {bad} out of range for axis {axis} of {x:?}"));
    }
    Ok([&x[..axis], indices_shape, &x[axis + 1..]].concat())
}

/// CPU reference of [`Op::Gather`].
pub(crate) fn reference(axis: usize, indices: &[i64], inputs: &[Tensor]) -> OpResult {
    reference::gather::gather(axis, indices, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Gather",
            opset: 13,
            inputs: &[Data(&[5, 4, 3]), Int64s(&[0, -1, 2])],
            attrs: &[Int("axis", 1)],
            output: &[5, 3, 3],
            ir: &["Gather"],
        },
        // Constant data (an embedding table): evaluated at import, so only
        // the copy into the graph output remains.
        Example {
            op_type: "Gather",
            opset: 11,
            inputs: &[Weight(&[6, 2]), Int64s(&[4])],
            attrs: &[],
            output: &[1, 2],
            ir: &["Identity"],
        },
    ];

    #[test]
    fn shape_puts_the_index_shape_at_the_axis() {
        assert_eq!(
            infer_shape(1, &[0, 1, 2, 0], &[2, 2], &[&[3, 4, 5]]),
            Ok(vec![3, 2, 2, 5])
        );
        assert_eq!(infer_shape(0, &[-1], &[], &[&[3, 4]]), Ok(vec![4]));
        assert!(infer_shape(0, &[3], &[1], &[&[3, 4]]).is_err());
        assert!(infer_shape(2, &[0], &[1], &[&[3, 4]]).is_err());
    }
}
