//! ONNX `PRelu`: `x < 0 ? slope·x : x` ([`Op::Binary`] with
//! [`BinaryOp::PRelu`]), the slope broadcast onto `x` (unidirectional: the
//! output has `x`'s shape; a slope that would enlarge it is refused).
//! Opset 6 and earlier's per-channel slope `[C]` against an NCHW input is
//! not numpy broadcasting and is refused unless it also broadcasts.

use super::OpDef;
use crate::ir::{broadcast, BinaryOp, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["PRelu"],
    summary: "PRelu (slope broadcast to the input)",
    node_types: &[NodeType::PRelu],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::PRelu(_) = cx.node else {
        return Err(cx.unsupported());
    };
    let ins = cx.inputs(2..=2)?;
    let (x, slope) = (cx.shape(ins[0]).to_vec(), cx.shape(ins[1]).to_vec());
    if broadcast(&x, &slope).as_deref() != Ok(x.as_slice()) {
        return Err(cx.input_error(
            "slope",
            format!("shape {slope:?} does not broadcast to the input's {x:?}"),
        ));
    }
    cx.push(Op::Binary(BinaryOp::PRelu), ins)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        // torchvision's nn.PReLU(C): a [C, 1, 1] slope.
        Example {
            op_type: "PRelu",
            opset: 16,
            inputs: &[Data(&[1, 3, 4, 4]), Weight(&[3, 1, 1])],
            attrs: &[],
            output: &[1, 3, 4, 4],
            ir: &["PRelu"],
        },
        Example {
            op_type: "PRelu",
            opset: 9,
            inputs: &[Data(&[2, 5]), Scalar(0.25)],
            attrs: &[],
            output: &[2, 5],
            ir: &["PRelu"],
        },
    ];

    #[test]
    fn a_slope_that_enlarges_the_input_is_refused() {
        use crate::onnx::{import_bytes, ImportError, ImportOptions};
        let wide = Example {
            inputs: &[Data(&[3]), Weight(&[2, 3])],
            output: &[2, 3],
            ..EXAMPLES[0]
        };
        let err = import_bytes(&wide.model(), "prelu", &ImportOptions::default()).unwrap_err();
        assert!(
            matches!(&err, ImportError::BadNodeInput { input, .. } if input == "slope"),
            "{err}"
        );
    }
}
