//! `aotune refine`: after `tune`, tries each task's fastest measured configs
//! inside the model's own CUDA graph and keeps those that make the whole
//! graph faster (`aotune::tune::refine`). Needs the GPU, nvcc (the model is
//! built with the --best log first) and NVRTC (the candidates).

use super::gpu_model;
use super::model_args::{LaunchArg, ModelArgs};
use anyhow::Context;
use aotune::runtime::{driver_present, LoadOptions};
use aotune::tune::compile_pool::CompileIn;
use aotune::tune::nvrtc;
use aotune::tune::refine::{refine, Builder, Candidates, RefineOptions};
use aotune::tune::tunable_tasks;
use aotune_compiler::schedule::{BestLog, Target, Timing};
use aotune_compiler::tune::read_records;
use clap::Args;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct RefineArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The trial records `tune` wrote (`--log`): the candidates come from them.
    #[arg(long)]
    pub log: PathBuf,
    /// The tuning log to start from; the kept configs replace their tasks'
    /// records in it (unless --out names another file).
    #[arg(long)]
    pub best: PathBuf,
    /// Write the refined log here instead of over --best.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// What to try per task: `records`, its fastest configs from --log
    /// (--top, --within); `trigger`, the config --best gives it with the
    /// next kernel allowed to start earlier (tensor-core convs only); or
    /// `spread`, that config with its cluster split-K reduction swapped
    /// between rank 0 summing and a reduce-scatter (tensor-core convs only).
    #[arg(long, value_enum, default_value_t = CandidatesArg::Records)]
    pub candidates: CandidatesArg,
    /// Most configs tried per task besides the one --best gives it.
    #[arg(long, default_value_t = 4)]
    pub top: usize,
    /// Only configs whose median alone is within this factor of the task's
    /// fastest.
    #[arg(long, default_value_t = 1.25)]
    pub within: f64,
    /// A/B rounds per candidate (incumbent and candidate, alternating).
    #[arg(long, default_value_t = 6)]
    pub rounds: usize,
    /// Graph launches timed per side of a round.
    #[arg(long, default_value_t = 30)]
    pub runs: usize,
    /// Rounds a candidate must win to be kept [default: all but one].
    #[arg(long)]
    pub wins: Option<usize>,
    /// How the model's kernels are launched while refining (as `bench`):
    /// refine for the mode the model will run in.
    #[arg(long, value_enum, default_value_t = LaunchArg::Auto)]
    pub launch: LaunchArg,
}

/// `--candidates`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CandidatesArg {
    /// Each task's fastest configs among the records.
    Records,
    /// Each task's config with its trigger moved (`early_trigger`).
    Trigger,
    /// Each task's config with its cluster reduction swapped (`split_reduce`
    /// cluster ↔ spread).
    Spread,
}

pub fn refine_command(args: RefineArgs) -> anyhow::Result<()> {
    if !driver_present() {
        anyhow::bail!(
            "`aotune refine` times the model's graph on an NVIDIA GPU and none is usable here \
             (no driver library); run it on the GPU machine, then commit the refined log"
        );
    }
    let rounds = args.rounds.max(1);
    let options = RefineOptions {
        candidates: match args.candidates {
            CandidatesArg::Records => Candidates::Records,
            CandidatesArg::Trigger => Candidates::Trigger,
            CandidatesArg::Spread => Candidates::Spread,
        },
        top: args.top,
        within: args.within.max(1.0),
        rounds,
        runs: args.runs.max(1),
        wins_needed: args
            .wins
            .unwrap_or(rounds.saturating_sub(1))
            .clamp(1, rounds),
        tolerance: aotune::tune::tolerance(args.model.precision),
    };
    let best = BestLog::read(&args.best)
        .with_context(|| format!("reading the tuning log '{}'", args.best.display()))?;
    let records = read_records(&args.log)?;
    let compiled = args.model.compile()?;
    // refine swaps kernels in the model: cuBLASLt configs are not among its candidates.
    let tasks = tunable_tasks(&compiled, false).context("building the search spaces")?;
    let started = Instant::now();
    eprintln!(
        "building {} with '{}' (nvcc)…",
        args.model.model.display(),
        args.best.display()
    );
    let load = LoadOptions {
        launch: args.launch.mode(),
        ..Default::default()
    };
    let mut gpu = gpu_model::load_with(&args.model, Some(&args.best), &load)?;
    let device = gpu.model.device().clone();
    let here = Target {
        gpu: device.name.clone(),
        sm: format!("sm_{}", device.sm()),
        driver: String::new(),
        cuda: String::new(),
        timing: Timing::Flushed,
    };
    let include = nvrtc::setup()?;
    let exe = std::env::current_exe().context("locating the aotune binary for the compilers")?;
    let builder = Builder {
        include: &include,
        how: &CompileIn::Processes(exe),
        threads: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(4),
        timeout: Duration::from_secs(60),
    };
    eprintln!(
        "refining {} tasks on {} (up to {} configs each, {} rounds of {} graph launches per config)",
        tasks.len(),
        device.name,
        options.top,
        options.rounds,
        options.runs
    );
    let outcome = refine(
        &mut gpu.model,
        &compiled,
        &tasks,
        &records,
        &best,
        &here,
        &builder,
        &options,
        |line| eprintln!("  {line}"),
    )?;
    let refined = outcome.apply_to(&best);
    let out = args.out.as_ref().unwrap_or(&args.best);
    refined.write(out)?;

    println!("task              node                 weight  tried  kept config");
    for t in &outcome.tasks {
        let kept = t.trials.iter().rev().find(|x| x.kept);
        println!(
            "{:17} {:20} {:>6} {:>6}  {}",
            t.task,
            t.node,
            t.weight,
            t.trials.iter().filter(|x| x.skipped.is_none()).count(),
            kept.map(|k| k.config.to_string())
                .unwrap_or_else(|| "-".into())
        );
    }
    let tried: usize = outcome.tasks.iter().map(|t| t.trials.len()).sum();
    println!(
        "graph: {:.4} → {:.4} ms ({:+.1}%); {} of {tried} configs kept; {:.1} s",
        outcome.before_ms,
        outcome.after_ms,
        (outcome.after_ms / outcome.before_ms - 1.0) * 100.0,
        outcome.records.len(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "wrote {} ({} records; the kept ones marked \"timing\": \"graph\")",
        out.display(),
        refined.records.len()
    );
    Ok(())
}
