//! The space-to-depth input conversion ([`Op::SpaceToDepth`],
//! `space_to_depth` in `elementwise.cu`): the model's NCHW f32 image to the
//! NHWC f16/bf16 image of `block × block` pixel blocks that the folded
//! stem convolution reads ([`crate::passes::space_to_depth_input`]).
//!
//! One thread per `VO`-channel chunk of one output pixel (`VO` = 8 for
//! 16-bit storage when the channel count allows: one 16-byte store),
//! consecutive threads on consecutive chunks, so a warp's stores are one
//! contiguous range of the NHWC output. Each output element is one input
//! element (or a zero), so the kernel gathers: for ResNet's stem (C = 3,
//! 2×2 blocks, 16 channels) a warp covers 16 output pixels, and each of
//! its loads reads every other float of 32 consecutive ones of an input
//! row; the neighbouring column comes three loads later from the same
//! lines, through the read-only cache. Every input element is read from
//! memory once and every output byte written once (at batch 256: 154 MB
//! in, 108 MB out). A CTA covers `threads · per_thread` chunks, each
//! thread `per_thread` of them `threads` apart (still coalesced), with all
//! its loads issued before its stores.

use super::config::KernelConfig;
use super::index_map::same_order;
use super::source::{wrapper, Arg, Geometry, Instance, Params, Template, Workspace};
use crate::ir::{DType, Graph, Layout, NodeId, Op};
use serde::{Deserialize, Serialize};

/// Everything the kernel specializes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceToDepthShape {
    /// Input `[N, C, H, W]` (logical).
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    /// Element strides of the input's N, C, H and W axes (its layout).
    pub in_strides: [usize; 4],
    pub block: usize,
    pub pad_top: usize,
    pub pad_left: usize,
    /// Output `[N, channels, height, width]`, stored NHWC.
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub in_dtype: DType,
    pub out_dtype: DType,
}

impl SpaceToDepthShape {
    /// Channels per thread: a 16-byte store where the channel count allows.
    pub fn vec_out(&self) -> usize {
        [8usize, 4, 2, 1]
            .into_iter()
            .find(|&v| v * self.out_dtype.size() <= 16 && self.channels % v == 0)
            .unwrap_or(1)
    }

    /// Work items: `vec_out`-channel chunks of the output.
    pub fn chunks(&self) -> usize {
        self.n * self.height * self.width * self.channels / self.vec_out()
    }

    /// Bytes written, and at most the bytes read (the whole input).
    pub fn bytes(&self) -> usize {
        self.n * self.c * self.h * self.w * self.in_dtype.size()
            + self.n * self.channels * self.height * self.width * self.out_dtype.size()
    }
}

/// The [`SpaceToDepthShape`] of a `SpaceToDepth` node whose output is
/// stored NHWC (any input layout and dtype); an error for any other op or
/// output layout.
pub fn space_to_depth_shape(graph: &Graph, node: NodeId) -> Result<SpaceToDepthShape, String> {
    let n = graph.node(node);
    let Op::SpaceToDepth {
        block,
        pad_top,
        pad_left,
        channels,
        height,
        width,
    } = n.op
    else {
        return Err(format!("{} is not a SpaceToDepth", n.op.kind()));
    };
    let x = graph.value(n.inputs[0]);
    let y = graph.value(n.output);
    if x.shape.len() != 4 || y.shape.len() != 4 {
        return Err(format!(
            "SpaceToDepth from {:?} to {:?} is not 4-D",
            x.shape, y.shape
        ));
    }
    if !same_order(&y.shape, y.layout, Layout::ChannelsLast) {
        return Err(format!(
            "SpaceToDepth to {} {:?} has no kernel (it writes NHWC)",
            y.layout.name(),
            y.shape
        ));
    }
    let strides = x.layout.strides(&x.shape);
    Ok(SpaceToDepthShape {
        n: x.shape[0],
        c: x.shape[1],
        h: x.shape[2],
        w: x.shape[3],
        in_strides: [strides[0], strides[1], strides[2], strides[3]],
        block,
        pad_top,
        pad_left,
        channels,
        height,
        width,
        in_dtype: x.dtype,
        out_dtype: y.dtype,
    })
}

/// Threads per CTA and chunks per thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpaceToDepthConfig {
    pub threads: u32,
    pub per_thread: u32,
}

/// CTAs that give each of the H200's 132 SMs eight.
const BUSY_CTAS: usize = 8 * 132;

