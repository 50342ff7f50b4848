//! Convolution kernels (`FusedConv`, and a plain `Conv` that survived the
//! passes): the node's [`ConvShape`], the [`ConvConfig`] that picks one of
//! four templates, and the rendered instantiation.
//!
//! - `conv_wgmma.cu`, Hopper's warpgroup tensor-core instructions (sm_90a),
//!   for f16/bf16 operands (groups = 1);
//! - `conv_mma.cu`, mma.sync tensor cores, for f16/bf16 operands, and for
//!   f32 operands under Tf32 (groups = 1);
//! - `conv_simt.cu`, f32 FMA, for everything else with groups = 1 (the only
//!   path for strict Fp32);
//! - `conv_direct.cu` for grouped and depthwise convolutions.
//!
//! Activations must be NHWC and weights OHWI (`channels_last: true`); the
//! epilogue is `act(acc + bias + residual)` in f32, rounded once at the store.
//!
//! The default config ([`ConvConfig::default_for`]) is the candidate with the
//! lowest time in [`super::cost_model`], among those within 113 KiB of shared
//! memory (two CTAs per SM), of one tensor-core template: wgmma (with at
//! least 3 stages) where the GEMM has a wave of 128×128 tiles on 132 SMs,
//! mma.sync otherwise (measured: on batch-1 layers, none of which has a
//! wave, wgmma's default picks tied with mma.sync's, 7 faster and 7 slower;
//! it won on every batch-256 layer and on every batch-8 layer with a wave);
//! SIMT where neither applies.
//! The snapshot shows what that rule picks for zoo ResNet-50 on 132 SMs: one
//! line per kernel (`convN xK`: first layer using it, number of layers),
//! GEMM M × N × K (K counting a projection shortcut's channels too), config tag (`m`/`n`/`k` tile, `w` warps or `t` thread
//! tile, `p` stages, `s` split-K, a trailing `d` for the direct epilogue
//! instead of the staged one), CTAs per launch. At batch 1, M·N tiles alone
//! would leave most SMs idle in layers 3 and 4 (M = 196 and 49), so the
//! model takes small mma.sync tiles and split-K there; the direct and staged
//! epilogues cost about the same on outputs that small. At batch 256 there
//! are waves of tiles everywhere: the model takes 128×128 wgmma tiles (two
//! warpgroups, 3 stages, two CTAs per SM, so one CTA's epilogue overlaps the
//! other's main loop), 192×64 where N = 64, and the staged epilogue, whose
//! whole-sector stores matter once output and residual traffic reach device
//! memory. At batch 1 (fp16, bf16, tf32) the last conv, `conv53`, has
//! the global average pool in its epilogue (`pool=avg`,
//! [`crate::passes::fuse_global_pool`]): a task of its own, whose configs
//! need the staged epilogue and one M tile over all 49 rows. What the rule
//! picks is the snapshot `snapshots/*resnet50_default_geometry.snap`
//! (`codegen::cuda::tests::resnet50_default_geometry`): a change to the rule
//! shows there as a diff.

use super::config::{KernelConfig, LinearConfig, LinearShape};
use super::conv_shape::{ConvShape, ShortcutShape, DEPTHWISE_VECTOR};
use super::cost_model;
use super::depthwise_config::DepthwiseConfig;
use super::implicit_gemm::{cheapest, SimtConfig};
use super::index_map::same_order;
use super::mma_config::MmaConfig;
use super::source::{
    clustered_wrapper, tiled_wrapper, wrapper, Arg, DependencyWait, Geometry, Instance, Params,
    Template, Workspace,
};
use super::wgmma_config::WgmmaConfig;
use crate::ir::{Activation, DType, Graph, Layout, NodeId, Op};
use serde::{Deserialize, Serialize};

/// Which convolution template runs a task, with its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kernel", rename_all = "snake_case")]
pub enum ConvConfig {
    Simt(SimtConfig),
    Mma(MmaConfig),
    Wgmma(WgmmaConfig),
    Direct(LinearConfig),
    /// Depthwise only: the register-window kernel ([`DepthwiseConfig`]).
    DepthwiseWindow(DepthwiseConfig),
}

