//! Fully connected layers: canonicalizes the head's global pool and lowers
//! `Gemm`/`MatMul` with a constant weight to `Dense`.
//!
//! [`canonicalize_global_pool`] rewrites `ReduceMean(axes=[2,3])` on a 4-D
//! value into `GlobalAveragePool` (the dynamo exporter's spelling of the
//! head's pool); with `keepdims=0` a `Flatten(axis=1)` view restores the
//! `[N,C]` shape. [`lower_dense`] rewrites `Gemm(A, B, C)` with constant 2-D
//! `B` and `transA=0` into `Dense(x=A, w)`: the weight is stored `[N,K]`
//! row-major (transposed when `transB=0`) with `alpha` multiplied in, and
//! `beta·C` becomes a constant f32 bias when `C` is a constant that
//! broadcasts along M (shapes `[]`, `[1]`, `[N]`, `[1,1]`, `[1,N]`), or the
//! residual input when `C` has the output's shape `[M,N]` (a non-constant C
//! only when `beta = 1`); any other `C` leaves the Gemm alone, and `beta = 0`
//! drops C. `MatMul(A[M,K], B[K,N])` with constant B is the same with
//! `alpha = 1` and no C. A Dense without bias then absorbs an `Add` of such a
//! broadcastable constant (the MatMul + Add export pattern), and a `Relu`,
//! `Clip` or `Gelu` reading only the Dense's output becomes its activation;
//! the Dense takes the last absorbed node's place and output value. The
//! Flatten/Reshape between pool and Gemm stays: it is a view. Then
//! sequence-first attention blocks run batch-first ([`super::token_order`]:
//! the row-swapping Transposes around them become strides). Last, every
//! Dense absorbs what follows it through views and Transposes, where the
//! epilogue can express it ([`super::dense_epilogue`]): an activation, a
//! residual `Add`, and per-output-feature `Mul`/`Add` constants folded into
//! its weight and bias (ConvNeXt's layer scale).

use super::dense_epilogue::absorb_epilogues;
use super::fuse_epilogue::activation_after;
use super::{PassError, PassSummary, Uses};
use crate::ir::{
    debug_verify, Activation, BinaryOp, DType, Epilogue, Graph, Node, Op, Patch, Value, ValueId,
    ValueKind,
};
use std::sync::Arc;

/// Turns `ReduceMean(axes=[2,3])` over a 4-D value into `GlobalAveragePool`.
pub fn canonicalize_global_pool(graph: &mut Graph) -> Result<PassSummary, PassError> {
    const PASS: &str = "canonicalize_global_pool";
    let mut patch = Patch::new(graph);
    let mut rewritten = 0;
    for id in graph.node_ids() {
        let node = graph.node(id);
        let Op::ReduceMean { axes, keepdims } = &node.op else {
            continue;
        };
        let Some(&x) = node.inputs.first() else {
            continue;
        };
        let input = graph.value(x);
        if input.shape.len() != 4 || axes != &[2, 3] {
            continue;
        }
        let pool = |output| Node {
            name: node.name.clone(),
            op: Op::GlobalAveragePool,
            inputs: vec![x],
            output,
        };
        if *keepdims {
            patch.replace_node(id, pool(node.output));
        } else {
            let pooled = patch.add_value(Value {
                name: format!("{}_pooled", node.name),
                shape: vec![input.shape[0], input.shape[1], 1, 1],
                ..graph.value(node.output).clone()
            });
            patch.insert_before(id, pool(pooled));
            patch.replace_node(
                id,
                Node {
                    name: format!("{}_flatten", node.name),
                    op: Op::Flatten { axis: 1 },
                    inputs: vec![pooled],
                    output: node.output,
                },
            );
        }
        rewritten += 1;
    }
    patch.apply(graph);
    debug_verify(graph, PASS);
    let mut summary = PassSummary::new(PASS);
    summary.add(rewritten, "ReduceMean → GlobalAveragePool");
    Ok(summary)
}

const PASS: &str = "dense";

