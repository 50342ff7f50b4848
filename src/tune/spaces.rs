//! The model's tunable tasks as the search sees them: one [`TaskSpace`] per
//! task whose op has a versioned template (`aotune_compiler::build::template_versions`,
//! the same table the build checks tuning records against), with the node
//! whose kernel stands for the task.

use aotune_compiler::build::template_versions;
use aotune_compiler::codegen::cuda::candidate::task_candidates;
use aotune_compiler::codegen::cuda::library_matmul;
use aotune_compiler::codegen::cuda::CodegenError;
use aotune_compiler::ir::NodeId;
use aotune_compiler::tune::TaskSpace;
use aotune_compiler::Compiled;

/// A task to tune and the node that represents it.
#[derive(Debug, Clone)]
pub struct TunableTask {
    pub space: TaskSpace,
    pub node: NodeId,
    /// Name of the representative node, for messages.
    pub node_name: String,
}

/// cuBLASLt heuristic ranks a Dense task's space gets with `cublaslt`.
pub const CUBLASLT_CANDIDATES: u32 = 4;
/// The rate the cuBLASLt candidates' prior assumes (about what cuBLAS ran
/// ViT-B/16's layers at on an H100, `docs/design/cublaslt-dense.md`): it
/// only orders them among the templates' priors, so the first round of a
/// large GEMM's search includes them.
const CUBLASLT_PRIOR_FLOPS: f64 = 600e12;

/// The tunable tasks of `compiled`, heaviest (weight × flops) first. With
/// `cublaslt`, each Dense task cuBLASLt can run also has its heuristic's
/// first [`CUBLASLT_CANDIDATES`] algorithms as configs
/// (`{"kernel": "cublaslt", "algo": rank}`).
pub fn tunable_tasks(
    compiled: &Compiled,
    cublaslt: bool,
) -> Result<Vec<TunableTask>, CodegenError> {
    let templates = template_versions();
    let mut out = Vec::new();
    for task in &compiled.tasks {
        let Some(template) = templates.get(&task.key.op) else {
            continue;
        };
        let Some(&node) = task.nodes.first() else {
            continue;
        };
        let mut c = task_candidates(&compiled.graph, node)?;
        if cublaslt
            && task.key.op == "Dense"
            && library_matmul::library_matmul(&compiled.graph, node, 0).is_ok()
        {
            if c.prior_ns.is_empty() {
                c.prior_ns = vec![None; c.configs.len()];
            }
            let ns = task.flops as f64 / CUBLASLT_PRIOR_FLOPS * 1e9;
            for algo in 0..CUBLASLT_CANDIDATES {
                c.configs.push(library_matmul::config(algo));
                c.prior_ns.push(Some(ns * (1.0 + 0.05 * f64::from(algo))));
            }
        }
        out.push(TunableTask {
            space: TaskSpace {
                task: task.key.hash_hex(),
                op: task.key.op.clone(),
                key: task.key.canonical.clone(),
                template: template.clone(),
                weight: task.weight,
                flops: task.flops,
                bytes: task.bytes,
                configs: c.configs,
                prior_ns: c.prior_ns,
                shape_features: c.shape_features,
                default: c.default,
            },
            node,
            node_name: compiled.graph.node(node).name.clone(),
        });
    }
    out.sort_by(|a, b| {
        let w = |t: &TunableTask| t.space.weight as u128 * u128::from(t.space.flops);
        w(b).cmp(&w(a))
            .then_with(|| a.space.task.cmp(&b.space.task))
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aotune_compiler::ir::Precision;
    use aotune_compiler::{compile_bytes, zoo, CompileOptions};

    #[test]
    fn resnet50_has_its_conv_tasks_and_valid_spaces() {
        let bytes = zoo::resnet_onnx(zoo::ResNetDepth::R50, zoo::DEFAULT_SEED);
        let compiled = compile_bytes(
            &bytes,
            "resnet50.onnx",
            &CompileOptions {
                batch: Some(1),
                precision: Precision::Fp16,
                ..CompileOptions::default()
            },
        )
        .expect("compiles");
        let tasks = tunable_tasks(&compiled, false).expect("spaces");
        let convs = tasks.iter().filter(|t| t.space.op == "FusedConv").count();
        assert!(convs >= 20, "{convs} conv tasks");
        for t in &tasks {
            t.space.check().expect("valid space");
        }
        let weights: usize = tasks
            .iter()
            .filter(|t| t.space.op == "FusedConv")
            .map(|t| t.space.weight)
            .sum();
        // ResNet-50's 53 convs, the 4 projection shortcuts fused into their blocks.
        assert_eq!(weights, 49, "every conv launch belongs to a tuned task");
    }

    /// What the tuner's builder does for real candidates: render a few
    /// configs of the heaviest task and compile them with NVRTC (no GPU
    /// needed; skipped, saying why, without libnvrtc).
    #[test]
    fn real_candidates_compile_with_nvrtc() {
        let include = match crate::tune::nvrtc::setup() {
            Ok(i) => i,
            Err(e) => {
                eprintln!("skipping: {e}");
                return;
            }
        };
        let bytes = zoo::resnet_onnx(zoo::ResNetDepth::R18, zoo::DEFAULT_SEED);
        let compiled = compile_bytes(
            &bytes,
            "resnet18.onnx",
            &CompileOptions {
                batch: Some(1),
                precision: Precision::Fp16,
                ..CompileOptions::default()
            },
        )
        .expect("compiles");
        let tasks = tunable_tasks(&compiled, false).expect("spaces");
        let t = &tasks[0];
        use aotune_compiler::codegen::cuda::candidate::{render_candidate, task_candidates};
        // Three more configs of the heaviest task, and every task's default
        // (each template NVRTC will see).
        let n = t.space.configs.len();
        let mut picks: Vec<(NodeId, serde_json::Value)> = [0, n / 2, n - 1]
            .iter()
            .map(|&i| (t.node, t.space.configs[i].clone()))
            .collect();
        for task in &compiled.tasks {
            let node = task.nodes[0];
            let space = task_candidates(&compiled.graph, node).expect("space");
            picks.push((node, space.configs[space.default].clone()));
        }
        let jobs: Vec<_> = picks
            .iter()
            .enumerate()
            .map(|(tag, (node, config))| {
                let k = render_candidate(&compiled.graph, *node, config).expect("renders");
                crate::tune::compile_pool::Job {
                    tag,
                    name: format!("{}.cu", k.symbol),
                    source: k.source,
                }
            })
            .collect();
        let start = std::time::Instant::now();
        let mut ok = 0;
        crate::tune::compile_pool::compile_all(
            jobs,
            2,
            std::time::Duration::from_secs(300),
            &include,
            &crate::tune::compile_pool::CompileIn::Threads,
            |tag, r| {
                let c = r.unwrap_or_else(|e| panic!("candidate {tag} failed: {e}"));
                assert!(c.report.registers > 0);
                eprintln!(
                    "kernel {tag}: {} registers, {} B spilled, compiled in {:.2} s",
                    c.report.registers,
                    c.report.spill_store_bytes,
                    c.compile_time.as_secs_f64()
                );
                ok += 1;
            },
        );
        assert_eq!(ok, picks.len());
        eprintln!(
            "{} candidates in {:.2} s on 2 threads",
            ok,
            start.elapsed().as_secs_f64()
        );
    }
}
