//! Folds a LayerNormalization over the last axis into the Dense layers that
//! read it ([`RowNorm`], `docs/design/layernorm-into-dense.md`): each Dense
//! multiplies the *unnormalized* rows by `w' = w·diag(γ)` and finishes the
//! norm in its epilogue, `r_m·(acc − μ_m·s) + b'`, with `b' = b + w·β` and
//! `s_n = Σ_k w'[n,k]`. The normalized activation is never written and the
//! LayerNorm's kernel never runs.
//!
//! A LayerNorm `y = LN(x)` qualifies when
//! - the graph's precision is fp16 or bf16 (only the tensor-core GEMM
//!   templates compute the row statistics);
//! - it normalizes only the last axis (K) of x, x and y hold row-major
//!   bytes of the same shape in the storage type, and γ and β are
//!   constants of K elements or one (a missing β is zeros);
//! - y is no graph output, and every reader of y is a Dense without a row
//!   norm that reads it as its x only, with a constant row-major weight
//!   `[N, K]`, at least [`RowNorm::MIN_ROWS`] rows and K a multiple of
//!   [`RowNorm::K_MULTIPLE`], or a view
//!   (Reshape, Flatten, Identity: the same row-major bytes) whose output
//!   is no graph output and whose readers are such Denses or views again.
//!   So the LayerNorm's output is never read anywhere else (ViT's is not a
//!   residual).
//!
//! Each Dense then takes `x` through the same views, its inputs become
//! `x, w', b', [residual], s`: `w'` rounded to w's storage type, `b'` summed
//! in f64 from w as stored (in the old bias's dtype, f32 without one) and
//! `s` the f32 sum over the rounded `w'`, in f64. It runs after the precision
//! pass, so w is already in its storage type, and after every pass that
//! rewrites a Dense's epilogue (those leave a Dense with a norm alone).

use super::{PassError, PassSummary, Uses};
use crate::ir::{
    debug_verify, is_byte_view, is_row_major_bytes, DType, Epilogue, Graph, Node, NodeId, Op,
    Patch, Precision, RowNorm, Value, ValueId,
};

const PASS: &str = "fuse_dense_layer_norm";
const FOLDED: &str = "LayerNormalization folded into its Dense readers";
const DENSE: &str = "Dense given a row norm";

/// A qualifying LayerNorm: its ε and the folds of the Denses that read it.
struct Match {
    epsilon: f32,
    folds: Vec<Fold>,
}

/// One Dense reader with the LayerNorm folded in: its new constants.
struct Fold {
    dense: NodeId,
    epilogue: Epilogue,
    /// `w' = w·diag(γ)` `[N, K]`, rounded to w's dtype.
    weight: (Vec<f32>, DType),
    /// `b' = b + w·β` `[N]`, rounded to the old bias's dtype (f32 without one).
    bias: (Vec<f32>, DType),
    /// `s_n = Σ_k w'[n,k]` `[N]`, f32.
    sums: Vec<f32>,
}

/// Folds each qualifying LayerNormalization into its Dense readers.
pub fn fuse_dense_layer_norm(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let mut summary = PassSummary::new(PASS);
    let (mut folded, mut denses) = (0, 0);
    if matches!(graph.precision, Precision::Fp16 | Precision::Bf16) {
        let uses = Uses::of(graph);
        let mut patch = Patch::new(graph);
        for id in graph.node_ids() {
            let Some(m) = qualifies(graph, &uses, id) else {
                continue;
            };
            denses += m.folds.len();
            for fold in m.folds {
                let (dense, node) = rewrite(graph, &mut patch, fold, m.epsilon);
                patch.replace_node(dense, node);
            }
            let ln = graph.node(id);
            patch.remove_node(id);
            patch.substitute(ln.output, ln.inputs[0]);
            folded += 1;
        }
        patch.apply(graph);
        debug_verify(graph, PASS);
    }
    summary.add(folded, FOLDED);
    summary.add(denses, DENSE);
    Ok(summary)
}

/// The match of LayerNorm node `id` when it qualifies (module doc).
fn qualifies(graph: &Graph, uses: &Uses, id: NodeId) -> Option<Match> {
    let node = graph.node(id);
    let Op::LayerNorm { axis, epsilon } = node.op else {
        return None;
    };
    let (x, y) = (graph.value(node.inputs[0]), graph.value(node.output));
    let &k = x.shape.last()?;
    let row_major = |v: &Value| is_row_major_bytes(&v.shape, v.layout);
    if k == 0
        || axis + 1 != x.shape.len()
        || x.shape != y.shape
        || x.dtype != y.dtype
        || x.dtype != graph.precision.storage()
        || !row_major(x)
        || !row_major(y)
        || uses.is_output(node.output)
    {
        return None;
    }
    let gamma = affine(graph, node.inputs.get(1).copied(), k, 1.0)?;
    let beta = affine(graph, node.inputs.get(2).copied(), k, 0.0)?;
    let mut readers = Vec::new();
    dense_readers(graph, uses, node.output, k, &mut readers)?;
    let folds = readers
        .into_iter()
        .map(|dense| fold(graph, dense, &gamma, &beta))
        .collect::<Option<Vec<Fold>>>()?;
    (!folds.is_empty()).then_some(Match { epsilon, folds })
}

