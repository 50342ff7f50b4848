//! NCHW → NHWC conversions (`to_nhwc` in `elementwise.cu`): the model
//! input's `Convert` to channels-last (f32 → the storage type) and its
//! channel-padded form [`Op::PadChannels`].
//!
//! Read element by element in the output's order (the generic `convert`),
//! this transpose reads with a stride of H·W elements and writes 2-byte
//! scalars: 42% of the bandwidth on the H200 at batch 256. Here a CTA owns
//! a tile of `pixels` consecutive pixels of one image: it reads the tile's C
//! channel rows with 16-byte loads (a row is contiguous in NCHW), stages
//! them in shared memory as f32, and writes the tile's `pixels · C'`
//! outputs — one contiguous range in NHWC — with 16-byte stores, channels
//! `C..C'` as zeros. Both global sides are coalesced; only shared memory
//! sees the transpose.

use super::config::KernelConfig;
use super::index_map::same_order;
use super::source::{wrapper, Arg, Geometry, Instance, Params, Template, Workspace};
use crate::ir::{DType, Graph, Layout, NodeId, Op};
use serde::{Deserialize, Serialize};

/// Static shared memory a CTA may use (the tile is `C × pixels` f32).
const SMEM_LIMIT: usize = 48 * 1024;
/// Smallest tile; 8 pixels keep every 16-byte vector of a tile aligned.
const MIN_PIXELS: u32 = 8;

/// An NCHW → NHWC copy of `n` images of `c` channels and `hw` pixels into
/// `channels ≥ c` output channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToNhwcShape {
    pub n: usize,
    pub c: usize,
    pub hw: usize,
    /// Output channels: `c`, or more for `PadChannels` (zeros).
    pub channels: usize,
    pub in_dtype: DType,
    pub out_dtype: DType,
}

impl ToNhwcShape {
    /// Elements per input load: 16 bytes where a channel row allows (tiles
    /// are powers of two ≥ 8 pixels, so they keep the alignment).
    pub fn vec_in(&self) -> usize {
        [8usize, 4, 2, 1]
            .into_iter()
            .find(|&v| v * self.in_dtype.size() <= 16 && self.hw % v == 0)
            .unwrap_or(1)
    }

    /// Elements per output store: 16 bytes where an image's output allows
    /// (tiles are powers of two ≥ 8 pixels, so they keep the alignment).
    pub fn vec_out(&self) -> usize {
        [8usize, 4, 2, 1]
            .into_iter()
            .find(|&v| v * self.out_dtype.size() <= 16 && (self.hw * self.channels) % v == 0)
            .unwrap_or(1)
    }

    /// Bytes read and written.
    pub fn bytes(&self) -> usize {
        self.n * self.hw * (self.c * self.in_dtype.size() + self.channels * self.out_dtype.size())
    }
}

/// The [`ToNhwcShape`] of a `Convert` from NCHW (row-major) bytes to a
/// different NHWC order, or of a `PadChannels` from NCHW to NHWC;
/// `Ok(None)` for any other `Convert` (the generic elementwise copy runs it)
/// and for one whose smallest tile does not fit shared memory.
pub fn to_nhwc_shape(graph: &Graph, node: NodeId) -> Result<Option<ToNhwcShape>, String> {
    let n = graph.node(node);
    let padding = match n.op {
        Op::PadChannels { .. } => true,
        Op::Convert => false,
        _ => return Err(format!("{} is not a conversion", n.op.kind())),
    };
    let x = graph.value(n.inputs[0]);
    let y = graph.value(n.output);
    let rank4 = x.shape.len() == 4 && y.shape.len() == 4;
    let nchw_in = rank4 && same_order(&x.shape, x.layout, Layout::RowMajor);
    let nhwc_out = rank4 && same_order(&y.shape, y.layout, Layout::ChannelsLast);
    let fits = rank4 && x.shape[1] * MIN_PIXELS as usize * 4 <= SMEM_LIMIT;
    if padding && !(nchw_in && nhwc_out && fits) {
        return Err(format!(
            "PadChannels from {} {:?} to {} has no kernel (NCHW to NHWC, at most {} channels)",
            x.layout.name(),
            x.shape,
            y.layout.name(),
            SMEM_LIMIT / 4 / MIN_PIXELS as usize
        ));
    }
    let transposes = nchw_in && nhwc_out && !same_order(&y.shape, y.layout, Layout::RowMajor);
    let runs_here = padding || (transposes && fits);
    if !runs_here {
        return Ok(None);
    }
    Ok(Some(ToNhwcShape {
        n: x.shape[0],
        c: x.shape[1],
        hw: x.shape[2] * x.shape[3],
        channels: y.shape[1],
        in_dtype: x.dtype,
        out_dtype: y.dtype,
    }))
}

