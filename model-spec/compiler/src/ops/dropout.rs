//! ONNX `Dropout` at inference: output 0 is the input ([`Op::Identity`]),
//! the optional mask (output 1) a constant of ones. A `training_mode` input
//! that is true is refused: aotune compiles inference graphs.

use super::{const_input, OpDef};
use crate::ir::{Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Dropout"],
    summary: "Dropout (inference: the input, and a mask of ones)",
    node_types: &[NodeType::Dropout],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Dropout(_) = cx.node else {
        return Err(cx.unsupported());
    };
    if let Some((_, training)) = const_input::ints(cx, 2, "training_mode")? {
        if training.iter().any(|&t| t != 0) {
            return Err(cx.attr_error(
                "training_mode",
                training,
                "aotune compiles inference graphs; export the model in eval mode",
            ));
        }
    }
    let x = cx.input(0)?;
    let names = cx.output_names();
    let y = cx.push(Op::Identity, vec![x])?;
    cx.bind_output(0, y);
    if let Some(mask) = names.get(1).filter(|n| !n.is_empty()) {
        let shape = cx.shape(x).to_vec();
        let ones = vec![1.0; shape.iter().product()];
        let id = cx.add_constant(mask.to_string(), shape, ones);
        cx.bind_output(1, id);
    }
    Ok(y)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Dropout",
            opset: 9,
            inputs: &[Data(&[2, 3])],
            attrs: &[Float("ratio", 0.5), Outputs(2)],
            output: &[2, 3],
            ir: &["Identity"],
        },
        Example {
            op_type: "Dropout",
            opset: 13,
            inputs: &[Data(&[2, 3]), Scalar(0.1)],
            attrs: &[],
            output: &[2, 3],
            ir: &["Identity"],
        },
    ];
}
