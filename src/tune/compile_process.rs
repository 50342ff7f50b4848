//! Compiling one candidate in a child process (`aotune nvrtc-compile`)
//! instead of on a thread of the tuner: a compiler that crashes takes only
//! that process down, and one that hangs is killed at its deadline (a
//! thread running NVRTC can only be abandoned). It is also faster: NVRTC
//! serializes the threads of one process (16.7 compiles/s with 1, 4, 8 or
//! 16 threads on the H200 machine, against 50.7 with 16 processes;
//! `bench/probes/nvrtc_scaling.sh`, session 8), so this is `aotune tune`'s
//! default (`--compile-in processes`).
//!
//! The protocol is one request per process. Stdin: a JSON line
//! ([`CompileRequest`]), then the source until end of file. Stdout: a JSON
//! line ([`CompileReply`]), then `cubin_bytes` bytes of cubin.

use super::nvrtc::{self, CompileFailure, Cubin, PtxasReport};
use serde::{Deserialize, Serialize};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The hidden subcommand the child runs.
pub const SUBCOMMAND: &str = "nvrtc-compile";

/// What the parent sends first.
#[derive(Debug, Serialize, Deserialize)]
pub struct CompileRequest {
    /// The program's name in NVRTC's messages.
    pub name: String,
    /// The CUDA headers' directory (`nvrtc::setup`'s answer in the parent).
    pub include: PathBuf,
}

/// What the child answers before the cubin.
#[derive(Debug, Serialize, Deserialize)]
pub struct CompileReply {
    /// The compile error (with NVRTC's log), or `None` when it compiled.
    pub error: Option<String>,
    pub report: PtxasReport,
    pub cubin_bytes: usize,
}

/// The child's side: reads one request and its source from stdin,
/// compiles, and writes the reply and cubin to stdout. A request that does
/// not parse or an NVRTC that cannot be loaded is answered as a compile
/// error; only broken pipes are errors here.
pub fn compile_child_main() -> io::Result<()> {
    lowest_cpu_priority();
    let mut input = BufReader::new(io::stdin().lock());
    let mut header = String::new();
    input.read_line(&mut header)?;
    let mut source = String::new();
    input.read_to_string(&mut source)?;
    let result = serde_json::from_str::<CompileRequest>(&header)
        .map_err(|e| format!("the compile request does not parse: {e}"))
        .and_then(|req| {
            nvrtc::setup().map_err(|e| e.to_string())?;
            nvrtc::compile(&source, &req.name, &req.include).map_err(|e| match e {
                CompileFailure::Error(log) => log,
                other => other.to_string(),
            })
        });
    let (reply, image) = match result {
        Ok(cubin) => (
            CompileReply {
                error: None,
                report: cubin.report,
                cubin_bytes: cubin.image.len(),
            },
            cubin.image,
        ),
        Err(error) => (
            CompileReply {
                error: Some(error),
                report: PtxasReport::default(),
                cubin_bytes: 0,
            },
            Vec::new(),
        ),
    };
    let mut out = io::stdout().lock();
    serde_json::to_writer(&mut out, &reply)?;
    out.write_all(b"\n")?;
    out.write_all(&image)?;
    out.flush()
}

/// How often a waiting parent thread looks at its child.
const POLL: Duration = Duration::from_millis(2);

/// The parent's side: compiles `source` in a fresh `exe nvrtc-compile`
/// process, killed when it runs past `timeout`. The compile time is the
/// whole round trip (process start included), what the tuner waits.
pub fn compile_in_process(
    exe: &Path,
    source: &str,
    name: &str,
    include: &Path,
    timeout: Duration,
) -> Result<Cubin, CompileFailure> {
    let start = Instant::now();
    let mut child = Command::new(exe)
        .arg(SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            CompileFailure::Error(format!(
                "cannot start the compiler process '{} {SUBCOMMAND}': {e}",
                exe.display()
            ))
        })?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(CompileFailure::Error(
            "the compiler process has no pipes".into(),
        ));
    };
    let (stdout, stderr) = (drain(stdout), drain(stderr));
    let request = CompileRequest {
        name: name.to_string(),
        include: include.to_path_buf(),
    };
    // A child that died early closes its stdin: the status below says why.
    let _ = serde_json::to_writer(&mut stdin, &request)
        .map_err(io::Error::from)
        .and_then(|()| stdin.write_all(b"\n"))
        .and_then(|()| stdin.write_all(source.as_bytes()));
    drop(stdin);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = (stdout.join(), stderr.join());
                return Err(CompileFailure::Timeout(timeout));
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CompileFailure::Error(format!(
                    "waiting for the compiler process: {e}"
                )));
            }
        }
    };
    let out = stdout.join().unwrap_or_default();
    let err = stderr.join().unwrap_or_default();
    let died = || {
        let err = String::from_utf8_lossy(&err);
        let err = err.trim();
        CompileFailure::Error(format!(
            "the compiler process died ({status}){}{err}",
            if err.is_empty() { "" } else { ": " }
        ))
    };
    let Some(newline) = out.iter().position(|&b| b == b'\n') else {
        return Err(died());
    };
    let reply: CompileReply = serde_json::from_slice(&out[..newline]).map_err(|_| died())?;
    if let Some(error) = reply.error {
        return Err(CompileFailure::Error(error));
    }
    let image = &out[newline + 1..];
    if !status.success() || image.len() != reply.cubin_bytes {
        return Err(died());
    }
    Ok(Cubin {
        image: image.to_vec(),
        report: reply.report,
        compile_time: start.elapsed(),
    })
}

/// Reads `pipe` to its end on a thread of its own (a child blocks when a
/// pipe it writes fills up).
fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    })
}

/// Puts this compiler process at the lowest CPU priority (nice 19): the
/// tuner measures candidates while the rest of a round compiles, and the
/// worker's launches between timed repeats must not wait for a core.
/// Failing to lower it only costs that protection, so errors are ignored.
fn lowest_cpu_priority() {
    #[cfg(unix)]
    // SAFETY: setpriority takes plain integers and touches no memory of ours.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 19);
    }
}
