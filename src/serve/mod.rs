//! `aotune serve`: a KServe v2 / Triton-compatible inference server over a
//! model repository (docs/serving.md).
//!
//! The pieces, one concern each: [`repository`] finds and loads models
//! ([`config`] is their `config.json`); [`backend`] is what runs them, the
//! CPU reference ([`cpu_backend`]) or the GPU runtime ([`gpu_backend`]);
//! [`batcher`] queues requests per model and merges them into the compiled
//! batch sizes; [`tensor`] checks requests against a model; [`state`] is the
//! protocol-neutral inference path; [`http`] (with [`http_wire`]) and
//! [`grpc`] (with the generated [`proto`]) are the two protocols;
//! [`metrics`] is Prometheus and [`statistics`] Triton's per-model
//! statistics; [`shutdown`] is SIGTERM / ctrl-c.
//!
//! [`serve`] binds the three listeners, reports their addresses, loads the
//! models in the background (the server is live at once and ready once they
//! are loaded), and serves until a signal; then it stops accepting, finishes
//! the requests in flight and the queued batches, and returns `Ok`.

pub mod backend;
pub mod batcher;
pub mod config;
pub mod cpu_backend;
pub mod datatype;
pub mod error;
pub mod gpu_backend;
pub mod gpu_schedule;
pub mod grpc;
pub mod http;
pub mod http_wire;
pub mod metrics;
pub mod model_info;
pub mod proto;
pub mod repository;
pub mod row_pool;
pub mod rows;
pub mod shutdown;
pub mod state;
pub mod statistics;
pub mod tensor;

use metrics::Metrics;
use repository::{LoadSettings, Repository};
use state::ServerState;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;

/// What `aotune serve` was asked for.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub model_repository: PathBuf,
    /// The address every listener binds (`0.0.0.0`: all interfaces).
    pub address: std::net::IpAddr,
    /// Port 0 picks a free port (reported through `on_listening`).
    pub http_port: u16,
    pub grpc_port: u16,
    pub metrics_port: u16,
    pub max_body_bytes: usize,
    pub strict_readiness: bool,
    pub load: LoadSettings,
}

/// The addresses the listeners bound.
#[derive(Debug, Clone, Copy)]
pub struct Listening {
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub metrics: SocketAddr,
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Repository(#[from] repository::RepositoryError),
    #[error(transparent)]
    Metrics(#[from] metrics::MetricsError),
    #[error("binding the {what} listener to {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the {what} server failed: {message}")]
    Server { what: &'static str, message: String },
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Runs the server until SIGTERM or ctrl-c (see the module doc). Calls
/// `on_listening` once every listener is bound.
pub fn serve(
    options: ServeOptions,
    on_listening: impl FnOnce(&Listening),
) -> Result<(), ServeError> {
    tune_allocator();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("aotune-serve")
        .build()
        .map_err(ServeError::Runtime)?;
    runtime.block_on(serve_async(options, on_listening))
}

/// Sets glibc malloc's mmap and trim thresholds for the server's allocation
/// pattern: every request allocates and frees buffers of its input's size
/// (602 KB for one 3×224×224 f32 image: the received message, and for JSON
/// or `fp32_contents` its f32 values) on whichever worker thread runs it. With glibc's
/// defaults (a dynamic mmap threshold from 128 KiB, and a trim threshold of
/// twice it), such buffers are mmapped and unmapped, or freed to the top of
/// an arena that is then trimmed (madvise), so every request faults its
/// buffers' pages in afresh: on the CPU backend at concurrency 4-16, 70 to
/// 400 page faults and a quarter of the server's CPU time per request.
/// Fixed thresholds keep blocks up to 32 MiB in the arenas (glibc's own
/// ceiling for the dynamic threshold) and let each arena keep up to 64 MiB
/// free at its top for reuse (twice the mmap threshold, glibc's dynamic
/// rule). The cost: free memory up to that
/// bound per arena stays resident after a burst. Other allocators are left
/// as they are, and so are glibc's settings when the environment gives any
/// (`GLIBC_TUNABLES`, `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`).
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let from_env = [
            "GLIBC_TUNABLES",
            "MALLOC_MMAP_THRESHOLD_",
            "MALLOC_TRIM_THRESHOLD_",
        ]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
        if from_env {
            return;
        }
        const MMAP_THRESHOLD: libc::c_int = 32 << 20;
        const TRIM_THRESHOLD: libc::c_int = 64 << 20;
        // SAFETY: mallopt only sets malloc's parameters (under malloc's own
        // lock); it is called before the runtime starts its threads.
        let ok = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
        };
        if !ok {
            tracing::warn!("mallopt refused the server's malloc thresholds; keeping glibc's");
        }
    }
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { what, addr, source })
}

/// HTTP/2 frame size and windows of the gRPC server (bytes).
const GRPC_MAX_FRAME: u32 = 1 << 20;
const GRPC_STREAM_WINDOW: u32 = 8 << 20;
const GRPC_CONNECTION_WINDOW: u32 = 32 << 20;

// Every accepted connection gets TCP_NODELAY. A gRPC response is several
// writes (HEADERS, DATA, then the trailers HEADERS with grpc-status), and the
// client sends nothing until the last one arrives. With Nagle's algorithm on,
// the kernel holds the last small write until the earlier ones are
// acknowledged, and the client delays that ACK (40 ms on Linux): each
// request would wait ~40 ms, capping a closed loop of N clients near
// N / 40 ms requests/s whatever the model's speed. An HTTP/1 response is mostly
// one write, but a large or streamed body can be written apart from its
// head, so HTTP and metrics get the same setting. hyper and tonic batch
// frames into few writes themselves, so nothing is gained from Nagle here.
// tonic's `Server::tcp_nodelay` (on by default) applies only to listeners
// it binds itself, not to `serve_with_incoming`; axum's `serve` leaves the
// socket as accepted (Nagle on). So both are set here.