impl ConvConfig {
    pub fn geometry(&self, shape: &ConvShape) -> Geometry {
        match self {
            ConvConfig::Simt(c) => c.geometry(shape),
            ConvConfig::Mma(c) => c.geometry(shape),
            ConvConfig::Wgmma(c) => c.geometry(shape),
            ConvConfig::Direct(c) => {
                let items = direct_items(shape);
                Geometry {
                    grid: [c.grid(&items), 1, 1],
                    block: [c.block, 1, 1],
                    smem_bytes: 0,
                }
            }
            ConvConfig::DepthwiseWindow(c) => c.geometry(shape),
        }
    }

    pub fn workspace(&self, shape: &ConvShape) -> Workspace {
        match self {
            ConvConfig::Simt(c) => c.workspace(shape),
            ConvConfig::Mma(c) => c.workspace(shape),
            ConvConfig::Wgmma(c) => c.workspace(shape),
            ConvConfig::Direct(_) | ConvConfig::DepthwiseWindow(_) => Workspace::default(),
        }
    }

    pub fn template(&self) -> Template {
        match self {
            ConvConfig::Simt(_) => Template::ConvSimt,
            ConvConfig::Mma(_) => Template::ConvMma,
            ConvConfig::Wgmma(c) if c.warp_specialized => Template::ConvWgmmaWs,
            ConvConfig::Wgmma(_) => Template::ConvWgmma,
            ConvConfig::Direct(_) | ConvConfig::DepthwiseWindow(_) => Template::ConvDirect,
        }
    }
}

impl KernelConfig for ConvConfig {
    type Shape = ConvShape;

    /// Grouped convolutions run the direct template. Otherwise the candidate
    /// with the lowest modelled time ([`super::cost_model`]) among the
    /// tensor-core configs (f16/bf16 operands, f32 under tf32) or else the
    /// SIMT configs, limited to
    /// [`super::conv_shape::DEFAULT_SMEM_LIMIT`] of shared memory:
    /// large tiles where M·N gives waves on 132 SMs, smaller tiles and
    /// split-K where it does not (the module doc shows ResNet-50's).
    fn default_for(shape: &ConvShape) -> Self {
        if shape.groups != 1 {
            return ConvConfig::Direct(direct_default(shape));
        }
        if shape.mma_operands() {
            let space = default_tensor_core_space(shape);
            if let Some(c) = cheapest(&space, shape, |c| c.smem(shape), |c| c.tile_model(shape)) {
                return c;
            }
        }
        let space = SimtConfig::search_space(shape);
        match cheapest(&space, shape, SimtConfig::smem_bytes, |c| {
            Some(c.model(shape))
        }) {
            Some(c) => ConvConfig::Simt(c),
            None => ConvConfig::Direct(direct_default(shape)),
        }
    }

    fn validate(&self, shape: &ConvShape) -> Result<(), String> {
        if shape.pool
            && matches!(
                self,
                ConvConfig::Simt(_) | ConvConfig::Direct(_) | ConvConfig::DepthwiseWindow(_)
            )
        {
            return Err(
                "the SIMT and direct kernels have no pooled epilogue (the tensor-core ones do)"
                    .into(),
            );
        }
        if shape.row_norm.is_some() && !matches!(self, ConvConfig::Wgmma(_)) {
            return Err("only the wgmma template normalizes its input rows".into());
        }
        match self {
            ConvConfig::Simt(c) => c.validate(shape),
            ConvConfig::Mma(c) => c.validate(shape),
            ConvConfig::Wgmma(c) => c.validate(shape),
            ConvConfig::Direct(_) if shape.shortcut.is_some() => {
                Err("the direct kernel has no shortcut input".into())
            }
            // Wider strips hold more input columns in registers than 512
            // threads a block leave (128 each): ptxas spills at 8.
            ConvConfig::Direct(c) if shape.depthwise_vectorized() && c.per_thread > 4 => Err(
                format!("per_thread {} > 4 for the depthwise kernel", c.per_thread),
            ),
            ConvConfig::Direct(c) => c.validate(&direct_items(shape)),
            ConvConfig::DepthwiseWindow(c) => c.validate(shape),
        }
    }

