//! In-graph refinement (`aotune refine`): the tuner times each candidate
//! alone, and at batch 1 that ranking mispredicts the model's graph by
//! several µs per layer (a kernel's prologue overlaps its predecessor under
//! programmatic launches, weights and activations sit in L2 or not). This
//! step takes the model built with the best log, and for each task, heaviest
//! first, puts each of a few of its fastest measured configs into the
//! model's own CUDA graph, times the whole graph against the incumbent
//! (interleaved, several rounds) and keeps the config only when it wins
//! nearly every round. The kernels are the build's code generator's, for
//! the same node, compiled by the tuner's NVRTC builder.
//!
//! Before a candidate is timed, the graph's output with it in place is
//! compared with the output of the graph as built (three runs, the
//! precision's tolerance): the tuner checks each kernel alone, which cannot
//! show a kernel that reads its input before `griddepcontrol.wait` under
//! programmatic launches, and such a kernel would look fast here.

use super::compile_pool::{self, CompileIn, Job};
use super::spaces::TunableTask;
use crate::runtime::{LaunchKernel, Model, RuntimeError};
use aotune_compiler::codegen::cuda::candidate::render_candidate;
use aotune_compiler::codegen::cuda::library_matmul;
use aotune_compiler::codegen::cuda::CodegenError;
use aotune_compiler::schedule::{BestLog, BestRecord, Target, Timing, BEST_FORMAT};
use aotune_compiler::tune::{best_record, TuneRecord};
use aotune_compiler::Compiled;
use aotune_spec::stats::{median, rel_l2};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

/// What `refine` tries for each task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Candidates {
    /// The task's fastest configs among its records (timed alone).
    #[default]
    Records,
    /// The incumbent with its trigger moved (a tensor-core conv's
    /// `early_trigger` flipped): where the next kernel's CTAs may start
    /// only shows in the graph, so the tuner never times it.
    Trigger,
    /// The incumbent with its cluster split-K reduction swapped: a
    /// tensor-core conv reducing through rank 0 (`cluster`) tried as a reduce-scatter
    /// (`spread`, direct epilogue), and back.
    Spread,
}

/// How much `refine` tries.
#[derive(Debug, Clone, Copy)]
pub struct RefineOptions {
    /// Where the configs tried come from.
    pub candidates: Candidates,
    /// Most configs tried per task besides the incumbent.
    pub top: usize,
    /// Only configs whose measured median is within this factor of the
    /// task's fastest.
    pub within: f64,
    /// A/B rounds per candidate (incumbent and candidate, alternating).
    pub rounds: usize,
    /// Graph launches timed per side of a round (their median counts).
    pub runs: usize,
    /// A candidate is kept when it wins at least this many rounds.
    pub wins_needed: usize,
    /// Largest relative L2 distance of the graph's output with a candidate
    /// from the output as built.
    pub tolerance: f64,
}

impl Default for RefineOptions {
    fn default() -> Self {
        RefineOptions {
            candidates: Candidates::Records,
            top: 4,
            within: 1.25,
            rounds: 6,
            runs: 30,
            wins_needed: 5,
            tolerance: 1e-2,
        }
    }
}

/// Why refinement stopped.
#[derive(Debug, thiserror::Error)]
pub enum RefineError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Codegen(#[from] CodegenError),
    #[error(
        "task {task} (node `{node}`) has no launch in the built model: the build and the \
         tuner's compile of the model disagree; rebuild with the same --batch and --precision"
    )]
    NoLaunch { task: String, node: String },
    #[error(
        "task {task}: a config's kernel takes {candidate} arguments but launch {launch} of \
         the built model passes {built}"
    )]
    Arguments {
        task: String,
        launch: usize,
        candidate: usize,
        built: usize,
    },
}

/// One candidate tried in the graph.
#[derive(Debug, Clone)]
pub struct Trial {
    pub config: serde_json::Value,
    /// Its median alone (the record's).
    pub alone_us: f64,
    /// Median graph time with the incumbent, and with this config.
    pub incumbent_ms: f64,
    pub candidate_ms: f64,
    /// Rounds the candidate won.
    pub wins: usize,
    pub kept: bool,
    /// Why it was not tried (a compile or load failure).
    pub skipped: Option<String>,
}

/// What refinement did to one task.
#[derive(Debug, Clone)]
pub struct TaskRefinement {
    pub task: String,
    pub node: String,
    pub weight: usize,
    pub trials: Vec<Trial>,
}

