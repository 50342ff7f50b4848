//! `aotune tune`: measures kernel configs of every tunable task on the GPU
//! and writes the records (`*.records.jsonl`, every trial) and the committed
//! log (`*.best.json`, the best config per task) the build applies.
//!
//! The model goes through exactly the stages `aotune build` runs
//! ([`ModelArgs::compile`]), and each candidate is rendered by the build's
//! own code generator, so a tuned config is the kernel the build emits.

use super::gpu_model;
use super::model_args::ModelArgs;
use super::tune_progress::BarProgress;
use anyhow::Context;
use aotune::runtime::{driver_present, LaunchMode, LoadOptions};
use aotune::tune::{tunable_tasks, GpuMeasurer, MeasureSettings};
use aotune_compiler::schedule::{BestLog, Timing};
use aotune_compiler::tune::{
    best_log, merge_into, read_records, tune, RecordSink, RunSetup, TuneOptions,
};
use clap::{Args, ValueEnum};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct TuneArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Records of every trial (JSON lines, appended).
    #[arg(long)]
    pub log: PathBuf,
    /// The tuning log to write: the best config per task (what builds apply).
    #[arg(long)]
    pub best: PathBuf,
    /// Wall-clock budget for measuring (compiling included).
    #[arg(long, default_value_t = 5.0)]
    pub budget_minutes: f64,
    /// Configs measured per task before its cap grows: once every task is
    /// done with time left in the budget, the tasks stopped by this cap go on
    /// with it doubled, until the budget or early stopping ends them.
    #[arg(long, default_value_t = 64)]
    pub trials_per_task: usize,
    /// Stop each task at --trials-per-task even with budget left.
    #[arg(long)]
    pub fixed_cap: bool,
    /// Configs compiled and measured per round of one task.
    #[arg(long, default_value_t = 32)]
    pub round_size: usize,
    /// Continue from the records in --log: configs measured there (same
    /// task, template and GPU) are not measured again.
    #[arg(long)]
    pub resume: bool,
    /// Seed of the search (runs are deterministic given the measurements).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// NVRTC compile threads [default: every core].
    #[arg(long)]
    pub compile_threads: Option<usize>,
    /// Where NVRTC runs: `processes` compiles each candidate in its own
    /// `aotune nvrtc-compile` child (a compiler crash costs only that
    /// candidate, a hung compile is killed at its deadline, and compiles
    /// scale with the cores: NVRTC serializes the threads of one process,
    /// 16.7 vs 50.7 compiles/s on 16 cores of the H200 machine,
    /// bench/probes/nvrtc_scaling.sh); `threads` keeps them in this process.
    #[arg(long, value_enum, default_value_t = CompileWhere::Processes)]
    pub compile_in: CompileWhere,
    /// How a candidate is timed: `flushed` (one launch between two
    /// events, after 128 MiB written to evict the L2, so weights and
    /// activations come from DRAM) or `chained` (a CUDA graph of 10
    /// launches back to back, as programmatic dependent launches where the
    /// model runs that way (batch <= 8), per launch: the regime of `bench
    /// --per-layer`, with no event or host launch between kernels). Records
    /// carry it in their target, so `--resume` and the best log keep the
    /// two apart.
    #[arg(long, value_enum, default_value_t = TimingArg::Flushed)]
    pub timing: TimingArg,
    /// Skip the closing end-to-end comparison (default vs tuned build, which
    /// needs nvcc).
    #[arg(long)]
    pub no_e2e: bool,
    /// Also time cuBLASLt (its heuristic's first 4 algorithms) for each
    /// Dense task it can run (fp16/bf16), beside the templates: a task's
    /// record then picks it where it is fastest, and the built model needs
    /// libcublasLt on the machine that runs it. Off by default.
    #[arg(long)]
    pub cublaslt_candidates: bool,
}

/// `--timing`: how candidates are timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TimingArg {
    /// One launch after an L2 flush.
    Flushed,
    /// Chains of launches in a CUDA graph.
    Chained,
}

