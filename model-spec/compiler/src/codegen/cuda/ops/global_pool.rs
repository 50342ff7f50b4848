//! `GlobalAveragePool` / `GlobalMaxPool` over NHWC values
//! (`global_pool_nhwc` in `reduce.cu`).
//!
//! The generic reduction gives one thread V channels of one image and loops
//! over all H·W pixels: ResNet-50's head at batch 1 is 256 threads, each
//! with 49 dependent-in-time loads, 0.4% of the H200's bandwidth. Here a CTA
//! owns `lanes` channel vectors (16 bytes each) of one image, and its
//! `lanes × slices` threads split the pixels: thread (lane, slice) sums
//! pixels `slice, slice + slices, …` of its vector, then the CTA adds the
//! slices' partial sums in shared memory in a fixed order (deterministic).
//! Consecutive lanes read consecutive 16-byte vectors of a pixel, so a warp
//! reads `16 · lanes`-byte contiguous runs.

use super::config::KernelConfig;
use super::source::{wrapper, Arg, Geometry, Instance, Params, Template, Workspace};
use crate::ir::{DType, Graph, Layout, NodeId, Op};
use serde::{Deserialize, Serialize};

/// SMs of the H200, which the default spreads the work over.
const SMS: usize = 132;

/// A global pool of `n` NHWC images of `c` channels and `hw` pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalPoolShape {
    pub n: usize,
    pub c: usize,
    pub hw: usize,
    pub max: bool,
    pub in_dtype: DType,
    pub out_dtype: DType,
}

impl GlobalPoolShape {
    /// Channels per load: 16 bytes of the input where C allows.
    pub fn vector(&self) -> usize {
        [8usize, 4, 2, 1]
            .into_iter()
            .find(|&v| v * self.in_dtype.size() <= 16 && self.c % v == 0)
            .unwrap_or(1)
    }

    /// Channel vectors per image.
    pub fn vectors(&self) -> usize {
        self.c / self.vector()
    }
}

/// The [`GlobalPoolShape`] of a global pool over a 4-D channels-last value,
/// or `None` (the generic reduction runs other global pools).
pub fn global_pool_shape(graph: &Graph, node: NodeId) -> Option<GlobalPoolShape> {
    let n = graph.node(node);
    let max = match n.op {
        Op::GlobalAveragePool => false,
        Op::GlobalMaxPool => true,
        _ => return None,
    };
    let x = graph.value(n.inputs[0]);
    let y = graph.value(n.output);
    let nhwc = x.shape.len() == 4 && x.layout == Layout::ChannelsLast;
    // The output [N, C, 1, 1] has the same bytes in either layout.
    let flat = crate::ir::is_row_major_bytes(&y.shape, y.layout);
    (nhwc && flat).then(|| GlobalPoolShape {
        n: x.shape[0],
        c: x.shape[1],
        hw: x.shape[2] * x.shape[3],
        max,
        in_dtype: x.dtype,
        out_dtype: y.dtype,
    })
}

/// Channel vectors per CTA (`lanes`) and pixel slices (`slices`); the CTA
/// has `lanes · slices` threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GlobalPoolConfig {
    pub lanes: u32,
    pub slices: u32,
}

impl GlobalPoolConfig {
    pub fn threads(&self) -> u32 {
        self.lanes * self.slices
    }

    fn ctas(&self, shape: &GlobalPoolShape) -> usize {
        shape.n * shape.vectors().div_ceil(self.lanes as usize)
    }

    /// Shared memory for the partial sums: one f32 per thread and channel.
    pub fn smem_bytes(&self, shape: &GlobalPoolShape) -> usize {
        self.threads() as usize * shape.vector() * 4
    }

    pub fn geometry(&self, shape: &GlobalPoolShape) -> Geometry {
        Geometry {
            grid: [self.ctas(shape) as u32, 1, 1],
            block: [self.threads(), 1, 1],
            smem_bytes: 0,
        }
    }
}

impl KernelConfig for GlobalPoolConfig {
    type Shape = GlobalPoolShape;

    /// Lanes: 32 (a warp reads 512 contiguous bytes of a pixel), at most
    /// the channel vectors there are, halved (down to 4: 64-byte runs, two
    /// whole sectors) while that leaves fewer CTAs than the H200 has SMs.
    /// Slices: the smallest power of two giving each thread at most 4
    /// pixels, so all of a thread's loads are in flight at once, and at
    /// least whole warps, at most 1024 threads.
    fn default_for(shape: &GlobalPoolShape) -> Self {
        let mut lanes = 32u32;
        while lanes > 1 && lanes as usize > shape.vectors() {
            lanes /= 2;
        }
        while lanes > 4 && (GlobalPoolConfig { lanes, slices: 1 }).ctas(shape) < SMS {
            lanes /= 2;
        }
        let slices = (shape.hw.div_ceil(4).next_power_of_two() as u32)
            .max(32 / lanes)
            .min(1024 / lanes);
        GlobalPoolConfig { lanes, slices }
    }

