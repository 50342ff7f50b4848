//! Small graphs for the generator's tests: one op over given inputs, with
//! chosen dtypes and layouts, verified, and planned.

use crate::ir::{
    infer_shape, verify, DType, Graph, Layout, Node, Op, Precision, Value, ValueId, ValueKind,
};
use crate::plan::{plan_memory, MemoryPlan};

/// An input of a one-op test graph.
#[derive(Debug, Clone)]
pub struct In {
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub layout: Layout,
    /// `Some(data)` (physical order) for a constant.
    pub constant: Option<Vec<f32>>,
}

impl In {
    pub fn act(shape: &[usize], dtype: DType, layout: Layout) -> Self {
        In {
            shape: shape.to_vec(),
            dtype,
            layout,
            constant: None,
        }
    }

    /// A constant with deterministic values in [-1, 1), rounded to `dtype`.
    pub fn constant(shape: &[usize], dtype: DType, layout: Layout, seed: u64) -> Self {
        let n: usize = shape.iter().product();
        let data = values(n, seed)
            .into_iter()
            .map(|v| dtype.round(v))
            .collect();
        In {
            shape: shape.to_vec(),
            dtype,
            layout,
            constant: Some(data),
        }
    }
}

/// Deterministic values in [-1, 1) (splitmix64).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let base = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..n as u64)
        .map(|i| {
            let z = crate::zoo::splitmix64(base.wrapping_add(i));
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A graph computing `op` over `inputs` into one output of `out_dtype` and
/// `out_layout`. Non-constant inputs are graph inputs.
pub fn one_op(
    op: Op,
    inputs: &[In],
    out_dtype: DType,
    out_layout: Layout,
    precision: Precision,
) -> (Graph, MemoryPlan) {
    let mut g = Graph {
        values: vec![],
        nodes: vec![],
        inputs: vec![],
        outputs: vec![],
        precision,
    };
    let mut ids: Vec<ValueId> = Vec::new();
    for (i, x) in inputs.iter().enumerate() {
        let kind = match &x.constant {
            Some(data) => ValueKind::Constant(std::sync::Arc::new(data.clone())),
            None => ValueKind::Input,
        };
        let id = g.add_value(Value {
            name: format!("in{i}"),
            shape: x.shape.clone(),
            dtype: x.dtype,
            layout: x.layout,
            kind: kind.clone(),
        });
        if kind == ValueKind::Input {
            g.inputs.push(id);
        }
        ids.push(id);
    }
    let shapes: Vec<&[usize]> = inputs.iter().map(|x| x.shape.as_slice()).collect();
    let shape = infer_shape(&op, &shapes).expect("test op shape");
    let out = g.add_value(Value {
        name: "out".into(),
        shape,
        dtype: out_dtype,
        layout: out_layout,
        kind: ValueKind::Activation,
    });
    g.nodes.push(Node {
        name: "node0".into(),
        op,
        inputs: ids,
        output: out,
    });
    g.outputs.push(out);
    verify(&g).expect("test graph verifies");
    let plan = plan_memory(&g).expect("test graph plans");
    (g, plan)
}
