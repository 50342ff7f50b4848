//! Test support for the code generator's tests here and the template
//! sweeps of the workspace's integration tests (`tests/nvcc_sweeps.rs`,
//! `tests/gpu_templates.rs`, with the `test-support` feature): one node's
//! kernel rendered with a forced config ([`node_instance`]), sampling a
//! search space ([`sample`]), and compiling many instances through nvcc with
//! ptxas's report, failing on spills ([`compile_all`], [`nvcc`]).

pub mod nvcc;

use super::assemble::assemble;
use super::config::TaskRef;
use super::source::Instance;
use crate::ir::{Graph, NodeId};
use nvcc::{KernelReport, Nvcc};
use serde::Serialize;

/// Every `n`-th element so that about `n` remain, first and last included.
pub fn sample<T: Clone>(all: &[T], n: usize) -> Vec<T> {
    if all.len() <= n || n < 2 {
        return all.to_vec();
    }
    (0..n)
        .map(|i| all[i * (all.len() - 1) / (n - 1)].clone())
        .collect()
}

/// The instance of node 0 of `graph` with `config` forced through the
/// override path (`None`: the default), under a unique `label`.
pub fn node_instance<C: Serialize>(graph: &Graph, config: Option<&C>, label: &str) -> Instance {
    let value = config.map(|c| serde_json::to_value(c).unwrap());
    let node = graph.node(NodeId(0));
    let task = TaskRef {
        hash: label,
        op: node.op.kind(),
        node: &node.name,
        overridden: value.as_ref(),
    };
    let mut warnings = Vec::new();
    let instance = super::instantiate(graph, NodeId(0), &task, label, &mut warnings)
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    assert!(warnings.is_empty(), "{label}: {warnings:?}");
    instance
}

/// Compiles the instances in batches (two nvcc processes at a time) and
/// returns ptxas's report of every kernel; fails on any compile error,
/// missing kernel or spill.
///
/// Configs with a `min_blocks` register cap are the exception: their
/// validity rule only bounds the cap against an estimate, so ptxas may
/// spill on some (which the tuner prunes by the same report before
/// measuring, and no heuristic default has a cap); their spills are
/// counted and printed, not failed.
pub fn compile_all(nvcc: &Nvcc, name: &str, instances: Vec<Instance>) -> Vec<KernelReport> {
    let capped: std::collections::HashSet<String> = instances
        .iter()
        .filter(|i| i.config.contains("\"min_blocks\""))
        .map(|i| i.symbol.clone())
        .collect();
    let reports = compile_reports(nvcc, name, instances);
    let mut capped_spills = 0;
    for k in &reports {
        if capped.contains(&k.name) {
            capped_spills += usize::from(k.spills());
            continue;
        }
        assert!(!k.spills(), "{name}: {} spills: {k:?}", k.name);
    }
    if !capped.is_empty() {
        println!(
            "{name}: {capped_spills} of {} kernels with a min_blocks register cap spill (pruned by the tuner)",
            capped.len()
        );
    }
    reports
}

/// [`compile_all`] without the spill check (for calibration).
pub fn compile_reports(nvcc: &Nvcc, name: &str, instances: Vec<Instance>) -> Vec<KernelReport> {
    const BATCH: usize = 48;
    let batches: Vec<Vec<Instance>> = instances.chunks(BATCH).map(<[_]>::to_vec).collect();
    let sources: Vec<(String, String, Vec<String>)> = batches
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let rendered: Vec<(Instance, String)> =
                b.iter().map(|x| (x.clone(), x.symbol.clone())).collect();
            (
                format!("{name}_{i}"),
                assemble(&rendered),
                b.iter().map(|x| x.symbol.clone()).collect(),
            )
        })
        .collect();
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 4);
    let mut reports = Vec::new();
    for group in sources.chunks(workers) {
        let results: Vec<Result<Vec<KernelReport>, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = group
                .iter()
                .map(|(label, source, _)| s.spawn(move || nvcc::compile(nvcc, source, label)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("nvcc thread panicked".into()))
                })
                .collect()
        });
        for ((label, _, symbols), result) in group.iter().zip(results) {
            let r = result.unwrap_or_else(|e| panic!("{label}: {e}"));
            for symbol in symbols {
                assert!(
                    r.iter().any(|k| &k.name == symbol),
                    "{label}: no ptxas report for {symbol}"
                );
            }
            reports.extend(r);
        }
    }
    reports
}