/// The gRPC listener's connections, with TCP_NODELAY (see above).
fn grpc_incoming(listener: TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// An axum listener whose connections have TCP_NODELAY (see above).
fn nodelay_listener(
    listener: TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|stream: &mut tokio::net::TcpStream| {
        if let Err(e) = stream.set_nodelay(true) {
            // The connection still works, only with Nagle's delays.
            tracing::debug!("setting TCP_NODELAY on an accepted connection: {e}");
        }
    })
}

async fn serve_async(
    options: ServeOptions,
    on_listening: impl FnOnce(&Listening),
) -> Result<(), ServeError> {
    let (repository, found) = Repository::scan(&options.model_repository)?;
    if found.is_empty() {
        tracing::warn!(
            "the model repository '{}' holds no model directory",
            options.model_repository.display()
        );
    }
    let repository = Arc::new(repository);
    let metrics = Arc::new(Metrics::new()?);
    let state = Arc::new(ServerState::new(
        Arc::clone(&repository),
        Arc::clone(&metrics),
        options.load.image_decoder,
        options.max_body_bytes,
        options.strict_readiness,
    ));

    let at = |port| SocketAddr::new(options.address, port);
    let http_listener = bind("HTTP", at(options.http_port)).await?;
    let grpc_listener = bind("gRPC", at(options.grpc_port)).await?;
    let metrics_listener = bind("metrics", at(options.metrics_port)).await?;
    let local = |l: &TcpListener, what| {
        l.local_addr().map_err(|source| ServeError::Bind {
            what,
            addr: at(0),
            source,
        })
    };
    let listening = Listening {
        http: local(&http_listener, "HTTP")?,
        grpc: local(&grpc_listener, "gRPC")?,
        metrics: local(&metrics_listener, "metrics")?,
    };
    on_listening(&listening);

    let (trigger, stop) = shutdown::channel();
    tokio::spawn(shutdown::watch_signals(trigger));

    let loader = {
        let (repository, metrics, settings) = (
            Arc::clone(&repository),
            Arc::clone(&metrics),
            options.load.clone(),
        );
        tokio::task::spawn_blocking(move || repository.load_all(&found, &settings, &metrics))
    };

    let stopping = {
        let (state, stop) = (Arc::clone(&state), stop.clone());
        async move {
            stop.wait().await;
            state.stop();
            state.repository.drain();
        }
    };
    let http = axum::serve(
        nodelay_listener(http_listener),
        http::router(Arc::clone(&state)),
    )
    .with_graceful_shutdown(stop.clone().wait());
    // HTTP/2 flow control and framing sized for tensors: a 600 KB image
    // crosses in a few 1 MiB frames, and the windows let every client of a
    // connection send a whole request without waiting for WINDOW_UPDATEs
    // (h2's defaults: 16 KiB frames, 1 MiB windows).
    let grpc = tonic::transport::Server::builder()
        .max_frame_size(GRPC_MAX_FRAME)
        .initial_stream_window_size(GRPC_STREAM_WINDOW)
        .initial_connection_window_size(GRPC_CONNECTION_WINDOW)
        .layer(tower::util::MapRequestLayer::new(grpc::stamp_receipt))
        .add_service(grpc::server(Arc::clone(&state)))
        .serve_with_incoming_shutdown(grpc_incoming(grpc_listener), stop.clone().wait());
    let metrics_app = axum::Router::new().route(
        "/metrics",
        axum::routing::get({
            let metrics = Arc::clone(&metrics);
            move || {
                let metrics = Arc::clone(&metrics);
                async move { metrics.render() }
            }
        }),
    );
    let metrics_server = axum::serve(nodelay_listener(metrics_listener), metrics_app)
        .with_graceful_shutdown(stop.clone().wait());

    let (_, http, grpc, metrics_result) = tokio::join!(stopping, http, grpc, metrics_server);
    tracing::info!("listeners closed; finishing queued batches");
    let repo = Arc::clone(&repository);
    if let Err(e) = tokio::task::spawn_blocking(move || repo.shutdown()).await {
        tracing::error!("stopping the executors: {e}");
    }
    if !loader.is_finished() {
        tracing::warn!("exiting while models are still loading");
    }
    http.map_err(|e| ServeError::Server {
        what: "HTTP",
        message: e.to_string(),
    })?;
    grpc.map_err(|e| ServeError::Server {
        what: "gRPC",
        message: e.to_string(),
    })?;
    metrics_result.map_err(|e| ServeError::Server {
        what: "metrics",
        message: e.to_string(),
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;
    use tonic::codegen::tokio_stream::StreamExt;

    async fn loopback() -> (TcpListener, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        (listener, addr)
    }

    #[tokio::test]
    async fn grpc_connections_have_tcp_nodelay() {
        let (listener, addr) = loopback().await;
        let mut incoming = grpc_incoming(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let accepted = incoming.next().await.unwrap().unwrap();
        assert!(accepted.nodelay().unwrap());
    }

    #[tokio::test]
    async fn http_connections_have_tcp_nodelay() {
        let (listener, addr) = loopback().await;
        let mut listener = nodelay_listener(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await;
        assert!(accepted.nodelay().unwrap());
    }
}
