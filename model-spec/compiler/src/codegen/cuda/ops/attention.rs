//! The fused attention kernels (`attention.cu`) for [`Op::Attention`]: the
//! workload ([`AttentionShape`]: sizes, each operand's strides and dtype,
//! the mask's batch period), the config ([`AttentionConfig`]: the
//! tensor-core FlashAttention-2 kernel or the f32 SIMT one, tile sizes,
//! pipeline depth) and the instantiation.
//!
//! Strides are parameters of the template. Today they are those of the
//! contiguous row-major operands (3-D `[N, S, D]` read as `[1, N, S, D]`;
//! the mask's broadcast axes get stride 0, its batch axis is read modulo
//! its size `G`), so a later pass can hand the kernel strided views (q, k,
//! v straight out of a fused qkv projection, an output written with heads
//! interleaved) by filling [`Strided`] differently. The tensor-core kernel
//! needs every stride to be a multiple of 8 elements (16-byte rows).
//!
//! The tensor-core kernel (`mma`) serves q, k, v of one 16-bit type with
//! head sizes D, Dv multiples of 16 up to 128; everything else (f32 and
//! tf32 storage, other head sizes, mixed operand types) runs the SIMT
//! kernel, whose search space then stands alone.

use super::config::KernelConfig;
use super::conv_shape::MAX_SMEM_BYTES;
use super::source::{tiled_wrapper, Arg, DependencyWait, Geometry, Instance, Params, Template};
use crate::ir::{is_row_major_bytes, DType, Graph, NodeId, Op, Precision, StridedView};
use crate::ops::attention::{as_4d, mask_4d};
use serde::{Deserialize, Serialize};

/// SMs of the GPUs the defaults are chosen for (H100/H200).
const SMS: usize = 132;
/// Register budget per thread the validity rules allow.
const MAX_REGS: usize = 232;
/// Largest head size of the tensor-core kernel.
const MMA_MAX_HEAD: usize = 128;

/// One operand of the kernel: its storage type, the element offset of its
/// first element and its element strides along batch, head and sequence
/// (the head axis is contiguous).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strided {
    pub dtype: DType,
    pub offset: usize,
    pub strides: [usize; 3],
}

/// The additive mask as the kernel reads it: batch `b` at `b mod groups`,
/// strides along (mask batch, head, query, key), 0 where broadcast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaskOperand {
    pub dtype: DType,
    pub groups: usize,
    pub strides: [usize; 4],
}

/// One attention launch: q `[batch, heads, sq, d]`, k `[batch, kv_heads,
/// skv, d]`, v `[batch, kv_heads, skv, dv]`, out `[batch, heads, sq, dv]`.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionShape {
    pub batch: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub sq: usize,
    pub skv: usize,
    pub d: usize,
    pub dv: usize,
    pub q: Strided,
    pub k: Strided,
    pub v: Strided,
    pub out: Strided,
    pub mask: Option<MaskOperand>,
    pub scale: f32,
    pub causal: bool,
    pub precision: Precision,
}

impl AttentionShape {
    /// Query tiles of `block_q` rows, over every (batch, head): the grid.
    pub fn ctas(&self, block_q: usize) -> usize {
        self.sq.div_ceil(block_q) * self.batch * self.heads
    }

    /// Key tiles of `block_kv` keys.
    pub fn key_tiles(&self, block_kv: usize) -> usize {
        self.skv.div_ceil(block_kv)
    }