    /// Tensor-core and SIMT tiles for groups = 1 (tensor-core only under a
    /// pooled epilogue, which the SIMT kernel lacks), the direct kernel's
    /// block sizes otherwise, and for depthwise convolutions the
    /// register-window kernel's configs.
    fn search_space(shape: &ConvShape) -> Vec<Self> {
        if shape.groups != 1 {
            return LinearConfig::search_space(&direct_items(shape))
                .into_iter()
                .map(ConvConfig::Direct)
                .chain(
                    DepthwiseConfig::search_space(shape)
                        .into_iter()
                        .map(ConvConfig::DepthwiseWindow),
                )
                .filter(|c| c.validate(shape).is_ok())
                .collect();
        }
        let mut out = tensor_core_space(shape);
        if shape.row_norm.is_some() {
            out.retain(|c| c.validate(shape).is_ok());
            return out;
        }
        if shape.pool {
            return out;
        }
        out.extend(
            SimtConfig::search_space(shape)
                .into_iter()
                .map(ConvConfig::Simt),
        );
        out
    }

    fn tag(&self) -> String {
        match self {
            ConvConfig::Simt(c) => c.tag(),
            ConvConfig::Mma(c) => c.tag(),
            ConvConfig::Wgmma(c) => c.tag(),
            ConvConfig::Direct(c) => format!("direct_{}", c.tag()),
            ConvConfig::DepthwiseWindow(c) => c.tag(),
        }
    }

    fn estimate_ns(&self, shape: &ConvShape) -> Option<f64> {
        let model = self.tile_model(shape)?;
        Some(cost_model::estimate_ns(
            shape.gemm_m(),
            shape.gemm_n(),
            shape.gemm_k(),
            &model,
        ))
    }

    fn shape_features(shape: &ConvShape) -> Vec<f64> {
        gemm_features(shape)
    }
}

impl ConvConfig {
    /// The cost model's view of a tiled config (none for the direct kernel).
    pub fn tile_model(&self, shape: &ConvShape) -> Option<cost_model::TileModel> {
        match self {
            ConvConfig::Simt(c) => Some(c.model(shape)),
            ConvConfig::Mma(c) => Some(c.model(shape)),
            ConvConfig::Wgmma(c) => Some(c.model(shape)),
            ConvConfig::Direct(_) | ConvConfig::DepthwiseWindow(_) => None,
        }
    }

    /// Dynamic shared memory of a launch.
    pub fn smem(&self, shape: &ConvShape) -> usize {
        self.geometry(shape).smem_bytes as usize
    }

    /// The cluster size along z of a config whose split-K slices reduce in
    /// a thread-block cluster (`None`: no clusters).
    pub fn cluster_split(&self) -> Option<u32> {
        let (split, reduce) = match self {
            ConvConfig::Mma(c) => (c.split_k, c.split_reduce),
            ConvConfig::Wgmma(c) => (c.split_k, c.split_reduce),
            _ => return None,
        };
        (split > 1 && reduce.is_cluster()).then_some(split)
    }

    /// Resident CTAs per SM the kernel asks ptxas to allow for
    /// (`__launch_bounds__`' second argument): 1 but for wgmma configs
    /// that ask for more.
    pub fn min_blocks(&self) -> u32 {
        match self {
            ConvConfig::Wgmma(c) => c.min_blocks,
            _ => 1,
        }
    }
}

/// The tensor-core configs of a shape: wgmma (f16/bf16) first, then
/// mma.sync (f16/bf16/tf32).
fn tensor_core_space(shape: &ConvShape) -> Vec<ConvConfig> {
    let mut out = wgmma_space(shape, |_| true);
    out.extend(mma_space(shape, |_| true));
    out
}

fn wgmma_space(shape: &ConvShape, keep: impl Fn(&WgmmaConfig) -> bool) -> Vec<ConvConfig> {
    WgmmaConfig::search_space(shape)
        .into_iter()
        .filter(keep)
        .map(ConvConfig::Wgmma)
        .collect()
}

fn mma_space(shape: &ConvShape, keep: impl Fn(&MmaConfig) -> bool) -> Vec<ConvConfig> {
    MmaConfig::search_space(shape)
        .into_iter()
        .filter(keep)
        .map(ConvConfig::Mma)
        .collect()
}

