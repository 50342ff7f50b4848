//! The tuner's fault handling on a real GPU, through the real measuring
//! worker (`aotune tune-worker`, the binary this package builds): a
//! candidate that traps and one that never ends (killed at the run timeout)
//! are recorded as failed with their reason, the worker is restarted after
//! each, and a good candidate measured after them is timed normally; then a
//! whole `tune` run over the three of them and the default finishes with
//! each one's record.
//!
//! The task is the lightest conv of the zoo's ResNet-18 (batch 1, fp16);
//! the bad candidates and the good one replace configs of its space through
//! `GpuMeasurer::replace_candidate`, each with the default's arguments and
//! launch geometry. The good one is the default kernel under another
//! symbol, so its output matches the reference exactly whatever the GPU.
//!
//! Also: the worker times a Dense task's cuBLASLt configs (`tune
//! --cublaslt-candidates`) on the tiny ViT fixture, each checked against the
//! template default's output first.
//!
//! Skips (`aotune_compiler::skip`) without an NVIDIA driver library or
//! without libnvrtc; a driver or NVRTC that is present but fails fails.
//! `AOTUNE_BIN` names the `aotune` binary to start the worker from when
//! this test binary runs away from its build (default: the build's own).

use aotune::runtime::driver_present;
use aotune::tune::protocol::Repeats;
use aotune::tune::{compile_pool, nvrtc, tunable_tasks, GpuMeasurer, MeasureSettings, TunableTask};
use aotune_compiler::codegen::cuda::candidate::{render_candidate, CandidateKernel};
use aotune_compiler::ir::Precision;
use aotune_compiler::skip::skip;
use aotune_compiler::tune::{
    best_log, read_records, tune, FailStage, Measurer, NoProgress, RecordSink, RunSetup, TaskSpace,
    Trial, TrialOutcome, TuneOptions, TuneRecord,
};
use aotune_compiler::{compile_bytes, zoo, CompileOptions, Compiled};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

mod common;
use std::time::{Duration, Instant};

/// How long the worker may take to answer one request: the candidate that
/// never ends is killed after this (twice in the test).
const RUN_TIMEOUT: Duration = Duration::from_secs(5);

/// The `aotune` binary whose hidden `tune-worker` subcommand is the
/// measuring worker: `$AOTUNE_BIN` when set (a test binary carried to
/// another machine, with the CLI beside it: `AOTUNE_BIN=.device/aotune`),
/// else the one this build made.
fn aotune_exe() -> PathBuf {
    let exe = std::env::var_os("AOTUNE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_aotune")));
    assert!(
        exe.is_file(),
        "the aotune binary {} is not there (set AOTUNE_BIN)",
        exe.display()
    );
    exe
}

/// A kernel with `args` pointer parameters whose body is `body`.
fn raw_source(symbol: &str, args: usize, body: &str) -> String {
    let params: Vec<String> = (0..args).map(|i| format!("float* a{i}")).collect();
    format!(
        "extern \"C\" __global__ void {symbol}({}) {{\n    {body}\n}}\n",
        params.join(", ")
    )
}

/// Every thread executes `trap`: the launch fails with a sticky error
/// (`CUDA_ERROR_LAUNCH_FAILED` or similar) and the context is lost.
fn trap_source(symbol: &str, args: usize) -> String {
    raw_source(symbol, args, "__trap();")
}

/// Never returns (the sleep keeps the loop from being optimized away).
fn spin_source(symbol: &str, args: usize) -> String {
    raw_source(symbol, args, "for (;;) { __nanosleep(1000); }")
}

/// `base` (the default's kernel) with another symbol and source.
fn with_source(base: &CandidateKernel, symbol: &str, source: String) -> CandidateKernel {
    CandidateKernel {
        source,
        symbol: symbol.to_string(),
        ..base.clone()
    }
}

/// The three replaced candidates of a task, built from its default kernel.
struct Candidates {
    trap: CandidateKernel,
    spin: CandidateKernel,
    good: CandidateKernel,
}

impl Candidates {
    fn new(default: &CandidateKernel) -> Candidates {
        let n = default.args.len();
        let good = format!("{}_again", default.symbol);
        Candidates {
            trap: with_source(
                default,
                "candidate_traps",
                trap_source("candidate_traps", n),
            ),
            spin: with_source(
                default,
                "candidate_spins",
                spin_source("candidate_spins", n),
            ),
            good: with_source(
                default,
                &good,
                default.source.replace(&default.symbol, &good),
            ),
        }
    }
}