/// Lowers Gemm/MatMul with a constant weight to Dense, absorbing a bias Add
/// and a ReLU/Clip/GELU that follow, then the activation, residual Add and
/// per-feature scale or shift each Dense can take through views.
pub fn lower_dense(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let uses = Uses::of(graph);
    let mut patch = Patch::new(graph);
    let (mut gemms, mut matmuls, mut adds, mut activations) = (0, 0, 0, 0);
    for id in graph.node_ids() {
        let node = graph.node(id);
        let Some(lowered) = lower(graph, node) else {
            continue;
        };
        match node.op {
            Op::MatMul => matmuls += 1,
            _ => gemms += 1,
        }
        let Lowered {
            weight,
            mut bias,
            residual,
        } = lowered;
        let out_shape = graph.value(node.output).shape.clone();
        let n = *out_shape
            .last()
            .expect("a lowered node has a rank-2+ output");
        let weight = weight.add_to(&mut patch);
        let residual = residual.map(|r| r.add_to(&mut patch));
        let mut last = id;
        // A bias Add right after a Dense that has none.
        if let Some(add) = uses.sole_user(node.output) {
            let add_node = graph.node(add);
            if bias.is_none() && add_node.op == Op::Binary(BinaryOp::Add) {
                let other = add_node.inputs.iter().find(|&&v| v != node.output);
                let constant = other.and_then(|&c| row_bias(graph.value(c), 1.0, n));
                let same = same_storage(graph.value(node.output), graph.value(add_node.output));
                if let (Some(constant), true) = (constant, same) {
                    bias = Some(constant);
                    patch.remove_node(last);
                    last = add;
                    adds += 1;
                }
            }
        }
        let value = graph.node(last).output;
        let mut activation = Activation::None;
        if let Some((user, found)) = activation_after(graph, &uses, value) {
            activation = found;
            patch.remove_node(last);
            last = user;
            activations += 1;
        }
        let epilogue = Epilogue {
            bias: bias.is_some(),
            residual: residual.is_some(),
            activation,
        };
        let mut inputs = vec![node.inputs[0], weight];
        if let Some(data) = bias {
            inputs.push(patch.add_value(bias_value(node, data)));
        }
        inputs.extend(residual);
        let output = graph.node(last).output;
        if out_shape.len() == 2 {
            patch.replace_node(
                last,
                Node {
                    name: node.name.clone(),
                    op: Op::Dense {
                        epilogue,
                        norm: None,
                    },
                    inputs,
                    output,
                },
            );
            continue;
        }
        // Leading axes flattened into M around a 2-D Dense, by views.
        let k = graph
            .value(node.inputs[0])
            .shape
            .last()
            .copied()
            .unwrap_or(1);
        let m = out_shape[..out_shape.len() - 1].iter().product::<usize>();
        let view = |name: String, of: ValueId, shape: Vec<usize>| Value {
            name,
            shape,
            kind: ValueKind::Activation,
            ..graph.value(of).clone()
        };
        let x2 = patch.add_value(view(
            format!("{}.x2d", node.name),
            node.inputs[0],
            vec![m, k],
        ));
        let y2 = patch.add_value(view(format!("{}.y2d", node.name), output, vec![m, n]));
        let reshape = |name: String, input, output, shape: &[usize]| Node {
            name,
            op: Op::Reshape {
                shape: shape.iter().map(|&d| d as i64).collect(),
                allowzero: false,
            },
            inputs: vec![input],
            output,
        };
        patch.insert_before(
            id,
            reshape(format!("{}/x2d", node.name), inputs[0], x2, &[m, k]),
        );
        inputs[0] = x2;
        patch.insert_before(
            last,
            Node {
                name: node.name.clone(),
                op: Op::Dense {
                    epilogue,
                    norm: None,
                },
                inputs,
                output: y2,
            },
        );
        patch.replace_node(
            last,
            reshape(format!("{}/y", node.name), y2, output, &out_shape),
        );
    }
    patch.apply(graph);
    // The copies attention_views left unread must not count as readers.
    super::dce(graph)?;
    let row_swaps = super::token_order::sink_row_swaps(graph);
    let absorbed = absorb_epilogues(graph);
    debug_verify(graph, PASS);
    let mut summary = PassSummary::new(PASS);
    summary.add(gemms, "Gemm → Dense");
    summary.add(matmuls, "MatMul → Dense");
    summary.add(adds + absorbed.biases, "bias Add absorbed");
    summary.add(absorbed.scales, "per-feature Mul folded");
    summary.add(activations + absorbed.activations, "activation absorbed");
    summary.add(absorbed.residuals, "residual Add absorbed");
    summary.add(row_swaps, "sequence-first attention block run batch-first");
    Ok(summary)
}