/// Waves of 128×128 output tiles (per SM) below which the default stays on
/// mma.sync, whose smaller tiles and deeper split-K suit GEMMs that leave
/// SMs idle. Measured on the H200 (the session-3 tuning records, each
/// kernel alone): ResNet-50's batch-8 layers with a wave ran 16–35% faster
/// on the wgmma default than on the mma.sync one (e.g. layer 1's 3×3,
/// 19.5 → 12.9 µs); batch-1 layers (at most 98 tiles) were a tie; batch
/// 256 was faster everywhere (8.43 vs 12.19 ms end to end).
const WGMMA_MIN_WAVES: usize = 1;

/// The configs the default rule ranks: wgmma's where the GEMM has
/// [`WGMMA_MIN_WAVES`] waves of 128×128 tiles on the GPU's SMs, else
/// mma.sync's; each falls back to the other when it has none.
fn default_tensor_core_space(shape: &ConvShape) -> Vec<ConvConfig> {
    let tiles = shape.gemm_m().div_ceil(128) * shape.gemm_n().div_ceil(128);
    let wgmma = || wgmma_space(shape, WgmmaConfig::default_candidate);
    // The other template's space is built only when the preferred one is empty.
    if tiles >= WGMMA_MIN_WAVES * cost_model::SMS {
        let preferred = wgmma();
        if preferred.is_empty() {
            mma_space(shape, MmaConfig::default_candidate)
        } else {
            preferred
        }
    } else {
        let preferred = mma_space(shape, MmaConfig::default_candidate);
        if preferred.is_empty() {
            wgmma()
        } else {
            preferred
        }
    }
}

/// log2 of the GEMM view's M, N, K and of the filter size and stride: what
/// the tuner's learned model sees of a convolution or dense workload.
pub fn gemm_features(shape: &ConvShape) -> Vec<f64> {
    [
        shape.gemm_m(),
        shape.gemm_n(),
        shape.gemm_k(),
        shape.r * shape.s,
        shape.stride[0],
    ]
    .iter()
    .map(|&v| (v.max(1) as f64).log2())
    .collect()
}

/// The direct template's work items: output elements, or for the
/// vectorized depthwise path output pixels × channel vectors (a thread then
/// takes `per_thread` consecutive output columns of one vector).
fn direct_items(shape: &ConvShape) -> LinearShape {
    let per_pixel = if shape.depthwise_vectorized() {
        shape.k / DEPTHWISE_VECTOR
    } else {
        shape.gemm_n()
    };
    LinearShape {
        items: (shape.gemm_m() * per_pixel) as u64,
    }
}

/// The direct template's default: one element per thread (256, 128 or 64
/// threads a block, [`LinearConfig::default_for`]); a depthwise convolution
/// with enough pixels takes two output columns per thread (its input
/// columns overlap, so the second costs a fraction of the loads), keeping at
/// least 128 threads per SM on 132 SMs.
fn direct_default(shape: &ConvShape) -> LinearConfig {
    let items = direct_items(shape);
    if !shape.depthwise_vectorized() {
        return LinearConfig::default_for(&items);
    }
    let per_thread = if items.items / 2 >= 132 * 128 { 2 } else { 1 };
    let threads = items.items.div_ceil(per_thread);
    LinearConfig {
        block: if threads / 128 >= 132 { 128 } else { 64 },
        per_thread: per_thread as u32,
    }
}

/// True when a rank-4 value's bytes are in NHWC (OHWI) order.
fn channels_last_bytes(shape: &[usize], layout: Layout) -> bool {
    shape.len() == 4 && same_order(shape, layout, Layout::ChannelsLast)
}