/// The conversion's tile: pixels per CTA and threads per CTA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToNhwcConfig {
    pub pixels: u32,
    pub threads: u32,
}

impl ToNhwcConfig {
    /// Shared memory of the staged tile.
    pub fn smem_bytes(&self, shape: &ToNhwcShape) -> usize {
        shape.c * self.pixels as usize * 4
    }

    fn ctas(&self, shape: &ToNhwcShape) -> usize {
        shape.n * shape.hw.div_ceil(self.pixels as usize)
    }

    pub fn geometry(&self, shape: &ToNhwcShape) -> Geometry {
        Geometry {
            grid: [self.ctas(shape) as u32, 1, 1],
            block: [self.threads, 1, 1],
            smem_bytes: 0,
        }
    }
}

impl KernelConfig for ToNhwcConfig {
    type Shape = ToNhwcShape;

    /// 256 threads; the largest tile of 512, 256, 128 or 64 pixels that
    /// still gives two CTAs per SM of the H200 (264 CTAs; at 512 pixels each
    /// thread has about two 16-byte loads and two stores in flight), else 64
    /// pixels; halved while the tile exceeds 48 KiB of shared memory.
    fn default_for(shape: &ToNhwcShape) -> Self {
        let mut c = [512u32, 256, 128, 64]
            .into_iter()
            .map(|pixels| ToNhwcConfig {
                pixels,
                threads: 256,
            })
            .find(|c| c.ctas(shape) >= 264)
            .unwrap_or(ToNhwcConfig {
                pixels: 64,
                threads: 256,
            });
        while c.pixels > MIN_PIXELS && c.smem_bytes(shape) > SMEM_LIMIT {
            c.pixels /= 2;
        }
        c
    }

    fn validate(&self, shape: &ToNhwcShape) -> Result<(), String> {
        if !self.pixels.is_power_of_two() || !(MIN_PIXELS..=1024).contains(&self.pixels) {
            return Err(format!(
                "pixels {} must be a power of two in {MIN_PIXELS}..=1024",
                self.pixels
            ));
        }
        if !matches!(self.threads, 64 | 128 | 256 | 512) {
            return Err(format!(
                "threads {} must be 64, 128, 256 or 512",
                self.threads
            ));
        }
        if self.smem_bytes(shape) > SMEM_LIMIT {
            return Err(format!(
                "a {}-pixel tile of {} channels needs {} B of shared memory",
                self.pixels,
                shape.c,
                self.smem_bytes(shape)
            ));
        }
        if self.ctas(shape) > i32::MAX as usize {
            return Err("grid exceeds the launch limits".into());
        }
        Ok(())
    }

    fn search_space(shape: &ToNhwcShape) -> Vec<Self> {
        let mut out = Vec::new();
        for pixels in [8, 16, 32, 64, 128, 256, 512, 1024] {
            for threads in [128, 256, 512] {
                let c = ToNhwcConfig { pixels, threads };
                if c.validate(shape).is_ok() {
                    out.push(c);
                }
            }
        }
        out
    }

    fn tag(&self) -> String {
        format!("p{}t{}", self.pixels, self.threads)
    }
}

