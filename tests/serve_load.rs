//! A bounded load test of `aotune serve` on loopback: 64 concurrent clients
//! (HTTP binary, HTTP JSON and gRPC) for `AOTUNE_SERVE_LOAD_SECONDS` (default
//! 5; `make serve-load` runs 60) against the tiny model on the CPU reference.
//! Every answer must be a success with the expected output; the server's
//! resident memory may not grow by 10% or more between the end of the
//! warm-up (the first fifth) and the end. Prints p50/p99 latency,
//! throughput, batch sizes and RSS. The clients are the closed loop of the
//! load client `examples/serving/grpc_load`.

#[path = "../examples/serving/grpc_load/closed_loop.rs"]
mod closed_loop;
mod serve_common;

#[allow(dead_code, clippy::all)]
mod proto {
    include!("../src/serve/proto/inference.rs");
}

use proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use proto::model_infer_request::InferInputTensor;
use proto::ModelInferRequest;
use serve_common::tiny_model::{reference, tiny_model};
use serve_common::{add_model, f32_bytes, histogram, Server};
use std::sync::Arc;
use std::time::Duration;

const CONCURRENCY: usize = 64;
const ROW: usize = 3 * 8 * 8;

/// One request of client `k`'s kind; its output row.
async fn one(
    k: usize,
    http: &reqwest::Client,
    grpc: &mut GrpcInferenceServiceClient<tonic::transport::Channel>,
    base: &str,
    x: &[f32],
) -> Result<Vec<f32>, String> {
    match k % 4 {
        0 => {
            let mut request = ModelInferRequest {
                model_name: "tiny".into(),
                ..Default::default()
            };
            request.inputs.push(InferInputTensor {
                name: "x".into(),
                datatype: "FP32".into(),
                shape: vec![1, 3, 8, 8],
                ..Default::default()
            });
            request.raw_input_contents.push(f32_bytes(x).into());
            let r = grpc.model_infer(request).await.map_err(|e| e.to_string())?;
            let raw = r.into_inner().raw_output_contents.remove(0);
            Ok(raw
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect())
        }
        1 => {
            let body = format!(
                r#"{{"inputs": [{{"name": "x", "shape": [1, 3, 8, 8], "datatype": "FP32", "data": {x:?}}}]}}"#
            );
            let r = http
                .post(format!("{base}/v2/models/tiny/infer"))
                .body(body)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if r.status() != 200 {
                return Err(format!(
                    "{}: {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                ));
            }
            let v: serde_json::Value = r.json().await.map_err(|e| e.to_string())?;
            Ok(v["outputs"][0]["data"]
                .as_array()
                .ok_or("no data")?
                .iter()
                .map(|d| d.as_f64().unwrap_or(f64::NAN) as f32)
                .collect())
        }
        _ => {
            let header = r#"{"inputs": [{"name": "x", "shape": [1, 3, 8, 8], "datatype": "FP32", "parameters": {"binary_data_size": 768}}], "outputs": [{"name": "y", "parameters": {"binary_data": true}}]}"#;
            let mut body = header.as_bytes().to_vec();
            body.extend_from_slice(&f32_bytes(x));
            let r = http
                .post(format!("{base}/v2/models/tiny/infer"))
                .header("Inference-Header-Content-Length", header.len())
                .body(body)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if r.status() != 200 {
                return Err(format!(
                    "{}: {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                ));
            }
            let json_len: usize = r
                .headers()
                .get("inference-header-content-length")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .ok_or("no Inference-Header-Content-Length")?;
            let bytes = r.bytes().await.map_err(|e| e.to_string())?;
            Ok(bytes[json_len..]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_at_concurrency_64_has_no_errors_and_bounded_memory() {
    let seconds: u64 = std::env::var("AOTUNE_SERVE_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let repo = serve_common::scratch("load").join("repo");
    add_model(
        &repo,
        "tiny",
        &tiny_model(),
        Some(r#"{"batch_sizes": [1, 8, 32, 64], "instances": 2}"#),
    );
    let server = Server::start(&repo, &[]);
    // 16 distinct inputs, their expected rows.
    let inputs: Vec<Vec<f32>> = (0..16)
        .map(|i| aotune_compiler::zoo::fill(500 + i, -1.0, 1.0, ROW))
        .collect();
    let expected = reference(&repo.join("tiny/model.onnx"), 16, &inputs.concat());
    let (inputs, expected) = (Arc::new(inputs), Arc::new(expected));

    // The first fifth warms up; RSS is read at its end, then at the end.
    let warm_up = Duration::from_secs(seconds) / 5;
    let http = reqwest::Client::new();
    let channel = tonic::transport::Endpoint::from_shared(server.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let grpc = GrpcInferenceServiceClient::new(channel);
    let base = server.http.clone();
    let load = closed_loop::closed_loop(
        CONCURRENCY,
        warm_up,
        Duration::from_secs(seconds) - warm_up,
        move |k, n| {
            let (http, mut grpc, base) = (http.clone(), grpc.clone(), base.clone());
            let (inputs, expected) = (Arc::clone(&inputs), Arc::clone(&expected));
            async move {
                let i = (k + n) % inputs.len();
                let y = one(k, &http, &mut grpc, &base, &inputs[i]).await?;
                let want = &expected[i * 10..][..10];
                let ok = y.len() == 10
                    && y.iter()
                        .zip(want)
                        .all(|(a, b)| (a - b).abs() <= 1e-5 * b.abs().max(1.0));
                if ok {
                    Ok(())
                } else {
                    Err(format!("wrong output {y:?}, want {want:?}"))
                }
            }
        },
    );
    let rss_at_warm = async {
        tokio::time::sleep(warm_up).await;
        server.rss_kib().unwrap_or(0)
    };
    let (load, rss_warm) = tokio::join!(load, rss_at_warm);
    let rss_end = server.rss_kib().unwrap_or(0);
    assert!(
        load.errors == 0,
        "{} errors, first: {:?}",
        load.errors,
        &load.first_errors[..load.first_errors.len().min(5)]
    );
    assert!(
        !load.latencies_ms.is_empty(),
        "no request finished after the warm-up"
    );
    let metrics = reqwest::get(&server.metrics)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (rows, batches) = histogram(&metrics, "aotune_batch_size", r#"model="tiny""#);
    let growth = (rss_end as f64 - rss_warm as f64) / rss_warm.max(1) as f64;
    println!(
        "load: {seconds} s at concurrency {CONCURRENCY}: {} requests after warm-up, 0 errors, \
         p50 {:.2} ms, p99 {:.2} ms, {:.0} req/s; mean batch {:.1}; RSS {} → {} KiB ({:+.1}%)",
        load.latencies_ms.len(),
        load.percentile_ms(0.5),
        load.percentile_ms(0.99),
        load.requests_per_s(),
        rows / batches.max(1.0),
        rss_warm,
        rss_end,
        growth * 100.0
    );
    assert!(rss_warm > 0, "could not read the server's RSS");
    assert!(growth < 0.10, "RSS grew {:.1}% under load", growth * 100.0);
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "log:\n{log}");
    assert!(
        !log.contains("panicked"),
        "a panic in the server log:\n{log}"
    );
}
