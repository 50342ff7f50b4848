//! Task extraction: the distinct kernel workloads of an optimized graph.
//!
//! A [`TaskKey`] is the canonical text of everything a kernel specializes
//! on — op, attributes, epilogue, each operand's shape, dtype and layout, and
//! the graph's precision — so two nodes with equal keys run the same kernel.
//! Its hash is FNV-1a 64 of that text: stable across runs and machines,
//! usable as a key in tuning logs. A task's weight counts its occurrences.

use crate::ir::{is_byte_view, Graph, NodeId, Op};
use crate::zoo::fnv1a64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Canonical identity of a kernel workload.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TaskKey {
    /// Op kind, e.g. `FusedConv`.
    pub op: String,
    /// Canonical description: attributes and operand types.
    pub canonical: String,
}

impl TaskKey {
    /// Stable 64-bit hash of the key, as 16 hex digits.
    pub fn hash_hex(&self) -> String {
        format!(
            "{:016x}",
            fnv1a64(format!("{}|{}", self.op, self.canonical).as_bytes())
        )
    }
}

/// One distinct workload and where it occurs.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub key: TaskKey,
    /// Number of nodes running this workload.
    pub weight: usize,
    /// Floating-point operations of one occurrence (multiply-add = 2).
    pub flops: u64,
    /// Bytes read and written by one occurrence (operands once each).
    pub bytes: u64,
    /// The nodes, in graph order.
    pub nodes: Vec<NodeId>,
}

/// True when the node needs no kernel: a view whose bytes are already in
/// place ([`is_byte_view`]).
pub fn is_free(graph: &Graph, node: NodeId) -> bool {
    let n = graph.node(node);
    let [x] = n.inputs.as_slice() else {
        return false;
    };
    let x = graph.value(*x);
    is_byte_view(&n.op, x, graph.value(n.output)) && !x.is_constant()
}

/// Floating-point operations of one node.
pub fn node_flops(graph: &Graph, node: NodeId) -> u64 {
    let n = graph.node(node);
    let out = graph.value(n.output);
    let out_elems = out.numel() as u64;
    let in_shape = |i: usize| &graph.value(n.inputs[i]).shape;
    match &n.op {
        Op::Conv(c) | Op::FusedConv { conv: c, .. } => {
            let w = in_shape(1);
            let macs_per_out = (w[1] * w[2] * w[3]) as u64;
            // A pooled conv's output is [N, K, 1, 1]; its products are the
            // convolution's, over every pixel of its output.
            let pixels = match n.op {
                Op::FusedConv { pool: Some(_), .. } => {
                    let x = in_shape(0);
                    c.output_hw(x[2], x[3]).map_or(1, |[p, q]| (p * q) as u64)
                }
                _ => 1,
            };
            2 * out_elems * pixels * macs_per_out
        }
        Op::Dense { .. } | Op::Gemm { .. } => {
            let k = if let Op::Gemm { trans_a: true, .. } = n.op {
                in_shape(0)[0]
            } else {
                in_shape(0)[1]
            };
            2 * out_elems * k as u64
        }
        Op::MatMul => {
            let a = in_shape(0);
            2 * out_elems * *a.last().unwrap_or(&1) as u64
        }
        Op::Attention { views, .. } => {
            // q·kᵀ and p·v: 2·Skv·(D + Dv) per output row of Dv elements.
            let shapes: Vec<&[usize]> = (0..3).map(|i| in_shape(i).as_slice()).collect();
            let Ok([q, k, v]) = crate::ops::attention::operand_dims(views.as_deref(), &shapes)
            else {
                return out_elems;
            };
            let rows = (q[0] * q[1] * q[2]) as u64;
            rows * 2 * k[2] as u64 * (q[3] + v[3]) as u64
        }
        Op::MaxPool(p) | Op::AveragePool { pool: p, .. } => {
            out_elems * (p.kernel[0] * p.kernel[1]) as u64
        }
        Op::GlobalAveragePool | Op::GlobalMaxPool | Op::ReduceMean { .. } | Op::Reduce { .. } => {
            graph.value(n.inputs[0]).numel() as u64
        }
        _ => out_elems,
    }
}

fn canonical(graph: &Graph, node: NodeId) -> String {
    let n = graph.node(node);
    let mut s = String::new();
    let _ = write!(s, "{} precision={}", n.op.attrs(), graph.precision);
    for (i, &v) in n
        .inputs
        .iter()
        .chain(std::iter::once(&n.output))
        .enumerate()
    {
        let value = graph.value(v);
        let role = if i == n.inputs.len() {
            "out".to_string()
        } else {
            format!("in{i}")
        };
        let dims: Vec<String> = value.shape.iter().map(|d| d.to_string()).collect();
        let _ = write!(
            s,
            " {role}={}[{}]{}{}",
            value.dtype,
            dims.join("x"),
            match value.layout {
                crate::ir::Layout::RowMajor => "",
                crate::ir::Layout::ChannelsLast => ":cl",
            },
            if value.is_constant() { ":const" } else { "" }
        );
    }
    s
}

/// The key of the kernel a node runs.
pub fn task_key(graph: &Graph, node: NodeId) -> TaskKey {
    TaskKey {
        op: graph.node(node).op.kind().to_string(),
        canonical: canonical(graph, node),
    }
}

/// Distinct tasks of a graph, in order of first occurrence. Free views are skipped.
pub fn extract_tasks(graph: &Graph) -> Vec<Task> {
    let mut index: BTreeMap<TaskKey, usize> = BTreeMap::new();
    let mut tasks: Vec<Task> = Vec::new();
    for id in graph.node_ids() {
        if is_free(graph, id) {
            continue;
        }
        let key = task_key(graph, id);
        let n = graph.node(id);
        let bytes: u64 = n
            .inputs
            .iter()
            .chain(std::iter::once(&n.output))
            .map(|&v| graph.value(v).bytes() as u64)
            .sum();
        match index.get(&key) {
            Some(&i) => {
                tasks[i].weight += 1;
                tasks[i].nodes.push(id);
            }
            None => {
                index.insert(key.clone(), tasks.len());
                tasks.push(Task {
                    key,
                    weight: 1,
                    flops: node_flops(graph, id),
                    bytes,
                    nodes: vec![id],
                });
            }
        }
    }
    tasks
}

/// The task table as text: hash, op, weight, GFLOP, MB, short description.
pub fn render_tasks(tasks: &[Task]) -> String {
    let mut s = String::new();
    let total_flops: u64 = tasks.iter().map(|t| t.flops * t.weight as u64).sum();
    let _ = writeln!(
        s,
        "{} tasks, {} kernel launches, {:.3} GFLOP in all",
        tasks.len(),
        tasks.iter().map(|t| t.weight).sum::<usize>(),
        total_flops as f64 / 1e9
    );
    let _ = writeln!(
        s,
        "{:<16}  {:<17} {:>6} {:>10} {:>9}  key",
        "hash", "op", "weight", "MFLOP", "KB"
    );
    for t in tasks {
        let _ = writeln!(
            s,
            "{:<16}  {:<17} {:>6} {:>10.2} {:>9.1}  {}",
            t.key.hash_hex(),
            t.key.op,
            t.weight,
            t.flops as f64 / 1e6,
            t.bytes as f64 / 1024.0,
            t.key.canonical
        );
    }
    s
}
