//! Test support: a deterministic RNG (splitmix64), a small graph builder
//! that infers shapes and verifies the result, and naive logical-NCHW
//! reference loops shared by several test modules.

use super::layout::relayout_vec;
use super::{run, RunOptions};
use crate::ir::{
    infer_shape, verify, Conv2d, DType, Graph, Layout, Node, Op, Precision, Value, ValueId,
    ValueKind,
};

/// splitmix64.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub(crate) fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    pub(crate) fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform()).collect()
    }
}

/// Builds a graph node by node, inferring every output shape.
pub(crate) struct Builder {
    pub graph: Graph,
}

impl Builder {
    pub(crate) fn new() -> Self {
        Builder {
            graph: Graph {
                values: Vec::new(),
                nodes: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                precision: Precision::Fp32,
            },
        }
    }

    pub(crate) fn input(&mut self, name: &str, shape: &[usize]) -> ValueId {
        let mut value = Value::activation(name, shape.to_vec());
        value.kind = ValueKind::Input;
        let id = self.graph.add_value(value);
        self.graph.inputs.push(id);
        id
    }

    /// A constant from logical row-major data.
    pub(crate) fn constant(&mut self, name: &str, shape: &[usize], data: Vec<f32>) -> ValueId {
        self.graph
            .add_value(Value::constant(name, shape.to_vec(), data))
    }

    /// A constant from logical row-major data, stored in `layout` and `dtype`.
    pub(crate) fn constant_as(
        &mut self,
        name: &str,
        shape: &[usize],
        data: Vec<f32>,
        layout: Layout,
        dtype: DType,
    ) -> ValueId {
        let physical: Vec<f32> = relayout_vec(data, shape, Layout::RowMajor, layout)
            .into_iter()
            .map(|x| dtype.round(x))
            .collect();
        let mut value = Value::constant(name, shape.to_vec(), physical);
        value.layout = layout;
        value.dtype = dtype;
        self.graph.add_value(value)
    }

    pub(crate) fn node(&mut self, op: Op, inputs: &[ValueId]) -> ValueId {
        let shapes: Vec<&[usize]> = inputs
            .iter()
            .map(|&v| self.graph.value(v).shape.as_slice())
            .collect();
        let shape = infer_shape(&op, &shapes).unwrap_or_else(|e| panic!("{}: {e}", op.kind()));
        let name = format!("{}{}", op.kind().to_lowercase(), self.graph.nodes.len());
        let output = self
            .graph
            .add_value(Value::activation(format!("{name}_out"), shape));
        self.graph.nodes.push(Node {
            name,
            op,
            inputs: inputs.to_vec(),
            output,
        });
        output
    }

    /// Sets a value's layout and dtype.
    pub(crate) fn set(&mut self, id: ValueId, layout: Layout, dtype: DType) {
        let value = self.graph.value_mut(id);
        value.layout = layout;
        value.dtype = dtype;
    }

    pub(crate) fn finish(mut self, outputs: &[ValueId]) -> Graph {
        self.graph.outputs = outputs.to_vec();
        verify(&self.graph).unwrap_or_else(|e| panic!("{e}"));
        self.graph
    }
}

/// Runs with default options and returns the first output.
pub(crate) fn run1(graph: &Graph, inputs: &[&[f32]]) -> Vec<f32> {
    run(graph, inputs, &RunOptions::default())
        .unwrap_or_else(|e| panic!("{e}"))
        .remove(0)
}

pub(crate) fn conv2d(
    kernel: [usize; 2],
    strides: [usize; 2],
    pads: [usize; 4],
    dilations: [usize; 2],
    groups: usize,
) -> Conv2d {
    Conv2d {
        kernel,
        strides,
        pads,
        dilations,
        groups,
    }
}

/// Direct-loop convolution on logical NCHW / OIHW data, f64 accumulation.
pub(crate) fn naive_conv(
    x: &[f32],
    xs: [usize; 4],
    w: &[f32],
    ws: [usize; 4],
    geometry: &Conv2d,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let [n, c, h, wd] = xs;
    let [k, cg, r, s] = ws;
    let [p, q] = geometry.output_hw(h, wd).expect("kernel fits");
    let kg = k / geometry.groups;
    let mut out = vec![0.0f32; n * k * p * q];
    for img in 0..n {
        for kk in 0..k {
            let g = kk / kg;
            for pp in 0..p {
                for qq in 0..q {
                    let mut acc = 0.0f64;
                    for cc in 0..cg {
                        for rr in 0..r {
                            for ss in 0..s {
                                let hh = (pp * geometry.strides[0] + rr * geometry.dilations[0])
                                    as isize
                                    - geometry.pads[0] as isize;
                                let ww = (qq * geometry.strides[1] + ss * geometry.dilations[1])
                                    as isize
                                    - geometry.pads[1] as isize;
                                if hh < 0 || ww < 0 || hh >= h as isize || ww >= wd as isize {
                                    continue;
                                }
                                let xi =
                                    ((img * c + g * cg + cc) * h + hh as usize) * wd + ww as usize;
                                let wi = ((kk * cg + cc) * r + rr) * s + ss;
                                acc += f64::from(x[xi]) * f64::from(w[wi]);
                            }
                        }
                    }
                    if let Some(b) = bias {
                        acc += f64::from(b[kk]);
                    }
                    out[((img * k + kk) * p + pp) * q + qq] = acc as f32;
                }
            }
        }
    }
    out
}

/// A plan giving every non-constant value its own bytes (no reuse, no
/// aliases): always correct.
pub(crate) fn disjoint_plan(graph: &Graph) -> crate::plan::MemoryPlan {
    let alignment = 256;
    let mut offset = 0;
    let mut buffers = Vec::new();
    for (i, value) in graph.values.iter().enumerate() {
        if value.is_constant() {
            continue;
        }
        let bytes = value.bytes();
        buffers.push(crate::plan::Buffer {
            value: ValueId(i as u32),
            offset,
            bytes,
            first: 0,
            last: graph.nodes.len() + 1,
            alias_of: None,
        });
        offset += bytes.div_ceil(alignment) * alignment;
    }
    crate::plan::MemoryPlan {
        alignment,
        arena_bytes: offset,
        lower_bound: offset,
        buffers,
    }
}
