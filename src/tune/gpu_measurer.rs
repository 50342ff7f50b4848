//! [`GpuMeasurer`]: the tuner's [`Measurer`] on a real GPU.
//!
//! For one batch of configs of one task: render each as a stand-alone
//! kernel (the build's own code generator), compile them all at once with
//! NVRTC on every core, and, as each cubin comes back, prune what ptxas says
//! cannot run well (spills, more registers than a block can have), skip
//! duplicates (an identical cubin is measured once), or time it in the
//! worker process while the rest still compile. The
//! task's heuristic default is measured first in each worker session as the
//! reference every candidate's output is checked against.

use super::compile_pool::{self, CompileIn, Job};
use super::nvrtc::{self, CompileFailure, Cubin};
use super::protocol::{ArgSpec, Failure, Repeats, Reply, Request, Role};
use super::runner::{Runner, WorkerError};
use aotune_compiler::artifact::LibraryMatmul;
use aotune_compiler::codegen::cuda::candidate::{render_candidate, CandidateKernel};
use aotune_compiler::codegen::cuda::library_matmul;
use aotune_compiler::ir::{Graph, NodeId, Precision};
use aotune_compiler::schedule::{Target, Timing, CHAIN_LAUNCHES};
use aotune_compiler::tune::{FailStage, Measurer, TaskSpace, Trial, TrialOutcome};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Registers one SM has; a block needs `registers × threads` of them.
const REGISTERS_PER_SM: u64 = 65536;

/// Settings of the measurer.
#[derive(Debug, Clone)]
pub struct MeasureSettings {
    pub compile_threads: usize,
    /// Compile each candidate in a child process of the worker's binary
    /// (`aotune nvrtc-compile`) instead of on a thread of this one.
    pub compile_processes: bool,
    pub compile_timeout: Duration,
    /// Longest a worker may take to answer one request.
    pub run_timeout: Duration,
    pub repeats: Repeats,
    /// Bytes written between repeats to evict L2 (the H200 has 50 MiB).
    pub flush_bytes: usize,
    /// How a candidate is timed: one launch after an L2 flush
    /// (`flush_bytes`), or chains of launches in a CUDA graph.
    pub timing: Timing,
    /// Chained launches are programmatic dependent launches (as the model
    /// runs at this batch size: `LaunchMode::Auto`).
    pub programmatic: bool,
    /// Largest relative L2 distance from the default's output accepted.
    pub tolerance: f64,
}

impl MeasureSettings {
    pub fn new(precision: Precision) -> Self {
        MeasureSettings {
            compile_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(4),
            // NVRTC serializes one process's threads (bench/nvrtc_scaling.sh).
            compile_processes: true,
            compile_timeout: Duration::from_secs(60),
            run_timeout: Duration::from_secs(30),
            repeats: Repeats::default(),
            flush_bytes: 128 << 20,
            timing: Timing::Flushed,
            programmatic: false,
            tolerance: tolerance(precision),
        }
    }
}

/// How far a candidate may drift from the default's output: accumulation
/// order (split-K, tile shapes) changes the rounding of the stored result.
pub fn tolerance(precision: Precision) -> f64 {
    match precision {
        Precision::Fp32 => 1e-5,
        Precision::Tf32 => 2e-3,
        Precision::Fp16 | Precision::Bf16 => 1e-2,
    }
}