/// What `refine` found.
#[derive(Debug, Clone)]
pub struct RefineOutcome {
    pub before_ms: f64,
    pub after_ms: f64,
    pub tasks: Vec<TaskRefinement>,
    /// The kept configs, as best-log records ([`Timing::Graph`]).
    pub records: Vec<BestRecord>,
}

impl RefineOutcome {
    /// `best` with the records of the tasks a config was kept for replaced.
    pub fn apply_to(&self, best: &BestLog) -> BestLog {
        let fresh = BestLog {
            format: BEST_FORMAT.to_string(),
            records: self.records.clone(),
        };
        aotune_compiler::tune::merge_into(best, &fresh)
    }
}

/// The configs of `task` worth trying in the graph: its successful records
/// for `template` on `gpu` (timed alone, flushed), fastest first, one per
/// config, within `within` of the fastest, without `incumbent`, at most
/// `top`.
pub fn shortlist<'r>(
    records: &'r [TuneRecord],
    task: &str,
    template: &str,
    gpu: &Target,
    incumbent: &serde_json::Value,
    top: usize,
    within: f64,
) -> Vec<&'r TuneRecord> {
    let mut mine: Vec<(&TuneRecord, f64)> = records
        .iter()
        .filter(|r| r.task == task && r.template == template)
        .filter(|r| r.target.same_gpu(gpu) && r.target.timing == Timing::Flushed)
        .filter_map(|r| r.success_us().map(|us| (r, us)))
        .collect();
    mine.sort_by(|a, b| a.1.total_cmp(&b.1));
    let Some(&(_, fastest)) = mine.first() else {
        return Vec::new();
    };
    let mut seen: Vec<&serde_json::Value> = vec![incumbent];
    let mut out = Vec::new();
    for (r, us) in mine {
        if out.len() >= top || us > fastest * within {
            break;
        }
        if seen.contains(&&r.config) {
            continue;
        }
        seen.push(&r.config);
        out.push(r);
    }
    out
}

/// The task's record in `best` for this template and GPU.
fn record_in<'b>(best: &'b BestLog, t: &TunableTask, gpu: &Target) -> Option<&'b BestRecord> {
    best.records.iter().find(|r| {
        r.task == t.space.task && r.template == t.space.template && r.target.same_gpu(gpu)
    })
}

/// The config the model runs for a task: its record in `best` for this
/// template and GPU, else the template's default.
/// The record `best` holds for `t`, with its config turned into `variant`
/// (none when it has no record or `variant` does not apply).
fn variant_of(
    best: &BestLog,
    t: &TunableTask,
    gpu: &Target,
    variant: fn(&serde_json::Value) -> Option<serde_json::Value>,
) -> Vec<BestRecord> {
    record_in(best, t, gpu)
        .and_then(|r| {
            variant(&r.config).map(|config| BestRecord {
                config,
                ..r.clone()
            })
        })
        .into_iter()
        .collect()
}

fn incumbent(best: &BestLog, t: &TunableTask, gpu: &Target) -> serde_json::Value {
    record_in(best, t, gpu)
        .map(|r| r.config.clone())
        .unwrap_or_else(|| t.space.configs[t.space.default].clone())
}

/// The fields of a tensor-core conv config (`mma`, `wgmma`), to edit into
/// a variant; `None` for every other kernel.
fn tensor_core_fields(
    config: &serde_json::Value,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let kernel = config.get("kernel")?.as_str()?;
    (kernel == "mma" || kernel == "wgmma")
        .then(|| config.as_object().cloned())
        .flatten()
}

/// `config` with its trigger moved: a tensor-core conv config (`mma`,
/// `wgmma`) with `early_trigger` flipped (absent when false, as the configs
/// serialize); `None` for every other kernel and for warp-specialized
/// tiles (whose trigger follows each warpgroup's last tile).
pub fn trigger_variant(config: &serde_json::Value) -> Option<serde_json::Value> {
    let mut out = tensor_core_fields(config)?;
    if out.get("warp_specialized") == Some(&serde_json::Value::Bool(true)) {
        return None;
    }
    let early = out
        .get("early_trigger")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    if early {
        out.remove("early_trigger");
    } else {
        out.insert("early_trigger".into(), serde_json::Value::Bool(true));
    }
    Some(serde_json::Value::Object(out))
}

