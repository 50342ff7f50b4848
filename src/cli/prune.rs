//! `aotune prune`: drops the records of a tuning log that no build of the
//! model can use any more (a task a pass has since fused away, a task whose
//! key changed), given every batch size and precision the log serves. Needs
//! no GPU: it compiles the model for each of them (16-bit ones with an f32
//! and with a 16-bit input) and keeps the records whose task one of those
//! builds has.

use super::model_args::ModelArgs;
use anyhow::Context;
use aotune_compiler::ir::{DType, Precision};
use aotune_compiler::schedule::BestLog;
use clap::Args;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::str::FromStr;

/// One build the log serves: `BATCH:PRECISION`, e.g. `8:fp16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Serves {
    pub batch: usize,
    pub precision: Precision,
}

impl FromStr for Serves {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (batch, precision) = s
            .split_once(':')
            .ok_or_else(|| format!("'{s}' is not BATCH:PRECISION (e.g. 1:fp16)"))?;
        let batch = batch
            .parse::<usize>()
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| format!("'{batch}' in '{s}' is not a batch size (1 or more)"))?;
        let precision = precision
            .parse::<Precision>()
            .map_err(|e| format!("'{precision}' in '{s}': {e}"))?;
        Ok(Serves { batch, precision })
    }
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// The ONNX model the log tunes.
    #[arg(default_value = "models/resnet50.onnx")]
    pub model: PathBuf,
    /// The tuning log, rewritten in place (sorted, as `tune` writes it).
    #[arg(long, default_value = "models/resnet50.best.json")]
    pub best: PathBuf,
    /// Every build the log serves, as BATCH:PRECISION, comma-separated or
    /// repeated (the committed log: 1:fp16,1:tf32,1:fp32,8:fp16,64:fp16,256:fp16).
    /// A record is kept when its task is in any of them, so leaving one out
    /// drops all of its records: try --dry-run first.
    #[arg(
        long = "for",
        value_name = "BATCH:PRECISION",
        value_delimiter = ',',
        required = true
    )]
    pub serves: Vec<Serves>,
    /// The builds keep activations in ONNX's NCHW layout (`--no-channels-last`).
    #[arg(long)]
    pub no_channels_last: bool,
    /// The builds fuse LayerNorms into depthwise convs (`--fuse-depthwise-norm`).
    #[arg(long)]
    pub fuse_depthwise_norm: bool,
    /// The builds fold LayerNorms into Dense layers (`--fuse-dense-norm`).
    #[arg(long)]
    pub fuse_dense_norm: bool,
    /// List what would be dropped; leave the file as it is.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn prune(args: PruneArgs) -> anyhow::Result<()> {
    let mut log = BestLog::read(&args.best)?;
    let mut tasks = BTreeSet::new();
    for s in &args.serves {
        // A 16-bit build may also take its input in that type (`--input-dtype`,
        // a server's FP16 input): its first conversion is another task.
        let storage = s.precision.storage();
        let input_dtypes = if storage == DType::F32 {
            vec![DType::F32]
        } else {
            vec![DType::F32, storage]
        };
        for input_dtype in input_dtypes {
            let model = ModelArgs {
                model: args.model.clone(),
                batch: Some(s.batch),
                precision: s.precision,
                no_channels_last: args.no_channels_last,
                input_dtype,
                fuse_depthwise_norm: args.fuse_depthwise_norm,
                fuse_dense_norm: args.fuse_dense_norm,
                dense_cublaslt: false,
            };
            let compiled = model.compile().with_context(|| {
                format!(
                    "building for {}:{} ({input_dtype} input)",
                    s.batch, s.precision
                )
            })?;
            eprintln!(
                "{} at batch {} {}, {input_dtype} input: {} tasks",
                args.model.display(),
                s.batch,
                s.precision,
                compiled.tasks.len()
            );
            tasks.extend(compiled.tasks.iter().map(|t| t.key.hash_hex()));
        }
    }
    let total = log.records.len();
    let dropped = log.retain_tasks(&tasks);
    for r in &dropped {
        println!("drop {} ({}, {}): {}", r.task, r.op, r.target.gpu, r.key);
    }
    let verdict = if dropped.is_empty() {
        format!("{} unchanged", args.best.display())
    } else if args.dry_run {
        format!("dry run: {} unchanged", args.best.display())
    } else {
        log.write(&args.best)?;
        format!("wrote {}", args.best.display())
    };
    println!(
        "{} of {total} records are for tasks of these builds, {} are not; {verdict}",
        log.records.len(),
        dropped.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_parses_batch_and_precision_and_names_what_is_wrong() {
        assert_eq!(
            "8:fp16".parse::<Serves>(),
            Ok(Serves {
                batch: 8,
                precision: Precision::Fp16
            })
        );
        let e = "8".parse::<Serves>().unwrap_err();
        assert!(e.contains("BATCH:PRECISION"), "{e}");
        let e = "0:fp16".parse::<Serves>().unwrap_err();
        assert!(e.contains("'0'"), "{e}");
        let e = "1:fp8".parse::<Serves>().unwrap_err();
        assert!(e.contains("fp8"), "{e}");
    }
}