/// Why the measurer could not start.
#[derive(Debug, thiserror::Error)]
pub enum MeasurerError {
    #[error(transparent)]
    Nvrtc(#[from] nvrtc::NvrtcSetupError),
    #[error(transparent)]
    Worker(#[from] WorkerError),
    #[error("the measuring worker could not start on the GPU: {0}")]
    Setup(String),
    #[error("cannot create the cubin directory '{dir}': {source}")]
    Dir {
        dir: String,
        #[source]
        source: std::io::Error,
    },
}

/// Measures configs of the model's tasks on GPU 0.
pub struct GpuMeasurer<'g> {
    graph: &'g Graph,
    nodes: HashMap<String, NodeId>,
    runner: Runner,
    include: PathBuf,
    compile_in: CompileIn,
    dir: PathBuf,
    settings: MeasureSettings,
    /// The task the worker is set up for, and whether its reference ran.
    session: Option<(String, bool)>,
    /// The current task's reference kernel (its default config), compiled.
    reference: Option<(String, CandidateKernel, Cubin)>,
    /// Per task: cubin hash → the outcome measured for it.
    seen: HashMap<String, HashMap<u64, TrialOutcome>>,
    /// (task, config) → the kernel measured instead of the rendered one
    /// ([`GpuMeasurer::replace_candidate`]).
    replaced: HashMap<(String, usize), CandidateKernel>,
    target: Target,
    pub compiled: usize,
    pub pruned: usize,
    pub duplicates: usize,
    /// Wall time spent waiting on compiles (not hidden behind runs) and
    /// running candidates in the worker (their measure requests; worker
    /// setups count as neither): with the rest, these add up to the wall
    /// time. `compile_busy` is the pool's own time, start to last result,
    /// summed over rounds (it overlaps the runs).
    pub compile_wall: Duration,
    pub compile_busy: Duration,
    pub run_wall: Duration,
}

impl<'g> GpuMeasurer<'g> {
    /// Starts the worker (it opens the GPU) and reads the target from it.
    /// `nodes` maps each task hash to the node representing it.
    pub fn new(
        graph: &'g Graph,
        nodes: HashMap<String, NodeId>,
        worker_exe: PathBuf,
        dir: PathBuf,
        settings: MeasureSettings,
    ) -> Result<Self, MeasurerError> {
        let include = nvrtc::setup()?;
        std::fs::create_dir_all(&dir).map_err(|source| MeasurerError::Dir {
            dir: dir.display().to_string(),
            source,
        })?;
        let compile_in = if settings.compile_processes {
            CompileIn::Processes(worker_exe.clone())
        } else {
            CompileIn::Threads
        };
        let mut runner = Runner::new(worker_exe);
        let probe = Request::Setup {
            args: vec![ArgSpec {
                bytes: 16,
                dtype: super::protocol::ArgType::F32,
                output: true,
            }],
            seed: 0,
            flush_bytes: 16,
            chain: 1,
            programmatic: false,
        };
        let target = match runner.setup(probe, settings.run_timeout)? {
            Reply::Ready { gpu, sm, driver } => Target {
                gpu,
                sm,
                driver,
                cuda: cuda_version(),
                timing: settings.timing,
            },
            Reply::Error { message } => return Err(MeasurerError::Setup(message)),
            other => return Err(MeasurerError::Setup(format!("{other:?}"))),
        };
        Ok(GpuMeasurer {
            graph,
            nodes,
            runner,
            include,
            compile_in,
            dir,
            settings,
            session: None,
            reference: None,
            seen: HashMap::new(),
            replaced: HashMap::new(),
            target,
            compiled: 0,
            pruned: 0,
            duplicates: 0,
            compile_wall: Duration::ZERO,
            compile_busy: Duration::ZERO,
            run_wall: Duration::ZERO,
        })
    }

    /// The GPU and toolchain measurements are taken on.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Worker restarts so far (faults, hangs).
    pub fn restarts(&self) -> usize {
        self.runner.restarts
    }

    /// From now on, config `config` of task `task` is `kernel` (source,
    /// symbol, launch geometry; its arguments must be the task's) instead of
    /// what the code generator renders for it: compiled, run and recorded as
    /// that config. For tests of the fault handling, which need a candidate
    /// that traps or never ends (`tests/gpu_tuner_faults.rs`); the tuner
    /// never calls it.
    #[doc(hidden)]
    pub fn replace_candidate(&mut self, task: &str, config: usize, kernel: CandidateKernel) {
        self.replaced.insert((task.to_string(), config), kernel);
    }

    fn node(&self, space: &TaskSpace) -> Option<NodeId> {
        self.nodes.get(&space.task).copied()
    }

    /// Starts compiling `kernels` (index → kernel) on the pool in the
    /// background; results come through the returned channel in completion
    /// order, so the caller can measure each as soon as it is ready.
    fn start_compiles<'s>(
        &self,
        scope: &'s std::thread::Scope<'s, '_>,
        task: &str,
        kernels: &[(usize, CandidateKernel)],
    ) -> (Compiles, std::thread::ScopedJoinHandle<'s, Duration>) {
        let jobs: Vec<Job> = kernels
            .iter()
            .map(|(i, k)| Job {
                tag: *i,
                name: format!("{task}_{i}.cu"),
                source: k.source.clone(),
            })
            .collect();
        let (tx, rx) = mpsc::channel();
        let (threads, timeout) = (self.settings.compile_threads, self.settings.compile_timeout);
        let (include, how) = (self.include.clone(), self.compile_in.clone());
        let pool = scope.spawn(move || {
            let start = Instant::now();
            compile_pool::compile_all(jobs, threads, timeout, &include, &how, |tag, r| {
                let _ = tx.send((tag, r));
            });
            start.elapsed()
        });
        let compiles = Compiles {
            rx,
            early: BTreeMap::new(),
            waited: Duration::ZERO,
        };
        (compiles, pool)
    }

