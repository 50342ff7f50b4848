//! `aotune serve`: the inference server (`crate::serve`, docs/serving.md),
//! with Triton's flag names. Encoded images sent as BYTES go through
//! `aotune classify`'s ImageNet transform.

use crate::serve::config::BackendChoice;
use crate::serve::repository::LoadSettings;
use crate::serve::{serve, ServeOptions};
use clap::Args;
use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The model repository: DIR/<name>/model.onnx, optional tuning.json and
    /// config.json per model.
    #[arg(long)]
    pub model_repository: PathBuf,
    /// HTTP/REST port (KServe v2); 0 picks a free one.
    #[arg(long, default_value_t = 8000)]
    pub http_port: u16,
    /// gRPC port (inference.GRPCInferenceService); 0 picks a free one.
    #[arg(long, default_value_t = 8001)]
    pub grpc_port: u16,
    /// Prometheus metrics port (/metrics); 0 picks a free one.
    #[arg(long, default_value_t = 8002)]
    pub metrics_port: u16,
    /// The address all three listeners bind.
    #[arg(long, default_value = "0.0.0.0")]
    pub address: IpAddr,
    /// Largest request body (HTTP) or message (gRPC) accepted, in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub max_body_bytes: usize,
    /// Ready only when every model is ready (Triton's default); with
    /// `false`, ready when at least one serves.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub strict_readiness: bool,
    /// Backend of models whose config says "auto" (or has none).
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Where GPU builds are cached [default: $AOTUNE_CACHE, else target/aotune-cache].
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// The GPU where there is an NVIDIA driver, else the CPU reference.
    Auto,
    Gpu,
    Cpu,
}

/// A BYTES input's encoded image → `[3, 224, 224]` (ImageNet eval transform).
fn decode_image(bytes: &[u8]) -> Result<Vec<f32>, String> {
    let image = image::load_from_memory(bytes)
        .map_err(|e| format!("cannot decode the image (JPEG and PNG are supported): {e}"))?;
    Ok(super::classify::preprocess(&image.to_rgb8()))
}

pub fn serve_command(args: ServeArgs) -> anyhow::Result<()> {
    let cache_dir = args.cache_dir.unwrap_or_else(|| {
        std::env::var_os("AOTUNE_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("target/aotune-cache"))
    });
    let options = ServeOptions {
        model_repository: args.model_repository,
        address: args.address,
        http_port: args.http_port,
        grpc_port: args.grpc_port,
        metrics_port: args.metrics_port,
        max_body_bytes: args.max_body_bytes,
        strict_readiness: args.strict_readiness,
        load: LoadSettings {
            default_backend: match args.backend {
                BackendArg::Auto => BackendChoice::Auto,
                BackendArg::Gpu => BackendChoice::Gpu,
                BackendArg::Cpu => BackendChoice::Cpu,
            },
            cache_dir,
            image_decoder: Some(decode_image),
        },
    };
    serve(options, |at| {
        // One line a supervisor (or a test) can read to find the ports; a
        // closed stdout is not a reason to stop serving.
        let line = format!(
            "aotune serve: HTTP {} gRPC {} metrics {}\n",
            at.http, at.grpc, at.metrics
        );
        let _ = std::io::stdout().lock().write_all(line.as_bytes());
        let _ = std::io::stdout().flush();
    })?;
    let _ = std::io::stdout()
        .lock()
        .write_all(b"aotune serve: stopped\n");
    Ok(())
}
