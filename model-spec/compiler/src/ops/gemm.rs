//! ONNX `Gemm` ([`Op::Gemm`]: `alpha · op(A) · op(B) + beta · C` with
//! `transA`/`transB` and an optional C broadcast to the output) and
//! `MatMul` ([`Op::MatMul`]: numpy matmul, 1-D promotion and batch
//! broadcasting).
//!
//! onnx-ir rewrites `Gemm` with alpha = beta = 1, transA = 0 and transB = 1,
//! and `MatMul` by a 2-D constant weight (with the `Add` of a bias that
//! follows it), into a `Linear` node. A 2-D `Linear` is imported back as a
//! Gemm; on a higher-rank input it becomes a MatMul, with the weight
//! transposed at import when it came from a Gemm, plus an `Add` of the bias.

use super::OpDef;
use crate::ir::{arity, broadcast, BinaryOp, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, OutSpec, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Gemm", "MatMul"],
    summary: "Gemm (`alpha`, `beta`, `transA`, `transB`, optional C), MatMul",
    node_types: &[NodeType::Gemm, NodeType::MatMul, NodeType::Linear],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let node = cx.node;
    match node {
        Node::Gemm(n) => {
            let c = &n.config;
            let op = Op::Gemm {
                alpha: c.alpha,
                beta: c.beta,
                trans_a: c.trans_a != 0,
                trans_b: c.trans_b != 0,
            };
            let ins = cx.inputs(2..=3)?;
            cx.push(op, ins)
        }
        Node::Linear(n) => {
            let ins = cx.inputs(2..=3)?;
            if cx.shape(ins[0]).len() == 2 {
                let op = Op::Gemm {
                    alpha: 1.0,
                    beta: 1.0,
                    trans_a: false,
                    trans_b: n.config.transpose_weight,
                };
                cx.push(op, ins)
            } else {
                linear_as_matmul(cx, ins, n.config.transpose_weight)
            }
        }
        Node::MatMul(_) => {
            let ins = cx.inputs(2..=2)?;
            cx.push(Op::MatMul, ins)
        }
        _ => Err(cx.unsupported()),
    }
}

/// `Linear` on a rank > 2 input: MatMul with a `[in, out]` weight, then
/// Add the bias.
fn linear_as_matmul(
    cx: &mut NodeImport,
    ins: Vec<ValueId>,
    transpose_weight: bool,
) -> Result<ValueId, ImportError> {
    let mut weight = ins[1];
    if transpose_weight {
        let (shape, data) = match (cx.shape(weight), cx.constant(weight)) {
            ([n, k], Some(data)) => {
                let (n, k) = (*n, *k);
                let mut t = vec![0.0; n * k];
                for i in 0..n {
                    for j in 0..k {
                        t[j * n + i] = data[i * k + j];
                    }
                }
                (vec![k, n], t)
            }
            _ => {
                return Err(cx.input_error("B", "a transposed Linear weight must be a 2-D constant"))
            }
        };
        weight = cx.add_constant(format!("{}_weight_t", cx.name()), shape, data);
    }
    if ins.len() == 3 {
        let (name, out_name) = (cx.name(), cx.output_name().to_string());
        let y = cx.push_named(
            name,
            Op::MatMul,
            vec![ins[0], weight],
            &format!("{out_name}_matmul"),
        )?;
        let add = Op::Binary(BinaryOp::Add);
        return cx.push_named(&format!("{name}_bias"), add, vec![y, ins[2]], &out_name);
    }
    cx.push(Op::MatMul, vec![ins[0], weight])
}

