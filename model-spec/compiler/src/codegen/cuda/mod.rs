//! CUDA code generation: one self-contained `kernels.cu` and the launch
//! table of a forward pass, from an optimized [`Graph`], its [`MemoryPlan`]
//! and the tuned configs.
//!
//! [`generate_cuda`] walks the nodes in order. A view the plan aliased runs
//! nothing; every other node is a launch of the kernel of its task
//! ([`crate::schedule::task_key`]): nodes with equal keys share one kernel,
//! rendered once from the template its op family uses and the config chosen
//! for the task (`config::choose`: the tuned override when it parses and is
//! valid, else the template's heuristic default).
//!
//! Kernels are `extern "C" __global__` wrappers named
//! `<family>_<first 8 hex digits of the task hash>_<config tag>` (e.g.
//! `conv_6663570e_mma_m64n64k32w2x2p3s1`; the full 16 digits if two tasks
//! would collide). Each takes one pointer per argument value — the node's
//! inputs in order, then its output — and nothing else: shapes, strides,
//! pads, dtypes and the config are `static constexpr` members of the
//! instantiation's parameter struct, from which the launch geometry is also
//! computed. Pointers must be 16-byte aligned (the plan aligns arena buffers
//! to 256 bytes; the weight blob must align each constant likewise).
//!
//! Launches with more than 48 KiB of dynamic shared memory
//! ([`KernelLaunch::smem_bytes`]) need
//! `cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)`
//! first; heuristic defaults may use up to 113 KiB. Split-K kernels share the
//! module's static `aotune::splitk_partials` / `splitk_counters` buffers, so
//! launches of one module must not run concurrently (one stream or one
//! captured graph).
//!
//! Layers, bottom up (no file imports one above it): `config.rs` (the
//! [`KernelConfig`] contract every template's config implements: default,
//! validity, search space, tag, cost-model view), `source.rs` and
//! `index_map.rs` (rendering primitives, the embedded `.cu` templates);
//! `gemm/` (the GEMM-family templates: the shared conv workload and limits
//! in `conv_shape.rs`, then SIMT, mma.sync and wgmma configs, and the conv,
//! dense and matmul families built on them) and `ops/` (memory-bound op
//! kernels: elementwise, pools, reductions, layout conversions); then
//! `assemble.rs` (one `kernels.cu` from rendered instances), `candidate.rs`
//! (one task's kernel for the tuner), `library_matmul.rs` (Dense tasks that
//! run through cuBLASLt instead of a kernel) and this file (the whole model).

pub mod assemble;
pub mod candidate;
pub mod config;
mod error;
pub mod gemm;
pub mod index_map;
pub mod library_matmul;
pub mod ops;
pub mod source;

#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod test_support;
#[cfg(test)]
mod tests;

pub use gemm::{
    conv, conv_shape, cost_model, dense, depthwise_norm, depthwise_norm_config, implicit_gemm,
    matmul, mma_config, wgmma_config,
};
pub use ops::{elementwise, global_pool, norm, pool, reduce, rows, space_to_depth, to_nhwc};

pub use config::{ConfigOverrides, KernelConfig, LinearConfig, LinearShape};
pub use conv::ConvConfig;
pub use conv_shape::{ConvShape, MmaOperands};
pub use dense::{DenseConfig, GemvConfig};
pub use depthwise_norm_config::{DepthwiseNormConfig, DepthwiseNormShape};
pub use error::CodegenError;
pub use global_pool::GlobalPoolConfig;
pub use implicit_gemm::SimtConfig;
pub use matmul::MatmulConfig;
pub use mma_config::{MmaConfig, MmaEpilogue, SplitReduce};
pub use space_to_depth::SpaceToDepthConfig;
pub use to_nhwc::ToNhwcConfig;
pub use wgmma_config::WgmmaConfig;

use crate::artifact::LibraryMatmul;
use crate::ir::{Graph, NodeId, Op, ValueId, MAX_ELEMENTS};
use crate::plan::MemoryPlan;
use crate::schedule::{task_key, TaskKey};
use config::{choose, TaskRef};
use source::Instance;
use std::collections::{HashMap, HashSet};