pub fn instantiate(shape: &ToNhwcShape, config: &ToNhwcConfig, symbol: &str) -> Instance {
    let mut p = Params::new(format!("{symbol}_p"));
    p.ty("TIn", shape.in_dtype)
        .ty("TOut", shape.out_dtype)
        .ints(&[
            ("N", shape.n as i64),
            ("C", shape.c as i64),
            ("HW", shape.hw as i64),
            ("CP", shape.channels as i64),
        ])
        .ints(&[
            ("TILE", config.pixels.into()),
            ("THREADS", config.threads.into()),
            ("VI", shape.vec_in() as i64),
            ("VO", shape.vec_out() as i64),
        ]);
    let args = [
        Arg::input("x", shape.in_dtype),
        Arg::output("y", shape.out_dtype),
    ];
    let call = format!("aotune::to_nhwc<{}>(x, y)", p.name());
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

    fn stem(n: usize, channels: usize) -> ToNhwcShape {
        ToNhwcShape {
            n,
            c: 3,
            hw: 224 * 224,
            channels,
            in_dtype: DType::F32,
            out_dtype: DType::F16,
        }
    }

    #[test]
    fn resnet_input_moves_16_bytes_each_way() {
        for channels in [3, 8] {
            let s = stem(1, channels);
            assert_eq!((s.vec_in(), s.vec_out()), (4, 8));
        }
        // 7 pixels of 3 channels: 21 outputs per image, no vector divides it.
        let odd = ToNhwcShape {
            hw: 7,
            ..stem(2, 3)
        };
        assert_eq!((odd.vec_in(), odd.vec_out()), (1, 1));
    }

    #[test]
    fn default_tile_keeps_two_ctas_per_sm_and_fits_shared_memory() {
        let b1 = ToNhwcConfig::default_for(&stem(1, 8));
        assert_eq!(
            b1,
            ToNhwcConfig {
                pixels: 128,
                threads: 256
            }
        );
        assert_eq!(b1.geometry(&stem(1, 8)).grid, [392, 1, 1]);
        let b256 = ToNhwcConfig::default_for(&stem(256, 8));
        assert_eq!(b256.pixels, 512);
        let wide = ToNhwcShape {
            c: 512,
            channels: 512,
            ..stem(1, 8)
        };
        // 512 channels: 16 pixels are the largest tile within 48 KiB.
        let c = ToNhwcConfig::default_for(&wide);
        assert!(c.validate(&wide).is_ok(), "{c:?}");
        assert_eq!(c.pixels, 16);
    }

    #[test]
    fn only_nchw_to_nhwc_conversions_take_this_kernel() {
        use crate::ir::Precision;
        use crate::test_graphs::{one_op, In};
        let (cl, rm) = (Layout::ChannelsLast, Layout::RowMajor);
        let shape_of = |op: Op, shape: &[usize], from: Layout, to: Layout| {
            let x = In::act(shape, DType::F32, from);
            let (g, _) = one_op(op, &[x], DType::F16, to, Precision::Fp16);
            to_nhwc_shape(&g, NodeId(0))
        };
        let stem = shape_of(Op::Convert, &[2, 3, 4, 4], rm, cl).unwrap();
        assert_eq!(
            stem,
            Some(ToNhwcShape {
                n: 2,
                c: 3,
                hw: 16,
                channels: 3,
                in_dtype: DType::F32,
                out_dtype: DType::F16,
            })
        );
        let pad = Op::PadChannels { channels: 8 };
        let padded = shape_of(pad.clone(), &[2, 3, 4, 4], rm, cl).unwrap();
        assert_eq!(padded.map(|s| s.channels), Some(8));
        // Back to NCHW, a dtype-only copy, and [N, C, 1, 1] (same bytes in
        // both layouts): the generic elementwise copy.
        assert_eq!(shape_of(Op::Convert, &[2, 3, 4, 4], cl, rm), Ok(None));
        assert_eq!(shape_of(Op::Convert, &[2, 3, 4, 4], rm, rm), Ok(None));
        assert_eq!(shape_of(Op::Convert, &[2, 3, 1, 1], rm, cl), Ok(None));
        // Too many channels for an 8-pixel tile in shared memory.
        assert_eq!(shape_of(Op::Convert, &[1, 2000, 2, 2], rm, cl), Ok(None));
        // PadChannels has no other kernel: an error naming the layouts.
        let err = shape_of(pad, &[2, 3, 4, 4], cl, cl).unwrap_err();
        assert!(err.contains("channels-last"), "{err}");
    }

    #[test]
    fn search_space_is_valid_and_holds_the_default() {
        for shape in [stem(1, 8), stem(256, 3)] {
            let space = ToNhwcConfig::search_space(&shape);
            assert!(!space.is_empty());
            assert!(space.iter().all(|c| c.validate(&shape).is_ok()));
            assert!(space.contains(&ToNhwcConfig::default_for(&shape)));
        }
    }
}
