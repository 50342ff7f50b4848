//! A closed-loop gRPC load client for `aotune serve`, or for any server of the
//! KServe v2 / Triton gRPC protocol. It is the load half of
//! `bench/serve_gpu.sh`. `--concurrency` clients each send `ModelInfer`
//! requests of `--batch-per-request` rows, as raw little-endian tensors in
//! `raw_input_contents`, as tritonclient does. Each client sends its next
//! request when its last one is answered: for `--warmup-seconds`, then for
//! `--seconds` measured. It prints one JSON line with requests/s, images/s,
//! the p50/p90/p99 latency and the errors. It exits 1 when a request failed or
//! none was answered.
//!
//! ```sh
//! cargo build --release --features serve --example serve_grpc_load
//! target/release/examples/serve_grpc_load --url http://127.0.0.1:8001 --model resnet50 \
//!     --concurrency 64 --seconds 30 --warmup-seconds 10
//! ```
//!
//! The input shape, datatype and outputs come from `ModelMetadata`; a `-1`
//! (batch) dimension becomes `--batch-per-request`. Inputs are sent in the
//! datatype the metadata declares, FP32 or FP16 (little-endian f16, half the
//! bytes: `"input_datatype": "FP16"` in an aotune model's config), one fixed
//! pseudo-random tensor per client. An answer counts when it carries
//! every output with the byte length its metadata implies.

mod closed_loop;

#[allow(dead_code, clippy::all)]
mod proto {
    include!("../../../src/serve/proto/inference.rs");
}

use clap::Parser;
use closed_loop::closed_loop;
use proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use proto::model_infer_request::InferInputTensor;
use proto::model_metadata_response::TensorMetadata;
use proto::{ModelInferRequest, ModelInferResponse, ModelMetadataRequest, ModelReadyRequest};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};

#[derive(Debug, Parser)]
#[command(about = "Closed-loop gRPC load on a KServe v2 / Triton server; one JSON line out")]
struct Args {
    /// The server's gRPC address.
    #[arg(long, default_value = "http://127.0.0.1:8001")]
    url: String,
    /// The model to call.
    #[arg(long)]
    model: String,
    /// Clients, each with one request in flight.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// The measured window, after the warm-up.
    #[arg(long, default_value_t = 30.0)]
    seconds: f64,
    #[arg(long, default_value_t = 10.0)]
    warmup_seconds: f64,
    /// Rows of each request (the `-1` dimension of the model's inputs).
    #[arg(long, default_value_t = 1)]
    batch_per_request: usize,
    /// HTTP/2 connections the clients share, round robin [default: one per
    /// client, as independent clients would have].
    #[arg(long)]
    connections: Option<usize>,
    /// Wait up to this long for the server to answer and the model to be
    /// ready (a first GPU load compiles its kernels).
    #[arg(long, default_value_t = 0.0)]
    wait_ready_seconds: f64,
    /// Each request's deadline.
    #[arg(long, default_value_t = 60.0)]
    timeout_seconds: f64,
}

/// Bytes per element of a KServe datatype; `None` for BYTES and the unknown.
fn element_bytes(datatype: &str) -> Option<usize> {
    Some(match datatype {
        "BOOL" | "INT8" | "UINT8" => 1,
        "INT16" | "UINT16" | "FP16" | "BF16" => 2,
        "INT32" | "UINT32" | "FP32" => 4,
        "INT64" | "UINT64" | "FP64" => 8,
        _ => return None,
    })
}