/// `config` with its cluster reduction swapped: a tensor-core conv config
/// (`mma`, `wgmma`) whose split-K slices reduce through rank 0
/// (`split_reduce: cluster`) as a reduce-scatter (`spread`, which needs the
/// direct epilogue), and a `spread` one back to `cluster`; `None` for every
/// other config.
pub fn spread_variant(config: &serde_json::Value) -> Option<serde_json::Value> {
    let mut out = tensor_core_fields(config)?;
    let swapped = match out.get("split_reduce")?.as_str()? {
        "cluster" => "spread",
        "spread" => "cluster",
        _ => return None,
    };
    out.insert("split_reduce".into(), swapped.into());
    out.insert("epilogue".into(), "direct".into());
    Some(serde_json::Value::Object(out))
}

/// The largest distance over three runs of the graph from `want`.
fn output_distance(
    model: &mut Model,
    input: &[f32],
    want: &[f32],
    got: &mut [f32],
) -> Result<f64, RuntimeError> {
    let mut worst = 0.0f64;
    for _ in 0..3 {
        model.infer(input, got)?;
        // A NaN (a NaN in `got` only) is the worst distance.
        let d = rel_l2(got, want);
        worst = if d.is_nan() {
            f64::INFINITY
        } else {
            worst.max(d)
        };
    }
    Ok(worst)
}

/// Median of a timing run.
fn median_ms(ms: Vec<f32>) -> f64 {
    median(&ms.iter().map(|&x| f64::from(x)).collect::<Vec<_>>())
}

/// The graph's median time with `kernel` in `launches`.
fn time_with(
    model: &mut Model,
    launches: &[usize],
    kernel: LaunchKernel,
    runs: usize,
) -> Result<f64, RuntimeError> {
    // SAFETY: `kernel` is the build's kernel of these launches or one
    // rendered by the build's code generator for the same node (the
    // argument count is checked before), so it takes the same parameters.
    unsafe { model.set_launch_kernel(launches, kernel) }?;
    Ok(median_ms(model.time_graph(3, runs)?))
}

/// The A/B of `incumbent` against `candidate`: median graph times over the
/// rounds and the candidate's wins. The order alternates each round. Leaves
/// `incumbent` in place.
fn ab(
    model: &mut Model,
    launches: &[usize],
    incumbent: LaunchKernel,
    candidate: LaunchKernel,
    o: &RefineOptions,
) -> Result<(f64, f64, usize), RuntimeError> {
    let (mut a, mut b, mut wins) = (Vec::new(), Vec::new(), 0);
    for round in 0..o.rounds.max(1) {
        let (x, y) = if round % 2 == 0 {
            let x = time_with(model, launches, incumbent, o.runs)?;
            (x, time_with(model, launches, candidate, o.runs)?)
        } else {
            let y = time_with(model, launches, candidate, o.runs)?;
            (time_with(model, launches, incumbent, o.runs)?, y)
        };
        wins += usize::from(y < x);
        a.push(x);
        b.push(y);
    }
    // SAFETY: as in `time_with`.
    unsafe { model.set_launch_kernel(launches, incumbent) }?;
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok((med(a), med(b), wins))
}

/// The compile side of refinement: where NVRTC runs.
pub struct Builder<'a> {
    pub include: &'a Path,
    pub how: &'a CompileIn,
    pub threads: usize,
    pub timeout: Duration,
}