    /// Why the tensor-core kernel cannot run this workload, or `Ok`.
    pub fn mma_eligible(&self) -> Result<(), String> {
        let t = self.q.dtype;
        if !matches!(t, DType::F16 | DType::BF16) || self.k.dtype != t || self.v.dtype != t {
            return Err(format!(
                "q, k, v are {}, {}, {}: the tensor-core kernel takes one of f16/bf16",
                self.q.dtype, self.k.dtype, self.v.dtype
            ));
        }
        for (what, n) in [("D", self.d), ("Dv", self.dv)] {
            if n % 16 != 0 || !(16..=MMA_MAX_HEAD).contains(&n) {
                return Err(format!(
                    "head size {what} = {n}: the tensor-core kernel takes multiples of 16 up \
                     to {MMA_MAX_HEAD}"
                ));
            }
        }
        for (what, op) in [
            ("q", self.q),
            ("k", self.k),
            ("v", self.v),
            ("out", self.out),
        ] {
            if op.strides.iter().any(|s| s % 8 != 0) || op.offset % 8 != 0 {
                return Err(format!(
                    "{what} strides {:?} or offset {} are not multiples of 8 elements \
                     (16-byte rows)",
                    op.strides, op.offset
                ));
            }
        }
        Ok(())
    }
}

/// The [`AttentionShape`] of an `Attention` node. Fails, saying why, for a
/// value that is not row-major, an empty sequence, or a head size neither
/// kernel fits in shared memory.
pub fn attention_shape(graph: &Graph, node: NodeId) -> Result<AttentionShape, String> {
    let n = graph.node(node);
    let Op::Attention {
        scale,
        causal,
        ref views,
    } = n.op
    else {
        return Err(format!("{} is not Attention", n.op.kind()));
    };
    let views = views.as_deref();
    let mut operands = Vec::new();
    for (i, &v) in n.inputs.iter().take(3).chain([&n.output]).enumerate() {
        let value = graph.value(v);
        if !is_row_major_bytes(&value.shape, value.layout) {
            return Err(format!(
                "operand %{} is {}: the attention kernels read row-major values",
                v.0,
                value.layout.name()
            ));
        }
        let view = if i == 3 {
            views.and_then(|w| w.out.as_ref()).map(|(view, _)| *view)
        } else {
            views.and_then(|w| w.input(i)).copied()
        };
        let view =
            match view {
                Some(view) if view.strides[3] == 1 || view.dims[3] == 1 => view,
                Some(view) => {
                    return Err(format!(
                        "operand %{} is read through {}: the head axis must be contiguous",
                        v.0,
                        view.describe()
                    ))
                }
                None => StridedView::contiguous(as_4d(&value.shape).ok_or_else(|| {
                    format!("operand %{} {:?} is not 3-D or 4-D", v.0, value.shape)
                })?),
            };
        operands.push((view, value.dtype));
    }
    let dims: Vec<[usize; 4]> = operands.iter().map(|(view, _)| view.dims).collect();
    let ([b, h, sq, d], [_, hkv, skv, _], [.., dv]) = (dims[0], dims[1], dims[2]);
    if sq == 0 || skv == 0 || d == 0 || dv == 0 || b * h == 0 {
        return Err(format!(
            "empty attention (batch·heads {}, Sq {sq}, Skv {skv}, D {d}, Dv {dv})",
            b * h
        ));
    }
    if hkv == 0 || h % hkv != 0 {
        return Err(format!("{h} heads do not group over {hkv} key/value heads"));
    }
    let strided = |i: usize| {
        let (view, dtype) = operands[i];
        Strided {
            dtype,
            offset: view.offset,
            strides: [view.strides[0], view.strides[1], view.strides[2]],
        }
    };
    let mask = match n.inputs.get(3) {
        Some(&m) => {
            let value = graph.value(m);
            if !is_row_major_bytes(&value.shape, value.layout) {
                return Err(format!("mask %{} is not row-major", m.0));
            }
            let m4 = mask_4d(&value.shape, [b, h, sq, skv])?;
            let mut strides = [0; 4];
            let mut stride = 1;
            for axis in (0..4).rev() {
                strides[axis] = if m4[axis] == 1 { 0 } else { stride };
                stride *= m4[axis];
            }
            Some(MaskOperand {
                dtype: value.dtype,
                groups: m4[0],
                strides,
            })
        }
        None => None,
    };
    let shape = AttentionShape {
        batch: b,
        heads: h,
        kv_heads: hkv,
        sq,
        skv,
        d,
        dv,
        q: strided(0),
        k: strided(1),
        v: strided(2),
        out: strided(3),
        mask,
        scale,
        causal,
        precision: graph.precision,
    };
    if shape.mma_eligible().is_err() && AttentionSimtConfig::smallest().validate(&shape).is_err() {
        return Err(format!(
            "head sizes D {d}, Dv {dv} do not fit the SIMT attention kernel's shared memory"
        ));
    }
    Ok(shape)
}

