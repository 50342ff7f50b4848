//! The compile pool: many CUDA sources compiled at once, in threads of this
//! process ([`super::nvrtc::compile`]) or in child processes
//! ([`super::compile_process`]), each result reported as soon as it is ready
//! and each job held to a deadline.

use super::nvrtc::{compile, CompileFailure, Cubin};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One source to compile, tagged by the caller.
pub struct Job {
    pub tag: usize,
    pub name: String,
    pub source: String,
}

/// Where [`compile_all`] runs NVRTC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompileIn {
    /// On the pool's threads, in this process.
    Threads,
    /// One `aotune nvrtc-compile` child process per job, started from this
    /// binary (`super::compile_process`), each on one of the pool's threads.
    Processes(PathBuf),
}

/// Compiles `jobs` on `threads` threads; each result comes back with its
/// tag as soon as it is ready (through `done`), in completion order. A job
/// still running at its deadline is reported as a timeout; in-process NVRTC
/// cannot be interrupted, so its thread finishes in the background, while a
/// child process is killed.
pub fn compile_all(
    jobs: Vec<Job>,
    threads: usize,
    timeout: Duration,
    include: &Path,
    how: &CompileIn,
    mut done: impl FnMut(usize, Result<Cubin, CompileFailure>),
) {
    let total = jobs.len();
    let queue = Arc::new(Mutex::new(jobs.into_iter().rev().collect::<Vec<_>>()));
    let (tx, rx) = mpsc::channel::<(usize, Option<Result<Cubin, CompileFailure>>)>();
    let threads = threads.clamp(1, total.max(1));
    for _ in 0..threads {
        let queue = Arc::clone(&queue);
        let tx = tx.clone();
        let include = include.to_path_buf();
        let how = how.clone();
        std::thread::spawn(move || loop {
            let job = match queue.lock() {
                Ok(mut q) => q.pop(),
                Err(_) => None,
            };
            let Some(job) = job else { break };
            // Announce the start so the collector can time the deadline.
            if tx.send((job.tag, None)).is_err() {
                break;
            }
            let r = match &how {
                CompileIn::Threads => compile(&job.source, &job.name, &include),
                CompileIn::Processes(exe) => super::compile_process::compile_in_process(
                    exe,
                    &job.source,
                    &job.name,
                    &include,
                    timeout,
                ),
            };
            if tx.send((job.tag, Some(r))).is_err() {
                break;
            }
        });
    }
    drop(tx);
    let mut started: Vec<(usize, Instant)> = Vec::new();
    let mut finished = 0usize;
    while finished < total {
        let wait = started
            .iter()
            .map(|(_, t)| (*t + timeout).saturating_duration_since(Instant::now()))
            .min()
            .unwrap_or(timeout);
        match rx.recv_timeout(wait.max(Duration::from_millis(1))) {
            Ok((tag, None)) => started.push((tag, Instant::now())),
            Ok((tag, Some(r))) => {
                if let Some(i) = started.iter().position(|(t, _)| *t == tag) {
                    started.swap_remove(i);
                    finished += 1;
                    done(tag, r);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = Instant::now();
                let (late, on_time): (Vec<_>, Vec<_>) =
                    started.into_iter().partition(|(_, t)| now >= *t + timeout);
                started = on_time;
                for (tag, _) in late {
                    finished += 1;
                    done(tag, Err(CompileFailure::Timeout(timeout)));
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::nvrtc::setup;

    /// NVRTC needs no GPU; the test skips (saying why) where the library or
    /// headers are missing.
    #[test]
    fn compiles_kernels_in_parallel_and_reports_errors() {
        let include = match setup() {
            Ok(i) => i,
            Err(e) => {
                aotune_compiler::skip::skip(
                    "compiles_kernels_in_parallel_and_reports_errors",
                    &e.to_string(),
                );
                return;
            }
        };
        let good = "#include <cuda_fp16.h>\n\
                    extern \"C\" __global__ void k(__half* y) { y[threadIdx.x] = __float2half(1.0f); }\n";
        let bad = "extern \"C\" __global__ void k(float* y) { y[0] = undefined_name; }\n";
        let jobs = vec![
            Job {
                tag: 0,
                name: "good.cu".into(),
                source: good.into(),
            },
            Job {
                tag: 1,
                name: "bad.cu".into(),
                source: bad.into(),
            },
        ];
        let mut results: Vec<(usize, Result<Cubin, CompileFailure>)> = Vec::new();
        compile_all(
            jobs,
            2,
            Duration::from_secs(120),
            &include,
            &CompileIn::Threads,
            |t, r| results.push((t, r)),
        );
        results.sort_by_key(|(t, _)| *t);
        assert_eq!(results.len(), 2);
        let cubin = results[0].1.as_ref().expect("good compiles");
        assert_eq!(&cubin.image[..4], b"\x7fELF");
        assert!(cubin.report.registers > 0, "{:?}", cubin.report);
        match &results[1].1 {
            Err(CompileFailure::Error(log)) => assert!(log.contains("undefined_name"), "{log}"),
            other => panic!("expected a compile error, got {other:?}"),
        }
    }
}