/// The generated CUDA of one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaModule {
    /// The whole `kernels.cu`.
    pub source: String,
    /// `extern "C"` kernel symbols, indexed by [`KernelLaunch::kernel`].
    pub kernels: Vec<String>,
    /// One launch per node that runs a kernel, in node order.
    pub launches: Vec<KernelLaunch>,
    /// Tuned configs that were not used, each naming its task.
    pub warnings: Vec<String>,
}

/// One kernel launch of the forward pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelLaunch {
    pub node: NodeId,
    /// Index into [`CudaModule::kernels`].
    pub kernel: u32,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory bytes.
    pub smem_bytes: u32,
    /// Pointer parameters in kernel order: the node's inputs, then its
    /// output. Constants live in the weight blob, everything else in the
    /// arena at its planned offset.
    pub args: Vec<ValueId>,
    /// Set when the node runs through cuBLASLt ([`library_matmul`]): then
    /// there is no kernel (`kernel`, `grid`, `block`, `smem_bytes` are 0).
    pub matmul: Option<LibraryMatmul>,
}

/// A rendered kernel and the nodes that use it.
struct Kernel {
    instance: Instance,
    key: TaskKey,
    nodes: Vec<String>,
}

/// Renders the kernels and launches of `graph`. Fails, naming the node, on
/// an op or use of an op that has no kernel (e.g. a convolution compiled
/// with `channels_last: false`) or a value missing from `plan`.
pub fn generate_cuda(
    graph: &Graph,
    plan: &MemoryPlan,
    configs: &ConfigOverrides,
) -> Result<CudaModule, CodegenError> {
    let mut kernels: Vec<Kernel> = Vec::new();
    let mut by_key: HashMap<TaskKey, usize> = HashMap::new();
    let mut symbols: HashSet<String> = HashSet::new();
    let mut launches = Vec::new();
    let mut warnings = Vec::new();
    for id in graph.node_ids() {
        let node = graph.node(id);
        let unsupported = |message: String| CodegenError::Unsupported {
            index: id.index(),
            node: node.name.clone(),
            op: node.op.kind(),
            message,
        };
        let output_buffer = plan.buffer(node.output);
        if output_buffer.is_some_and(|b| b.alias_of.is_some()) {
            continue;
        }
        let mut args = node.inputs.clone();
        args.push(node.output);
        for &v in &args {
            let value = graph.value(v);
            if !value.is_constant() && plan.buffer(v).is_none() {
                return Err(CodegenError::Unplanned {
                    index: id.index(),
                    node: node.name.clone(),
                    op: node.op.kind(),
                    value: v.0,
                });
            }
            if value.numel() > i32::MAX as usize || value.numel() > MAX_ELEMENTS {
                return Err(unsupported(format!(
                    "value %{} has {} elements; kernels index with 32-bit ints",
                    v.0,
                    value.numel()
                )));
            }
        }
        let key = task_key(graph, id);
        let hash = key.hash_hex();
        let library = library_matmul::requested(configs.get(&hash));
        if let Some(algo) = library {
            match library_matmul::library_matmul(graph, id, algo) {
                Ok(matmul) => {
                    launches.push(KernelLaunch {
                        node: id,
                        kernel: 0,
                        grid: [0; 3],
                        block: [0; 3],
                        smem_bytes: 0,
                        args,
                        matmul: Some(matmul),
                    });
                    continue;
                }
                Err(why) => warnings.push(format!(
                    "task {hash} (node `{}`): its config asks for cuBLASLt, which cannot run \
                     it ({why}); the template's default config runs instead",
                    node.name
                )),
            }
        }
        let index = match by_key.get(&key) {
            Some(&i) => i,
            None => {
                let task = TaskRef {
                    hash: &hash,
                    op: node.op.kind(),
                    node: &node.name,
                    overridden: if library.is_some() {
                        None
                    } else {
                        configs.get(&hash)
                    },
                };
                let mut instance = instantiate(graph, id, &task, &hash[..8], &mut warnings)
                    .map_err(unsupported)?;
                if symbols.contains(&instance.symbol) {
                    instance = instantiate(graph, id, &task, &hash, &mut Vec::new())
                        .map_err(unsupported)?;
                }
                symbols.insert(instance.symbol.clone());
                by_key.insert(key.clone(), kernels.len());
                kernels.push(Kernel {
                    instance,
                    key,
                    nodes: Vec::new(),
                });
                kernels.len() - 1
            }
        };
        let kernel = &mut kernels[index];
        kernel.nodes.push(node.name.clone());
        let g = kernel.instance.geometry;
        launches.push(KernelLaunch {
            node: id,
            kernel: index as u32,
            grid: g.grid,
            block: g.block,
            smem_bytes: g.smem_bytes,
            args,
            matmul: None,
        });
    }
    let rendered: Vec<(Instance, String)> = kernels
        .iter()
        .map(|k| {
            let shown: Vec<&str> = k.nodes.iter().take(4).map(String::as_str).collect();
            let more = k.nodes.len().saturating_sub(4);
            let comment = format!(
                "{} task {}: {}{}\n// {}",
                k.key.op,
                k.key.hash_hex(),
                shown.join(", "),
                if more > 0 {
                    format!(" (+{more} more)")
                } else {
                    String::new()
                },
                k.key.canonical
            );
            (k.instance.clone(), comment)
        })
        .collect();
    Ok(CudaModule {
        source: assemble::assemble(&rendered),
        kernels: kernels.iter().map(|k| k.instance.symbol.clone()).collect(),
        launches,
        warnings,
    })
}