/// The query tile that holds a head's whole sequence (Sq rounded up to 16
/// rows) when that is not a power of two and at most 256 rows: one CTA per
/// (batch, head) reads its keys and values once, and no warp idles on a
/// tile past Sq (ViT's 197 queries: 208 rows, where 64-row tiles compute
/// 256).
fn whole_sequence_tile(shape: &AttentionShape) -> Option<usize> {
    let rows = shape.sq.next_multiple_of(16);
    (rows <= 256 && !rows.is_power_of_two()).then_some(rows)
}

/// The tensor-core kernel's tiles: `block_q` query rows per CTA (16 per
/// warp), `block_kv` keys per step and key group, `stages` key/value tiles
/// in flight, and `kv_split` groups of warps that share the query rows and
/// split each step's keys (merged at the end: `attention.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AttentionMmaConfig {
    pub block_q: u32,
    pub block_kv: u32,
    pub stages: u32,
    /// Absent from the JSON when 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub kv_split: u32,
}

fn one() -> u32 {
    1
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

impl AttentionMmaConfig {
    pub fn threads(&self) -> u32 {
        self.block_q / 16 * 32 * self.kv_split
    }

    /// Keys a step stages: `block_kv` for each key group.
    pub fn step_keys(&self) -> usize {
        (self.block_kv * self.kv_split) as usize
    }

    /// Dynamic shared memory: the Q tile and `stages` steps of K and V,
    /// rows padded by 16 bytes (the output is staged in the Q tile), or,
    /// if larger, what groups 1.. hand group 0 after the loop (per thread:
    /// two row maxima, two sums and Dv/2 outputs, in f32).
    pub fn smem_bytes(&self, shape: &AttentionShape) -> usize {
        let (bq, stages) = (self.block_q as usize, self.stages as usize);
        let qp = shape.d.max(shape.dv) + 8;
        let kv = 2 * stages * self.step_keys() * (shape.d + 8 + shape.dv + 8);
        let handover = 4 * (self.kv_split as usize - 1) * (bq / 16) * 32 * (shape.dv / 2 + 4);
        2 * bq * qp + kv.max(handover)
    }

    /// Registers per thread: Q's fragments (D/4), the scores (BKV/2) and
    /// the mask values read for them (BKV/2), the output accumulators
    /// (Dv/2) and about 40 for addresses, row state and the P fragment.
    pub fn regs_estimate(&self, shape: &AttentionShape) -> usize {
        let bkv = self.block_kv as usize;
        let mask = if shape.mask.is_some() { bkv / 2 } else { 0 };
        shape.d / 4 + bkv / 2 + mask + shape.dv / 2 + 40
    }

    pub fn validate(&self, shape: &AttentionShape) -> Result<(), String> {
        shape.mma_eligible()?;
        if !matches!(self.block_q, 16 | 32 | 64 | 128)
            && self.block_q as usize != whole_sequence_tile(shape).unwrap_or(0)
        {
            return Err(format!(
                "block_q must be 16, 32, 64 or 128 (16 rows per warp), or {} (the whole \
                 sequence in one tile, up to 256 rows)",
                whole_sequence_tile(shape).map_or("none here".into(), |t| t.to_string())
            ));
        }
        if !matches!(self.block_kv, 32 | 64 | 128) {
            return Err("block_kv must be 32, 64 or 128".into());
        }
        if !self.block_q.is_power_of_two() && self.block_kv > 64 {
            // Three or four of its warps share a register partition: 128-key
            // steps spill there (nvcc, sm_90).
            return Err("a whole-sequence query tile takes block_kv 32 or 64".into());
        }
        if !(1..=3).contains(&self.stages) {
            return Err("stages must be 1, 2 or 3".into());
        }
        if !matches!(self.kv_split, 1 | 2 | 4) {
            return Err("kv_split must be 1, 2 or 4".into());
        }
        if self.threads() > 1024 {
            return Err(format!("{} threads per CTA", self.threads()));
        }
        if self.kv_split > 1 && shape.skv <= (self.block_kv * (self.kv_split - 1)) as usize {
            return Err(format!(
                "kv_split {} leaves a key group without keys ({} keys, {} per group)",
                self.kv_split, shape.skv, self.block_kv
            ));
        }
        let tiles = shape.key_tiles(self.step_keys());
        if self.stages as usize > tiles.max(1) {
            return Err(format!("{} stages for {tiles} key step(s)", self.stages));
        }
        let smem = self.smem_bytes(shape);
        if smem > MAX_SMEM_BYTES {
            return Err(format!("{smem} B of shared memory"));
        }
        let regs = self.regs_estimate(shape);
        // A CTA's warps spread over the SM's four 16K-register partitions.
        let warps_per_partition = (self.threads() as usize / 32).div_ceil(4);
        let cap = ((16384 / (32 * warps_per_partition)) & !7).min(MAX_REGS);
        if regs > cap {
            return Err(format!(
                "about {regs} registers per thread, {cap} available to {} threads",
                self.threads()
            ));
        }
        if shape.ctas(self.block_q as usize) > i32::MAX as usize {
            return Err("grid exceeds the launch limits".into());
        }
        Ok(())
    }

    /// Tiles of 64 keys (32 when Skv ≤ 32); two stages when there are two
    /// key tiles or more. Query rows per CTA: the largest of 128, 64, 32,
    /// 16 (at most Sq rounded up to 16s) that still gives two CTAs per SM
    /// (132 SMs); short of that, with four key tiles or more, 32 rows with
    /// two key groups (`kv_split`), else the largest giving one CTA per
    /// SM, else 16 (a warp per CTA: at batch 1 the latency of a pass over
    /// the keys is what counts).
    fn default_for(shape: &AttentionShape) -> Self {
        let block_kv = if shape.skv <= 32 { 32 } else { 64 };
        let cap = shape.sq.next_multiple_of(16).max(16);
        let fits = |bq: u32, ctas: usize| {
            bq as usize <= cap.next_power_of_two() && shape.ctas(bq as usize) >= ctas
        };
        let two_waves = [128u32, 64, 32, 16]
            .into_iter()
            .find(|&bq| fits(bq, 2 * SMS));
        // Under two waves with four key tiles or more, each CTA's walk over
        // the keys is the latency: 32-row tiles whose two key groups split
        // it (ViT-B/16 b1, 12 × 197 queries: 59.6 → 47.4 µs for its 12
        // attentions against the 16-row tile, H200, 2026-12-06, CLI a06e50c,
        // bench/probes/attention_split_probe.sh).
        let split = AttentionMmaConfig {
            block_q: 32,
            block_kv: 64,
            stages: 2,
            kv_split: 2,
        };
        if two_waves.is_none()
            && shape.key_tiles(block_kv as usize) >= 4
            && fits(32, 1)
            && split.validate(shape).is_ok()
        {
            return split;
        }
        let block_q = two_waves
            .or_else(|| [64u32, 32, 16].into_iter().find(|&bq| fits(bq, SMS)))
            .unwrap_or(16);
        let stages = if shape.key_tiles(block_kv as usize) >= 2 {
            2
        } else {
            1
        };
        let mut c = AttentionMmaConfig {
            block_q,
            block_kv,
            stages,
            kv_split: 1,
        };
        // Large heads with a mask: fewer keys per step keeps the registers
        // within the budget.
        while c.validate(shape).is_err() && c.block_kv > 32 {
            c.block_kv /= 2;
            c.stages = c
                .stages
                .min(shape.key_tiles(c.block_kv as usize).max(1) as u32);
        }
        while c.validate(shape).is_err() && c.block_q > 16 {
            c.block_q /= 2;
        }
        c
    }

    /// Every tile and stage count, each with 1, 2 or 4 key groups where
    /// that validates; besides the power-of-two query tiles, the tile of
    /// the whole sequence (`whole_sequence_tile`).
    fn search_space(shape: &AttentionShape) -> Vec<Self> {
        let mut out = Vec::new();
        let whole = whole_sequence_tile(shape).map(|t| t as u32);
        for block_q in [16, 32, 64, 128].into_iter().chain(whole) {
            for block_kv in [32, 64, 128] {
                for stages in 1..=3 {
                    for kv_split in [1, 2, 4] {
                        let c = AttentionMmaConfig {
                            block_q,
                            block_kv,
                            stages,
                            kv_split,
                        };
                        if c.validate(shape).is_ok() {
                            out.push(c);
                        }
                    }
                }
            }
        }
        out
    }

    fn geometry(&self, shape: &AttentionShape) -> Geometry {
        Geometry {
            grid: [shape.ctas(self.block_q as usize) as u32, 1, 1],
            block: [self.threads(), 1, 1],
            smem_bytes: self.smem_bytes(shape) as u32,
        }
    }
}

/// The SIMT kernel's tiles: `block_q` query rows per CTA, each owned by
/// `threads_per_row` lanes of one warp, `block_kv` keys per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AttentionSimtConfig {
    pub block_q: u32,
    pub block_kv: u32,
    pub threads_per_row: u32,
}