/// The zoo's ResNet-18 at batch 1, fp16, and its lightest conv task.
fn model() -> (Compiled, TunableTask) {
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
    .expect("ResNet-18 compiles");
    let task = tunable_tasks(&compiled, false)
        .expect("search spaces")
        .into_iter()
        .filter(|t| t.space.op == "FusedConv" && t.space.configs.len() >= 4)
        .min_by_key(|t| t.space.flops)
        .expect("ResNet-18 has a conv task with at least 4 configs");
    (compiled, task)
}

/// The measuring worker for `task` of `compiled`, its cubins in `dir`.
fn start_measurer<'g>(compiled: &'g Compiled, task: &TunableTask, dir: PathBuf) -> GpuMeasurer<'g> {
    let nodes = HashMap::from([(task.space.task.clone(), task.node)]);
    GpuMeasurer::new(&compiled.graph, nodes, aotune_exe(), dir, settings())
        .unwrap_or_else(|e| panic!("starting the measuring worker: {e}"))
}

/// Quick timing: the test checks that candidates run, not how fast.
fn settings() -> MeasureSettings {
    let mut s = MeasureSettings::new(Precision::Fp16);
    s.compile_threads = s.compile_threads.min(4);
    s.compile_processes = false;
    s.run_timeout = RUN_TIMEOUT;
    s.flush_bytes = 16 << 20;
    s.repeats = Repeats {
        warmup: 1,
        min: 5,
        max: 20,
        min_total_ms: 0.0,
    };
    s
}

/// The first three configs of `space` other than its default.
fn three_others(space: &TaskSpace) -> [usize; 3] {
    let others: Vec<usize> = (0..space.configs.len())
        .filter(|&i| i != space.default)
        .take(3)
        .collect();
    [others[0], others[1], others[2]]
}

/// True (after a skip) when this machine cannot run the test.
fn skipped(test: &str) -> bool {
    if !driver_present() {
        skip(test, "no NVIDIA driver (libcuda.so.1 not loadable)");
        return true;
    }
    match nvrtc::setup() {
        Ok(_) => false,
        Err(e @ nvrtc::NvrtcSetupError::NotFound { .. }) => {
            skip(test, &e.to_string());
            true
        }
        Err(e) => panic!("{test}: NVRTC is present but unusable: {e}"),
    }
}

/// The one trial `measure` returns for `config`.
fn measure_one(measurer: &mut GpuMeasurer, space: &TaskSpace, config: usize) -> Trial {
    let start = Instant::now();
    let mut trials = measurer.measure(space, &[config]);
    println!(
        "config {config}: {:?} in {:.1} s, {} restarts so far",
        trials.first().map(|t| &t.outcome),
        start.elapsed().as_secs_f64(),
        measurer.restarts()
    );
    assert_eq!(trials.len(), 1, "one trial for config {config}: {trials:?}");
    let trial = trials.remove(0);
    assert_eq!(trial.config, config);
    trial
}

fn assert_measured(what: &str, outcome: &TrialOutcome) {
    match outcome {
        TrialOutcome::Ok {
            repeats_us,
            median_us,
        } => {
            assert!(!repeats_us.is_empty(), "{what}: no repeats");
            assert!(
                median_us.is_finite() && *median_us > 0.0,
                "{what}: median {median_us} µs"
            );
        }
        other => panic!("{what} should have been measured: {other:?}"),
    }
}

/// The trap's outcome: a launch-stage failure naming the CUDA error.
fn assert_fault(what: &str, stage: FailStage, reason: &str) {
    assert_eq!(stage, FailStage::Launch, "{what}: {reason}");
    assert!(
        reason.contains("running the kernel") && reason.contains("CUDA_ERROR_"),
        "{what}: the reason should name the fault: {reason}"
    );
}

/// The spinner's outcome: killed at the run timeout.
fn assert_timeout(what: &str, stage: FailStage, reason: &str) {
    assert_eq!(stage, FailStage::Timeout, "{what}: {reason}");
    assert!(
        reason.contains("no answer within") && reason.contains("killed"),
        "{what}: the reason should say it was killed at the deadline: {reason}"
    );
}

fn failed(what: &str, outcome: TrialOutcome) -> (FailStage, String) {
    match outcome {
        TrialOutcome::Failed { stage, reason } => (stage, reason),
        ok => panic!("{what} should have failed: {ok:?}"),
    }
}

