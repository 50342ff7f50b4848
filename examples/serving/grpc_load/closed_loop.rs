//! A closed-loop load generator, shared by the load client
//! (`examples/serving/grpc_load/main.rs`) and `tests/serve_load.rs`.
//!
//! `concurrency` clients each send their next request as soon as their last
//! one is answered: first for `warm_up`, then for `measure`. Requests
//! answered inside the measured window give the throughput and the latency
//! percentiles. A request's latency runs from just before it is sent to its
//! answer. Errors count over the whole run, warm-up included: a server that
//! fails while warming up has still failed.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many error messages a report keeps (every error is counted).
const KEPT_ERRORS: usize = 20;

/// What the measured window saw.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// The latency of each request answered successfully inside the
    /// window, in ms, sorted.
    pub latencies_ms: Vec<f64>,
    /// Failed requests over the whole run.
    pub errors: usize,
    /// The first failures' messages, each prefixed by its client.
    pub first_errors: Vec<String>,
    /// The measured window, in seconds.
    pub window_s: f64,
}

impl LoadReport {
    /// The `p` quantile (0..=1) of the latencies, in ms; NaN when none.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies_ms.is_empty() {
            return f64::NAN;
        }
        let last = self.latencies_ms.len() - 1;
        self.latencies_ms[(last as f64 * p).round() as usize]
    }

    /// Successful requests per second inside the window.
    pub fn requests_per_s(&self) -> f64 {
        self.latencies_ms.len() as f64 / self.window_s
    }
}

/// Runs `concurrency` closed-loop clients. `request(client, n)` sends client
/// `client`'s `n`-th request (counting from 0) and checks its answer.
pub async fn closed_loop<F, Fut>(
    concurrency: usize,
    warm_up: Duration,
    measure: Duration,
    request: F,
) -> LoadReport
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let start = Instant::now();
    let (window_start, window_end) = (start + warm_up, start + warm_up + measure);
    let request = Arc::new(request);
    let clients: Vec<_> = (0..concurrency)
        .map(|client| {
            let request = Arc::clone(&request);
            tokio::spawn(async move {
                let mut report = LoadReport::default();
                let mut n = 0;
                while Instant::now() < window_end {
                    let sent = Instant::now();
                    let result = request(client, n).await;
                    let answered = Instant::now();
                    match result {
                        Ok(()) if answered >= window_start && answered <= window_end => report
                            .latencies_ms
                            .push((answered - sent).as_secs_f64() * 1e3),
                        Ok(()) => {}
                        Err(e) => {
                            report.errors += 1;
                            if report.first_errors.len() < KEPT_ERRORS {
                                report.first_errors.push(format!("client {client}: {e}"));
                            }
                        }
                    }
                    n += 1;
                }
                report
            })
        })
        .collect();
    let mut total = LoadReport {
        window_s: measure.as_secs_f64(),
        ..LoadReport::default()
    };
    for client in clients {
        let report = client.await.unwrap_or_else(|e| LoadReport {
            errors: 1,
            first_errors: vec![format!("a client task failed: {e}")],
            ..LoadReport::default()
        });
        total.latencies_ms.extend(report.latencies_ms);
        total.errors += report.errors;
        let room = KEPT_ERRORS.saturating_sub(total.first_errors.len());
        total
            .first_errors
            .extend(report.first_errors.into_iter().take(room));
    }
    total.latencies_ms.sort_by(f64::total_cmp);
    total
}