/// A Dense input: an existing value, or a constant made by the pass.
enum Operand {
    Value(ValueId),
    New(Value),
}

impl Operand {
    fn add_to(self, patch: &mut Patch) -> ValueId {
        match self {
            Operand::Value(v) => v,
            Operand::New(value) => patch.add_value(value),
        }
    }
}

/// What a Gemm/MatMul becomes; the bias is per-column data `[N]`.
struct Lowered {
    weight: Operand,
    bias: Option<Vec<f32>>,
    residual: Option<Operand>,
}

fn same_storage(a: &Value, b: &Value) -> bool {
    a.dtype == b.dtype && a.layout == b.layout
}

/// `beta·C` as one value per output column, when constant `c` broadcasts
/// along M to `[M, n]` (shapes `[]`, `[1]`, `[n]`, `[1,1]`, `[1,n]`).
fn row_bias(c: &Value, beta: f32, n: usize) -> Option<Vec<f32>> {
    let data = c.constant_data()?;
    let columns = match c.shape.as_slice() {
        [] | [1] | [1, 1] => 1,
        [d] | [1, d] if *d == n => n,
        _ => return None,
    };
    Some(
        (0..n)
            .map(|j| ((beta as f64) * (data[j % columns] as f64)) as f32)
            .collect(),
    )
}

/// The Dense's bias: f32, whatever the weight's dtype (the epilogue adds it in f32).
fn bias_value(node: &Node, data: Vec<f32>) -> Value {
    Value {
        dtype: DType::F32,
        ..Value::constant(format!("{}.bias", node.name), vec![data.len()], data)
    }
}