/// The [`ConvShape`] of a `FusedConv` or `Conv` node.
pub fn conv_shape(graph: &Graph, node: NodeId) -> Result<ConvShape, String> {
    let n = graph.node(node);
    let (geometry, bias, residual, activation, shortcut, pool) = match &n.op {
        // A norm's γ and β follow the inputs read here; its kernel takes
        // this shape for the convolution ([`super::depthwise_norm`]).
        Op::FusedConv {
            conv,
            epilogue,
            shortcut,
            pool,
            norm: _,
        } => (
            conv,
            epilogue.bias,
            epilogue.residual,
            epilogue.activation,
            *shortcut,
            pool.is_some(),
        ),
        Op::Conv(conv) => (
            conv,
            n.inputs.len() == 3,
            false,
            Activation::None,
            None,
            false,
        ),
        other => return Err(format!("{} is not a convolution", other.kind())),
    };
    let value = |i: usize| {
        n.inputs
            .get(i)
            .map(|&v| graph.value(v))
            .ok_or_else(|| format!("missing input {i}"))
    };
    let (x, w, y) = (value(0)?, value(1)?, graph.value(n.output));
    let res = if residual {
        Some(value(2 + usize::from(bias))?)
    } else {
        None
    };
    let xs = match shortcut {
        Some(_) => Some(value(2 + usize::from(bias) + usize::from(residual))?),
        None => None,
    };
    let bias = if bias { Some(value(2)?) } else { None };
    for (what, v) in [("input", x), ("weight", w), ("output", y)]
        .into_iter()
        .chain(res.map(|r| ("residual", r)))
        .chain(xs.map(|v| ("shortcut input", v)))
    {
        if !channels_last_bytes(&v.shape, v.layout) {
            return Err(format!(
                "the CUDA convolutions need NHWC activations and OHWI weights, but the {what} \
                 {:?} is {}: compile with channels_last: true",
                v.shape,
                v.layout.name()
            ));
        }
    }
    let [bn, c, h, wd] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
    let [k, _, r, s] = [w.shape[0], w.shape[1], w.shape[2], w.shape[3]];
    // A pooled conv's output is [N, K, 1, 1]: its GEMM runs over the
    // convolution's own output pixels.
    let [p, q] = if pool {
        geometry
            .output_hw(h, wd)
            .ok_or("the pooled convolution's window does not fit its input")?
    } else {
        [y.shape[2], y.shape[3]]
    };
    Ok(ConvShape {
        n: bn,
        c,
        h,
        w: wd,
        k,
        r,
        s,
        p,
        q,
        stride: geometry.strides,
        pad: geometry.pads,
        dilation: geometry.dilations,
        groups: geometry.groups,
        x_dtype: x.dtype,
        w_dtype: w.dtype,
        residual: res.map(|v| v.dtype),
        out_dtype: y.dtype,
        bias: bias.map(|v| v.dtype),
        activation,
        precision: graph.precision,
        shortcut: shortcut.zip(xs).map(|(sc, v)| ShortcutShape {
            c: v.shape[1],
            h: v.shape[2],
            w: v.shape[3],
            stride: sc.strides,
            dtype: v.dtype,
        }),
        pool,
        row_norm: None,
    })
}

