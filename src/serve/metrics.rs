//! Prometheus metrics, served as text at `/metrics` on `--metrics-port`:
//!
//! | metric | type | labels | what |
//! | --- | --- | --- | --- |
//! | `aotune_requests_total` | counter | model, protocol, outcome | requests by outcome (`success` or an error kind) |
//! | `aotune_request_duration_seconds` | histogram | model, protocol | receipt to response of successful inferences |
//! | `aotune_queue_duration_seconds` | histogram | model | time a request (piece) waited in the queue |
//! | `aotune_compute_duration_seconds` | histogram | model | time the backend took per batch, gathering its inputs included |
//! | `aotune_gather_duration_seconds` | histogram | model | the part of that spent copying the requests' rows into the batch's input buffer |
//! | `aotune_device_duration_seconds` | histogram | model, stage | GPU time per batch by stage (`input` copy, `turn_wait` for earlier batches' kernels under `concurrent_kernels`, `kernels`, `output` copy), from CUDA events; waits behind other instances' work included |
//! | `aotune_receive_duration_seconds` | histogram | model, protocol | gRPC: from the request's headers arriving to its message decoded (the body's transfer) |
//! | `aotune_handoff_duration_seconds` | histogram | model | from the executor answering a request to its handler resuming with the answer |
//! | `aotune_gpu_memory_bytes` | gauge | model, kind | what the model's executors hold: `weights`, `arena` (device), `staging` (pinned host) |
//! | `aotune_gpu_device_memory_bytes` | gauge | kind | the device's `used` (every process) and `total` memory, refreshed at most once a second while batches run |
//! | `aotune_batch_size` | histogram | model | request rows per executed batch (padding not counted) |
//! | `aotune_batch_padding_rows_total` | counter | model | rows of padding added to reach a compiled size |
//! | `aotune_queue_rows` | gauge | model | rows waiting in the queue |
//! | `aotune_model_ready` | gauge | model | 1 when the model serves |

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Every metric of the server, registered in one registry.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    request_seconds: HistogramVec,
    queue_seconds: HistogramVec,
    compute_seconds: HistogramVec,
    gather_seconds: HistogramVec,
    device_seconds: HistogramVec,
    receive_seconds: HistogramVec,
    handoff_seconds: HistogramVec,
    gpu_memory: IntGaugeVec,
    device_memory: IntGaugeVec,
    batch_size: HistogramVec,
    padding_rows: IntCounterVec,
    queue_rows: IntGaugeVec,
    model_ready: IntGaugeVec,
}

/// Why the metrics could not be set up (a name clash: a bug, not input).
#[derive(Debug, thiserror::Error)]
#[error("metrics: {0}")]
pub struct MetricsError(#[from] prometheus::Error);

/// Seconds buckets from 100 µs to 60 s.
const SECONDS_BUCKETS: [f64; 16] = [
    1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
    60.0,
];
/// Seconds buckets from 10 µs to 100 ms, for the steps inside a request.
const STEP_BUCKETS: [f64; 12] = [
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1,
];
const BATCH_BUCKETS: [f64; 12] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0,
];