impl From<TimingArg> for Timing {
    fn from(a: TimingArg) -> Self {
        match a {
            TimingArg::Flushed => Timing::Flushed,
            TimingArg::Chained => Timing::Chained,
        }
    }
}

/// Where `tune` runs NVRTC (`--compile-in`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompileWhere {
    /// A child process per candidate (scales with the cores).
    Processes,
    /// Threads of the tuner's own process.
    Threads,
}

pub fn tune_command(args: TuneArgs) -> anyhow::Result<()> {
    if args.model.dense_cublaslt {
        anyhow::bail!(
            "--dense-cublaslt runs every eligible Dense layer through cuBLASLt, which leaves \
             their tuning nothing to decide; `aotune tune --cublaslt-candidates` times cuBLASLt \
             beside the templates and records it where it is fastest"
        );
    }
    if !driver_present() {
        anyhow::bail!(
            "`aotune tune` measures kernels on an NVIDIA GPU and none is usable here (no driver \
             library); run it on the GPU machine, then commit the --best file"
        );
    }
    if args.log.exists() && !args.resume {
        anyhow::bail!(
            "'{}' already holds records: pass --resume to continue from them, or choose another --log",
            args.log.display()
        );
    }
    // Records already in --best for tasks this run measures no config of
    // (other batch sizes or precisions sharing one committed log, tasks the
    // budget does not reach) are kept; read it now so a bad file stops the
    // run before it measures anything.
    let existing_best =
        if args.best.exists() {
            Some(BestLog::read(&args.best).with_context(|| {
                format!("reading the existing --best '{}'", args.best.display())
            })?)
        } else {
            None
        };
    let compiled = args.model.compile()?;
    let tasks =
        tunable_tasks(&compiled, args.cublaslt_candidates).context("building the search spaces")?;
    let nodes: HashMap<String, _> = tasks
        .iter()
        .map(|t| (t.space.task.clone(), t.node))
        .collect();
    let spaces: Vec<_> = tasks.iter().map(|t| t.space.clone()).collect();
    let mut settings = MeasureSettings::new(args.model.precision);
    if let Some(n) = args.compile_threads {
        settings.compile_threads = n.max(1);
    }
    settings.compile_processes = args.compile_in == CompileWhere::Processes;
    settings.timing = args.timing.into();
    settings.programmatic =
        LaunchMode::Auto.programmatic(compiled.batch.unwrap_or(1), args.model.precision);
    let (compile_threads, compile_processes) =
        (settings.compile_threads, settings.compile_processes);
    let scratch = std::env::temp_dir().join(format!("aotune-tune-{}", std::process::id()));
    let exe = std::env::current_exe().context("locating the aotune binary for the worker")?;
    let mut measurer = GpuMeasurer::new(&compiled.graph, nodes, exe, scratch.clone(), settings)
        .context("starting the measuring worker")?;
    let target = measurer.target().clone();
    let batch = compiled.batch.unwrap_or(1);
    eprintln!(
        "tuning {} (batch {batch}, {}) on {} ({}, driver {}, CUDA {}, timing {}): {} tasks, \
         {} configs in their spaces; NVRTC on {} threads{}",
        args.model.model.display(),
        args.model.precision,
        target.gpu,
        target.sm,
        target.driver,
        target.cuda,
        target.timing,
        spaces.len(),
        spaces.iter().map(|s| s.configs.len()).sum::<usize>(),
        compile_threads,
        if compile_processes {
            ", a child process per candidate"
        } else {
            " of this process (--compile-in threads)"
        }
    );
    let previous = if args.resume && args.log.exists() {
        read_records(&args.log)?
    } else {
        Vec::new()
    };
    let setup = RunSetup {
        target: target.clone(),
        batch,
        precision: args.model.precision.to_string(),
        compiler: format!("aotune {}", env!("CARGO_PKG_VERSION")),
    };
    if let Some(dir) = args.log.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating '{}'", dir.display()))?;
    }
    let mut sink = RecordSink::append_to(&args.log, setup)?;
    let options = TuneOptions {
        budget: Duration::from_secs_f64(args.budget_minutes.max(0.0) * 60.0),
        trials_per_task: args.trials_per_task.max(1),
        grow_caps: !args.fixed_cap,
        batch_size: args.round_size.max(1),
        seed: args.seed,
        ..TuneOptions::default()
    };
    let mut progress = BarProgress::new(spaces.len(), options.budget);
    let started = Instant::now();
    let outcome = tune(
        &spaces,
        &mut measurer,
        &mut sink,
        &previous,
        &options,
        &mut progress,
    )?;
    progress.finish();
    let wall = started.elapsed();
    let _ = std::fs::remove_dir_all(&scratch);

    // Only this model's tasks are promoted from the records: --log may hold
    // tasks an earlier version of the passes had (a layer fused away since),
    // which the driver already reported as not resumed.
    let ours: std::collections::HashSet<&str> = spaces.iter().map(|s| s.task.as_str()).collect();
    let mut all: Vec<_> = previous
        .into_iter()
        .filter(|r| ours.contains(r.task.as_str()))
        .collect();
    all.extend(outcome.records.iter().cloned());
    let mut best = best_log(&all);
    if let Some(existing) = &existing_best {
        best = merge_into(existing, &best);
    }
    best.write(&args.best)?;

    let report = outcome.report();
    println!("{report}");
    println!(
        "wall time {:.1} s: waiting for compiles {:.1} s (the pool busy {:.1} s, the rest of it \
         behind the runs), running candidates {:.1} s, the rest (search, setup, records) {:.1} s; \
         {} kernels compiled, {} pruned by ptxas's report, {} duplicate cubins reused, {} worker \
         restarts",
        wall.as_secs_f64(),
        measurer.compile_wall.as_secs_f64(),
        measurer.compile_busy.as_secs_f64(),
        measurer.run_wall.as_secs_f64(),
        wall.saturating_sub(measurer.compile_wall + measurer.run_wall)
            .as_secs_f64(),
        measurer.compiled,
        measurer.pruned,
        measurer.duplicates,
        measurer.restarts()
    );
    println!(
        "wrote {} ({} records) and {}",
        args.best.display(),
        best.records.len(),
        args.log.display()
    );
    drop(measurer);
    if !args.no_e2e {
        end_to_end(&args)?;
    }
    println!(
        "next: `aotune refine {} --batch {} --precision {} --log {} --best {}` tries the \
         fastest configs in the model's own CUDA graph (then again with `--candidates trigger`); \
         it paid 3–4% at batches 1 and 8 on the H200",
        args.model.model.display(),
        batch,
        args.model.precision,
        args.log.display(),
        args.best.display()
    );
    Ok(())
}