impl AttentionSimtConfig {
    /// The config with the least shared memory.
    fn smallest() -> Self {
        AttentionSimtConfig {
            block_q: 4,
            block_kv: 16,
            threads_per_row: 8,
        }
    }

    pub fn threads(&self) -> u32 {
        self.block_q * self.threads_per_row
    }

    /// Dynamic shared memory (f32): Q, K (rows padded by one float), V and
    /// the probabilities (rows padded by one).
    pub fn smem_bytes(&self, shape: &AttentionShape) -> usize {
        let (bq, bkv) = (self.block_q as usize, self.block_kv as usize);
        4 * (bq * (shape.d + 1) + bkv * (shape.d + 1) + bkv * shape.dv + bq * (bkv + 1))
    }

    /// Registers per thread: the scores of BKV/TPR keys, Dv/TPR output
    /// columns, about 40 more.
    pub fn regs_estimate(&self, shape: &AttentionShape) -> usize {
        let tpr = self.threads_per_row as usize;
        (self.block_kv as usize).div_ceil(tpr) + shape.dv.div_ceil(tpr) + 40
    }

    pub fn validate(&self, shape: &AttentionShape) -> Result<(), String> {
        if !matches!(self.block_q, 4 | 8 | 16 | 32 | 64) {
            return Err("block_q must be 4, 8, 16, 32 or 64".into());
        }
        if !matches!(self.block_kv, 16 | 32 | 64) {
            return Err("block_kv must be 16, 32 or 64".into());
        }
        if !matches!(self.threads_per_row, 4 | 8 | 16 | 32) {
            return Err("threads_per_row must be 4, 8, 16 or 32".into());
        }
        let t = self.threads();
        if !(32..=512).contains(&t) {
            return Err(format!("{t} threads per CTA (32..=512)"));
        }
        let smem = self.smem_bytes(shape);
        if smem > MAX_SMEM_BYTES {
            return Err(format!("{smem} B of shared memory"));
        }
        let regs = self.regs_estimate(shape);
        if regs > MAX_REGS {
            return Err(format!("about {regs} registers per thread"));
        }
        if shape.ctas(self.block_q as usize) > i32::MAX as usize {
            return Err("grid exceeds the launch limits".into());
        }
        Ok(())
    }

