//! One task's kernels as the tuner sees them: the search space of its
//! template (every valid config as JSON, which one the heuristic default is,
//! and the cost model's estimate where the template has one), and any one
//! candidate rendered as a self-contained `.cu` with a single kernel, its
//! launch geometry and the sizes of its pointer arguments.
//!
//! Both go through [`super::dispatch`], the same op → template mapping the
//! build uses, so a config the tuner measured is exactly the kernel the
//! build emits for it.

use super::config::KernelConfig;
use super::source::{Geometry, Instance};
use super::{dispatch, symbol, CodegenError, VisitTask};
use crate::ir::{DType, Graph, NodeId, ValueId};
use crate::schedule::task_key;

/// The search space of the task node `node` belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskCandidates {
    /// Kernel family, e.g. `conv`, `dense`, `maxpool`.
    pub family: String,
    /// Every config of the template's search space, as the tuning log
    /// stores them; the default is included even when the space lacks it.
    pub configs: Vec<serde_json::Value>,
    /// Tags of `configs` (the kernel symbol suffixes), same order.
    pub tags: Vec<String>,
    /// Index of the heuristic default in `configs`.
    pub default: usize,
    /// The analytic cost model's estimate per config, in ns, if any.
    pub prior_ns: Vec<Option<f64>>,
    /// Numeric description of the workload for a learned cost model.
    pub shape_features: Vec<f64>,
}

/// A pointer argument of a candidate kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelArg {
    pub value: ValueId,
    pub dtype: DType,
    pub bytes: usize,
    /// The last argument, the node's output.
    pub output: bool,
}

/// One candidate rendered alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateKernel {
    /// A complete `.cu` (includes, split-K workspace, helpers, template,
    /// the instantiation).
    pub source: String,
    pub symbol: String,
    pub geometry: Geometry,
    /// The node's inputs in order, then its output.
    pub args: Vec<KernelArg>,
    /// The config as the kernel's comment shows it.
    pub config: String,
}

fn unsupported(graph: &Graph, node: NodeId, message: String) -> CodegenError {
    let n = graph.node(node);
    CodegenError::Unsupported {
        index: node.index(),
        node: n.name.clone(),
        op: n.op.kind(),
        message,
    }
}

/// The search space of `node`'s task. Fails, naming the node, when the op
/// has no kernel.
pub fn task_candidates(graph: &Graph, node: NodeId) -> Result<TaskCandidates, CodegenError> {
    struct Space;
    impl VisitTask for Space {
        type Out = (
            Vec<serde_json::Value>,
            Vec<String>,
            usize,
            Vec<Option<f64>>,
            Vec<f64>,
        );
        fn visit<C: KernelConfig>(
            self,
            shape: &C::Shape,
            _family: &str,
            _render: &dyn Fn(&C, &str) -> Instance,
        ) -> Self::Out {
            let mut space = C::search_space(shape);
            let default_config = C::default_for(shape);
            let default = match space.iter().position(|c| *c == default_config) {
                Some(i) => i,
                None => {
                    space.insert(0, default_config);
                    0
                }
            };
            let configs = space
                .iter()
                .map(|c| serde_json::to_value(c).unwrap_or(serde_json::Value::Null))
                .collect();
            let tags = space.iter().map(KernelConfig::tag).collect();
            let prior = space.iter().map(|c| c.estimate_ns(shape)).collect();
            (configs, tags, default, prior, C::shape_features(shape))
        }
    }
    struct Family;
    impl VisitTask for Family {
        type Out = String;
        fn visit<C: KernelConfig>(
            self,
            _shape: &C::Shape,
            family: &str,
            _render: &dyn Fn(&C, &str) -> Instance,
        ) -> String {
            family.to_string()
        }
    }
    let (configs, tags, default, prior_ns, shape_features) =
        dispatch(graph, node, Space).map_err(|m| unsupported(graph, node, m))?;
    let family = dispatch(graph, node, Family).map_err(|m| unsupported(graph, node, m))?;
    Ok(TaskCandidates {
        family,
        configs,
        tags,
        default,
        prior_ns,
        shape_features,
    })
}

