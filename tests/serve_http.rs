//! `aotune serve` over HTTP and gRPC, from Rust clients: malformed requests
//! each get an error with a message and the server keeps serving; dynamic
//! batching merges concurrent clients without mixing their results.

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
use std::io::{Read, Write};
use std::time::Duration;

/// f32 values of one tiny-model row (`[3, 8, 8]`).
const ROW: usize = 3 * 8 * 8;

fn infer_json(shape: &str, datatype: &str, data: &str) -> String {
    format!(
        r#"{{"inputs": [{{"name": "x", "shape": {shape}, "datatype": "{datatype}", "data": {data}}}]}}"#
    )
}

fn zeros(n: usize) -> String {
    format!("[{}]", vec!["0"; n].join(","))
}

/// One malformed HTTP request and what its answer must say.
struct Case {
    what: &'static str,
    method: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    status: u16,
    needle: &'static str,
}

fn case(
    what: &'static str,
    path: &str,
    body: impl Into<Vec<u8>>,
    status: u16,
    needle: &'static str,
) -> Case {
    Case {
        what,
        method: "POST",
        path: path.into(),
        headers: Vec::new(),
        body: body.into(),
        status,
        needle,
    }
}

fn malformed_http_cases() -> Vec<Case> {
    let infer = "/v2/models/tiny/infer";
    let binary_header = r#"{"inputs": [{"name": "x", "shape": [1, 3, 8, 8], "datatype": "FP32", "parameters": {"binary_data_size": 10}}]}"#;
    let mut binary_body = binary_header.as_bytes().to_vec();
    binary_body.extend_from_slice(&[0u8; 10]);
    let good_header = r#"{"inputs": [{"name": "x", "shape": [1, 3, 8, 8], "datatype": "FP32", "parameters": {"binary_data_size": 768}}]}"#;
    let mut good_body = good_header.as_bytes().to_vec();
    good_body.extend_from_slice(&[0u8; 768]);
    vec![
        case(
            "malformed JSON",
            infer,
            "{\"inputs\": [",
            400,
            "malformed inference request JSON",
        ),
        case(
            "JSON array",
            infer,
            "[1, 2]",
            400,
            "malformed inference request JSON",
        ),
        case(
            "no inputs field",
            infer,
            "{}",
            400,
            "missing field `inputs`",
        ),
        case("not UTF-8", infer, vec![0xff, 0xfe, 0x00], 400, "malformed"),
        case(
            "unknown model",
            "/v2/models/nope/infer",
            infer_json("[1, 3, 8, 8]", "FP32", &zeros(ROW)),
            404,
            "unknown model 'nope'",
        ),
        case(
            "unknown version",
            "/v2/models/tiny/versions/7/infer",
            infer_json("[1, 3, 8, 8]", "FP32", &zeros(ROW)),
            404,
            "no version '7'",
        ),
        case(
            "model not ready",
            "/v2/models/broken/infer",
            infer_json("[1, 3, 8, 8]", "FP32", &zeros(ROW)),
            503,
            "not ready",
        ),
        case(
            "unknown input",
            infer,
            r#"{"inputs": [{"name": "z", "shape": [1], "datatype": "FP32", "data": [1]}]}"#,
            400,
            "unknown input 'z'",
        ),
        case(
            "wrong shape",
            infer,
            infer_json("[1, 3, 8, 9]", "FP32", &zeros(3 * 8 * 9)),
            400,
            "does not match",
        ),
        case(
            "wrong rank",
            infer,
            infer_json("[3, 8, 8]", "FP32", &zeros(ROW)),
            400,
            "does not match",
        ),
        case(
            "zero batch",
            infer,
            infer_json("[0, 3, 8, 8]", "FP32", "[]"),
            400,
            "at least 1",
        ),
        case(
            "negative dimension",
            infer,
            infer_json("[-1, 3, 8, 8]", "FP32", "[]"),
            400,
            "negative",
        ),
        case(
            "wrong datatype",
            infer,
            infer_json("[1, 3, 8, 8]", "INT64", &zeros(ROW)),
            400,
            "datatype INT64",
        ),
        case(
            "FP16 to an FP32 model",
            infer,
            infer_json("[1, 3, 8, 8]", "FP16", &zeros(ROW)),
            400,
            "expected FP32, got FP16",
        ),
        case(
            "too few values",
            infer,
            infer_json("[1, 3, 8, 8]", "FP32", "[1, 2, 3]"),
            400,
            "needs 192 values, got 3",
        ),
        case(
            "strings as FP32",
            infer,
            infer_json("[1, 3, 8, 8]", "FP32", r#"["a"]"#),
            400,
            "must be numbers",
        ),
        case(
            "no data",
            infer,
            r#"{"inputs": [{"name": "x", "shape": [1, 3, 8, 8], "datatype": "FP32"}]}"#,
            400,
            "no \"data\"",
        ),
        Case {
            headers: vec![(
                "Inference-Header-Content-Length",
                binary_header.len().to_string(),
            )],
            ..case(
                "binary byte length",
                infer,
                binary_body,
                400,
                "needs 768 bytes, got 10",
            )
        },
        Case {
            headers: vec![("Inference-Header-Content-Length", "100000".into())],
            ..case(
                "header length past the body",
                infer,
                good_body.clone(),
                400,
                "Inference-Header-Content-Length is 100000",
            )
        },
        Case {
            headers: vec![("Inference-Header-Content-Length", "ten".into())],
            ..case(
                "header length not a number",
                infer,
                good_body.clone(),
                400,
                "must be a byte count",
            )
        },
        Case {
            headers: vec![(
                "Inference-Header-Content-Length",
                good_header.len().to_string(),
            )],
            ..case(
                "binary data left over",
                infer,
                [good_body.as_slice(), &[1, 2, 3]].concat(),
                400,
                "belong to no input",
            )
        },
        case(
            "unknown output",
            infer,
            format!(
                r#"{{"inputs": [{{"name": "x", "shape": [1, 3, 8, 8], "datatype": "FP32", "data": {}}}], "outputs": [{{"name": "q"}}]}}"#,
                zeros(ROW)
            ),
            400,
            "unknown output 'q'",
        ),
        case(
            "bad timeout parameter",
            infer,
            format!(
                r#"{{"parameters": {{"timeout": "soon"}}, "inputs": [{{"name": "x", "shape": [1, 3, 8, 8], "datatype": "FP32", "data": {}}}]}}"#,
                zeros(ROW)
            ),
            400,
            "non-negative integer",
        ),
        Case {
            headers: vec![("Content-Encoding", "gzip".into())],
            ..case(
                "compressed body",
                infer,
                infer_json("[1, 3, 8, 8]", "FP32", &zeros(ROW)),
                400,
                "Content-Encoding",
            )
        },
        case(
            "oversize body",
            infer,
            vec![b' '; 300_000],
            413,
            "larger than the server's limit",
        ),
        case(
            "unknown endpoint",
            "/v2/nothing/here",
            "",
            404,
            "unknown endpoint",
        ),
        Case {
            method: "GET",
            ..case("wrong method", infer, "", 405, "GET is not allowed")
        },
    ]
}

/// A raw HTTP/1.1 exchange (so nothing client-side fixes the request up):
/// (status, body).
fn raw_http(base: &str, c: &Case) -> (u16, String) {
    let addr = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut request = format!(
        "{} {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        c.method,
        c.path,
        c.body.len()
    );
    for (k, v) in &c.headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    // The server may answer (413) before it has read the whole body.
    let _ = stream.write_all(&c.body);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body)
}