/// `<family>_<hash>_<tag>`.
fn symbol(family: &str, hash: &str, tag: &str) -> String {
    format!("{family}_{hash}_{tag}")
}

/// Renders the kernel of node `id`'s task, choosing its config.
fn instantiate(
    graph: &Graph,
    id: NodeId,
    task: &TaskRef,
    hash: &str,
    warnings: &mut Vec<String>,
) -> Result<Instance, String> {
    struct Choose<'a, 'b> {
        task: &'a TaskRef<'a>,
        hash: &'a str,
        warnings: &'b mut Vec<String>,
    }
    impl VisitTask for Choose<'_, '_> {
        type Out = Instance;
        fn visit<C: KernelConfig>(
            self,
            shape: &C::Shape,
            family: &str,
            render: &dyn Fn(&C, &str) -> Instance,
        ) -> Instance {
            let c: C = choose(shape, self.task, self.warnings);
            render(&c, &symbol(family, self.hash, &c.tag()))
        }
    }
    dispatch(
        graph,
        id,
        Choose {
            task,
            hash,
            warnings,
        },
    )
}

/// What to do with a task once its template's config type, shape and
/// renderer are known: [`dispatch`] calls `visit` with them.
pub(crate) trait VisitTask {
    type Out;
    /// `family` prefixes the kernel symbol; `render(config, symbol)` renders
    /// the instantiation.
    fn visit<C: KernelConfig>(
        self,
        shape: &C::Shape,
        family: &str,
        render: &dyn Fn(&C, &str) -> Instance,
    ) -> Self::Out;
}