    /// 16 rows of 8 lanes (128 threads), 32 keys per step; 4 lanes per row
    /// for Dv ≤ 32; fewer rows or keys until it fits shared memory.
    fn default_for(shape: &AttentionShape) -> Self {
        let mut c = AttentionSimtConfig {
            block_q: 16,
            block_kv: 32,
            threads_per_row: if shape.dv <= 32 { 4 } else { 8 },
        };
        if c.threads_per_row == 4 {
            c.block_q = 32;
        }
        while c.validate(shape).is_err() && c.block_kv > 16 {
            c.block_kv /= 2;
        }
        while c.validate(shape).is_err() && c.threads() > 32 {
            c.block_q /= 2;
        }
        if c.validate(shape).is_err() {
            c = Self::smallest();
        }
        c
    }

    fn search_space(shape: &AttentionShape) -> Vec<Self> {
        let mut out = Vec::new();
        for block_q in [4, 8, 16, 32, 64] {
            for threads_per_row in [4, 8, 16, 32] {
                for block_kv in [16, 32, 64] {
                    let c = AttentionSimtConfig {
                        block_q,
                        block_kv,
                        threads_per_row,
                    };
                    if c.validate(shape).is_ok() {
                        out.push(c);
                    }
                }
            }
        }
        out
    }

