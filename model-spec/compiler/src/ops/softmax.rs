//! ONNX `Softmax`, `LogSoftmax` and `Hardmax`: [`Op::Softmax`],
//! [`Op::LogSoftmax`], [`Op::Hardmax`] with opset ≥ 13 semantics, each
//! slice along `axis` on its own (Hardmax: 1 at the slice's first maximum,
//! 0 elsewhere).
//!
//! Before opset 13 the three ops coerce the input to 2-D
//! `[prod(dims[..axis]), prod(dims[axis..])]` and work on its rows, i.e.
//! jointly over every axis from `axis` on. On the last axis that is the
//! same thing; on another axis the node imports as a `Reshape` to that 2-D
//! shape, the op along axis 1, and a `Reshape` back.

use super::OpDef;
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Softmax", "LogSoftmax", "Hardmax"],
    summary: "Softmax, LogSoftmax, Hardmax (any axis; before opset 13 the flatten-to-2-D \
              semantics)",
    node_types: &[NodeType::Softmax, NodeType::LogSoftmax, NodeType::Hardmax],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let (axis, op): (usize, fn(usize) -> Op) = match cx.node {
        Node::Softmax(n) => (n.config.axis, |axis| Op::Softmax { axis }),
        Node::LogSoftmax(n) => (n.config.axis, |axis| Op::LogSoftmax { axis }),
        Node::Hardmax(n) => (n.config.axis, |axis| Op::Hardmax { axis }),
        _ => return Err(cx.unsupported()),
    };
    let ins = cx.inputs(1..=1)?;
    let shape = cx.shape(ins[0]).to_vec();
    if axis >= shape.len() {
        return Err(cx.attr_error(
            "axis",
            axis,
            &format!("out of range for an input of shape {shape:?}"),
        ));
    }
    if cx.opset >= 13 || axis + 1 == shape.len() {
        return cx.push(op(axis), ins);
    }
    // Before opset 13, on an axis other than the last: the 2-D coercion.
    let rows: usize = shape[..axis].iter().product();
    let cols: usize = shape[axis..].iter().product();
    let (name, out_name) = (cx.name(), cx.output_name().to_string());
    let flat = Op::Reshape {
        shape: vec![rows as i64, cols as i64],
        allowzero: false,
    };
    let x2 = cx.push_named(&format!("{name}_2d"), flat, ins, &format!("{out_name}_2d"))?;
    let y2 = cx.push_named(name, op(1), vec![x2], &format!("{out_name}_rows"))?;
    let back = Op::Reshape {
        shape: shape.iter().map(|&d| d as i64).collect(),
        allowzero: false,
    };
    cx.push_named(&format!("{name}_nd"), back, vec![y2], &out_name)
}

/// Output shape of [`Op::Softmax`], [`Op::LogSoftmax`] and [`Op::Hardmax`]:
/// their input's.
pub(crate) fn infer_shape(axis: usize, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    if axis >= inputs[0].len() {
        return Err(format!("axis {axis} out of range for {:?}", inputs[0]));
    }
    Ok(inputs[0].to_vec())
}

/// CPU reference of [`Op::Softmax`] (in the accumulation type).
pub(crate) fn reference(ctx: &Ctx, axis: usize, inputs: &[Tensor]) -> OpResult {
    reference::softmax::softmax(ctx, axis, inputs)
}

/// CPU reference of [`Op::LogSoftmax`] (in the accumulation type).
pub(crate) fn log_reference(ctx: &Ctx, axis: usize, inputs: &[Tensor]) -> OpResult {
    reference::softmax::log_softmax(ctx, axis, inputs)
}

/// CPU reference of [`Op::Hardmax`].
pub(crate) fn hardmax_reference(axis: usize, inputs: &[Tensor]) -> OpResult {
    reference::softmax::hardmax(axis, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Softmax",
            opset: 13,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[Int("axis", 1)],
            output: &[2, 3, 4],
            ir: &["Softmax"],
        },
        // Before opset 13 on the last axis (the default there is 1).
        Example {
            op_type: "Softmax",
            opset: 11,
            inputs: &[Data(&[2, 5])],
            attrs: &[],
            output: &[2, 5],
            ir: &["Softmax"],
        },
        // Before opset 13 on another axis: the 2-D coercion.
        Example {
            op_type: "Softmax",
            opset: 11,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[Int("axis", 1)],
            output: &[2, 3, 4],
            ir: &["Reshape", "Softmax", "Reshape"],
        },
        Example {
            op_type: "LogSoftmax",
            opset: 13,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[Int("axis", -1)],
            output: &[2, 3, 4],
            ir: &["LogSoftmax"],
        },
        Example {
            op_type: "LogSoftmax",
            opset: 11,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[Int("axis", 0)],
            output: &[2, 3, 4],
            ir: &["Reshape", "LogSoftmax", "Reshape"],
        },
        Example {
            op_type: "Hardmax",
            opset: 13,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[Int("axis", 1)],
            output: &[2, 3, 4],
            ir: &["Hardmax"],
        },
        Example {
            op_type: "Hardmax",
            opset: 11,
            inputs: &[Data(&[3, 4])],
            attrs: &[],
            output: &[3, 4],
            ir: &["Hardmax"],
        },
    ];

    #[test]
    fn before_opset_13_softmax_normalizes_jointly_from_the_axis() {
        use crate::onnx::{import_bytes, ImportOptions};
        use crate::reference::{run, RunOptions};
        let model = EXAMPLES[2].model();
        let graph = import_bytes(&model, "softmax11", &ImportOptions::default())
            .unwrap()
            .graph;
        let x: Vec<f32> = (0..24).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let y = run(&graph, &[&x], &RunOptions::default())
            .unwrap()
            .remove(0);
        // Each image's 12 elements (axes 1 and 2) sum to one together.
        for (image, xs) in y.chunks(12).zip(x.chunks(12)) {
            let denom: f64 = xs.iter().map(|&v| f64::from(v).exp()).sum();
            for (&got, &v) in image.iter().zip(xs) {
                assert!((f64::from(got) - f64::from(v).exp() / denom).abs() < 1e-6);
            }
        }
    }
}