/// The Dense form of `node`, when it is a Gemm/MatMul this pass handles.
fn lower(graph: &Graph, node: &Node) -> Option<Lowered> {
    let (alpha, beta, trans_b, c) = match node.op {
        Op::Gemm {
            alpha,
            beta,
            trans_a: false,
            trans_b,
        } => (alpha, beta, trans_b, node.inputs.get(2).copied()),
        Op::MatMul => (1.0, 0.0, false, None),
        _ => return None,
    };
    let (&a, &b) = (node.inputs.first()?, node.inputs.get(1)?);
    let (a, b, output) = (graph.value(a), graph.value(b), graph.value(node.output));
    let data = b.constant_data()?;
    let rank = a.shape.len();
    if rank < 2 || b.shape.len() != 2 || output.shape.len() != rank {
        return None;
    }
    let n = output.shape[rank - 1];
    let m: usize = output.shape[..rank - 1].iter().product();
    let k = a.shape[rank - 1];
    let (bias, residual) = match c.filter(|_| beta != 0.0) {
        None => (None, None),
        Some(c) => {
            let value = graph.value(c);
            if let Some(bias) = row_bias(value, beta, n) {
                (Some(bias), None)
            } else if value.shape != [m, n] || rank != 2 || !same_storage(value, output) {
                return None;
            } else if beta == 1.0 {
                (None, Some(Operand::Value(c)))
            } else {
                let scaled = value
                    .constant_data()?
                    .iter()
                    .map(|&x| value.dtype.round(beta * x))
                    .collect();
                let constant = Value {
                    name: format!("{}.residual", node.name),
                    kind: ValueKind::Constant(Arc::new(scaled)),
                    ..value.clone()
                };
                (None, Some(Operand::New(constant)))
            }
        }
    };
    if trans_b && alpha == 1.0 {
        // B is already the [N, K] weight.
        return Some(Lowered {
            weight: Operand::Value(node.inputs[1]),
            bias,
            residual,
        });
    }
    // w[j][p] = alpha · op(B)[p][j], stored [N, K].
    let weight: Vec<f32> = (0..n)
        .flat_map(|j| (0..k).map(move |p| (j, p)))
        .map(|(j, p)| {
            let x = if trans_b {
                data[j * k + p]
            } else {
                data[p * n + j]
            };
            if alpha == 1.0 {
                x
            } else {
                b.dtype.round(alpha * x)
            }
        })
        .collect();
    let weight = Value {
        name: b.name.clone(),
        shape: vec![n, k],
        kind: ValueKind::Constant(Arc::new(weight)),
        ..b.clone()
    };
    Some(Lowered {
        weight: Operand::New(weight),
        bias,
        residual,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{print_graph, UnaryOp};
    use crate::passes::direct_eval;
    use crate::test_graphs::{rel_l2, Builder};

    #[test]
    fn reduce_mean_becomes_global_average_pool() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 4, 5]);
        let keep = b.node(
            "mean_keep",
            Op::ReduceMean {
                axes: vec![2, 3],
                keepdims: true,
            },
            &[x],
        );
        let drop = b.node(
            "mean_drop",
            Op::ReduceMean {
                axes: vec![2, 3],
                keepdims: false,
            },
            &[x],
        );
        let other = b.node(
            "mean_c",
            Op::ReduceMean {
                axes: vec![1],
                keepdims: true,
            },
            &[x],
        );
        b.output(keep);
        b.output(drop);
        b.output(other);
        let mut g = b.finish();
        let summary = canonicalize_global_pool(&mut g).unwrap();
        assert_eq!(summary.count("ReduceMean → GlobalAveragePool"), 2);
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[2,3,4,5]  # x
          %1: f32[2,3,1,1] = GlobalAveragePool(%0)  # mean_keep
          %4: f32[2,3,1,1] = GlobalAveragePool(%0)  # mean_drop
          %2: f32[2,3] = Flatten(%4) axis=1  # mean_drop_flatten
          %3: f32[2,1,4,5] = ReduceMean(%0) axes=[1] keepdims=true  # mean_c
          return %1, %2, %3
        ");
    }

    fn gemm(alpha: f32, beta: f32, trans_a: bool, trans_b: bool) -> Op {
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        }
    }

    #[test]
    fn classifier_head_becomes_dense() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 2, 2]);
        let pooled = b.node("avgpool", Op::GlobalAveragePool, &[x]);
        let flat = b.node("flatten", Op::Flatten { axis: 1 }, &[pooled]);
        let w = b.constant("fc.weight", &[2, 3], vec![1.0, 2.0, 3.0, -1.0, -2.0, -3.0]);
        let bias = b.constant("fc.bias", &[2], vec![0.5, -0.25]);
        let y = b.node("fc", gemm(1.0, 1.0, false, true), &[flat, w, bias]);
        let z = b.relu("relu", y);
        b.output(z);
        let mut g = b.finish();
        let input: Vec<f32> = (0..24).map(|i| i as f32 / 8.0 - 1.5).collect();
        let before = direct_eval::evaluate(&g, &[&input]);
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[2,3,2,2]  # x
          const %3: f32[2,3]  # sum=0.000000e0
          const %4: f32[2]  # sum=2.500000e-1
          %1: f32[2,3,1,1] = GlobalAveragePool(%0)  # avgpool
          %2: f32[2,3] = Flatten(%1) axis=1  # flatten
          %5: f32[2,2] = Gemm(%2, %3, %4) alpha=1 beta=1 transA=false transB=true  # fc
          %6: f32[2,2] = Relu(%5)  # relu
          return %6
        ");
        let summary = lower_dense(&mut g).unwrap();
        assert_eq!(
            summary.to_string(),
            "dense: 1 Gemm → Dense, 1 activation absorbed"
        );
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[2,3,2,2]  # x
          const %3: f32[2,3]  # sum=0.000000e0
          const %5: f32[2]  # sum=2.500000e-1
          %1: f32[2,3,1,1] = GlobalAveragePool(%0)  # avgpool
          %2: f32[2,3] = Flatten(%1) axis=1  # flatten
          %4: f32[2,2] = Dense(%2, %3, %5) epilogue=bias+relu  # fc
          return %4
        ");
        let after = direct_eval::evaluate(&g, &[&input]);
        assert_eq!(after, before);
        // By hand: the channel means are -1.3125, -0.8125, -0.3125 and
        // 0.1875, 0.6875, 1.1875, so the products with the weight rows are
        // ∓3.875 and ±5.125; relu(-3.875 + 0.5), relu(3.875 - 0.25), ...
        assert_eq!(after[0], [0.0, 3.625, 5.625, 0.0]);
    }

    #[test]
    fn gemm_and_matmul_variants() {
        let mut b = Builder::new();
        let x = b.input("x", &[3, 4]);
        let r = b.input("r", &[3, 2]);
        let column = b.input("column", &[3, 1]);
        // transB=0 with alpha and a [N] bias scaled by beta.
        let w_kn = b.random("w_kn", &[4, 2], -1.0, 1.0);
        let c_n = b.random("c_n", &[2], -1.0, 1.0);
        let y1 = b.node("scaled", gemm(2.0, 0.5, false, false), &[x, w_kn, c_n]);
        // C of the output's shape: the residual.
        let w_nk = b.random("w_nk", &[2, 4], -1.0, 1.0);
        let y2 = b.node("residual", gemm(1.0, 1.0, false, true), &[x, w_nk, r]);
        // A [1,1] constant C broadcasts to a bias.
        let c_11 = b.constant("c_11", &[1, 1], vec![0.25]);
        let y3 = b.node("scalar_c", gemm(1.0, 2.0, false, true), &[x, w_nk, c_11]);
        // C [M,1] at run time, and transA: left alone.
        let y4 = b.node("column_c", gemm(1.0, 1.0, false, true), &[x, w_nk, column]);
        let xt = b.input("xt", &[4, 3]);
        let y5 = b.node("trans_a", gemm(1.0, 1.0, true, true), &[xt, w_nk]);
        // MatMul + Add(bias) + Clip.
        let m = b.node("matmul", Op::MatMul, &[x, w_kn]);
        let add = b.node("add", Op::Binary(BinaryOp::Add), &[c_n, m]);
        let clip = b.node(
            "clip",
            Op::Unary(UnaryOp::Clip {
                min: -0.5,
                max: 0.5,
            }),
            &[add],
        );
        for y in [y1, y2, y3, y4, y5, clip] {
            b.output(y);
        }
        let inputs: Vec<Vec<f32>> = b
            .graph
            .inputs
            .clone()
            .into_iter()
            .map(|v| b.data_for(v))
            .collect();
        let mut g = b.finish();
        let inputs: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        let before = direct_eval::evaluate(&g, &inputs);
        let summary = lower_dense(&mut g).unwrap();
        insta::assert_snapshot!(
            summary.to_string(),
            @"dense: 3 Gemm → Dense, 1 MatMul → Dense, 1 bias Add absorbed, 1 activation absorbed"
        );
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[3,4]  # x
          input %1: f32[3,2]  # r
          input %2: f32[3,1]  # column
          input %8: f32[4,3]  # xt
          const %4: f32[2,4]  # sum=1.050691e0
          const %11: f32[2,4]  # sum=-3.785522e0
          const %12: f32[2]  # sum=3.484986e-1
          const %13: f32[2]  # sum=1.000000e0
          const %14: f32[2,4]  # sum=-1.892761e0
          const %15: f32[2]  # sum=6.969972e-1
          %3: f32[3,2] = Dense(%0, %11, %12) epilogue=bias  # scaled
          %5: f32[3,2] = Dense(%0, %4, %1) epilogue=residual  # residual
          %6: f32[3,2] = Dense(%0, %4, %13) epilogue=bias  # scalar_c
          %7: f32[3,2] = Gemm(%0, %4, %2) alpha=1 beta=1 transA=false transB=true  # column_c
          %9: f32[3,2] = Gemm(%8, %4) alpha=1 beta=1 transA=true transB=true  # trans_a
          %10: f32[3,2] = Dense(%0, %14, %15) epilogue=bias+clip(-0.5,0.5)  # matmul
          return %3, %5, %6, %7, %9, %10
        ");
        let after = direct_eval::evaluate(&g, &inputs);
        for (a, b) in after.iter().zip(&before) {
            assert!(rel_l2(a, b) <= 1e-6, "{a:?} vs {b:?}");
        }
    }
}
