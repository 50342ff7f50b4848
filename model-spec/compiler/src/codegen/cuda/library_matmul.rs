//! Dense nodes run by cuBLASLt instead of a generated kernel
//! (docs/design/cublaslt-dense.md): which Dense nodes can, and the
//! [`LibraryMatmul`] their launch carries.
//!
//! A Dense task runs through cuBLASLt when its config (from the tuning log,
//! or from [`force_all`]) is `{"kernel": "cublaslt", "algo": <rank>}` and
//! the node is eligible: no folded LayerNorm; x, w, the residual and y of
//! one 16-bit type (f16 or bf16), row-major; w a constant `[N, K]`; the bias
//! a constant f32 `[N]`; K and N multiples of 8 (16-byte rows); an
//! activation of none, ReLU or GELU (cuBLASLt's is the tanh approximation:
//! within fp16 rounding of the exact one), and not both a residual and an
//! activation (where cuBLASLt applies the activation relative to `beta·C` is
//! not documented).

use super::config::ConfigOverrides;
use crate::artifact::{LibraryMatmul, MatmulActivation};
use crate::ir::{Activation, DType, Graph, Layout, NodeId, Op};
use crate::schedule::task_key;

/// The `kernel` value of a config that asks for cuBLASLt.
pub const KERNEL: &str = "cublaslt";

/// The config that runs a Dense task through cuBLASLt with the heuristic's
/// candidate of rank `algo`.
pub fn config(algo: u32) -> serde_json::Value {
    serde_json::json!({ "kernel": KERNEL, "algo": algo })
}

/// The heuristic rank `config` asks for, when it asks for cuBLASLt.
pub fn requested(config: Option<&serde_json::Value>) -> Option<u32> {
    let config = config?;
    if config.get("kernel")?.as_str()? != KERNEL {
        return None;
    }
    let algo = config.get("algo").and_then(|a| a.as_u64()).unwrap_or(0);
    Some(u32::try_from(algo).unwrap_or(0))
}

/// The matmul of Dense node `id`, or why it cannot run through cuBLASLt.
pub fn library_matmul(graph: &Graph, id: NodeId, algo: u32) -> Result<LibraryMatmul, String> {
    let node = graph.node(id);
    let Op::Dense { epilogue, norm } = &node.op else {
        return Err(format!("a {} node is not a Dense", node.op.kind()));
    };
    if norm.is_some() {
        return Err("the Dense carries a LayerNorm".into());
    }
    let activation = match epilogue.activation {
        Activation::None => MatmulActivation::None,
        Activation::Relu => MatmulActivation::Relu,
        Activation::Gelu { .. } => MatmulActivation::Gelu,
        Activation::Clip { .. } => return Err("cuBLASLt has no Clip epilogue".into()),
    };
    if epilogue.residual && activation != MatmulActivation::None {
        return Err("a residual and an activation together".into());
    }
    let expected = 2 + usize::from(epilogue.bias) + usize::from(epilogue.residual);
    if node.inputs.len() != expected {
        return Err(format!(
            "{} inputs where the epilogue `{epilogue}` needs {expected}",
            node.inputs.len()
        ));
    }
    let x = graph.value(node.inputs[0]);
    let w = graph.value(node.inputs[1]);
    let y = graph.value(node.output);
    let dtype = x.dtype;
    if !matches!(dtype, DType::F16 | DType::BF16) {
        return Err(format!(
            "{dtype} operands (cuBLASLt runs f16 and bf16 here)"
        ));
    }
    let (&k, &[n, wk]) = (x.shape.last().ok_or("a scalar input")?, w.shape.as_slice()) else {
        return Err(format!("weight shape {:?} is not [N, K]", w.shape));
    };
    if wk != k || !w.is_constant() || w.dtype != dtype {
        return Err(format!(
            "weight {}[{n}x{wk}] is not a constant [N, {k}] of the input's type",
            w.dtype
        ));
    }
    let m = x.numel() / k.max(1);
    let row_major = [x, w, y].iter().all(|v| v.layout == Layout::RowMajor);
    if !row_major || y.dtype != dtype || y.numel() != m * n {
        return Err(format!(
            "input, weight and output are not row-major {dtype} [M,K], [N,K], [M,N]"
        ));
    }
    if k % 8 != 0 || n % 8 != 0 {
        return Err(format!("K {k} and N {n} are not both multiples of 8"));
    }
    if [m, n, k].iter().any(|&d| d == 0 || d > i32::MAX as usize) {
        return Err(format!("M {m}, N {n}, K {k} out of cuBLASLt's range"));
    }
    let mut next = 2;
    if epilogue.bias {
        let b = graph.value(node.inputs[next]);
        if !b.is_constant() || b.dtype != DType::F32 || b.numel() != n {
            return Err("the bias is not a constant f32 [N]".into());
        }
        next += 1;
    }
    if epilogue.residual {
        let r = graph.value(node.inputs[next]);
        if r.dtype != dtype || r.layout != Layout::RowMajor || r.numel() != m * n {
            return Err("the residual is not a row-major [M,N] of the output's type".into());
        }
    }
    Ok(LibraryMatmul {
        m: m as u64,
        n: n as u64,
        k: k as u64,
        dtype,
        bias: epilogue.bias,
        residual: epilogue.residual,
        activation,
        algo,
    })
}

/// Sets every eligible Dense task of `graph` to cuBLASLt (the heuristic's
/// first candidate), over whatever `overrides` had for it; returns how many
/// tasks it set.
pub fn force_all(graph: &Graph, overrides: &mut ConfigOverrides) -> usize {
    let mut set = 0;
    for id in graph.node_ids() {
        if matches!(graph.node(id).op, Op::Dense { .. }) && library_matmul(graph, id, 0).is_ok() {
            let hash = task_key(graph, id).hash_hex();
            if overrides.by_task.insert(hash, config(0)) != Some(config(0)) {
                set += 1;
            }
        }
    }
    set
}