    /// Sets the worker up for `space`'s task (buffers sized from `kernel`)
    /// unless it already is.
    fn ensure_session(
        &mut self,
        space: &TaskSpace,
        kernel: &CandidateKernel,
    ) -> Result<(), String> {
        if self.session.as_ref().is_some_and(|(t, _)| *t == space.task) {
            return Ok(());
        }
        let args = kernel
            .args
            .iter()
            .map(|a| ArgSpec {
                bytes: a.bytes,
                dtype: a.dtype.into(),
                output: a.output,
            })
            .collect();
        let setup = Request::Setup {
            args,
            seed: aotune_compiler::zoo::fnv1a64(space.task.as_bytes()),
            // `Graph` is refine's choice, not a way to time one kernel: it
            // measures alone as `Flushed` (tune never sets it).
            flush_bytes: match self.settings.timing {
                Timing::Flushed | Timing::Graph => self.settings.flush_bytes,
                Timing::Chained => 0,
            },
            chain: match self.settings.timing {
                Timing::Flushed | Timing::Graph => 1,
                Timing::Chained => CHAIN_LAUNCHES,
            },
            programmatic: self.settings.timing == Timing::Chained && self.settings.programmatic,
        };
        match self.runner.setup(setup, self.settings.run_timeout) {
            Ok(Reply::Ready { .. }) => {
                self.session = Some((space.task.clone(), false));
                Ok(())
            }
            Ok(other) => Err(format!("worker setup failed: {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Runs one compiled candidate in the worker.
    fn run(
        &mut self,
        space: &TaskSpace,
        index: usize,
        kernel: &CandidateKernel,
        cubin: &Cubin,
        role: Role,
    ) -> TrialOutcome {
        let path = self.dir.join(format!("{}_{index}.cubin", space.task));
        if let Err(e) = std::fs::write(&path, &cubin.image) {
            return TrialOutcome::Failed {
                stage: FailStage::Launch,
                reason: format!("cannot write {}: {e}", path.display()),
            };
        }
        let req = Request::Measure {
            cubin: path.clone(),
            symbol: kernel.symbol.clone(),
            grid: kernel.geometry.grid,
            block: kernel.geometry.block,
            smem_bytes: kernel.geometry.smem_bytes,
            role,
            tolerance: self.settings.tolerance,
            repeats: self.settings.repeats,
        };
        let start = Instant::now();
        let reply = self.runner.send(&req, self.settings.run_timeout);
        self.run_wall += start.elapsed();
        let _ = std::fs::remove_file(&path);
        self.outcome(reply)
    }

    /// Runs `matmul` (a config of the session's Dense task) through
    /// cuBLASLt in the worker, on the session's buffers.
    fn run_matmul(&mut self, matmul: LibraryMatmul) -> TrialOutcome {
        let req = Request::MeasureMatmul {
            matmul,
            role: Role::Candidate,
            tolerance: self.settings.tolerance,
            repeats: self.settings.repeats,
        };
        let start = Instant::now();
        let reply = self.runner.send(&req, self.settings.run_timeout);
        self.run_wall += start.elapsed();
        self.outcome(reply)
    }

    /// The trial outcome of the worker's reply (a lost session is noted).
    fn outcome(&mut self, reply: Result<Reply, WorkerError>) -> TrialOutcome {
        match reply {
            Ok(Reply::Measured { repeats_us, .. }) => {
                let median_us = median(&repeats_us);
                TrialOutcome::Ok {
                    repeats_us,
                    median_us,
                }
            }
            Ok(Reply::Failed {
                kind,
                reason,
                fatal,
            }) => {
                if fatal {
                    // The worker exits; the next request starts a fresh one,
                    // which needs its setup and reference again.
                    self.session = None;
                }
                TrialOutcome::Failed {
                    stage: match kind {
                        Failure::Launch | Failure::Fault => FailStage::Launch,
                        Failure::WrongResult => FailStage::WrongResult,
                    },
                    reason,
                }
            }
            Ok(other) => {
                self.session = None;
                TrialOutcome::Failed {
                    stage: FailStage::WorkerCrash,
                    reason: format!("unexpected reply {other:?}"),
                }
            }
            Err(WorkerError::Timeout(d)) => {
                self.session = None;
                TrialOutcome::Failed {
                    stage: FailStage::Timeout,
                    reason: format!("no answer within {d:.0?}: killed"),
                }
            }
            Err(e) => {
                self.session = None;
                TrialOutcome::Failed {
                    stage: FailStage::WorkerCrash,
                    reason: e.to_string(),
                }
            }
        }
    }

    /// Why ptxas's report rules the kernel out, if it does.
    fn prune_reason(kernel: &CandidateKernel, cubin: &Cubin) -> Option<(FailStage, String)> {
        let r = cubin.report;
        if r.spill_store_bytes > 0 || r.spill_load_bytes > 0 {
            return Some((
                FailStage::Compile,
                format!(
                    "ptxas spills ({} B stores, {} B loads at {} registers): pruned",
                    r.spill_store_bytes, r.spill_load_bytes, r.registers
                ),
            ));
        }
        let threads: u64 = kernel
            .geometry
            .block
            .iter()
            .map(|&b| u64::from(b))
            .product();
        // Registers are allocated per warp in units of 256 (8 per thread).
        let regs = u64::from(r.registers).div_ceil(8) * 8;
        if regs * threads > REGISTERS_PER_SM {
            return Some((
                FailStage::Launch,
                format!(
                    "{} registers × {threads} threads exceed the SM's {REGISTERS_PER_SM}: pruned",
                    r.registers
                ),
            ));
        }
        let smem = u64::from(r.static_smem_bytes) + u64::from(kernel.geometry.smem_bytes);
        if smem > 227 * 1024 {
            return Some((
                FailStage::Launch,
                format!("{smem} B of shared memory exceed the SM's 227 KiB: pruned"),
            ));
        }
        None
    }
}

/// The CUDA version the kernels are compiled with (NVRTC's).
fn cuda_version() -> String {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints; NVRTC is loaded by `nvrtc::setup`.
    let ok = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if ok == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        format!("{major}.{minor}")
    } else {
        "unknown".into()
    }
}

/// Median of `v` (mean of the middle two for an even count).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn hash_bytes(b: &[u8]) -> u64 {
    aotune_compiler::zoo::fnv1a64(b)
}

impl GpuMeasurer<'_> {
    /// Makes the worker ready for candidates of `space`'s task: set up, and
    /// the reference (the default config) run. Returns the reference's own
    /// outcome when it ran now.
    fn ensure_ready(&mut self, space: &TaskSpace) -> Result<Option<TrialOutcome>, String> {
        if self
            .session
            .as_ref()
            .is_some_and(|(t, r)| *t == space.task && *r)
        {
            return Ok(None);
        }
        let Some((task, kernel, cubin)) = self.reference.take() else {
            return Err("no reference kernel".into());
        };
        if task != space.task {
            self.reference = Some((task, kernel, cubin));
            return Err("the reference belongs to another task".into());
        }
        let result = self.ensure_session(space, &kernel).and_then(|()| {
            match self.run(space, space.default, &kernel, &cubin, Role::Reference) {
                TrialOutcome::Failed { reason, .. } => Err(format!(
                    "the default config (the reference) failed: {reason}"
                )),
                ok => {
                    if let Some((_, r)) = self.session.as_mut() {
                        *r = true;
                    }
                    Ok(Some(ok))
                }
            }
        });
        self.reference = Some((task, kernel, cubin));
        result
    }
}

impl GpuMeasurer<'_> {
    /// The trial of config `i` from its compile result: pruned, a duplicate
    /// of a cubin measured before, or run in the worker. The default is the
    /// reference: its run (when the worker session needs one) is its trial.
    fn trial(
        &mut self,
        space: &TaskSpace,
        i: usize,
        kernel: &CandidateKernel,
        result: Result<Cubin, CompileFailure>,
    ) -> Trial {
        let ms = result
            .as_ref()
            .map_or(0.0, |c| c.compile_time.as_secs_f64() * 1e3);
        let trial = |outcome| Trial {
            config: i,
            outcome,
            compile_ms: ms,
        };
        let failed = |stage, reason| TrialOutcome::Failed { stage, reason };
        if i == space.default {
            let outcome = match self.ensure_ready(space) {
                Ok(Some(o)) => o,
                Ok(None) => match &result {
                    Ok(c) => self.run(space, i, kernel, c, Role::Candidate),
                    Err(f) => failed(FailStage::Compile, f.to_string()),
                },
                Err(reason) => failed(FailStage::WorkerCrash, reason),
            };
            return trial(outcome);
        }
        let cubin = match result {
            Ok(c) => c,
            Err(f) => return trial(failed(FailStage::Compile, f.to_string())),
        };
        if let Some((stage, reason)) = Self::prune_reason(kernel, &cubin) {
            self.pruned += 1;
            return trial(failed(stage, reason));
        }
        let h = hash_bytes(&cubin.image);
        if let Some(o) = self.seen.get(&space.task).and_then(|m| m.get(&h)).cloned() {
            self.duplicates += 1;
            return trial(o);
        }
        match self.ensure_ready(space) {
            Err(reason) => trial(failed(FailStage::WorkerCrash, reason)),
            Ok(_) => {
                let o = self.run(space, i, kernel, &cubin, Role::Candidate);
                self.seen
                    .entry(space.task.clone())
                    .or_default()
                    .insert(h, o.clone());
                trial(o)
            }
        }
    }
}