/// Renders the instantiation of `config` for `shape` under `symbol`.
pub fn instantiate(shape: &ConvShape, config: &ConvConfig, symbol: &str) -> Instance {
    let mut p = Params::new(format!("{symbol}_p"));
    shape.render(&mut p);
    let function = match config {
        ConvConfig::Simt(c) => {
            c.render(&mut p, shape);
            "conv_simt"
        }
        ConvConfig::Mma(c) => {
            c.render(&mut p, shape);
            "conv_mma"
        }
        ConvConfig::Wgmma(c) => {
            c.render(&mut p, shape);
            if c.warp_specialized {
                "conv_wgmma_ws"
            } else {
                "conv_wgmma"
            }
        }
        ConvConfig::Direct(c) => {
            p.int("PER_THREAD", c.per_thread)
                .boolean("DW_VECTOR", shape.depthwise_vectorized());
            "conv_direct"
        }
        ConvConfig::DepthwiseWindow(c) => {
            p.int("PER_THREAD", c.cols)
                .int("DWW_LANES", c.lanes)
                .int("DWW_THREADS", c.block);
            "conv_depthwise_window"
        }
    };
    let mut args = vec![
        Arg::input("x", shape.x_dtype),
        Arg::input("w", shape.w_dtype),
    ];
    if let Some(dtype) = shape.bias {
        args.push(Arg::input("bias", dtype));
    }
    if let Some(dtype) = shape.residual {
        args.push(Arg::input("res", dtype));
    }
    if let Some(sc) = shape.shortcut {
        args.push(Arg::input("xs", sc.dtype));
    }
    // A row norm's column sums are the node's last input ([`crate::ir::RowNorm`]).
    if shape.row_norm.is_some() {
        args.push(Arg::input("colsum", DType::F32));
    }
    args.push(Arg::output("y", shape.out_dtype));
    let or_null = |present: bool, name: &'static str| if present { name } else { "nullptr" };
    let call = format!(
        "aotune::{function}<{}>(x, w, {}, {}, {}, y{})",
        p.name(),
        or_null(shape.bias.is_some(), "bias"),
        or_null(shape.residual.is_some(), "res"),
        or_null(shape.shortcut.is_some(), "xs"),
        if shape.row_norm.is_some() {
            ", colsum"
        } else {
            ""
        },
    );
    let geometry = config.geometry(shape);
    let threads = geometry.block[0];
    // The tensor-core templates read their first weight tiles before the
    // grid dependency wait (`load_prologue` in conv_mma.cu).
    let wait = match config {
        ConvConfig::Mma(_) | ConvConfig::Wgmma(_) | ConvConfig::DepthwiseWindow(_) => {
            DependencyWait::InTemplate
        }
        _ => DependencyWait::AtEntry,
    };
    let min_blocks = config.min_blocks();
    let wrapped = match config {
        // ptxas, given only the block size, caps the depthwise kernel's
        // registers for occupancy and spills its input columns; one block
        // per SM as the stated minimum lets it keep them (82 at 2 columns).
        ConvConfig::Direct(_) if shape.depthwise_vectorized() => {
            tiled_wrapper(symbol, threads, 1, DependencyWait::AtEntry, &args, &call)
        }
        ConvConfig::Direct(_) => wrapper(symbol, threads, &args, &call),
        // One CTA per SM as the minimum: ptxas keeps the input window in
        // registers instead of capping them for occupancy.
        ConvConfig::DepthwiseWindow(_) => {
            tiled_wrapper(symbol, threads, 1, DependencyWait::InTemplate, &args, &call)
        }
        _ => match config.cluster_split() {
            Some(split) => {
                clustered_wrapper(symbol, threads, min_blocks, split, wait, &args, &call)
            }
            None => tiled_wrapper(symbol, threads, min_blocks, wait, &args, &call),
        },
    };
    let code = format!("{}{}", p.render(), wrapped);
    Instance {
        symbol: symbol.to_string(),
        template: config.template(),
        config: serde_json::to_string(config).unwrap_or_default(),
        code,
        geometry,
        workspace: config.workspace(shape),
    }
}

#[cfg(test)]
mod tests {
    use super::super::implicit_gemm::tests::conv;
    use super::*;

