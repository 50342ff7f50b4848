//! Triton's load generator, perf_analyzer, against `aotune serve` on the CPU
//! backend, over gRPC and HTTP: it must read the model's metadata and
//! configuration, run its requests without an error, and find the server's
//! side of them in the statistics extension; the server's own count of
//! successful requests must cover every request perf_analyzer reports.
//!
//! The binary comes from `$AOTUNE_PERF_ANALYZER`, else from
//! `.tools/perf_analyzer/perf_analyzer` (`make perf-analyzer` puts it there
//! with the two libraries it loads; `make test` does it first). Without one
//! the test skips, visibly.

mod serve_common;

use serve_common::tiny_model::tiny_model;
use serve_common::{add_model, Server};
use std::path::PathBuf;
use std::process::Command;

/// perf_analyzer's path, or why there is none.
fn perf_analyzer() -> Result<PathBuf, String> {
    let path = std::env::var_os("AOTUNE_PERF_ANALYZER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".tools/perf_analyzer/perf_analyzer")
        });
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "no perf_analyzer at {} (`make perf-analyzer` fetches it)",
            path.display()
        ))
    }
}

/// The first number after `label` in perf_analyzer's report.
fn number_after(report: &str, label: &str) -> Option<f64> {
    let at = report.find(label)? + label.len();
    report[at..]
        .split_whitespace()
        .next()?
        .trim_end_matches(',')
        .parse()
        .ok()
}

/// Runs perf_analyzer on `url` over `protocol` at concurrency 2 and returns
/// its report (stdout and stderr).
fn run(binary: &PathBuf, protocol: &str, url: &str) -> String {
    let libraries = binary.parent().unwrap().to_path_buf();
    let library_path = match std::env::var_os("LD_LIBRARY_PATH") {
        Some(old) => {
            let mut paths = vec![libraries];
            paths.extend(std::env::split_paths(&old));
            std::env::join_paths(paths).unwrap()
        }
        None => libraries.into_os_string(),
    };
    let out = Command::new(binary)
        .args(["-m", "tiny", "-u", url, "-i", protocol, "-b", "1"])
        .args(["--concurrency-range", "2"])
        // Fixed windows of 40 requests, and any spread is stable: a CPU
        // machine of 2 cores is no place to judge stability.
        .args(["--measurement-mode", "count_windows"])
        .args(["--measurement-request-count", "40"])
        .args(["--stability-percentage", "1000", "--max-trials", "3"])
        .env("LD_LIBRARY_PATH", library_path)
        .output()
        .expect("run perf_analyzer");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "perf_analyzer over {protocol} failed ({}):\n{report}",
        out.status
    );
    report
}

#[test]
fn perf_analyzer_runs_against_the_server_over_grpc_and_http() {
    let binary = match perf_analyzer() {
        Ok(b) => b,
        Err(why) => return aotune_compiler::skip::here(&why),
    };
    let dir = serve_common::scratch("perf-analyzer");
    let repo = dir.join("repo");
    add_model(
        &repo,
        "tiny",
        &tiny_model(),
        Some(r#"{"batch_sizes": [1, 4], "max_queue_delay_us": 1000}"#),
    );
    let server = Server::start(&repo, &[]);
    let mut sent = 0.0;
    for (protocol, url) in [("grpc", &server.grpc), ("http", &server.http)] {
        // perf_analyzer takes host:port, without a scheme.
        let url = url.trim_start_matches("http://");
        let report = run(&binary, protocol, url);
        println!("perf_analyzer over {protocol}:\n{report}");
        let client = number_after(&report, "Request count:")
            .unwrap_or_else(|| panic!("no client request count over {protocol}:\n{report}"));
        let throughput = number_after(&report, "Throughput:")
            .unwrap_or_else(|| panic!("no throughput over {protocol}:\n{report}"));
        // The server's side, from the statistics extension.
        let served = number_after(&report, "Successful request count:")
            .unwrap_or_else(|| panic!("no server statistics over {protocol}:\n{report}"));
        assert!(client >= 40.0, "{protocol}: {client} requests measured");
        assert!(throughput > 0.0, "{protocol}: throughput {throughput}");
        assert!(
            served >= client,
            "{protocol}: the server counted {served} successful requests, perf_analyzer {client}"
        );
        assert!(
            report.contains("Avg request latency"),
            "{protocol}: no server-side latency split:\n{report}"
        );
        sent += client;
    }
    let (code, log) = server.stop();
    assert_eq!(
        code,
        Some(0),
        "the server's exit after SIGTERM; log:\n{log}"
    );
    assert!(
        !log.contains("panicked"),
        "a panic in the server's log:\n{log}"
    );
    assert!(sent >= 80.0);
}