fn tiny_repo(name: &str, config: &str) -> std::path::PathBuf {
    let repo = serve_common::scratch(name).join("repo");
    add_model(&repo, "tiny", &tiny_model(), Some(config));
    add_model(&repo, "broken", b"\x08\x01 not onnx", None);
    repo
}

/// FP16 inputs need the GPU backend at fp16: on the CPU reference the model
/// is not ready, and the reason says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fp16_input_config_on_the_cpu_is_not_ready_with_the_reason() {
    let repo = tiny_repo("fp16-on-cpu", r#"{"batch_sizes": [1, 4]}"#);
    add_model(
        &repo,
        "half",
        &tiny_model(),
        Some(r#"{"backend": "cpu", "input_datatype": "FP16"}"#),
    );
    let server = Server::start(&repo, &["--strict-readiness", "false"]);
    let r = reqwest::get(format!("{}/v2/models/half/ready", server.http))
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body: serde_json::Value = r.json().await.unwrap();
    let reason = body["error"].as_str().unwrap_or_default();
    assert!(
        reason.contains("\"input_datatype\": \"FP16\" needs the GPU backend"),
        "{body}"
    );
    // The FP32 model's metadata and config state its datatype.
    let meta: serde_json::Value = reqwest::get(format!("{}/v2/models/tiny", server.http))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(meta["inputs"][0]["datatype"], "FP32");
    let config: serde_json::Value = reqwest::get(format!("{}/v2/models/tiny/config", server.http))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["input"][0]["data_type"], "TYPE_FP32");
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "exit status after SIGTERM; log:\n{log}");
}

