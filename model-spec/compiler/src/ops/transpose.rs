//! ONNX `Transpose`: [`Op::Transpose`], output axis `i` is input axis
//! `perm[i]`; without `perm` the axes are reversed. Any rank. The CPU
//! reference is a strided copy of the input's logical data.

use super::OpDef;
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Transpose"],
    summary: "Transpose (any rank; `perm`, default reversed)",
    node_types: &[NodeType::Transpose],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Transpose(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let x = cx.input(0)?;
    let rank = cx.shape(x).len();
    let perm: Vec<usize> = n
        .config
        .perm
        .iter()
        .map(|&p| usize::try_from(p).ok().filter(|&p| p < rank))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            cx.attr_error(
                "perm",
                &n.config.perm,
                "must be a permutation of the input's axes",
            )
        })?;
    cx.push(Op::Transpose { perm }, vec![x])
}

/// Output shape of [`Op::Transpose`]: the input's dims in `perm` order.
pub(crate) fn infer_shape(perm: &[usize], inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    let x = inputs[0];
    let mut seen = vec![false; x.len()];
    for &p in perm {
        match seen.get_mut(p) {
            Some(s) if !*s => *s = true,
            _ => {
                return Err(format!(
                    "perm {perm:?} is not a permutation of {x:?}'s axes"
                ))
            }
        }
    }
    if perm.len() != x.len() {
        return Err(format!("perm {perm:?} has not one entry per axis of {x:?}"));
    }
    Ok(perm.iter().map(|&p| x[p]).collect())
}

/// CPU reference of [`Op::Transpose`]: the input's row-major strides,
/// permuted.
pub(crate) fn reference(perm: &[usize], inputs: &[Tensor]) -> OpResult {
    reference::strided::transpose(perm, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Attr::*, Example, Input::*};
    use crate::reference::testing::run1;
    use crate::test_graphs::Builder;

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Transpose",
            opset: 13,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[Ints("perm", &[1, 2, 0])],
            output: &[3, 4, 2],
            ir: &["Transpose"],
        },
        // No perm: the axes reversed.
        Example {
            op_type: "Transpose",
            opset: 1,
            inputs: &[Data(&[2, 5])],
            attrs: &[],
            output: &[5, 2],
            ir: &["Transpose"],
        },
    ];

    #[test]
    fn perm_must_be_a_permutation() {
        assert_eq!(infer_shape(&[2, 0, 1], &[&[2, 3, 4]]), Ok(vec![4, 2, 3]));
        assert!(infer_shape(&[0, 0, 1], &[&[2, 3, 4]]).is_err());
        assert!(infer_shape(&[0, 1], &[&[2, 3, 4]]).is_err());
        assert!(infer_shape(&[0, 1, 3], &[&[2, 3, 4]]).is_err());
    }

    #[test]
    fn transposes_nchw_to_nhwc() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 2, 2, 3]);
        let y = b.op(
            Op::Transpose {
                perm: vec![0, 2, 3, 1],
            },
            &[x],
        );
        b.output(y);
        let graph = b.finish();
        let data: Vec<f32> = (0..12).map(|i| i as f32).collect();
        // Element (h, w, c) of the output is x[c, h, w] = c·6 + h·3 + w.
        let want: Vec<f32> = (0..12)
            .map(|i| {
                let (hw, c) = (i / 2, i % 2);
                (c * 6 + hw) as f32
            })
            .collect();
        assert_eq!(run1(&graph, &[&data]), want);
    }
}