/// Builds the model with and without the tuning log and times both forward
/// passes (CUDA graph, events, median of 200 after 20 warm-up runs).
fn end_to_end(args: &TuneArgs) -> anyhow::Result<()> {
    let options = LoadOptions::default();
    let time = |tuning: Option<&PathBuf>| -> anyhow::Result<f32> {
        let mut gpu = gpu_model::load_with(&args.model, tuning, &options)?;
        let mut ms = gpu.model.time_graph(20, 200)?;
        ms.sort_by(f32::total_cmp);
        Ok(ms[ms.len() / 2])
    };
    let default_ms = time(None).context("timing the default build")?;
    let tuned_ms = time(Some(&args.best)).context("timing the tuned build")?;
    println!(
        "end to end (CUDA graph, median of 200): default {default_ms:.4} ms, tuned {tuned_ms:.4} ms, \
         {:.2}× faster",
        default_ms / tuned_ms
    );
    Ok(())
}

/// `aotune tune-worker` (hidden): the measuring process `tune` starts.
pub fn worker() -> anyhow::Result<()> {
    aotune::tune::worker_main().context("the tune worker's pipes failed")
}

/// `aotune nvrtc-compile` (hidden): compiles one candidate for `tune
/// --compile-in processes` (request and source on stdin, cubin on stdout).
pub fn nvrtc_compile() -> anyhow::Result<()> {
    aotune::tune::compile_child_main().context("the compiler process's pipes failed")
}