/// Collects into `denses` the Denses that read `value` (through views),
/// or `None` when something else reads it (module doc).
fn dense_readers(
    graph: &Graph,
    uses: &Uses,
    value: ValueId,
    k: usize,
    denses: &mut Vec<NodeId>,
) -> Option<()> {
    let mut users = uses.users(value).to_vec();
    users.dedup();
    for user in users {
        let node = graph.node(user);
        if node.op.is_view() {
            let out = node.output;
            if !is_byte_view(&node.op, graph.value(value), graph.value(out)) || uses.is_output(out)
            {
                return None;
            }
            dense_readers(graph, uses, out, k, denses)?;
        } else if reads_rows(graph, node, value, k) {
            denses.push(user);
        } else {
            return None;
        }
    }
    Some(())
}

/// True when `node` is a Dense without a norm that reads `x` `[M, k]` as its
/// x only, with `M ≥ MIN_ROWS` and `k` in whole 16-byte rows of 8 elements
/// (the wgmma template's operand rows).
fn reads_rows(graph: &Graph, node: &Node, x: ValueId, k: usize) -> bool {
    let rows = match graph.value(x).shape.as_slice() {
        &[m, kx] if kx == k => m,
        _ => return false,
    };
    matches!(node.op, Op::Dense { norm: None, .. })
        && node.inputs[0] == x
        && node.inputs[1..].iter().all(|&v| v != x)
        && rows >= RowNorm::MIN_ROWS
        && k % RowNorm::K_MULTIPLE == 0
}

/// A LayerNorm scale or bias as K values (`None`: absent, K copies of
/// `missing`), when it is a row-major constant of K or 1 elements.
fn affine(graph: &Graph, value: Option<ValueId>, k: usize, missing: f64) -> Option<Vec<f64>> {
    let Some(id) = value else {
        return Some(vec![missing; k]);
    };
    let v = graph.value(id);
    let data = v.constant_data()?;
    if !is_row_major_bytes(&v.shape, v.layout) {
        return None;
    }
    match data.len() {
        n if n == k => Some(data.iter().map(|&e| f64::from(e)).collect()),
        1 => Some(vec![f64::from(data[0]); k]),
        _ => None,
    }
}

/// The fold of γ and β (K each) into Dense `id`, when its weight (and bias,
/// if any) are row-major constants.
fn fold(graph: &Graph, id: NodeId, gamma: &[f64], beta: &[f64]) -> Option<Fold> {
    let dense = graph.node(id);
    let Op::Dense { epilogue, .. } = dense.op else {
        return None;
    };
    let constant = |slot: usize| {
        let v = graph.value(*dense.inputs.get(slot)?);
        let data = v.constant_data()?;
        is_row_major_bytes(&v.shape, v.layout).then_some((data.as_slice(), v.dtype))
    };
    let (w, w_dtype) = constant(1)?;
    let old_bias = match epilogue.bias {
        true => Some(constant(2)?),
        false => None,
    };
    let k = gamma.len();
    let scaled: Vec<f32> = w
        .iter()
        .enumerate()
        .map(|(i, &e)| w_dtype.round((f64::from(e) * gamma[i % k]) as f32))
        .collect();
    let sums: Vec<f32> = scaled
        .chunks(k)
        .map(|row| row.iter().map(|&e| f64::from(e)).sum::<f64>() as f32)
        .collect();
    let bias_dtype = old_bias.map_or(DType::F32, |(_, dtype)| dtype);
    let bias = w
        .chunks(k)
        .enumerate()
        .map(|(j, row)| {
            let b = old_bias.map_or(0.0, |(b, _)| f64::from(b[j]));
            let wb: f64 = row.iter().zip(beta).map(|(&e, &t)| f64::from(e) * t).sum();
            bias_dtype.round((b + wb) as f32)
        })
        .collect();
    Some(Fold {
        dense: id,
        epilogue,
        weight: (scaled, w_dtype),
        bias: (bias, bias_dtype),
        sums,
    })
}

/// The Dense of `fold` with the norm: inputs `x, w', b', [residual], s`,
/// the new constants added to `patch`.
fn rewrite(graph: &Graph, patch: &mut Patch, fold: Fold, epsilon: f32) -> (NodeId, Node) {
    let dense = graph.node(fold.dense);
    let n = fold.sums.len();
    let k = fold.weight.0.len() / n.max(1);
    let mut constant = |what: &str, shape: Vec<usize>, (data, dtype): (Vec<f32>, DType)| {
        patch.add_value(Value {
            dtype,
            ..Value::constant(format!("{}/norm_{what}", dense.name), shape, data)
        })
    };
    let mut inputs = vec![
        dense.inputs[0],
        constant("weight", vec![n, k], fold.weight),
        constant("bias", vec![n], fold.bias),
    ];
    if fold.epilogue.residual {
        inputs.extend(dense.inputs.last());
    }
    inputs.push(constant("sums", vec![n], (fold.sums, DType::F32)));
    let node = Node {
        op: Op::Dense {
            epilogue: Epilogue {
                bias: true,
                ..fold.epilogue
            },
            norm: Some(RowNorm { epsilon }),
        },
        inputs,
        ..dense.clone()
    };
    (fold.dense, node)
}

#[cfg(test)]
#[path = "fuse_dense_layer_norm_tests.rs"]
mod tests;
