//! Test support: a deterministic RNG (splitmix64), constants in a layout's
//! physical order, and naive logical-NCHW reference loops shared by several
//! test modules. Graphs are built with [`crate::test_graphs::Builder`].

use super::layout::relayout_vec;
use super::{run, RunOptions};
use crate::ir::{Conv2d, Graph, Layout, ValueId};

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

/// Logical row-major `data` of `shape` in `layout`'s physical order (for
/// `Builder::constant_as`).
pub(crate) fn physical(data: Vec<f32>, shape: &[usize], layout: Layout) -> Vec<f32> {
    relayout_vec(data, shape, Layout::RowMajor, layout)
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