impl SpaceToDepthConfig {
    fn ctas(&self, shape: &SpaceToDepthShape) -> usize {
        shape
            .chunks()
            .div_ceil(self.threads as usize * self.per_thread as usize)
    }

    pub fn geometry(&self, shape: &SpaceToDepthShape) -> Geometry {
        Geometry {
            grid: [self.ctas(shape) as u32, 1, 1],
            block: [self.threads, 1, 1],
            smem_bytes: 0,
        }
    }
}

impl KernelConfig for SpaceToDepthConfig {
    type Shape = SpaceToDepthShape;

    /// 128 threads with 4 or 2 chunks each, the most that still gives
    /// eight CTAs per SM of the H200 (1056), else one chunk each.
    /// Measured on the H200 in session 5 (2026-12-02) by the ignored GPU
    /// test `gpu_space_to_depth_configs_timing` (every config of the
    /// space timed alone), ResNet-50's image at f16: batch 256 64.4 µs,
    /// 4.1 TB/s (t128r4; every config with 1 to 4 chunks of 128 or 256
    /// threads within 5%); batch 8 4.3 µs (t128r1; the sixteen configs
    /// take 4.3 to 7.6 µs); batch 1 4.2 µs, where all sixteen take 3.8 to
    /// 5.0 µs (1 MB moved: launch latency dominates).
    fn default_for(shape: &SpaceToDepthShape) -> Self {
        [4, 2]
            .into_iter()
            .map(|per_thread| SpaceToDepthConfig {
                threads: 128,
                per_thread,
            })
            .find(|c| c.ctas(shape) >= BUSY_CTAS)
            .unwrap_or(SpaceToDepthConfig {
                threads: 128,
                per_thread: 1,
            })
    }

    fn validate(&self, shape: &SpaceToDepthShape) -> Result<(), String> {
        if !matches!(self.threads, 64 | 128 | 256 | 512) {
            return Err(format!(
                "threads {} must be 64, 128, 256 or 512",
                self.threads
            ));
        }
        if !matches!(self.per_thread, 1 | 2 | 4 | 8) {
            return Err(format!(
                "per_thread {} must be 1, 2, 4 or 8",
                self.per_thread
            ));
        }
        if self.ctas(shape) > i32::MAX as usize {
            return Err("grid exceeds the launch limits".into());
        }
        Ok(())
    }

    fn search_space(shape: &SpaceToDepthShape) -> Vec<Self> {
        let mut out = Vec::new();
        for threads in [64, 128, 256, 512] {
            for per_thread in [1, 2, 4, 8] {
                let c = SpaceToDepthConfig {
                    threads,
                    per_thread,
                };
                if c.validate(shape).is_ok() {
                    out.push(c);
                }
            }
        }
        out
    }

    fn tag(&self) -> String {
        format!("t{}r{}", self.threads, self.per_thread)
    }
}

