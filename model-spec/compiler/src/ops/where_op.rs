//! ONNX `Where` ([`Op::Where`]): `condition != 0 ? x : y` elementwise, the
//! three inputs broadcast (numpy rules) to the output shape. The condition
//! is a bool tensor in ONNX, read here as its f32 values (any non-zero is
//! true).

use super::OpDef;
use crate::ir::{arity, broadcast, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, OutSpec, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Where"],
    summary: "Where (broadcasting)",
    node_types: &[NodeType::Where],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Where(_) = cx.node else {
        return Err(cx.unsupported());
    };
    let ins = cx.inputs(3..=3)?;
    cx.push(Op::Where, ins)
}

/// Output shape of [`Op::Where`]: the broadcast of its three inputs.
pub(crate) fn infer_shape(inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 3, 3)?;
    broadcast(&broadcast(inputs[0], inputs[1])?, inputs[2])
}

/// CPU reference of [`Op::Where`].
pub(crate) fn reference(inputs: &[Tensor], out: &OutSpec) -> OpResult {
    reference::select::select(inputs, out)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Where",
            opset: 16,
            inputs: &[Bools(&[true, false, true]), Data(&[2, 3]), Weight(&[2, 1])],
            attrs: &[],
            output: &[2, 3],
            ir: &["Where"],
        },
        Example {
            op_type: "Where",
            opset: 9,
            inputs: &[
                Bools(&[false, true, true, false]),
                Scalar(1.0),
                Data(&[2, 1]),
            ],
            attrs: &[],
            output: &[2, 4],
            ir: &["Where"],
        },
    ];

    #[test]
    fn the_output_is_the_three_way_broadcast() {
        assert_eq!(
            super::infer_shape(&[&[2, 1, 1], &[3, 1], &[4]]),
            Ok(vec![2, 3, 4])
        );
        assert!(super::infer_shape(&[&[2], &[3], &[1]]).is_err());
        assert!(super::infer_shape(&[&[2], &[2]]).is_err());
    }
}