/// Refines `model` (built from `compiled` with `best`) task by task, as the
/// module documentation says. `progress` gets one line per candidate.
#[allow(clippy::too_many_arguments)]
pub fn refine(
    model: &mut Model,
    compiled: &Compiled,
    tasks: &[TunableTask],
    records: &[TuneRecord],
    best: &BestLog,
    gpu: &Target,
    builder: &Builder<'_>,
    options: &RefineOptions,
    mut progress: impl FnMut(&str),
) -> Result<RefineOutcome, RefineError> {
    // Heaviest first: weight × the incumbent's measured median.
    let mut order: Vec<(&TunableTask, serde_json::Value, f64)> = tasks
        .iter()
        .map(|t| {
            let inc = incumbent(best, t, gpu);
            let us = records
                .iter()
                .filter(|r| r.task == t.space.task && r.config == inc)
                .filter_map(TuneRecord::success_us)
                .fold(f64::INFINITY, f64::min);
            let cost = if us.is_finite() { us } else { 0.0 } * t.space.weight as f64;
            (t, inc, cost)
        })
        .collect();
    order.sort_by(|a, b| b.2.total_cmp(&a.2));

    // Every candidate of every task, rendered and compiled in one batch.
    let mut rendered = Vec::new();
    for (i, (t, inc, _)) in order.iter().enumerate() {
        // A task the log runs through cuBLASLt has no kernel in the model to
        // swap, and cuBLASLt configs render no kernel: refine tries neither.
        if library_matmul::requested(Some(inc)).is_some() {
            continue;
        }
        // Each candidate as the best-log record it becomes when kept.
        let list: Vec<BestRecord> = match options.candidates {
            Candidates::Records => shortlist(
                records,
                &t.space.task,
                &t.space.template,
                gpu,
                inc,
                options.top,
                options.within,
            )
            .into_iter()
            .map(best_record)
            .collect(),
            Candidates::Trigger => variant_of(best, t, gpu, trigger_variant),
            Candidates::Spread => variant_of(best, t, gpu, spread_variant),
        };
        for c in list {
            if library_matmul::requested(Some(&c.config)).is_some() {
                continue;
            }
            let kernel = render_candidate(&compiled.graph, t.node, &c.config)?;
            rendered.push((i, c, kernel));
        }
    }
    let jobs = rendered
        .iter()
        .enumerate()
        .map(|(tag, (i, _, k))| Job {
            tag,
            name: format!("refine_{i}_{tag}.cu"),
            source: k.source.clone(),
        })
        .collect();
    let mut cubins = HashMap::new();
    compile_pool::compile_all(
        jobs,
        builder.threads,
        builder.timeout,
        builder.include,
        builder.how,
        |tag, r| {
            cubins.insert(tag, r);
        },
    );

    let input = aotune_compiler::zoo::fill(3, 0.0, 1.0, model.spec().inputs[0].elements());
    let mut want = vec![0.0f32; model.spec().outputs[0].elements()];
    model.infer(&input, &mut want)?;
    let mut got = want.clone();
    let before_ms = median_ms(model.time_graph(10, options.runs * options.rounds)?);
    let spec_launches: Vec<(String, usize)> = model
        .spec()
        .launches
        .iter()
        .map(|l| (l.node.to_string(), l.args.len()))
        .collect();
    let mut out_tasks = Vec::new();
    let mut kept_records = Vec::new();
    for (i, (t, _, _)) in order.iter().enumerate() {
        let task = compiled
            .tasks
            .iter()
            .find(|k| k.key.hash_hex() == t.space.task);
        let names: Vec<String> = task
            .map(|k| {
                k.nodes
                    .iter()
                    .map(|&n| compiled.graph.node(n).name.clone())
                    .collect()
            })
            .unwrap_or_default();
        let launches: Vec<usize> = spec_launches
            .iter()
            .enumerate()
            .filter(|(_, (node, _))| names.contains(node))
            .map(|(index, _)| index)
            .collect();
        let Some(&first) = launches.first() else {
            return Err(RefineError::NoLaunch {
                task: t.space.task.clone(),
                node: t.node_name.clone(),
            });
        };
        // A task the build runs through cuBLASLt has no kernel to swap.
        let Some(mut current) = model.launch_kernel(first) else {
            continue;
        };
        let mut trials = Vec::new();
        for (tag, (_, r, kernel)) in rendered.iter().enumerate().filter(|(_, c)| c.0 == i) {
            let alone_us = r.median_us;
            let skip = |why: String| Trial {
                config: r.config.clone(),
                alone_us,
                incumbent_ms: f64::NAN,
                candidate_ms: f64::NAN,
                wins: 0,
                kept: false,
                skipped: Some(why),
            };
            if kernel.args.len() != spec_launches[first].1 {
                return Err(RefineError::Arguments {
                    task: t.space.task.clone(),
                    launch: first,
                    candidate: kernel.args.len(),
                    built: spec_launches[first].1,
                });
            }
            let cubin = match cubins.remove(&tag) {
                Some(Ok(c)) => c,
                Some(Err(e)) => {
                    trials.push(skip(format!("did not compile: {e}")));
                    continue;
                }
                None => {
                    trials.push(skip("the compile pool gave no result".into()));
                    continue;
                }
            };
            let g = kernel.geometry;
            let loaded =
                model.load_kernel(&cubin.image, &kernel.symbol, g.grid, g.block, g.smem_bytes);
            let candidate = match loaded {
                Ok(k) => k,
                Err(e) => {
                    trials.push(skip(format!("did not load: {e}")));
                    continue;
                }
            };
            // SAFETY: as in `time_with`.
            unsafe { model.set_launch_kernel(&launches, candidate) }?;
            let off = output_distance(model, &input, &want, &mut got)?;
            // SAFETY: as in `time_with`.
            unsafe { model.set_launch_kernel(&launches, current) }?;
            if off.is_nan() || off > options.tolerance {
                progress(&format!(
                    "{} ({}): {} changes the graph's output (rel. L2 {off:.3e} > {:.1e}):                      not tried (a read before the grid dependency wait?)",
                    t.node_name, t.space.task, r.config, options.tolerance
                ));
                trials.push(skip(format!(
                    "the graph's output moved by rel. L2 {off:.3e} with it in place"
                )));
                continue;
            }
            let (incumbent_ms, candidate_ms, wins) =
                ab(model, &launches, current, candidate, options)?;
            let kept = wins >= options.wins_needed && candidate_ms < incumbent_ms;
            progress(&format!(
                "{} ({}): {} {:.4} → {:.4} ms, {wins}/{} rounds{}",
                t.node_name,
                t.space.task,
                r.config,
                incumbent_ms,
                candidate_ms,
                options.rounds,
                if kept { ", kept" } else { "" }
            ));
            if kept {
                // SAFETY: as in `time_with`.
                unsafe { model.set_launch_kernel(&launches, candidate) }?;
                current = candidate;
                kept_records.retain(|k: &BestRecord| k.task != r.task);
                kept_records.push(BestRecord {
                    target: Target {
                        timing: Timing::Graph,
                        ..r.target.clone()
                    },
                    ..r.clone()
                });
            }
            trials.push(Trial {
                config: r.config.clone(),
                alone_us,
                incumbent_ms,
                candidate_ms,
                wins,
                kept,
                skipped: None,
            });
        }
        out_tasks.push(TaskRefinement {
            task: t.space.task.clone(),
            node: t.node_name.clone(),
            weight: t.space.weight,
            trials,
        });
    }
    let after_ms = median_ms(model.time_graph(10, options.runs * options.rounds)?);
    Ok(RefineOutcome {
        before_ms,
        after_ms,
        tasks: out_tasks,
        records: kept_records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use aotune_compiler::tune::RECORD_FORMAT;
    use serde_json::json;

    fn target(gpu: &str, timing: Timing) -> Target {
        Target {
            gpu: gpu.into(),
            sm: "90".into(),
            driver: "580".into(),
            cuda: "13.0".into(),
            timing,
        }
    }

    fn rec(task: &str, block: u32, us: Option<f64>, on: Target) -> TuneRecord {
        TuneRecord {
            format: RECORD_FORMAT.into(),
            task: task.into(),
            op: "FusedConv".into(),
            key: String::new(),
            template: "conv/2".into(),
            config: json!({ "block": block }),
            target: on,
            batch: 1,
            precision: "fp16".into(),
            compiler: String::new(),
            repeats_us: us.into_iter().collect(),
            median_us: us,
            compile_ms: 1.0,
            failure: None,
            timestamp: String::new(),
        }
    }

    #[test]
    fn kept_configs_replace_only_their_tasks_in_the_best_log() {
        let h200 = target("NVIDIA H200", Timing::Flushed);
        let best = aotune_compiler::tune::best_log(&[
            rec("a", 1, Some(10.0), h200.clone()),
            rec("b", 2, Some(5.0), h200.clone()),
        ]);
        let kept = BestRecord {
            config: json!({ "block": 3 }),
            median_us: 10.4,
            target: target("NVIDIA H200", Timing::Graph),
            ..best.records[0].clone()
        };
        let outcome = RefineOutcome {
            before_ms: 1.0,
            after_ms: 0.9,
            tasks: Vec::new(),
            records: vec![kept],
        };
        let got: Vec<(String, u64, Timing)> = outcome
            .apply_to(&best)
            .records
            .iter()
            .map(|r| {
                (
                    r.task.clone(),
                    r.config["block"].as_u64().unwrap(),
                    r.target.timing,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("a".into(), 3, Timing::Graph),
                ("b".into(), 2, Timing::Flushed)
            ]
        );
    }

    #[test]
    fn the_spread_variant_swaps_the_cluster_reduction_of_tensor_core_convs_only() {
        let mma = json!({"kernel": "mma", "split_k": 8, "split_reduce": "cluster",
                         "epilogue": "staged", "early_trigger": true});
        let spread = spread_variant(&mma).unwrap();
        assert_eq!(spread["split_reduce"], json!("spread"));
        assert_eq!(spread["epilogue"], json!("direct"));
        assert_eq!(spread["early_trigger"], json!(true));
        let back = spread_variant(&spread).unwrap();
        assert_eq!(back["split_reduce"], json!("cluster"));
        let wgmma = json!({"kernel": "wgmma", "split_k": 3, "split_reduce": "cluster"});
        assert_eq!(
            spread_variant(&wgmma).unwrap()["split_reduce"],
            json!("spread")
        );
        for other in [
            json!({"kernel": "mma", "split_k": 1}),
            json!({"kernel": "mma", "split_k": 4, "split_reduce": "global"}),
            json!({"kernel": "simt", "split_k": 2}),
            json!({"kernel": "gemv"}),
        ] {
            assert_eq!(spread_variant(&other), None, "{other}");
        }
    }

    #[test]
    fn the_trigger_variant_flips_early_trigger_of_tensor_core_convs_only() {
        let mma = json!({"kernel": "mma", "block_m": 32, "split_k": 4});
        let on = trigger_variant(&mma).unwrap();
        assert_eq!(on["early_trigger"], json!(true));
        assert_eq!(on["block_m"], json!(32));
        // flipped back, it is the config as it serializes: the field absent.
        assert_eq!(trigger_variant(&on).unwrap(), mma);
        let ws = json!({"kernel": "wgmma", "block_m": 64, "warp_specialized": true});
        assert_eq!(trigger_variant(&ws), None);
        let wgmma = json!({"kernel": "wgmma", "block_m": 64, "early_trigger": true});
        assert!(trigger_variant(&wgmma)
            .unwrap()
            .get("early_trigger")
            .is_none());
        for other in [
            json!({"kernel": "gemv", "rows": 1}),
            json!({"kernel": "simt"}),
            json!({"block_m": 64}),
        ] {
            assert_eq!(trigger_variant(&other), None, "{other}");
        }
    }

    #[test]
    fn output_distance_is_relative_and_nan_is_infinite() {
        assert_eq!(rel_l2(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((rel_l2(&[0.0, 4.0], &[0.0, 5.0]) - 0.2).abs() < 1e-12);
        // rel_l2 gives NaN; output_distance counts it as the worst (infinite).
        assert!(rel_l2(&[f32::NAN, 1.0], &[1.0, 1.0]).is_nan());
    }

    #[test]
    fn the_shortlist_is_fastest_first_unique_near_the_best_and_flushed_only() {
        let h200 = target("NVIDIA H200", Timing::Flushed);
        let records = vec![
            rec("a", 1, Some(10.0), h200.clone()),
            rec("a", 2, Some(11.0), h200.clone()),
            rec("a", 2, Some(10.5), h200.clone()),
            rec("a", 3, Some(14.0), h200.clone()),
            rec("a", 4, Some(10.2), h200.clone()),
            rec("a", 5, Some(9.0), target("NVIDIA A100", Timing::Flushed)),
            rec("a", 6, Some(9.0), target("NVIDIA H200", Timing::Chained)),
            rec("a", 7, None, h200.clone()),
            rec("b", 8, Some(1.0), h200.clone()),
        ];
        let got: Vec<u64> = shortlist(
            &records,
            "a",
            "conv/2",
            &h200,
            &json!({"block": 1}),
            8,
            1.25,
        )
        .iter()
        .map(|r| r.config["block"].as_u64().unwrap())
        .collect();
        // 1 is the incumbent; 3 is 40% slower than the fastest; 5 and 6 are
        // another GPU and another regime; 7 failed.
        assert_eq!(got, vec![4, 2]);
        let capped = shortlist(
            &records,
            "a",
            "conv/2",
            &h200,
            &json!({"block": 9}),
            2,
            1.25,
        );
        assert_eq!(capped.len(), 2);
        assert!(shortlist(&records, "c", "conv/2", &h200, &json!({}), 4, 2.0).is_empty());
    }
}