/// One candidate at a time, in a fixed order: the default (the reference),
/// the trap, the spinner, then the good one.
#[test]
fn gpu_worker_survives_a_trap_and_a_hang() {
    let test = "gpu_worker_survives_a_trap_and_a_hang";
    if skipped(test) {
        return;
    }
    let (compiled, task) = model();
    let space = &task.space;
    let default = render_candidate(&compiled.graph, task.node, &space.configs[space.default])
        .expect("the default renders");
    let candidates = Candidates::new(&default);
    let [trap, spin, good] = three_others(space);
    let scratch = scratch_dir("order");
    let mut measurer = start_measurer(&compiled, &task, scratch.path.clone());
    println!(
        "task {} ({}), {} configs, on {} ({})",
        space.task,
        task.node_name,
        space.configs.len(),
        measurer.target().gpu,
        measurer.target().sm
    );
    measurer.replace_candidate(&space.task, trap, candidates.trap.clone());
    measurer.replace_candidate(&space.task, spin, candidates.spin.clone());
    measurer.replace_candidate(&space.task, good, candidates.good.clone());

    let reference = measure_one(&mut measurer, space, space.default);
    assert_measured("the default (the reference)", &reference.outcome);
    assert_eq!(measurer.restarts(), 0);

    let (stage, reason) = failed("the trap", measure_one(&mut measurer, space, trap).outcome);
    assert_fault("the trap", stage, &reason);
    assert_eq!(measurer.restarts(), 1, "the trap takes the worker down");

    let started = Instant::now();
    let (stage, reason) = failed(
        "the spinner",
        measure_one(&mut measurer, space, spin).outcome,
    );
    assert_timeout("the spinner", stage, &reason);
    assert!(
        started.elapsed() >= RUN_TIMEOUT,
        "killed before the deadline"
    );
    assert_eq!(measurer.restarts(), 2, "the hung worker is killed");

    // A fresh worker: set up again, the reference again, then the candidate.
    let after = measure_one(&mut measurer, space, good);
    assert_measured("the good candidate after the faults", &after.outcome);
    assert_eq!(measurer.restarts(), 2, "the good one needs no restart");
    // The default measured again (a candidate now) still works too.
    assert_measured(
        "the default after the faults",
        &measure_one(&mut measurer, space, space.default).outcome,
    );
    assert_eq!(measurer.restarts(), 2);
}

/// A whole `tune` run (the driver `aotune tune` uses, writing records) over
/// a space of four configs: the default, the trap, the spinner and the good
/// one, in one round in whatever order their compiles finish.
#[test]
fn gpu_tune_run_records_the_trap_and_the_hang() {
    let test = "gpu_tune_run_records_the_trap_and_the_hang";
    if skipped(test) {
        return;
    }
    let (compiled, task) = model();
    let full = &task.space;
    let default = render_candidate(&compiled.graph, task.node, &full.configs[full.default])
        .expect("the default renders");
    let candidates = Candidates::new(&default);
    // Config 0 is the default; 1, 2 and 3 are replaced.
    let picks = [
        full.default,
        three_others(full)[0],
        three_others(full)[1],
        three_others(full)[2],
    ];
    let space = TaskSpace {
        configs: picks.iter().map(|&i| full.configs[i].clone()).collect(),
        prior_ns: if full.prior_ns.is_empty() {
            Vec::new()
        } else {
            picks.iter().map(|&i| full.prior_ns[i]).collect()
        },
        default: 0,
        ..full.clone()
    };
    let scratch = scratch_dir("run");
    let mut measurer = start_measurer(&compiled, &task, scratch.path.join("cubins"));
    measurer.replace_candidate(&space.task, 1, candidates.trap);
    measurer.replace_candidate(&space.task, 2, candidates.spin);
    measurer.replace_candidate(&space.task, 3, candidates.good);
    let log = scratch.path.join("records.jsonl");
    let setup = RunSetup {
        target: measurer.target().clone(),
        batch: 1,
        precision: Precision::Fp16.to_string(),
        compiler: "gpu_tuner_faults".into(),
    };
    let mut sink = RecordSink::append_to(&log, setup).expect("the records file");
    let options = TuneOptions {
        budget: Duration::from_secs(300),
        trials_per_task: 4,
        batch_size: 4,
        ..TuneOptions::default()
    };
    let start = Instant::now();
    let outcome = tune(
        std::slice::from_ref(&space),
        &mut measurer,
        &mut sink,
        &[],
        &options,
        &mut NoProgress,
    )
    .expect("the run finishes");
    println!(
        "{} trials in {:.1} s, {} restarts",
        outcome.trials,
        start.elapsed().as_secs_f64(),
        measurer.restarts()
    );
    assert_eq!(outcome.trials, 4, "every config measured once");
    assert_eq!(measurer.restarts(), 2, "one restart for each bad candidate");

    let records = read_records(&log).expect("the records read back");
    assert_eq!(records.len(), 4, "{records:#?}");
    let record = |i: usize| -> &TuneRecord {
        records
            .iter()
            .find(|r| r.config == space.configs[i])
            .unwrap_or_else(|| panic!("no record of config {i}: {records:#?}"))
    };
    for (i, what) in [(0, "the default"), (3, "the good candidate")] {
        let r = record(i);
        assert!(
            r.failure.is_none() && r.success_us().is_some(),
            "{what}: {r:?}"
        );
    }
    let trap = record(1).failure.clone().expect("the trap failed");
    assert_fault("the trap's record", trap.stage, &trap.reason);
    let spin = record(2).failure.clone().expect("the spinner failed");
    assert_timeout("the spinner's record", spin.stage, &spin.reason);
    let best = best_log(&records);
    assert_eq!(best.records.len(), 1);
    assert!(
        [&space.configs[0], &space.configs[3]].contains(&&best.records[0].config),
        "the best is a config that ran: {:?}",
        best.records[0]
    );
}