/// Output shape of [`Op::Gemm`]: `[M, N]`, C broadcasting to it.
pub(crate) fn infer_gemm_shape(
    trans_a: bool,
    trans_b: bool,
    inputs: &[&[usize]],
) -> Result<Vec<usize>, String> {
    arity(inputs, 2, 3)?;
    let (a, b) = (inputs[0], inputs[1]);
    if a.len() != 2 || b.len() != 2 {
        return Err(format!("Gemm needs 2-D inputs, got {a:?} and {b:?}"));
    }
    let (m, k) = if trans_a { (a[1], a[0]) } else { (a[0], a[1]) };
    let (k2, n) = if trans_b { (b[1], b[0]) } else { (b[0], b[1]) };
    if k != k2 {
        return Err(format!(
            "Gemm inner dims differ: A {a:?} (transA={trans_a}) × B {b:?} (transB={trans_b})"
        ));
    }
    if let Some(c) = inputs.get(2) {
        let out = broadcast(&[m, n], c)?;
        if out != [m, n] {
            return Err(format!("Gemm C {c:?} does not broadcast to [{m}, {n}]"));
        }
    }
    Ok(vec![m, n])
}

/// Output shape of [`Op::MatMul`].
pub(crate) fn infer_matmul_shape(inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 2, 2)?;
    matmul_shape(inputs[0], inputs[1])
}

fn matmul_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    if a.is_empty() || b.is_empty() {
        return Err("MatMul inputs must have rank ≥ 1".into());
    }
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != k2 {
        return Err(format!("MatMul inner dims differ: {a:?} × {b:?}"));
    }
    let mut out = broadcast(&a2[..a2.len() - 2], &b2[..b2.len() - 2])?;
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(n);
    }
    Ok(out)
}

/// CPU reference of [`Op::Gemm`].
/// `scale` is `[alpha, beta]`, `trans` is `[trans_a, trans_b]`.
pub(crate) fn gemm_reference(
    ctx: &Ctx,
    scale: [f32; 2],
    trans: [bool; 2],
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    reference::gemm::gemm(ctx, scale, trans, inputs, out)
}

/// CPU reference of [`Op::MatMul`].
pub(crate) fn matmul_reference(ctx: &Ctx, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    reference::gemm::matmul(ctx, inputs, out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        // A general Gemm stays a Gemm.
        Example {
            op_type: "Gemm",
            opset: 13,
            inputs: &[Data(&[4, 3]), Weight(&[4, 5]), Weight(&[5])],
            attrs: &[Float("alpha", 0.5), Int("transA", 1)],
            output: &[3, 5],
            ir: &["Gemm"],
        },
        // PyTorch's nn.Linear: onnx-ir's Linear, imported as a Gemm.
        Example {
            op_type: "Gemm",
            opset: 11,
            inputs: &[Data(&[2, 8]), Weight(&[10, 8]), Weight(&[10])],
            attrs: &[Float("alpha", 1.0), Float("beta", 1.0), Int("transB", 1)],
            output: &[2, 10],
            ir: &["Gemm"],
        },
        // Two activations.
        Example {
            op_type: "MatMul",
            opset: 13,
            inputs: &[Data(&[2, 3, 4]), Data(&[4, 5])],
            attrs: &[],
            output: &[2, 3, 5],
            ir: &["MatMul"],
        },
        // A 2-D constant weight: Linear, imported as a Gemm.
        Example {
            op_type: "MatMul",
            opset: 13,
            inputs: &[Data(&[3, 4]), Weight(&[4, 6])],
            attrs: &[],
            output: &[3, 6],
            ir: &["Gemm"],
        },
        // The same weight on a 3-D input: Linear, imported as a MatMul.
        Example {
            op_type: "MatMul",
            opset: 13,
            inputs: &[Data(&[2, 3, 4]), Weight(&[4, 6])],
            attrs: &[],
            output: &[2, 3, 6],
            ir: &["MatMul"],
        },
    ];

    #[test]
    fn matmul_promotes_vectors() {
        assert_eq!(matmul_shape(&[4], &[2, 4, 3]), Ok(vec![2, 3]));
        assert_eq!(matmul_shape(&[2, 3, 4], &[4]), Ok(vec![2, 3]));
        assert_eq!(matmul_shape(&[1, 3, 4], &[5, 4, 2]), Ok(vec![5, 3, 2]));
    }
}