/// The one place that maps an op to its template: finds node `id`'s shape
/// and config type and hands them to `visitor`. Fails when the node's op or
/// layout has no kernel.
pub(crate) fn dispatch<V: VisitTask>(
    graph: &Graph,
    id: NodeId,
    visitor: V,
) -> Result<V::Out, String> {
    let node = graph.node(id);
    Ok(match &node.op {
        // A channel norm makes the conv a task of its own kind.
        Op::FusedConv { norm: Some(_), .. } => {
            let shape = depthwise_norm::depthwise_norm_shape(graph, id)?;
            visitor.visit::<DepthwiseNormConfig>(&shape, "dwln", &|c, sym| {
                depthwise_norm::instantiate(&shape, c, sym)
            })
        }
        Op::FusedConv { .. } | Op::Conv(_) => {
            let shape = conv::conv_shape(graph, id)?;
            visitor.visit::<ConvConfig>(&shape, "conv", &|c, sym| conv::instantiate(&shape, c, sym))
        }
        Op::Dense { .. } => {
            let shape = dense::dense_shape(graph, id)?;
            visitor.visit::<DenseConfig>(&shape, "dense", &|c, sym| {
                dense::instantiate(&shape, c, sym)
            })
        }
        Op::MaxPool(_) | Op::AveragePool { .. } => {
            let shape = pool::pool_shape(graph, id)?;
            let family = if shape.average.is_some() {
                "avgpool"
            } else {
                "maxpool"
            };
            visitor.visit::<LinearConfig>(&shape.items(), family, &|c, sym| {
                pool::instantiate(&shape, c, sym)
            })
        }
        Op::GlobalAveragePool | Op::GlobalMaxPool | Op::ReduceMean { .. } | Op::Reduce { .. } => {
            if let Some(shape) = global_pool::global_pool_shape(graph, id) {
                return Ok(
                    visitor.visit::<GlobalPoolConfig>(&shape, "gpool", &|c, sym| {
                        global_pool::instantiate(&shape, c, sym)
                    }),
                );
            }
            let shape = reduce::reduce_shape(graph, id)?;
            visitor.visit::<LinearConfig>(&shape.items(), "reduce", &|c, sym| {
                reduce::instantiate_reduce(&shape, c, sym)
            })
        }
        Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::Hardmax { .. } => {
            let shape = reduce::softmax_shape(graph, id)?;
            visitor.visit::<LinearConfig>(&shape.items(), shape.family, &|c, sym| {
                reduce::instantiate_norm(&shape, c, sym)
            })
        }
        Op::LayerNorm { .. }
        | Op::GroupNorm { .. }
        | Op::LpNorm { .. }
        | Op::MeanVarianceNorm { .. } => {
            let shape = norm::norm_shape(graph, id)?;
            visitor.visit::<LinearConfig>(&shape.items(), shape.family, &|c, sym| {
                reduce::instantiate_norm(&shape, c, sym)
            })
        }
        Op::Convert | Op::PadChannels { .. } => match to_nhwc::to_nhwc_shape(graph, id)? {
            Some(shape) => {
                let family = if node.op == Op::Convert {
                    "convert"
                } else {
                    "pad"
                };
                visitor.visit::<ToNhwcConfig>(&shape, family, &|c, sym| {
                    to_nhwc::instantiate(&shape, c, sym)
                })
            }
            None => elementwise_task(graph, id, visitor)?,
        },
        Op::SpaceToDepth { .. } => {
            let shape = space_to_depth::space_to_depth_shape(graph, id)?;
            visitor.visit::<SpaceToDepthConfig>(&shape, "s2d", &|c, sym| {
                space_to_depth::instantiate(&shape, c, sym)
            })
        }
        Op::Where => {
            let shape = ops::movement::select_shape(graph, id)?;
            visitor.visit::<LinearConfig>(&shape.items(), "where", &|c, sym| {
                ops::movement::instantiate_select(&shape, c, sym)
            })
        }
        Op::Transpose { .. }
        | Op::Slice { .. }
        | Op::Gather { .. }
        | Op::Expand { .. }
        | Op::Tile { .. }
        | Op::Pad { .. } => {
            let shape = ops::movement::copy_shape(graph, id)?;
            let family = ops::movement::family(&node.op);
            visitor.visit::<LinearConfig>(&shape.items(), family, &|c, sym| {
                ops::movement::instantiate(&shape, c, sym)
            })
        }
        Op::Flatten { .. }
        | Op::Reshape { .. }
        | Op::Identity
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Sum
        | Op::BatchNorm { .. }
        | Op::Concat { .. } => elementwise_task(graph, id, visitor)?,
        Op::Attention { .. } => {
            let shape = ops::attention::attention_shape(graph, id)?;
            visitor.visit::<ops::attention::AttentionConfig>(&shape, "attention", &|c, sym| {
                ops::attention::instantiate(&shape, c, sym)
            })
        }
        Op::ScatterNd { .. } | Op::GatherNd { .. } | Op::Resize(_) => {
            return Err(format!("no GPU kernel for {} yet", node.op.kind()))
        }
        Op::Einsum { .. } => return Err(format!("no GPU kernel for {} yet", node.op.kind())),
        Op::Gemm { .. } | Op::MatMul => {
            let shape = matmul::matmul_shape(graph, id)?;
            visitor.visit::<MatmulConfig>(&shape, "matmul", &|c, sym| {
                matmul::instantiate(&shape, c, sym)
            })
        }
    })
}

/// [`dispatch`] for the generic elementwise template.
fn elementwise_task<V: VisitTask>(graph: &Graph, id: NodeId, visitor: V) -> Result<V::Out, String> {
    let shape = elementwise::elt_shape(graph, id)?;
    let family = elementwise::prefix(&shape.kind);
    Ok(
        visitor.visit::<LinearConfig>(&shape.items(), family, &|c, sym| {
            elementwise::instantiate(&shape, c, sym)
        }),
    )
}