    fn validate(&self, shape: &GlobalPoolShape) -> Result<(), String> {
        if !self.lanes.is_power_of_two() || self.lanes > 32 {
            return Err(format!("lanes {} must be a power of two ≤ 32", self.lanes));
        }
        if !self.slices.is_power_of_two() || self.slices > 1024 {
            return Err(format!(
                "slices {} must be a power of two ≤ 1024",
                self.slices
            ));
        }
        let t = self.threads();
        if !(32..=1024).contains(&t) {
            return Err(format!("{t} threads: whole warps, at most 1024"));
        }
        if self.ctas(shape) > i32::MAX as usize {
            return Err("grid exceeds the launch limits".into());
        }
        Ok(())
    }

    fn search_space(shape: &GlobalPoolShape) -> Vec<Self> {
        let mut out = Vec::new();
        for lanes in [1, 2, 4, 8, 16, 32] {
            for slices in [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024] {
                let c = GlobalPoolConfig { lanes, slices };
                if c.validate(shape).is_ok() {
                    out.push(c);
                }
            }
        }
        out
    }

    fn tag(&self) -> String {
        format!("l{}s{}", self.lanes, self.slices)
    }
}

pub fn instantiate(shape: &GlobalPoolShape, config: &GlobalPoolConfig, symbol: &str) -> Instance {
    let mut p = Params::new(format!("{symbol}_p"));
    p.ty("TIn", shape.in_dtype)
        .ty("TOut", shape.out_dtype)
        .ints(&[
            ("N", shape.n as i64),
            ("C", shape.c as i64),
            ("HW", shape.hw as i64),
            ("V", shape.vector() as i64),
        ])
        .ints(&[
            ("LANES", config.lanes.into()),
            ("SLICES", config.slices.into()),
        ])
        .boolean("MAX", shape.max);
    let args = [
        Arg::input("x", shape.in_dtype),
        Arg::output("y", shape.out_dtype),
    ];
    let call = format!("aotune::global_pool_nhwc<{}>(x, y)", p.name());
    Instance {
        symbol: symbol.to_string(),
        template: Template::Reduce,
        config: serde_json::to_string(config).unwrap_or_default(),
        code: format!(
            "{}{}",
            p.render(),
            wrapper(symbol, config.threads(), &args, &call)
        ),
        geometry: config.geometry(shape),
        workspace: Workspace::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(n: usize) -> GlobalPoolShape {
        GlobalPoolShape {
            n,
            c: 2048,
            hw: 49,
            max: false,
            in_dtype: DType::F16,
            out_dtype: DType::F16,
        }
    }

    #[test]
    fn resnet50_head_spreads_over_the_sms_at_batch_one() {
        let b1 = GlobalPoolConfig::default_for(&head(1));
        // 256 vectors of 8 channels, 4 per CTA: 64 CTAs of 4 × 16 threads,
        // each thread summing at most 4 of the 49 pixels.
        assert_eq!(
            b1,
            GlobalPoolConfig {
                lanes: 4,
                slices: 16
            }
        );
        assert_eq!(b1.geometry(&head(1)).grid, [64, 1, 1]);
        let b256 = GlobalPoolConfig::default_for(&head(256));
        assert_eq!(
            b256,
            GlobalPoolConfig {
                lanes: 32,
                slices: 16
            }
        );
        assert_eq!(b256.geometry(&head(256)).grid, [2048, 1, 1]);
    }

    #[test]
    fn odd_channels_and_big_images_get_valid_defaults() {
        for (c, hw, dtype) in [
            (6, 15, DType::F32),
            (3, 3136, DType::F16),
            (2048, 1, DType::BF16),
        ] {
            let shape = GlobalPoolShape {
                c,
                hw,
                in_dtype: dtype,
                ..head(2)
            };
            let d = GlobalPoolConfig::default_for(&shape);
            assert!(d.validate(&shape).is_ok(), "{shape:?}: {d:?}");
            let space = GlobalPoolConfig::search_space(&shape);
            assert!(space.contains(&d), "{shape:?}: {d:?}");
            assert!(space.iter().all(|c| c.validate(&shape).is_ok()));
        }
    }
}
