//! Generic matrix products that survive the passes (`matmul.cu`): ONNX
//! `Gemm` (transposes, alpha, beta, broadcast C) and `MatMul` (1-D
//! promotion, batch broadcasting) on row-major values. Transposes become
//! strides and batch offsets rendered functions; the kernel is a simple
//! shared-memory tiled SIMT GEMM (correct first: Dense and the convolutions
//! carry the model's FLOPs).

use super::config::KernelConfig;
use super::index_map::broadcast_src;
use super::source::{wrapper, Arg, Geometry, Instance, Params, Template, Workspace};
use crate::ir::{broadcast, is_row_major_bytes, DType, Graph, Layout, NodeId, Op, Precision};
use serde::{Deserialize, Serialize};

/// A (batched) `M × N × K` product with strided operands.
#[derive(Debug, Clone, PartialEq)]
pub struct MatmulShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Number of output matrices.
    pub batch: usize,
    /// Element strides of op(A)[i, k] and op(B)[k, j].
    pub a_strides: [usize; 2],
    pub b_strides: [usize; 2],
    /// Body of `int a_batch(int z)` / `b_batch`: element offset of batch z.
    pub a_batch: String,
    pub b_batch: String,
    pub alpha: f32,
    /// `(beta, [row stride, col stride], dtype)` of C when present.
    pub c: Option<(f32, [usize; 2], DType)>,
    pub a_dtype: DType,
    pub b_dtype: DType,
    pub out_dtype: DType,
    pub precision: Precision,
}

/// Tiles of the generic matmul template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MatmulConfig {
    pub block_m: u32,
    pub block_n: u32,
    pub block_k: u32,
    pub thread_m: u32,
    pub thread_n: u32,
}

impl MatmulConfig {
    pub fn threads(&self) -> u32 {
        (self.block_m / self.thread_m.max(1)) * (self.block_n / self.thread_n.max(1))
    }
}

impl KernelConfig for MatmulConfig {
    type Shape = MatmulShape;

    /// 64×64 tiles (4×4 per thread) when that still gives a CTA per SM,
    /// else 32×32 (2×2).
    fn default_for(shape: &MatmulShape) -> Self {
        let big = shape.m.div_ceil(64) * shape.n.div_ceil(64) * shape.batch >= 132;
        if big {
            MatmulConfig {
                block_m: 64,
                block_n: 64,
                block_k: 16,
                thread_m: 4,
                thread_n: 4,
            }
        } else {
            MatmulConfig {
                block_m: 32,
                block_n: 32,
                block_k: 16,
                thread_m: 2,
                thread_n: 2,
            }
        }
    }

    fn validate(&self, shape: &MatmulShape) -> Result<(), String> {
        for v in [self.block_m, self.block_n, self.block_k] {
            if !matches!(v, 8 | 16 | 32 | 64 | 128) {
                return Err("tile sides must be powers of two in 8..=128".into());
            }
        }
        if !matches!(self.thread_m, 1 | 2 | 4 | 8)
            || !matches!(self.thread_n, 1 | 2 | 4 | 8)
            || self.block_m % self.thread_m != 0
            || self.block_n % self.thread_n != 0
        {
            return Err("thread tiles must be 1, 2, 4 or 8 and divide the CTA tile".into());
        }
        let t = self.threads();
        if !(32..=1024).contains(&t) || t % 32 != 0 {
            return Err(format!("{t} threads"));
        }
        let smem = self.block_k * (self.block_m + self.block_n) * 4;
        if smem > 48 * 1024 {
            return Err(format!("{smem} B of static shared memory"));
        }
        if shape.batch > 65535 || shape.n.div_ceil(self.block_n as usize) > 65535 {
            return Err("grid exceeds the launch limits".into());
        }
        Ok(())
    }

    fn search_space(shape: &MatmulShape) -> Vec<Self> {
        let mut out = Vec::new();
        for (block_m, block_n, thread_m, thread_n) in [
            (32, 32, 2, 2),
            (64, 64, 4, 4),
            (64, 32, 4, 2),
            (32, 64, 2, 4),
            (128, 64, 8, 4),
        ] {
            for block_k in [8, 16, 32] {
                let c = MatmulConfig {
                    block_m,
                    block_n,
                    block_k,
                    thread_m,
                    thread_n,
                };
                if c.validate(shape).is_ok() {
                    out.push(c);
                }
            }
        }
        out
    }

    fn tag(&self) -> String {
        format!(
            "m{}n{}k{}t{}x{}",
            self.block_m, self.block_n, self.block_k, self.thread_m, self.thread_n
        )
    }
}

fn row_major(graph: &Graph, v: crate::ir::ValueId) -> Result<&crate::ir::Value, String> {
    let value = graph.value(v);
    if is_row_major_bytes(&value.shape, value.layout) {
        Ok(value)
    } else {
        Err(format!("operand %{} must be row-major", v.0))
    }
}

