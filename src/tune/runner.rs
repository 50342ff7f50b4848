//! The tuner's side of the worker process: spawn `aotune tune-worker`, send
//! requests, read replies under a deadline, and start a fresh worker (with
//! the same setup) after one dies or hangs.

use super::protocol::{Reply, Request};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why a request got no reply.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("cannot start the measuring worker '{exe} tune-worker': {source}")]
    Spawn {
        exe: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the measuring worker did not answer within {0:.0?} (killed)")]
    Timeout(Duration),
    #[error("the measuring worker died ({status}){stderr}")]
    Died { status: String, stderr: String },
    #[error("the measuring worker sent a reply that does not parse: {0}")]
    BadReply(String),
}

/// A running worker process.
struct Process {
    child: Child,
    stdin: ChildStdin,
    replies: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Process {
    fn spawn(exe: &PathBuf) -> Result<Self, WorkerError> {
        let mut child = Command::new(exe)
            .arg("tune-worker")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| WorkerError::Spawn {
                exe: exe.display().to_string(),
                source,
            })?;
        let (Some(stdin), Some(stdout), Some(mut stderr_pipe)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            return Err(WorkerError::Spawn {
                exe: exe.display().to_string(),
                source: std::io::Error::other("no pipes"),
            });
        };
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut s) = sink.lock() {
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if s.len() > 8192 {
                        let cut = s.len() - 4096;
                        let cut = (cut..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(0);
                        s.drain(..cut);
                    }
                }
            }
        });
        Ok(Process {
            child,
            stdin,
            replies,
            stderr,
        })
    }

    fn died(&mut self) -> WorkerError {
        let status = match self.child.wait() {
            Ok(s) => s.to_string(),
            Err(e) => e.to_string(),
        };
        // Give the stderr reader a moment to drain.
        std::thread::sleep(Duration::from_millis(50));
        let tail = self
            .stderr
            .lock()
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        WorkerError::Died {
            status,
            stderr: if tail.is_empty() {
                String::new()
            } else {
                format!(": {tail}")
            },
        }
    }

    fn request(&mut self, req: &Request, timeout: Duration) -> Result<Reply, WorkerError> {
        let mut line =
            serde_json::to_string(req).map_err(|e| WorkerError::BadReply(e.to_string()))?;
        line.push('\n');
        if self
            .stdin
            .write_all(line.as_bytes())
            .and_then(|_| self.stdin.flush())
            .is_err()
        {
            return Err(self.died());
        }
        match self.replies.recv_timeout(timeout) {
            Ok(reply) => serde_json::from_str(&reply)
                .map_err(|e| WorkerError::BadReply(format!("{e}: {reply}"))),
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                Err(WorkerError::Timeout(timeout))
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.died()),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A worker that is restarted on demand, replaying the current setup.
pub struct Runner {
    exe: PathBuf,
    process: Option<Process>,
    setup: Option<Request>,
    /// How many times a worker had to be replaced.
    pub restarts: usize,
}

impl Runner {
    /// Workers are started from `exe` (normally `std::env::current_exe()`).
    pub fn new(exe: PathBuf) -> Self {
        Runner {
            exe,
            process: None,
            setup: None,
            restarts: 0,
        }
    }

    /// Sends a `Setup` (remembered for restarts) and returns its reply.
    pub fn setup(&mut self, setup: Request, timeout: Duration) -> Result<Reply, WorkerError> {
        self.setup = Some(setup.clone());
        self.send(&setup, timeout)
    }

    /// Sends a request, starting a worker (and replaying the setup) first if
    /// none is running. After a timeout, a death, or a fatal failure the
    /// worker is dropped, so the next request starts a fresh one.
    pub fn send(&mut self, req: &Request, timeout: Duration) -> Result<Reply, WorkerError> {
        if self.process.is_none() {
            let mut p = Process::spawn(&self.exe)?;
            if let (Some(setup), false) = (&self.setup, matches!(req, Request::Setup { .. })) {
                match p.request(setup, timeout)? {
                    Reply::Ready { .. } => {}
                    other => {
                        return Err(WorkerError::BadReply(format!(
                            "setup after restart failed: {other:?}"
                        )))
                    }
                }
            }
            self.process = Some(p);
        }
        let Some(p) = self.process.as_mut() else {
            return Err(WorkerError::BadReply("no worker".into()));
        };
        let result = p.request(req, timeout);
        let keep = matches!(&result, Ok(r) if !matches!(r, Reply::Failed { fatal: true, .. }));
        if !keep {
            self.process = None;
            self.restarts += 1;
        }
        result
    }
}