pub fn instantiate(
    shape: &SpaceToDepthShape,
    config: &SpaceToDepthConfig,
    symbol: &str,
) -> Instance {
    let [sn, sc, sh, sw] = shape.in_strides.map(|s| s as i64);
    let mut p = Params::new(format!("{symbol}_p"));
    p.ty("TIn", shape.in_dtype)
        .ty("TOut", shape.out_dtype)
        .ints(&[
            ("N", shape.n as i64),
            ("C", shape.c as i64),
            ("H", shape.h as i64),
            ("W", shape.w as i64),
        ])
        .ints(&[("SN", sn), ("SC", sc), ("SH", sh), ("SW", sw)])
        .ints(&[
            ("B", shape.block as i64),
            ("PT", shape.pad_top as i64),
            ("PL", shape.pad_left as i64),
        ])
        .ints(&[
            ("CQ", shape.channels as i64),
            ("HQ", shape.height as i64),
            ("WQ", shape.width as i64),
        ])
        .ints(&[
            ("VO", shape.vec_out() as i64),
            ("THREADS", config.threads.into()),
            ("PER_THREAD", config.per_thread.into()),
        ]);
    let args = [
        Arg::input("x", shape.in_dtype),
        Arg::output("y", shape.out_dtype),
    ];
    let call = format!("aotune::space_to_depth<{}>(x, y)", p.name());
    Instance {
        symbol: symbol.to_string(),
        template: Template::Elementwise,
        config: serde_json::to_string(config).unwrap_or_default(),
        code: format!(
            "{}{}",
            p.render(),
            wrapper(symbol, config.threads, &args, &call)
        ),
        geometry: config.geometry(shape),
        workspace: Workspace::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Precision;
    use crate::test_graphs::{one_op, In};

    /// ResNet-50's stem image at `n` images.
    fn stem(n: usize) -> SpaceToDepthShape {
        SpaceToDepthShape {
            n,
            c: 3,
            h: 224,
            w: 224,
            in_strides: [3 * 224 * 224, 224 * 224, 224, 1],
            block: 2,
            pad_top: 3,
            pad_left: 3,
            channels: 16,
            height: 115,
            width: 115,
            in_dtype: DType::F32,
            out_dtype: DType::F16,
        }
    }

    fn op(channels: usize) -> Op {
        Op::SpaceToDepth {
            block: 2,
            pad_top: 1,
            pad_left: 2,
            channels,
            height: 4,
            width: 3,
        }
    }

    #[test]
    fn stem_moves_16_bytes_per_thread_and_its_traffic_is_known() {
        let s = stem(256);
        assert_eq!(s.vec_out(), 8);
        assert_eq!(s.chunks(), 256 * 115 * 115 * 2);
        // 154 MB read, 108 MB written.
        assert_eq!(
            s.bytes(),
            256 * 3 * 224 * 224 * 4 + 256 * 16 * 115 * 115 * 2
        );
        // 12 channels: 4 per store (8 bytes); 5: one at a time; f32 output:
        // 4 channels of 16.
        assert_eq!(SpaceToDepthShape { channels: 12, ..s }.vec_out(), 4);
        assert_eq!(SpaceToDepthShape { channels: 5, ..s }.vec_out(), 1);
        let f32_out = SpaceToDepthShape {
            out_dtype: DType::F32,
            ..s
        };
        assert_eq!(f32_out.vec_out(), 4);
    }

    #[test]
    fn default_keeps_eight_ctas_per_sm() {
        let b256 = SpaceToDepthConfig::default_for(&stem(256));
        assert_eq!((b256.threads, b256.per_thread), (128, 4));
        assert_eq!(b256.geometry(&stem(256)).grid, [13225, 1, 1]);
        // 211600 chunks: 827 CTAs of 2 chunks a thread would be too few.
        let b8 = SpaceToDepthConfig::default_for(&stem(8));
        assert_eq!((b8.threads, b8.per_thread), (128, 1));
        let b1 = SpaceToDepthConfig::default_for(&stem(1));
        assert_eq!((b1.threads, b1.per_thread), (128, 1));
        assert_eq!(b1.geometry(&stem(1)).grid, [207, 1, 1]);
    }

    #[test]
    fn search_space_is_valid_and_holds_the_default() {
        for shape in [stem(1), stem(256)] {
            let space = SpaceToDepthConfig::search_space(&shape);
            assert_eq!(space.len(), 16);
            assert!(space.iter().all(|c| c.validate(&shape).is_ok()));
            assert!(space.contains(&SpaceToDepthConfig::default_for(&shape)));
        }
        let bad = SpaceToDepthConfig {
            threads: 96,
            per_thread: 1,
        };
        assert!(bad.validate(&stem(1)).unwrap_err().contains("threads 96"));
    }

    #[test]
    fn shape_follows_the_input_layout_and_needs_an_nhwc_output() {
        let (cl, rm) = (Layout::ChannelsLast, Layout::RowMajor);
        let shape_of = |from: Layout, to: Layout| {
            let x = In::act(&[2, 3, 7, 5], DType::F32, from);
            let (g, _) = one_op(op(16), &[x], DType::BF16, to, Precision::Bf16);
            space_to_depth_shape(&g, NodeId(0))
        };
        let nchw = shape_of(rm, cl).unwrap();
        assert_eq!(nchw.in_strides, [105, 35, 5, 1]);
        assert_eq!(
            (nchw.channels, nchw.height, nchw.width, nchw.pad_left),
            (16, 4, 3, 2)
        );
        assert_eq!(shape_of(cl, cl).unwrap().in_strides, [105, 1, 15, 3]);
        let err = shape_of(rm, rm).unwrap_err();
        assert!(err.contains("row-major") && err.contains("NHWC"), "{err}");
        // The rendered parameters name the geometry.
        let s = shape_of(rm, cl).unwrap();
        let c = SpaceToDepthConfig::default_for(&s);
        let code = instantiate(&s, &c, "s2d_test").code;
        assert!(code.contains("B = 2, PT = 1, PL = 2"), "{code}");
        assert!(code.contains("CQ = 16, HQ = 4, WQ = 3"), "{code}");
        assert!(code.contains("aotune::space_to_depth<s2d_test_p>(x, y)"));
    }
}