    fn kernel(c: &ConvConfig) -> &'static str {
        match c {
            ConvConfig::Wgmma(_) => "wgmma",
            ConvConfig::Mma(_) => "mma",
            ConvConfig::Simt(_) => "simt",
            ConvConfig::Direct(_) => "direct",
            ConvConfig::DepthwiseWindow(_) => "window",
        }
    }

    /// ConvNeXt-T's depthwise 7×7 at stage `hw` × `c`.
    fn depthwise(hw: usize, c: usize) -> ConvShape {
        ConvShape {
            groups: c,
            ..conv(1, c, hw, c, 7, 1, DType::F16)
        }
    }

    #[test]
    fn depthwise_takes_the_vectorized_kernel_on_maps_of_28x28_and_more() {
        for (hw, c, vectorized) in [
            (56, 96, true),
            (28, 192, true),
            (14, 384, false),
            (7, 768, false),
        ] {
            let shape = depthwise(hw, c);
            assert_eq!(shape.depthwise_vectorized(), vectorized, "{hw}×{hw}×{c}");
            let default = ConvConfig::default_for(&shape);
            assert!(matches!(default, ConvConfig::Direct(_)), "{default:?}");
            assert!(default.validate(&shape).is_ok());
            let space = ConvConfig::search_space(&shape);
            assert!(
                space.contains(&default),
                "{hw}: {default:?} not in the space"
            );
            let text = instantiate(&shape, &default, "k").code;
            assert!(
                text.contains(&format!("DW_VECTOR = {vectorized}")),
                "{text}"
            );
            // One work item per 4-channel vector of an output pixel on the
            // vectorized path, per output element otherwise.
            let per_pixel = if vectorized { c / DEPTHWISE_VECTOR } else { c };
            assert_eq!(direct_items(&shape).items, (hw * hw * per_pixel) as u64);
        }
        // Strips wider than 4 columns spill (128 registers at 512 threads).
        let wide = ConvConfig::Direct(LinearConfig {
            block: 128,
            per_thread: 8,
        });
        assert!(wide.validate(&depthwise(56, 96)).is_err());
        assert!(wide.validate(&depthwise(7, 768)).is_ok());
        // Channels not in whole vectors keep the per-element kernel.
        assert!(!depthwise(56, 6).depthwise_vectorized());
        // The stage-1 default takes two columns per thread, 128 threads.
        assert_eq!(
            ConvConfig::default_for(&depthwise(56, 96)),
            ConvConfig::Direct(LinearConfig {
                block: 128,
                per_thread: 2
            })
        );
    }

    #[test]
    fn the_default_takes_wgmma_from_one_wave_of_tiles() {
        // ResNet-50's layer-1 3×3 at batch 8: M = 25088, N = 64, 196 tiles
        // of 128×128 (a wave on 132 SMs) — wgmma, with at least 3 stages.
        let big = conv(8, 64, 56, 64, 3, 1, DType::F16);
        let c = ConvConfig::default_for(&big);
        assert_eq!(kernel(&c), "wgmma", "{c:?}");
        assert!(matches!(c, ConvConfig::Wgmma(w) if w.stages >= 3));
        // The same layer at batch 1: 25 tiles — mma.sync.
        let small = conv(1, 64, 56, 64, 3, 1, DType::F16);
        assert_eq!(kernel(&ConvConfig::default_for(&small)), "mma");
        // bf16 alike; f32 under strict fp32 has neither.
        let bf16 = conv(8, 64, 56, 64, 3, 1, DType::BF16);
        assert_eq!(kernel(&ConvConfig::default_for(&bf16)), "wgmma");
        let f32 = conv(8, 64, 56, 64, 3, 1, DType::F32);
        assert_eq!(kernel(&ConvConfig::default_for(&f32)), "simt");
    }

    #[test]
    fn a_pooled_space_holds_only_configs_with_a_pooled_epilogue() {
        let shape = ConvShape {
            pool: true,
            ..conv(1, 512, 7, 2048, 1, 1, DType::F16)
        };
        let space = ConvConfig::search_space(&shape);
        assert!(!space.is_empty());
        for c in &space {
            assert!(
                c.validate(&shape).is_ok(),
                "{c:?}: {:?}",
                c.validate(&shape)
            );
        }
        assert!(ConvConfig::default_for(&shape).validate(&shape).is_ok());
    }

    #[test]
    fn cluster_split_k_kernels_declare_their_cluster_and_no_default_uses_one() {
        let shape = conv(1, 256, 14, 256, 3, 1, DType::F16);
        let space = ConvConfig::search_space(&shape);
        let cluster = space
            .iter()
            .find(|c| {
                matches!(c, ConvConfig::Wgmma(w) if w.split_k == 4) && c.cluster_split().is_some()
            })
            .expect("a wgmma config reducing 4 slices in a cluster");
        let text = instantiate(&shape, cluster, "k").code;
        assert!(
            text.contains("__cluster_dims__(1, 1, 4) __launch_bounds__"),
            "{text}"
        );
        assert!(text.contains("CLUSTER_SPLIT = true"), "{text}");
        assert_eq!(cluster.geometry(&shape).grid[2], 4);
        let global = space
            .iter()
            .find(
                |c| matches!(c, ConvConfig::Mma(m) if m.split_k == 4 && m.split_reduce.is_global()),
            )
            .expect("an mma config reducing 4 slices through L2");
        let text = instantiate(&shape, global, "k").code;
        assert!(!text.contains("__cluster_dims__") && text.contains("CLUSTER_SPLIT = false"));
        for batch in [1, 8, 256] {
            for (c, h, k, r, stride) in [
                (256, 14, 256, 3, 1),
                (1024, 14, 256, 1, 1),
                (512, 7, 512, 3, 1),
            ] {
                let d = ConvConfig::default_for(&conv(batch, c, h, k, r, stride, DType::F16));
                assert_eq!(d.cluster_split(), None, "{d:?}");
            }
        }
    }
}
