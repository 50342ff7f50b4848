//! Helpers of the `aotune serve` tests: a tiny ONNX model, a model
//! repository on disk, and a server process started on free ports and
//! stopped with SIGTERM.

#![allow(dead_code)]

pub mod tiny_model;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A fresh scratch directory for `name`.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aotune-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `repo/<name>/model.onnx` (and `config.json` when given).
pub fn add_model(repo: &Path, name: &str, model: &[u8], config: Option<&str>) {
    let dir = repo.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.onnx"), model).unwrap();
    if let Some(config) = config {
        std::fs::write(dir.join("config.json"), config).unwrap();
    }
}

/// A running `aotune serve`; killed when dropped unless [`Server::stop`]ped.
pub struct Server {
    child: Option<Child>,
    pub http: String,
    pub grpc: String,
    pub metrics: String,
    pub log: PathBuf,
}

impl Server {
    /// Starts `aotune serve` on `repo` (CPU backend, loopback, free ports)
    /// and waits until its ready endpoint answers 200.
    pub fn start(repo: &Path, extra: &[&str]) -> Server {
        let log = repo.with_extension("serve.log");
        let stderr = std::fs::File::create(&log).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_aotune"))
            .args(["serve", "--model-repository"])
            .arg(repo)
            .args([
                "--http-port",
                "0",
                "--grpc-port",
                "0",
                "--metrics-port",
                "0",
            ])
            .args(["--address", "127.0.0.1", "--backend", "cpu"])
            .args(extra)
            .env("AOTUNE_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start aotune serve");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        assert!(
            words.len() == 8 && words[2] == "HTTP",
            "unexpected first line {line:?}; log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let server = Server {
            child: Some(child),
            http: format!("http://{}", words[3]),
            grpc: format!("http://{}", words[5]),
            metrics: format!("http://{}/metrics", words[7]),
            log,
        };
        server.wait_ready(Duration::from_secs(300));
        server
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// Polls `/v2/health/ready` until 200 (blocking HTTP/1.0 by hand, so it
    /// works outside an async runtime).
    fn wait_ready(&self, limit: Duration) {
        let start = Instant::now();
        while start.elapsed() < limit {
            if http_get_status(&self.http, "/v2/health/ready") == Some(200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "server not ready after {limit:?}; log:\n{}",
            self.log_text()
        );
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the exit; returns (exit code, log).
    pub fn stop(mut self) -> (Option<i32>, String) {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                panic!("the server did not stop within 60 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        (status.code(), self.log_text())
    }

    /// The server's resident set size in KiB (Linux `/proc`).
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The status of a GET on `base` + `path`, or `None` when nothing answers.
pub fn http_get_status(base: &str, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

/// The sum and count of a Prometheus histogram with one label set.
pub fn histogram(metrics: &str, name: &str, labels: &str) -> (f64, f64) {
    let value = |suffix: &str| {
        let key = format!("{name}_{suffix}{{{labels}}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (value("sum"), value("count"))
}

/// Little-endian f32 bytes.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}
