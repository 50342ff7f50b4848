//! ONNX `Cast`: values stay f32 at runtime, so a cast only changes them as
//! far as the target type would. To float32 or float64 it is
//! [`Op::Identity`]; to float16 or bfloat16 [`UnaryOp::Cast`] rounds to the
//! nearest value of that type (ties to even; overflow gives ±∞); to any
//! integer type it truncates toward zero (no wrapping or saturation: a
//! value outside the type's range stays as it is); to bool it gives 1.0
//! for non-zero (and NaN), 0.0 for zero. A cast of a constant is folded
//! by onnx-ir before import. Quantized targets are refused; onnx-ir
//! itself refuses float8 and string targets.

use super::OpDef;
use crate::ir::{CastTarget, Op, UnaryOp, ValueId};
use crate::onnx::{ImportError, NodeImport};
use onnx_ir::{DType, Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Cast"],
    summary: "Cast (to float, float16/bfloat16 rounding, integer truncation, bool)",
    node_types: &[NodeType::Cast],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Cast(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let target = match n.config.to {
        DType::F64 | DType::F32 | DType::Flex32 => None,
        DType::F16 => Some(CastTarget::F16),
        DType::BF16 => Some(CastTarget::BF16),
        DType::I64
        | DType::I32
        | DType::I16
        | DType::I8
        | DType::U64
        | DType::U32
        | DType::U16
        | DType::U8 => Some(CastTarget::Int),
        DType::Bool(_) => Some(CastTarget::Bool),
        other @ DType::QFloat(_) => {
            return Err(cx.attr_error("to", other, "quantized targets are not supported"))
        }
    };
    let ins = cx.inputs(1..=1)?;
    match target {
        None => cx.push(Op::Identity, ins),
        Some(to) => cx.push(Op::Unary(UnaryOp::Cast(to)), ins),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    /// TensorProto data type codes.
    const FLOAT16: i64 = 10;
    const BFLOAT16: i64 = 16;
    const INT32: i64 = 6;
    const UINT8: i64 = 2;
    const BOOL: i64 = 9;
    const DOUBLE: i64 = 11;

    /// `Cast` of a 2-D input to `to`, imported as `ir`.
    const fn cast(opset: i64, attrs: &'static [crate::ops::example::Attr]) -> Example {
        Example {
            op_type: "Cast",
            opset,
            inputs: &[Data(&[2, 3])],
            attrs,
            output: &[2, 3],
            ir: &["Cast"],
        }
    }

    pub(crate) const EXAMPLES: &[Example] = &[
        cast(13, &[Int("to", FLOAT16)]),
        cast(13, &[Int("to", BFLOAT16)]),
        cast(6, &[Int("to", INT32)]),
        cast(19, &[Int("to", UINT8)]),
        cast(13, &[Int("to", BOOL)]),
        Example {
            ir: &["Identity"],
            ..cast(13, &[Int("to", DOUBLE)])
        },
    ];

    #[test]
    fn each_target_imports_its_rounding() {
        use crate::ir::{CastTarget, Op, UnaryOp};
        use crate::onnx::{import_bytes, ImportOptions};
        let want = [
            Op::Unary(UnaryOp::Cast(CastTarget::F16)),
            Op::Unary(UnaryOp::Cast(CastTarget::BF16)),
            Op::Unary(UnaryOp::Cast(CastTarget::Int)),
            Op::Unary(UnaryOp::Cast(CastTarget::Int)),
            Op::Unary(UnaryOp::Cast(CastTarget::Bool)),
            Op::Identity,
        ];
        for (example, want) in EXAMPLES.iter().zip(want) {
            let g = import_bytes(&example.model(), "cast", &ImportOptions::default()).unwrap();
            assert_eq!(g.graph.nodes[0].op, want, "{:?}", example.attrs);
        }
    }
}