/// Renders `config` for `node`'s task as a stand-alone kernel. Fails,
/// naming the node, when the config does not parse as the template's config
/// type or is invalid for the task.
pub fn render_candidate(
    graph: &Graph,
    node: NodeId,
    config: &serde_json::Value,
) -> Result<CandidateKernel, CodegenError> {
    struct Render<'a> {
        config: &'a serde_json::Value,
        hash: &'a str,
    }
    impl VisitTask for Render<'_> {
        type Out = Result<Instance, String>;
        fn visit<C: KernelConfig>(
            self,
            shape: &C::Shape,
            family: &str,
            render: &dyn Fn(&C, &str) -> Instance,
        ) -> Self::Out {
            let c: C = serde_json::from_value(self.config.clone())
                .map_err(|e| format!("config {} does not parse: {e}", self.config))?;
            c.validate(shape)
                .map_err(|why| format!("config {} is invalid: {why}", self.config))?;
            Ok(render(&c, &symbol(family, self.hash, &c.tag())))
        }
    }
    let key = task_key(graph, node);
    let hash = key.hash_hex();
    let instance = dispatch(
        graph,
        node,
        Render {
            config,
            hash: &hash[..8],
        },
    )
    .and_then(|r| r)
    .map_err(|m| unsupported(graph, node, m))?;
    let n = graph.node(node);
    let mut args: Vec<KernelArg> = n
        .inputs
        .iter()
        .map(|&v| (v, false))
        .chain(std::iter::once((n.output, true)))
        .map(|(v, output)| {
            let value = graph.value(v);
            KernelArg {
                value: v,
                dtype: value.dtype,
                bytes: value.numel() * value.dtype.size(),
                output,
            }
        })
        .collect();
    // A zero-sized tensor still gets a (tiny) allocation.
    for a in &mut args {
        a.bytes = a.bytes.max(16);
    }
    let comment = format!("{} task {}: {}\n// {}", key.op, hash, n.name, key.canonical);
    let config = instance.config.clone();
    Ok(CandidateKernel {
        symbol: instance.symbol.clone(),
        geometry: instance.geometry,
        source: super::assemble::assemble(&[(instance, comment)]),
        args,
        config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Precision;
    use crate::pipeline::{compile_bytes, CompileOptions};
    use crate::zoo;

    fn resnet18(precision: Precision) -> crate::pipeline::Compiled {
        let bytes = zoo::resnet_onnx(zoo::ResNetDepth::R18, zoo::DEFAULT_SEED);
        compile_bytes(
            &bytes,
            "resnet18.onnx",
            &CompileOptions {
                batch: Some(1),
                precision,
                ..CompileOptions::default()
            },
        )
        .expect("compiles")
    }

    #[test]
    fn every_task_has_a_space_whose_default_renders_like_the_build() {
        let compiled = resnet18(Precision::Fp16);
        let module = super::super::generate_cuda(
            &compiled.graph,
            &compiled.plan,
            &super::super::ConfigOverrides::new(),
        )
        .expect("generates");
        for task in &compiled.tasks {
            let node = task.nodes[0];
            let space = task_candidates(&compiled.graph, node).expect("space");
            assert!(!space.configs.is_empty());
            assert_eq!(space.configs.len(), space.tags.len());
            assert_eq!(space.configs.len(), space.prior_ns.len());
            let default = &space.configs[space.default];
            let k = render_candidate(&compiled.graph, node, default).expect("renders");
            assert!(
                module.kernels.contains(&k.symbol),
                "{} is not a kernel of the build",
                k.symbol
            );
            let launch = module
                .launches
                .iter()
                .find(|l| l.node == node)
                .expect("launch");
            assert_eq!(launch.grid, k.geometry.grid);
            assert_eq!(launch.block, k.geometry.block);
            assert_eq!(launch.args.len(), k.args.len());
            assert!(k.args.last().is_some_and(|a| a.output));
            assert!(k.source.contains(&format!(" {}(", k.symbol)));
        }
    }

    #[test]
    fn conv_spaces_are_large_and_priced_by_the_cost_model() {
        let compiled = resnet18(Precision::Fp16);
        let conv = compiled
            .tasks
            .iter()
            .find(|t| t.key.op == "FusedConv")
            .expect("a conv task");
        let space = task_candidates(&compiled.graph, conv.nodes[0]).expect("space");
        assert_eq!(space.family, "conv");
        assert!(space.configs.len() > 100, "{} configs", space.configs.len());
        assert!(space.prior_ns.iter().filter(|p| p.is_some()).count() > 100);
        assert_eq!(space.shape_features.len(), 5);
    }

    #[test]
    fn a_bad_config_is_an_error_naming_the_node() {
        let compiled = resnet18(Precision::Fp16);
        let conv = compiled
            .tasks
            .iter()
            .find(|t| t.key.op == "FusedConv")
            .expect("a conv task");
        let node = conv.nodes[0];
        let name = compiled.graph.node(node).name.clone();
        let bad = serde_json::json!({"kernel": "mma", "block_m": 7});
        let err = render_candidate(&compiled.graph, node, &bad).unwrap_err();
        assert!(err.to_string().contains(&name), "{err}");
        assert!(err.to_string().contains("does not parse"), "{err}");
    }
}