/// Runs without a GPU: the bad candidates are valid CUDA for NVRTC (so on
/// the GPU they fail by trapping and hanging, not by not compiling).
#[test]
fn fault_candidates_compile_with_nvrtc() {
    let test = "fault_candidates_compile_with_nvrtc";
    let include = match nvrtc::setup() {
        Ok(include) => include,
        Err(e @ nvrtc::NvrtcSetupError::NotFound { .. }) => {
            skip(test, &e.to_string());
            return;
        }
        Err(e) => panic!("{test}: NVRTC is present but unusable: {e}"),
    };
    let jobs = vec![
        compile_pool::Job {
            tag: 0,
            name: "trap.cu".into(),
            source: trap_source("candidate_traps", 3),
        },
        compile_pool::Job {
            tag: 1,
            name: "spin.cu".into(),
            source: spin_source("candidate_spins", 3),
        },
    ];
    let mut compiled = 0;
    compile_pool::compile_all(
        jobs,
        2,
        Duration::from_secs(120),
        &include,
        &compile_pool::CompileIn::Threads,
        |tag, result| {
            let cubin = result.unwrap_or_else(|e| panic!("candidate {tag}: {e}"));
            assert_eq!(&cubin.image[..4], b"\x7fELF", "candidate {tag}");
            compiled += 1;
        },
    );
    assert_eq!(compiled, 2);
}

/// Every cuBLASLt config of the tiny ViT's heaviest eligible Dense task
/// is checked against the default template kernel's output and timed in
/// the measuring worker.
#[test]
fn gpu_measurer_times_cublaslt_candidates_of_a_dense_task() {
    const TEST: &str = "gpu_measurer_times_cublaslt_candidates_of_a_dense_task";
    if skipped(TEST) {
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny_vit_dynamo");
    let options = CompileOptions {
        precision: Precision::Fp16,
        channels_last: true,
        ..CompileOptions::default()
    };
    let model = common::fixture::refilled_model(&dir);
    let compiled = compile_bytes(&model, "tiny_vit.onnx", &options).expect("the tiny ViT compiles");
    let lt = |c: &serde_json::Value| {
        aotune_compiler::codegen::cuda::library_matmul::requested(Some(c)).is_some()
    };
    let task = tunable_tasks(&compiled, true)
        .expect("search spaces")
        .into_iter()
        .find(|t| t.space.configs.iter().any(lt))
        .expect("a Dense task with cuBLASLt configs");
    let space = &task.space;
    let scratch = scratch_dir("cublaslt");
    let mut measurer = start_measurer(&compiled, &task, scratch.path.clone());
    assert_measured(
        "the default",
        &measure_one(&mut measurer, space, space.default).outcome,
    );
    for i in (0..space.configs.len()).filter(|&i| lt(&space.configs[i])) {
        let trial = measure_one(&mut measurer, space, i);
        assert_measured(&format!("cuBLASLt config {i}"), &trial.outcome);
    }
}

/// A directory removed on drop.
struct Scratch {
    path: PathBuf,
}

fn scratch_dir(label: &str) -> Scratch {
    let path = std::env::temp_dir().join(format!(
        "aotune-tuner-faults-{label}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Scratch { path }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