/// `values` as little-endian f32, or f16 (rounded) when `fp16`.
fn le_bytes(values: &[f32], fp16: bool) -> Vec<u8> {
    if fp16 {
        values
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect()
    } else {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
}

/// `shape` with its `-1` dimensions set to `batch`.
fn concrete(shape: &[i64], batch: usize) -> Vec<i64> {
    shape
        .iter()
        .map(|&d| if d < 0 { batch as i64 } else { d })
        .collect()
}

fn elements(shape: &[i64]) -> usize {
    shape.iter().map(|&d| d.max(0) as usize).product()
}

/// What every request shares: its inputs' metadata, one input tensor per
/// client, and the expected output lengths.
struct Workload {
    model: String,
    inputs: Vec<InferInputTensor>,
    /// Per client, per input: the raw bytes (shared by every request of
    /// that client: cloning one copies nothing).
    data: Vec<Vec<bytes::Bytes>>,
    /// Per output: its name and byte length (`None`: not checked).
    outputs: Vec<(String, Option<usize>)>,
    timeout: Duration,
}

impl Workload {
    fn request(&self, client: usize) -> tonic::Request<ModelInferRequest> {
        let mut request = tonic::Request::new(ModelInferRequest {
            model_name: self.model.clone(),
            inputs: self.inputs.clone(),
            raw_input_contents: self.data[client].clone(),
            ..Default::default()
        });
        request.set_timeout(self.timeout);
        request
    }

    fn check(&self, response: &ModelInferResponse) -> Result<(), String> {
        if response.raw_output_contents.len() != self.outputs.len() {
            return Err(format!(
                "{} raw outputs, expected {}",
                response.raw_output_contents.len(),
                self.outputs.len()
            ));
        }
        for ((name, bytes), raw) in self.outputs.iter().zip(&response.raw_output_contents) {
            if let Some(bytes) = bytes {
                if raw.len() != *bytes {
                    return Err(format!(
                        "output {name}: {} bytes, expected {bytes}",
                        raw.len()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Connects and waits until `model` is ready, for up to `limit`.
async fn connect_ready(
    endpoint: &Endpoint,
    model: &str,
    limit: Duration,
) -> Result<Channel, String> {
    let start = Instant::now();
    let mut said = false;
    loop {
        let last = match endpoint.connect().await {
            Ok(channel) => {
                let ready = GrpcInferenceServiceClient::new(channel.clone())
                    .model_ready(ModelReadyRequest {
                        name: model.into(),
                        version: String::new(),
                    })
                    .await;
                match ready {
                    Ok(r) if r.get_ref().ready => return Ok(channel),
                    Ok(_) => format!("model '{model}' is not ready"),
                    Err(e) => format!("ModelReady: {}: {}", e.code(), e.message()),
                }
            }
            Err(e) => format!("connecting: {e}"),
        };
        if start.elapsed() >= limit {
            return Err(last);
        }
        if !said {
            eprintln!("serve_grpc_load: waiting up to {limit:?} for '{model}' ({last})");
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn workload(channel: Channel, args: &Args) -> Result<(Workload, usize), String> {
    let metadata = GrpcInferenceServiceClient::new(channel)
        .model_metadata(ModelMetadataRequest {
            name: args.model.clone(),
            version: String::new(),
        })
        .await
        .map_err(|e| format!("ModelMetadata: {}: {}", e.code(), e.message()))?
        .into_inner();
    let batch = args.batch_per_request;
    let mut inputs = Vec::new();
    let mut sizes = Vec::new();
    for TensorMetadata {
        name,
        datatype,
        shape,
    } in &metadata.inputs
    {
        if datatype != "FP32" && datatype != "FP16" {
            return Err(format!(
                "input {name} is {datatype}; this client sends FP32 or FP16 only"
            ));
        }
        let shape = concrete(shape, batch);
        sizes.push((elements(&shape), datatype == "FP16"));
        inputs.push(InferInputTensor {
            name: name.clone(),
            datatype: datatype.clone(),
            shape,
            ..Default::default()
        });
    }
    // Rows per request: the batch where the model has a batch dimension,
    // else the exported first dimension.
    let rows = match metadata.inputs.first().and_then(|t| t.shape.first()) {
        Some(&d) if d < 0 => batch,
        Some(&d) => d.max(1) as usize,
        None => 1,
    };
    let data = (0..args.concurrency)
        .map(|client| {
            sizes
                .iter()
                .enumerate()
                .map(|(i, &(n, fp16))| {
                    let seed = 1000 + (client * sizes.len() + i) as u64;
                    let values = aotune_compiler::zoo::fill(seed, 0.0, 1.0, n);
                    bytes::Bytes::from(le_bytes(&values, fp16))
                })
                .collect()
        })
        .collect();
    let outputs = metadata
        .outputs
        .iter()
        .map(|t| {
            let bytes =
                element_bytes(&t.datatype).map(|b| b * elements(&concrete(&t.shape, batch)));
            (t.name.clone(), bytes)
        })
        .collect();
    let workload = Workload {
        model: args.model.clone(),
        inputs,
        data,
        outputs,
        timeout: Duration::from_secs_f64(args.timeout_seconds),
    };
    Ok((workload, rows))
}

async fn run(args: Args) -> Result<bool, String> {
    if args.concurrency == 0 || args.batch_per_request == 0 || args.seconds <= 0.0 {
        return Err("--concurrency, --batch-per-request and --seconds must be positive".into());
    }
    let endpoint = Endpoint::from_shared(args.url.clone())
        .map_err(|e| format!("--url {}: {e}", args.url))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5));
    let first = connect_ready(
        &endpoint,
        &args.model,
        Duration::from_secs_f64(args.wait_ready_seconds.max(0.0)),
    )
    .await?;
    let (workload, rows) = workload(first.clone(), &args).await?;
    let connections = args
        .connections
        .unwrap_or(args.concurrency)
        .clamp(1, args.concurrency);
    let mut channels = vec![first];
    for _ in 1..connections {
        channels.push(
            endpoint
                .connect()
                .await
                .map_err(|e| format!("connecting: {e}"))?,
        );
    }
    let clients: Vec<_> = channels
        .into_iter()
        .map(|c| {
            GrpcInferenceServiceClient::new(c)
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX)
        })
        .collect();
    let workload = Arc::new(workload);
    let report = {
        let workload = Arc::clone(&workload);
        closed_loop(
            args.concurrency,
            Duration::from_secs_f64(args.warmup_seconds.max(0.0)),
            Duration::from_secs_f64(args.seconds),
            move |client, _n| {
                let mut grpc = clients[client % clients.len()].clone();
                let workload = Arc::clone(&workload);
                async move {
                    let response = grpc
                        .model_infer(workload.request(client))
                        .await
                        .map_err(|e| format!("{}: {}", e.code(), e.message()))?;
                    workload.check(response.get_ref())
                }
            },
        )
        .await
    };
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    let line = serde_json::json!({
        "protocol": "grpc",
        "model": args.model,
        "inputs": workload.inputs.iter().map(|t| serde_json::json!({"name": t.name, "shape": t.shape})).collect::<Vec<_>>(),
        "concurrency": args.concurrency,
        "connections": connections,
        "batch_per_request": rows,
        "warmup_s": args.warmup_seconds,
        "seconds": args.seconds,
        "requests": report.latencies_ms.len(),
        "requests_per_s": round(report.requests_per_s()),
        "images_per_s": round(report.requests_per_s() * rows as f64),
        "p50_ms": round(report.percentile_ms(0.5)),
        "p90_ms": round(report.percentile_ms(0.9)),
        "p99_ms": round(report.percentile_ms(0.99)),
        "max_ms": round(report.percentile_ms(1.0)),
        "errors": report.errors,
        "first_errors": report.first_errors.iter().take(5).collect::<Vec<_>>(),
    });
    println!("{line}");
    Ok(report.errors == 0 && !report.latencies_ms.is_empty())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("serve_grpc_load: {e}");
            ExitCode::from(2)
        }
    }
}