async fn infer_ok(client: &reqwest::Client, base: &str, x: &[f32], rows: usize) -> Vec<f32> {
    let body = format!(
        r#"{{"inputs": [{{"name": "x", "shape": [{rows}, 3, 8, 8], "datatype": "FP32", "data": {x:?}}}]}}"#
    );
    let r = client
        .post(format!("{base}/v2/models/tiny/infer"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["outputs"][0]["shape"], serde_json::json!([rows, 10]));
    v["outputs"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_f64().unwrap() as f32)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_answered_and_the_server_keeps_serving() {
    let repo = tiny_repo("malformed", r#"{"batch_sizes": [1, 4]}"#);
    let server = Server::start(
        &repo,
        &["--max-body-bytes", "200000", "--strict-readiness", "false"],
    );
    let cases = malformed_http_cases();
    assert!(cases.len() >= 15);
    let mut failures = Vec::new();
    for c in &cases {
        let (status, body) = raw_http(&server.http, c);
        let message = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string));
        match message {
            Some(m) if status == c.status && m.contains(c.needle) => {
                println!("{:28} {status} {m}", c.what)
            }
            _ => failures.push(format!(
                "{}: got {status} {body:?}, want {} ~ {:?}",
                c.what, c.status, c.needle
            )),
        }
    }
    // A client that disconnects halfway through its body.
    {
        let addr = server.http.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(
            b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{\"inp",
        )
        .unwrap();
    }
    // gRPC: errors with codes and messages.
    let mut grpc = GrpcInferenceServiceClient::connect(server.grpc.clone())
        .await
        .unwrap();
    let typed_request =
        |model: &str, datatype: &str, shape: Vec<i64>, raw: Vec<Vec<u8>>| ModelInferRequest {
            model_name: model.into(),
            inputs: vec![InferInputTensor {
                name: "x".into(),
                datatype: datatype.into(),
                shape,
                ..Default::default()
            }],
            raw_input_contents: raw.into_iter().map(Into::into).collect(),
            ..Default::default()
        };
    let request =
        |model: &str, shape: Vec<i64>, raw: Vec<Vec<u8>>| typed_request(model, "FP32", shape, raw);
    let good = f32_bytes(&vec![0.5; ROW]);
    for (what, req, code, needle) in [
        (
            "grpc unknown model",
            request("nope", vec![1, 3, 8, 8], vec![good.clone()]),
            tonic::Code::NotFound,
            "unknown model",
        ),
        (
            "grpc byte length",
            request("tiny", vec![1, 3, 8, 8], vec![vec![0; 5]]),
            tonic::Code::InvalidArgument,
            "needs 768 bytes",
        ),
        (
            "grpc FP16 to an FP32 model",
            typed_request("tiny", "FP16", vec![1, 3, 8, 8], vec![vec![0; 2 * ROW]]),
            tonic::Code::InvalidArgument,
            "expected FP32, got FP16",
        ),
        (
            "grpc raw count",
            request("tiny", vec![1, 3, 8, 8], vec![good.clone(), good.clone()]),
            tonic::Code::InvalidArgument,
            "raw_input_contents has 2",
        ),
        (
            "grpc wrong shape",
            request("tiny", vec![2, 3, 8, 8], vec![good.clone()]),
            tonic::Code::InvalidArgument,
            "needs 1536 bytes",
        ),
        (
            "grpc oversize",
            request("tiny", vec![1, 3, 8, 8], vec![vec![0; 300_000]]),
            tonic::Code::OutOfRange,
            "",
        ),
    ] {
        match grpc.model_infer(req).await {
            Err(s)
                if s.code() == code && s.message().contains(needle) && !s.message().is_empty() =>
            {
                println!("{what:28} {:?} {}", s.code(), s.message())
            }
            other => failures.push(format!("{what}: got {other:?}, want {code:?} ~ {needle:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Still serving, over both protocols.
    let client = reqwest::Client::new();
    let x = vec![0.25f32; ROW];
    let got = infer_ok(&client, &server.http, &x, 1).await;
    let model = repo.join("tiny/model.onnx");
    assert_eq!(got, reference(&model, 1, &x));
    let r = grpc
        .model_infer(request("tiny", vec![1, 3, 8, 8], vec![f32_bytes(&x)]))
        .await
        .unwrap();
    let raw = &r.get_ref().raw_output_contents[0];
    assert_eq!(raw, &f32_bytes(&got));
    let metrics = reqwest::get(&server.metrics)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains(
        r#"aotune_requests_total{model="tiny",outcome="invalid_argument",protocol="http"}"#
    ));
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "exit status after SIGTERM; log:\n{log}");
    assert!(
        !log.contains("panicked"),
        "a panic in the server log:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_are_batched_and_get_their_own_results() {
    const CLIENTS: usize = 32;
    let repo = tiny_repo(
        "batching",
        r#"{"batch_sizes": [1, 8, 32], "max_queue_delay_us": 200000}"#,
    );
    let server = Server::start(&repo, &["--strict-readiness", "false"]);
    // A distinct image per client; their expected rows all differ.
    let images: Vec<Vec<f32>> = (0..CLIENTS)
        .map(|i| aotune_compiler::zoo::fill(100 + i as u64, 0.0, 1.0, ROW))
        .collect();
    let model = repo.join("tiny/model.onnx");
    let expected = reference(&model, CLIENTS, &images.concat());
    let client = reqwest::Client::new();
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(CLIENTS));
    let tasks: Vec<_> = images
        .iter()
        .cloned()
        .map(|x| {
            let (client, base, barrier) = (client.clone(), server.http.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                infer_ok(&client, &base, &x, 1).await
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        let got = task.await.unwrap();
        let want = &expected[i * 10..][..10];
        let close = got
            .iter()
            .zip(want)
            .all(|(a, b)| (a - b).abs() <= 1e-5 * b.abs().max(1.0));
        assert!(close, "client {i}: {got:?} is not its image's {want:?}");
        for j in (0..CLIENTS).filter(|&j| j != i) {
            assert_ne!(
                &got[..],
                &expected[j * 10..][..10],
                "client {i} got client {j}'s row"
            );
        }
    }
    let metrics = reqwest::get(&server.metrics)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (rows, batches) = histogram(&metrics, "aotune_batch_size", r#"model="tiny""#);
    let mean = rows / batches;
    println!("{CLIENTS} clients: {batches} batches, mean batch size {mean:.1}");
    assert_eq!(rows as usize, CLIENTS);
    assert!(
        mean > 4.0,
        "mean batch size {mean} (rows {rows}, batches {batches})"
    );
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "log:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_request_in_flight_then_exits_0() {
    // A one-second queue delay keeps the request in flight when SIGTERM comes.
    let repo = tiny_repo(
        "shutdown",
        r#"{"batch_sizes": [1, 8], "max_queue_delay_us": 1000000}"#,
    );
    let server = Server::start(&repo, &["--strict-readiness", "false"]);
    let base = server.http.clone();
    let x = vec![0.5f32; ROW];
    let in_flight = {
        let (base, x) = (base.clone(), x.clone());
        tokio::spawn(async move { infer_ok(&reqwest::Client::new(), &base, &x, 1).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = tokio::task::spawn_blocking(move || server.stop());
    let sent = std::time::Instant::now();
    let got = in_flight.await.expect("the request in flight is answered");
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "shutdown waited for the queue delay"
    );
    assert_eq!(got, reference(&repo.join("tiny/model.onnx"), 1, &x));
    let (code, log) = stopped.await.unwrap();
    assert_eq!(code, Some(0), "log:\n{log}");
    assert!(log.contains("SIGTERM: shutting down"), "log:\n{log}");
    assert_eq!(
        serve_common::http_get_status(&base, "/v2/health/live"),
        None
    );
}

/// GET `base` + `path`: (status, JSON body).
async fn get_json(base: &str, path: &str) -> (u16, serde_json::Value) {
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// Sends requests of `rows` rows each, all at once, over HTTP.
async fn infer_concurrently(base: &str, rows: &[usize]) {
    let client = reqwest::Client::new();
    let tasks: Vec<_> = rows
        .iter()
        .map(|&n| {
            let (client, base) = (client.clone(), base.to_string());
            tokio::spawn(async move { infer_ok(&client, &base, &vec![0.5; n * ROW], n).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// The statistics' ns and count of `stat` ("success", "queue", ...).
fn duration_stat(stats: &serde_json::Value, stat: &str) -> (u64, u64) {
    let d = &stats["inference_stats"][stat];
    (d["count"].as_u64().unwrap(), d["ns"].as_u64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_statistics_count_requests_rows_and_batches() {
    let repo = tiny_repo(
        "stats-http",
        r#"{"batch_sizes": [1, 4], "max_queue_delay_us": 50000}"#,
    );
    let server = Server::start(&repo, &["--strict-readiness", "false"]);
    let base = server.http.as_str();
    let (status, meta) = get_json(base, "/v2").await;
    assert_eq!(status, 200);
    assert!(
        meta["extensions"]
            .as_array()
            .unwrap()
            .contains(&"statistics".into()),
        "{meta}"
    );
    let (status, fresh) = get_json(base, "/v2/models/tiny/stats").await;
    assert_eq!(status, 200, "{fresh}");
    let fresh = &fresh["model_stats"][0];
    assert_eq!(fresh["execution_count"], 0, "{fresh}");
    assert_eq!(fresh["batch_stats"], serde_json::json!([]), "{fresh}");

    // Four requests of 7 rows in all (at least two batches: 4 rows at most
    // each), one refused as invalid (not counted), one timed out (failed).
    infer_concurrently(base, &[1, 1, 2, 3]).await;
    let invalid = case(
        "wrong shape",
        "/v2/models/tiny/infer",
        infer_json("[1, 3, 8, 9]", "FP32", &zeros(3 * 8 * 9)),
        400,
        "",
    );
    assert_eq!(raw_http(base, &invalid).0, 400);
    let timed_out = format!(
        r#"{{"parameters": {{"timeout": 1}}, "inputs": [{{"name": "x", "shape": [1, 3, 8, 8], "datatype": "FP32", "data": {}}}]}}"#,
        zeros(ROW)
    );
    let timed_out = case("timeout", "/v2/models/tiny/infer", timed_out, 504, "");
    assert_eq!(raw_http(base, &timed_out).0, 504);

    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for path in [
        "/v2/models/tiny/stats",
        "/v2/models/tiny/versions/1/stats",
        "/v2/models/stats",
    ] {
        let (status, body) = get_json(base, path).await;
        assert_eq!(status, 200, "{path}: {body}");
        // The broken model is not ready: only the ready one is reported.
        let all = body["model_stats"].as_array().unwrap();
        assert_eq!(all.len(), 1, "{path}: {body}");
        let s = &all[0];
        assert_eq!((&s["name"], &s["version"]), (&"tiny".into(), &"1".into()));
        assert_eq!(s["inference_count"], 7, "{s}");
        let success = duration_stat(s, "success");
        assert_eq!(success.0, 4, "{s}");
        assert!(success.1 > 0, "{s}");
        for stat in ["queue", "compute_input", "compute_infer", "compute_output"] {
            assert_eq!(duration_stat(s, stat).0, 4, "{stat}: {s}");
        }
        for stat in ["queue", "compute_input", "compute_infer"] {
            assert!(duration_stat(s, stat).1 > 0, "{stat}: {s}");
        }
        assert_eq!(duration_stat(s, "fail").0, 1, "{s}");
        assert_eq!(duration_stat(s, "cache_hit"), (0, 0), "{s}");
        assert_eq!(duration_stat(s, "cache_miss"), (0, 0), "{s}");
        let executions = s["execution_count"].as_u64().unwrap();
        assert!((2..=4).contains(&executions), "{s}");
        let last = s["last_inference"].as_u64().unwrap();
        assert!(last <= now_ms && now_ms - last < 60_000, "{s}");
        let batches = s["batch_stats"].as_array().unwrap();
        let mut counted = 0;
        for b in batches {
            assert!([1, 4].contains(&b["batch_size"].as_u64().unwrap()), "{s}");
            let count = b["compute_infer"]["count"].as_u64().unwrap();
            assert_eq!(b["compute_input"]["count"], count, "{s}");
            assert!(b["compute_infer"]["ns"].as_u64().unwrap() > 0, "{s}");
            counted += count;
        }
        assert_eq!(counted, executions, "{s}");
    }

    for (path, status, needle) in [
        ("/v2/models/nope/stats", 404, "unknown model 'nope'"),
        ("/v2/models/tiny/versions/7/stats", 404, "no version '7'"),
        ("/v2/models/broken/stats", 503, "not ready"),
    ] {
        let (got, body) = get_json(base, path).await;
        let message = body["error"].as_str().unwrap_or_default();
        assert!(
            got == status && message.contains(needle),
            "{path}: {got} {body}"
        );
    }
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "log:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_statistics_count_requests_rows_and_batches() {
    use proto::{ModelStatisticsRequest, ServerMetadataRequest};
    let repo = tiny_repo(
        "stats-grpc",
        r#"{"batch_sizes": [1, 4], "max_queue_delay_us": 20000}"#,
    );
    let server = Server::start(&repo, &["--strict-readiness", "false"]);
    let mut grpc = GrpcInferenceServiceClient::connect(server.grpc.clone())
        .await
        .unwrap();
    let meta = grpc
        .server_metadata(ServerMetadataRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        meta.extensions.iter().any(|e| e == "statistics"),
        "{meta:?}"
    );
    let request = |rows: usize| ModelInferRequest {
        model_name: "tiny".into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: vec![rows as i64, 3, 8, 8],
            ..Default::default()
        }],
        raw_input_contents: vec![f32_bytes(&vec![0.5; rows * ROW]).into()],
        ..Default::default()
    };
    // Three requests of 6 rows in all, one at a time.
    for rows in [1, 2, 3] {
        grpc.model_infer(request(rows)).await.unwrap();
    }
    let stats = |name: &str, version: &str| ModelStatisticsRequest {
        name: name.into(),
        version: version.into(),
    };
    for (name, version) in [("tiny", ""), ("tiny", "1"), ("", "")] {
        let r = grpc
            .model_statistics(stats(name, version))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.model_stats.len(), 1, "{r:?}");
        let s = &r.model_stats[0];
        assert_eq!((s.name.as_str(), s.version.as_str()), ("tiny", "1"));
        assert_eq!(s.inference_count, 6, "{s:?}");
        assert_eq!(s.execution_count, 3, "{s:?}");
        assert!(s.last_inference > 0, "{s:?}");
        let i = s.inference_stats.unwrap();
        let success = i.success.unwrap();
        assert_eq!(success.count, 3, "{s:?}");
        assert!(success.ns > 0, "{s:?}");
        for d in [i.queue, i.compute_input, i.compute_infer, i.compute_output] {
            assert_eq!(d.unwrap().count, 3, "{s:?}");
        }
        assert!(i.compute_infer.unwrap().ns > 0, "{s:?}");
        assert_eq!(i.fail.unwrap().count, 0, "{s:?}");
        assert_eq!(i.cache_hit.unwrap().count, 0, "{s:?}");
        // 1 row at batch 1, 2 and 3 rows at batch 4.
        let sizes: Vec<(u64, u64)> = s
            .batch_stats
            .iter()
            .map(|b| (b.batch_size, b.compute_infer.unwrap().count))
            .collect();
        assert_eq!(sizes, [(1, 1), (4, 2)], "{s:?}");
    }
    for (name, version, code) in [
        ("nope", "", tonic::Code::NotFound),
        ("tiny", "7", tonic::Code::NotFound),
        ("broken", "", tonic::Code::Unavailable),
    ] {
        let e = grpc
            .model_statistics(stats(name, version))
            .await
            .unwrap_err();
        assert_eq!(e.code(), code, "{name}/{version}: {e:?}");
        assert!(!e.message().is_empty(), "{e:?}");
    }
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "log:\n{log}");
}