    fn geometry(&self, shape: &AttentionShape) -> Geometry {
        Geometry {
            grid: [shape.ctas(self.block_q as usize) as u32, 1, 1],
            block: [self.threads(), 1, 1],
            smem_bytes: self.smem_bytes(shape) as u32,
        }
    }
}

/// Which attention kernel runs a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kernel", rename_all = "snake_case")]
pub enum AttentionConfig {
    Mma(AttentionMmaConfig),
    Simt(AttentionSimtConfig),
}

impl KernelConfig for AttentionConfig {
    type Shape = AttentionShape;

    /// The tensor-core kernel wherever it applies
    /// ([`AttentionShape::mma_eligible`]), else the SIMT kernel; each
    /// type's `default_for` documents its tiles.
    fn default_for(shape: &AttentionShape) -> Self {
        if shape.mma_eligible().is_ok() {
            AttentionConfig::Mma(AttentionMmaConfig::default_for(shape))
        } else {
            AttentionConfig::Simt(AttentionSimtConfig::default_for(shape))
        }
    }

    fn validate(&self, shape: &AttentionShape) -> Result<(), String> {
        match self {
            AttentionConfig::Mma(c) => c.validate(shape),
            AttentionConfig::Simt(c) => c.validate(shape),
        }
    }

    /// The tensor-core configs where that kernel applies, else the SIMT
    /// ones.
    fn search_space(shape: &AttentionShape) -> Vec<Self> {
        if shape.mma_eligible().is_ok() {
            AttentionMmaConfig::search_space(shape)
                .into_iter()
                .map(AttentionConfig::Mma)
                .collect()
        } else {
            AttentionSimtConfig::search_space(shape)
                .into_iter()
                .map(AttentionConfig::Simt)
                .collect()
        }
    }

    fn tag(&self) -> String {
        match self {
            AttentionConfig::Mma(c) => {
                let split = if c.kv_split > 1 {
                    format!("x{}", c.kv_split)
                } else {
                    String::new()
                };
                format!("mma_q{}k{}s{}{split}", c.block_q, c.block_kv, c.stages)
            }
            AttentionConfig::Simt(c) => {
                format!("simt_q{}k{}t{}", c.block_q, c.block_kv, c.threads_per_row)
            }
        }
    }