/// The [`MatmulShape`] of a `Gemm` or `MatMul` node.
pub fn matmul_shape(graph: &Graph, node: NodeId) -> Result<MatmulShape, String> {
    let n = graph.node(node);
    let a = row_major(graph, n.inputs[0])?;
    let b = row_major(graph, n.inputs[1])?;
    let y = row_major(graph, n.output)?;
    match n.op {
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        } => {
            let (a0, a1) = (a.shape[0], a.shape[1]);
            let (b0, b1) = (b.shape[0], b.shape[1]);
            let (m, k, a_strides) = if trans_a {
                (a1, a0, [1, a1])
            } else {
                (a0, a1, [a1, 1])
            };
            let (nn, b_strides) = if trans_b {
                (b0, [1, b1])
            } else {
                (b1, [b1, 1])
            };
            let c = match n.inputs.get(2) {
                Some(&cv) => {
                    let c = row_major(graph, cv)?;
                    let s = &c.shape;
                    let strides = match s.as_slice() {
                        [] => [0, 0],
                        [d] => [0, usize::from(*d != 1)],
                        [r, d] => [if *r == 1 { 0 } else { *d }, usize::from(*d != 1)],
                        _ => return Err(format!("Gemm C {s:?} has rank > 2")),
                    };
                    Some((beta, strides, c.dtype))
                }
                None => None,
            };
            Ok(MatmulShape {
                m,
                n: nn,
                k,
                batch: 1,
                a_strides,
                b_strides,
                a_batch: "return 0;".into(),
                b_batch: "return 0;".into(),
                alpha,
                c,
                a_dtype: a.dtype,
                b_dtype: b.dtype,
                out_dtype: y.dtype,
                precision: graph.precision,
            })
        }
        Op::MatMul => {
            let a_shape = if a.shape.len() == 1 {
                vec![1, a.shape[0]]
            } else {
                a.shape.clone()
            };
            let b_shape = if b.shape.len() == 1 {
                vec![b.shape[0], 1]
            } else {
                b.shape.clone()
            };
            let (a_batch, a_mat) = a_shape.split_at(a_shape.len() - 2);
            let (b_batch, b_mat) = b_shape.split_at(b_shape.len() - 2);
            let (m, k, nn) = (a_mat[0], a_mat[1], b_mat[1]);
            let batch = broadcast(a_batch, b_batch)?;
            let offset = |src: &[usize], per: usize| {
                let body = broadcast_src(&batch, Layout::RowMajor, src, Layout::RowMajor);
                // `return expr;` → `return (expr) * per;`
                match body.rsplit_once("return ") {
                    Some((pre, expr)) => {
                        format!("{pre}return ({}) * {per};", expr.trim_end_matches(';'))
                    }
                    None => body,
                }
            };
            Ok(MatmulShape {
                m,
                n: nn,
                k,
                batch: batch.iter().product(),
                a_strides: [k, 1],
                b_strides: [nn, 1],
                a_batch: offset(a_batch, m * k),
                b_batch: offset(b_batch, k * nn),
                alpha: 1.0,
                c: None,
                a_dtype: a.dtype,
                b_dtype: b.dtype,
                out_dtype: y.dtype,
                precision: graph.precision,
            })
        }
        _ => Err(format!("{} is not a matrix product", n.op.kind())),
    }
}

pub fn instantiate(shape: &MatmulShape, config: &MatmulConfig, symbol: &str) -> Instance {
    let mut p = Params::new(format!("{symbol}_p"));
    let (beta, c_strides, c_dtype) = shape.c.unwrap_or((0.0, [0, 0], DType::F32));
    p.ty("TA", shape.a_dtype)
        .ty("TB", shape.b_dtype)
        .ty("TC", c_dtype)
        .ty("TOut", shape.out_dtype)
        .ints(&[
            ("GEMM_M", shape.m as i64),
            ("GEMM_N", shape.n as i64),
            ("GEMM_K", shape.k as i64),
        ])
        .ints(&[
            ("A_RS", shape.a_strides[0] as i64),
            ("A_CS", shape.a_strides[1] as i64),
            ("B_RS", shape.b_strides[0] as i64),
            ("B_CS", shape.b_strides[1] as i64),
            ("C_RS", c_strides[0] as i64),
            ("C_CS", c_strides[1] as i64),
        ])
        .ints(&[
            ("BM", config.block_m.into()),
            ("BN", config.block_n.into()),
            ("BK", config.block_k.into()),
            ("TM", config.thread_m.into()),
            ("TN", config.thread_n.into()),
        ])
        .boolean("ALPHA_IS_ONE", shape.alpha == 1.0)
        .float("ALPHA", shape.alpha)
        .float("BETA", beta)
        .boolean("HAS_C", shape.c.is_some())
        .boolean("TF32", shape.precision == Precision::Tf32)
        .func("int a_batch(int j)", &shape.a_batch)
        .func("int b_batch(int j)", &shape.b_batch);
    let mut args = vec![
        Arg::input("a", shape.a_dtype),
        Arg::input("b", shape.b_dtype),
    ];
    if shape.c.is_some() {
        args.push(Arg::input("c", c_dtype));
    }
    args.push(Arg::output("y", shape.out_dtype));
    let call = format!(
        "aotune::matmul<{}>(a, b, {}, y)",
        p.name(),
        if shape.c.is_some() { "c" } else { "nullptr" }
    );
    let threads = config.threads();
    Instance {
        symbol: symbol.to_string(),
        template: Template::Matmul,
        config: serde_json::to_string(config).unwrap_or_default(),
        code: format!("{}{}", p.render(), wrapper(symbol, threads, &args, &call)),
        geometry: Geometry {
            grid: [
                shape.m.div_ceil(config.block_m as usize).max(1) as u32,
                shape.n.div_ceil(config.block_n as usize).max(1) as u32,
                shape.batch.max(1) as u32,
            ],
            block: [threads, 1, 1],
            smem_bytes: 0,
        },
        workspace: Workspace::default(),
    }
}