impl Metrics {
    pub fn new() -> Result<Metrics, MetricsError> {
        let registry = Registry::new();
        let seconds = |name: &str, help: &str, labels: &[&str]| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(SECONDS_BUCKETS.to_vec()),
                labels,
            )
        };
        let steps = |name: &str, help: &str, labels: &[&str]| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(STEP_BUCKETS.to_vec()),
                labels,
            )
        };
        let metrics = Metrics {
            requests: IntCounterVec::new(
                Opts::new("aotune_requests_total", "Inference requests by outcome"),
                &["model", "protocol", "outcome"],
            )?,
            request_seconds: seconds(
                "aotune_request_duration_seconds",
                "Receipt to response of successful inference requests",
                &["model", "protocol"],
            )?,
            queue_seconds: seconds(
                "aotune_queue_duration_seconds",
                "Time requests waited in the model's queue",
                &["model"],
            )?,
            compute_seconds: seconds(
                "aotune_compute_duration_seconds",
                "Backend time per executed batch, gathering its inputs included",
                &["model"],
            )?,
            gather_seconds: seconds(
                "aotune_gather_duration_seconds",
                "Part of the backend time per batch spent copying request rows into its input buffer",
                &["model"],
            )?,
            device_seconds: steps(
                "aotune_device_duration_seconds",
                "GPU time per batch by stage (input copy, turn wait, kernels, output copy), from CUDA events",
                &["model", "stage"],
            )?,
            receive_seconds: steps(
                "aotune_receive_duration_seconds",
                "From a gRPC request's headers arriving to its message decoded",
                &["model", "protocol"],
            )?,
            handoff_seconds: steps(
                "aotune_handoff_duration_seconds",
                "From the executor answering a request to its handler resuming",
                &["model"],
            )?,
            gpu_memory: IntGaugeVec::new(
                Opts::new(
                    "aotune_gpu_memory_bytes",
                    "Memory the model's executors hold: weights and arena (device), staging (pinned host)",
                ),
                &["model", "kind"],
            )?,
            device_memory: IntGaugeVec::new(
                Opts::new(
                    "aotune_gpu_device_memory_bytes",
                    "The GPU's used (every process) and total memory",
                ),
                &["kind"],
            )?,
            batch_size: HistogramVec::new(
                HistogramOpts::new(
                    "aotune_batch_size",
                    "Request rows per executed batch (padding not counted)",
                )
                .buckets(BATCH_BUCKETS.to_vec()),
                &["model"],
            )?,
            padding_rows: IntCounterVec::new(
                Opts::new(
                    "aotune_batch_padding_rows_total",
                    "Rows of padding added to reach a compiled batch size",
                ),
                &["model"],
            )?,
            queue_rows: IntGaugeVec::new(
                Opts::new("aotune_queue_rows", "Rows waiting in the model's queue"),
                &["model"],
            )?,
            model_ready: IntGaugeVec::new(
                Opts::new("aotune_model_ready", "1 when the model serves, else 0"),
                &["model"],
            )?,
            registry,
        };
        let r = &metrics.registry;
        r.register(Box::new(metrics.requests.clone()))?;
        r.register(Box::new(metrics.request_seconds.clone()))?;
        r.register(Box::new(metrics.queue_seconds.clone()))?;
        r.register(Box::new(metrics.compute_seconds.clone()))?;
        r.register(Box::new(metrics.gather_seconds.clone()))?;
        r.register(Box::new(metrics.device_seconds.clone()))?;
        r.register(Box::new(metrics.receive_seconds.clone()))?;
        r.register(Box::new(metrics.handoff_seconds.clone()))?;
        r.register(Box::new(metrics.gpu_memory.clone()))?;
        r.register(Box::new(metrics.device_memory.clone()))?;
        r.register(Box::new(metrics.batch_size.clone()))?;
        r.register(Box::new(metrics.padding_rows.clone()))?;
        r.register(Box::new(metrics.queue_rows.clone()))?;
        r.register(Box::new(metrics.model_ready.clone()))?;
        Ok(metrics)
    }

    /// Counts one finished inference request (`Err`: its error kind).
    pub fn request(
        &self,
        model: &str,
        protocol: &str,
        outcome: &str,
        elapsed: Option<std::time::Duration>,
    ) {
        self.requests
            .with_label_values(&[model, protocol, outcome])
            .inc();
        if let Some(elapsed) = elapsed {
            self.request_seconds
                .with_label_values(&[model, protocol])
                .observe(elapsed.as_secs_f64());
        }
    }

    /// A request's receipt (headers to decoded message) under `protocol`.
    pub fn receive(&self, model: &str, protocol: &str, elapsed: std::time::Duration) {
        self.receive_seconds
            .with_label_values(&[model, protocol])
            .observe(elapsed.as_secs_f64());
    }

    /// From a request's answer to its handler resuming.
    pub fn handoff(&self, model: &str, elapsed: std::time::Duration) {
        self.handoff_seconds
            .with_label_values(&[model])
            .observe(elapsed.as_secs_f64());
    }

    /// Whether `model` serves.
    pub fn set_ready(&self, model: &str, ready: bool) {
        self.model_ready
            .with_label_values(&[model])
            .set(i64::from(ready));
    }

    /// The handles the batcher of `model` records into.
    pub fn model(&self, model: &str) -> ModelMetrics {
        ModelMetrics {
            queue_seconds: self.queue_seconds.with_label_values(&[model]),
            compute_seconds: self.compute_seconds.with_label_values(&[model]),
            gather_seconds: self.gather_seconds.with_label_values(&[model]),
            device_seconds: ["input", "turn_wait", "kernels", "output"]
                .map(|stage| self.device_seconds.with_label_values(&[model, stage])),
            gpu_memory: ["weights", "arena", "staging"]
                .map(|kind| self.gpu_memory.with_label_values(&[model, kind])),
            device_memory: ["used", "total"]
                .map(|kind| self.device_memory.with_label_values(&[kind])),
            batch_size: self.batch_size.with_label_values(&[model]),
            padding_rows: self.padding_rows.with_label_values(&[model]),
            queue_rows: self.queue_rows.with_label_values(&[model]),
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        // Encoding into a Vec fails only on a metric family that does not
        // validate, which the registry refused at registration.
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buffer) {
            tracing::error!("encoding metrics: {e}");
        }
        String::from_utf8_lossy(&buffer).into_owned()
    }
}

/// One model's batcher metrics.
#[derive(Clone)]
pub struct ModelMetrics {
    pub queue_seconds: Histogram,
    pub compute_seconds: Histogram,
    pub gather_seconds: Histogram,
    /// The `input`, `turn_wait`, `kernels` and `output` stages' device time.
    pub device_seconds: [Histogram; 4],
    /// The model's `weights`, `arena` and `staging` bytes, summed over its
    /// executors.
    pub gpu_memory: [IntGauge; 3],
    /// The device's `used` and `total` bytes.
    pub device_memory: [IntGauge; 2],
    pub batch_size: Histogram,
    pub padding_rows: IntCounter,
    pub queue_rows: IntGauge,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_values_show_in_the_text() {
        let m = Metrics::new().unwrap();
        m.request(
            "m1",
            "http",
            "success",
            Some(std::time::Duration::from_millis(3)),
        );
        m.request("m1", "grpc", "queue_full", None);
        let b = m.model("m1");
        b.batch_size.observe(8.0);
        b.batch_size.observe(4.0);
        m.set_ready("m1", true);
        let text = m.render();
        for needle in [
            "aotune_requests_total{model=\"m1\",outcome=\"success\",protocol=\"http\"} 1",
            "aotune_requests_total{model=\"m1\",outcome=\"queue_full\",protocol=\"grpc\"} 1",
            "aotune_batch_size_sum{model=\"m1\"} 12",
            "aotune_batch_size_count{model=\"m1\"} 2",
            "aotune_model_ready{model=\"m1\"} 1",
        ] {
            assert!(text.contains(needle), "{needle} not in\n{text}");
        }
    }
}