/// One round's compile results as the pool delivers them.
struct Compiles {
    rx: mpsc::Receiver<(usize, Result<Cubin, CompileFailure>)>,
    /// Results that arrived while another one was awaited.
    early: BTreeMap<usize, Result<Cubin, CompileFailure>>,
    /// Time spent blocked on the pool: compiling not hidden behind runs.
    waited: Duration,
}

impl Compiles {
    fn recv(&mut self) -> Option<(usize, Result<Cubin, CompileFailure>)> {
        let start = Instant::now();
        let r = self.rx.recv().ok();
        self.waited += start.elapsed();
        r
    }

    /// The result for `tag`, waiting for it; `None` if the pool ended
    /// without one.
    fn take(&mut self, tag: usize) -> Option<Result<Cubin, CompileFailure>> {
        if let Some(r) = self.early.remove(&tag) {
            return Some(r);
        }
        while let Some((t, r)) = self.recv() {
            if t == tag {
                return Some(r);
            }
            self.early.insert(t, r);
        }
        None
    }

    /// A result that arrived early, else the next one the pool finishes.
    fn next(&mut self) -> Option<(usize, Result<Cubin, CompileFailure>)> {
        self.early.pop_first().or_else(|| self.recv())
    }
}

impl Measurer for GpuMeasurer<'_> {
    /// Compiles the round on the pool and measures each candidate as soon as
    /// its cubin is ready (the default first when it is the reference), so
    /// the GPU runs while the rest compile. The compiler children run at the
    /// lowest CPU priority (`compile_process`), so they do not delay the
    /// worker's launches between timed repeats.
    fn measure(&mut self, space: &TaskSpace, configs: &[usize]) -> Vec<Trial> {
        let failed = |config: usize, stage: FailStage, reason: String| Trial {
            config,
            outcome: TrialOutcome::Failed { stage, reason },
            compile_ms: 0.0,
        };
        let Some(node) = self.node(space) else {
            let reason = format!("task {} is not in the model", space.task);
            return configs
                .iter()
                .map(|&i| failed(i, FailStage::Compile, reason.clone()))
                .collect();
        };
        let have_reference = self
            .reference
            .as_ref()
            .is_some_and(|(t, _, _)| *t == space.task);
        let mut wanted: Vec<usize> = configs.to_vec();
        if !have_reference && !wanted.contains(&space.default) {
            wanted.push(space.default);
        }
        let mut trials: HashMap<usize, Trial> = HashMap::new();
        let mut kernels = Vec::new();
        // Configs that run the task through cuBLASLt: measured after the
        // round's kernels, once the reference has run.
        let mut matmuls: Vec<(usize, Result<LibraryMatmul, String>)> = Vec::new();
        for &i in &wanted {
            let Some(config) = space.configs.get(i) else {
                continue;
            };
            if let Some(algo) = library_matmul::requested(Some(config)) {
                matmuls.push((i, library_matmul::library_matmul(self.graph, node, algo)));
                continue;
            }
            let rendered = match self.replaced.get(&(space.task.clone(), i)) {
                Some(k) => Ok(k.clone()),
                None => render_candidate(self.graph, node, config),
            };
            match rendered {
                Ok(k) => kernels.push((i, k)),
                Err(e) => {
                    trials.insert(i, failed(i, FailStage::Compile, e.to_string()));
                }
            }
        }
        let by_index: HashMap<usize, &CandidateKernel> =
            kernels.iter().map(|(i, k)| (*i, k)).collect();
        let reference_failure = std::thread::scope(|scope| {
            let (mut compiles, pool) = self.start_compiles(scope, &space.task, &kernels);
            let mut reference_failure = None;
            if !have_reference {
                let result = by_index
                    .contains_key(&space.default)
                    .then(|| compiles.take(space.default))
                    .flatten();
                match (by_index.get(&space.default), result) {
                    (Some(&kernel), Some(Ok(c))) => {
                        self.compiled += 1;
                        self.reference = Some((space.task.clone(), kernel.clone(), c.clone()));
                        self.session = None;
                        let t = self.trial(space, space.default, kernel, Ok(c));
                        trials.insert(space.default, t);
                    }
                    (_, other) => {
                        let why = match other {
                            Some(Err(f)) => f.to_string(),
                            _ => "it did not render".into(),
                        };
                        reference_failure = Some(format!(
                            "the default config (the reference) does not compile: {why}"
                        ));
                    }
                }
            }
            while reference_failure.is_none() {
                let Some((i, result)) = compiles.next() else {
                    break;
                };
                self.compiled += usize::from(result.is_ok());
                if let Some(&kernel) = by_index.get(&i) {
                    let t = self.trial(space, i, kernel, result);
                    trials.insert(i, t);
                }
            }
            // On a failed reference the rest of the round compiles for
            // nothing: dropping the receiver lets the pool finish unheard.
            let waited = compiles.waited;
            drop(compiles);
            let busy = pool.join().unwrap_or_default();
            self.compile_wall += waited;
            self.compile_busy += busy;
            reference_failure
        });
        if let Some(reason) = reference_failure {
            return configs
                .iter()
                .map(|&i| failed(i, FailStage::Compile, reason.clone()))
                .collect();
        }
        for (i, matmul) in matmuls {
            let outcome = match matmul {
                Err(why) => TrialOutcome::Failed {
                    stage: FailStage::Compile,
                    reason: format!("cuBLASLt cannot run this task: {why}"),
                },
                Ok(m) => match self.ensure_ready(space) {
                    Err(reason) => TrialOutcome::Failed {
                        stage: FailStage::WorkerCrash,
                        reason,
                    },
                    Ok(_) => self.run_matmul(m),
                },
            };
            trials.insert(
                i,
                Trial {
                    config: i,
                    outcome,
                    compile_ms: 0.0,
                },
            );
        }
        // A config without a trial (no result from the pool) is lost; the
        // search then never proposes it again.
        configs.iter().filter_map(|i| trials.remove(i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn compile_results_come_in_completion_order_with_the_awaited_one_first() {
        let (tx, rx) = mpsc::channel();
        let mut compiles = Compiles {
            rx,
            early: BTreeMap::new(),
            waited: Duration::ZERO,
        };
        for tag in [7, 3, 5] {
            tx.send((tag, Err(CompileFailure::Error(format!("job {tag}")))))
                .unwrap();
        }
        assert!(matches!(
            compiles.take(5),
            Some(Err(CompileFailure::Error(log))) if log == "job 5"
        ));
        // What came before the awaited one is handed out first, in tag order.
        let order: Vec<usize> = std::iter::from_fn(|| {
            if compiles.early.is_empty() {
                None
            } else {
                compiles.next().map(|(t, _)| t)
            }
        })
        .collect();
        assert_eq!(order, [3, 7]);
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            tx.send((9, Err(CompileFailure::Timeout(Duration::from_secs(1)))))
                .unwrap();
        });
        assert_eq!(compiles.next().map(|(t, _)| t), Some(9));
        late.join().unwrap();
        assert!(
            compiles.waited >= Duration::from_millis(20),
            "{:?}",
            compiles.waited
        );
        // The pool ended (its sender dropped): nothing more, and no hang.
        assert!(compiles.take(11).is_none());
        assert!(compiles.next().is_none());
    }

    #[test]
    fn tolerances_follow_the_precision() {
        assert!(tolerance(Precision::Fp32) < tolerance(Precision::Tf32));
        assert!(tolerance(Precision::Tf32) < tolerance(Precision::Fp16));
    }
}