    fn shape_features(shape: &AttentionShape) -> Vec<f64> {
        let log = |x: usize| (x.max(1) as f64).log2();
        vec![
            log(shape.batch * shape.heads),
            log(shape.sq),
            log(shape.skv),
            log(shape.d),
            log(shape.dv),
            f64::from(u8::from(shape.mask.is_some())),
            f64::from(u8::from(shape.causal)),
        ]
    }
}

/// Renders the kernel of `shape` with `config`.
pub fn instantiate(shape: &AttentionShape, config: &AttentionConfig, symbol: &str) -> Instance {
    let mut p = Params::new(format!("{symbol}_p"));
    let mask = shape.mask.unwrap_or(MaskOperand {
        dtype: DType::F32,
        groups: 1,
        strides: [0; 4],
    });
    let int = |x: usize| x as i64;
    p.ty("TQ", shape.q.dtype)
        .ty("TK", shape.k.dtype)
        .ty("TV", shape.v.dtype)
        .ty("TMask", mask.dtype)
        .ty("TOut", shape.out.dtype)
        .ints(&[
            ("B", int(shape.batch)),
            ("H", int(shape.heads)),
            ("HKV", int(shape.kv_heads)),
            ("SQ", int(shape.sq)),
            ("SKV", int(shape.skv)),
            ("D", int(shape.d)),
            ("DV", int(shape.dv)),
        ]);
    for (name, op) in [
        ("Q", shape.q),
        ("K", shape.k),
        ("V", shape.v),
        ("O", shape.out),
    ] {
        let [sb, sh, ss] = op.strides;
        p.ints(&[
            (&format!("{name}_OFF"), int(op.offset)),
            (&format!("{name}_SB"), int(sb)),
            (&format!("{name}_SH"), int(sh)),
            (&format!("{name}_SS"), int(ss)),
        ]);
    }
    let [mb, mh, mq, mk] = mask.strides;
    p.ints(&[
        ("MASK_G", int(mask.groups)),
        ("M_SB", int(mb)),
        ("M_SH", int(mh)),
        ("M_SQ", int(mq)),
        ("M_SK", int(mk)),
    ])
    .boolean("HAS_MASK", shape.mask.is_some())
    .boolean("CAUSAL", shape.causal)
    .boolean("TF32", shape.precision == Precision::Tf32)
    .float(
        "SCALE_LOG2",
        (f64::from(shape.scale) * std::f64::consts::LOG2_E) as f32,
    );
    let (function, geometry) = match config {
        AttentionConfig::Mma(c) => {
            p.ints(&[
                ("BQ", c.block_q.into()),
                ("BKV", c.block_kv.into()),
                ("STAGES", c.stages.into()),
                ("KV_SPLIT", c.kv_split.into()),
            ]);
            ("attention_mma", c.geometry(shape))
        }
        AttentionConfig::Simt(c) => {
            p.ints(&[
                ("BQ", c.block_q.into()),
                ("BKV", c.block_kv.into()),
                ("TPR", c.threads_per_row.into()),
            ]);
            ("attention_simt", c.geometry(shape))
        }
    };
    let mut args = vec![
        Arg::input("q", shape.q.dtype),
        Arg::input("k", shape.k.dtype),
        Arg::input("v", shape.v.dtype),
    ];
    if shape.mask.is_some() {
        args.push(Arg::input("mask", mask.dtype));
    }
    args.push(Arg::output("out", shape.out.dtype));
    let mask_arg = if shape.mask.is_some() {
        "mask"
    } else {
        "static_cast<const float*>(nullptr)"
    };
    let call = format!("aotune::{function}<{}>(q, k, v, {mask_arg}, out)", p.name());
    Instance {
        symbol: symbol.to_string(),
        template: Template::Attention,
        config: serde_json::to_string(config).unwrap_or_default(),
        code: format!(
            "{}{}",
            p.render(),
            tiled_wrapper(
                symbol,
                geometry.block[0],
                1,
                DependencyWait::AtEntry,
                &args,
                &call
            )
        ),
        geometry,
        workspace: Default::default(),
    }
}
