//! ONNX `Tile` with constant repeats: [`Op::Tile`], the input repeated
//! `repeats[i]` times along each axis `i`. Repeats of 0 (an empty output)
//! are rejected.

use super::{const_input, OpDef};
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::node::tile::TileInput;
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Tile"],
    summary: "Tile (constant repeats)",
    node_types: &[NodeType::Tile],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Tile(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let repeats = match &n.config.repeats {
        TileInput::Static(r) => r.clone(),
        TileInput::Runtime(r) => {
            let repeats = const_input::required_ints(cx, r.input_index, "repeats")?;
            repeats
                .iter()
                .map(|&r| usize::try_from(r))
                .collect::<Result<_, _>>()
                .map_err(|_| cx.attr_error("repeats", &repeats, "must not be negative"))?
        }
    };
    let x = cx.input(0)?;
    if repeats.len() != cx.shape(x).len() {
        return Err(cx.attr_error("repeats", &repeats, "needs one entry per input axis"));
    }
    if repeats.contains(&0) {
        return Err(cx.attr_error(
            "repeats",
            &repeats,
            "a repeat of 0 empties the output; aotune values have no zero-sized dimensions",
        ));
    }
    cx.push(Op::Tile { repeats }, vec![x])
}

/// Output shape of [`Op::Tile`]: each dimension times its repeat.
pub(crate) fn infer_shape(repeats: &[usize], inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    if repeats.len() != inputs[0].len() {
        return Err(format!(
            "{repeats:?} has not one repeat per axis of {:?}",
            inputs[0]
        ));
    }
    repeats
        .iter()
        .zip(inputs[0])
        .map(|(&r, &d)| {
            r.checked_mul(d)
                .ok_or_else(|| format!("tiling {d} by {r} overflows"))
        })
        .collect()
}

/// CPU reference of [`Op::Tile`]: a strided copy with stride-0 repeat axes.
pub(crate) fn reference(repeats: &[usize], inputs: &[Tensor]) -> OpResult {
    reference::strided::tile(repeats, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[Example {
        op_type: "Tile",
        opset: 13,
        inputs: &[Data(&[2, 3]), Int64s(&[3, 2])],
        attrs: &[],
        output: &[6, 6],
        ir: &["Tile"],
    }];

    #[test]
    fn tile_multiplies_each_axis() {
        assert_eq!(infer_shape(&[3, 1], &[&[2, 5]]), Ok(vec![6, 5]));
        assert!(infer_shape(&[3], &[&[2, 5]]).is_err());
    }
}
