//! What the build step left in `OUT_DIR` for one model, checked against
//! what `include_model!` asks for.
//!
//! `aotune_compiler::Build` writes `<OUT_DIR>/aotune/<name>/manifest.json` for a
//! single batch size and `<OUT_DIR>/aotune/<name>_b<batch>/manifest.json`
//! for each of several; the manifest's `batch` and `precision` say what was
//! compiled. Every mismatch becomes a message that says what was built, what
//! was asked for, and the `build.rs` line that makes them agree. Messages
//! name files relative to `$OUT_DIR`: the absolute path is a hashed
//! directory under `target/` that tells the user nothing.

use std::path::{Path, PathBuf};

use crate::args::{describe_batches, Args};

/// One compiled batch size: the executor to `include!`.
#[derive(Debug)]
pub(crate) struct Variant {
    pub batch: usize,
    pub executor: PathBuf,
}

/// What one manifest says was compiled.
struct Manifest {
    batch: usize,
    /// Lower case, as the macro spells it ("fp16").
    precision: String,
}

/// The directory name the build step uses for `batch` of model `name`.
fn dir_name(name: &str, batches: &[usize], batch: usize) -> String {
    if batches.len() == 1 {
        name.to_string()
    } else {
        format!("{name}_b{batch}")
    }
}

/// Reads a manifest; `Ok(None)` when there is none, `Err` when it is not one
/// the build step wrote.
fn read_manifest(root: &Path, dir: &str) -> Result<Option<Manifest>, String> {
    let shown = format!("$OUT_DIR/aotune/{dir}/manifest.json");
    let text = match std::fs::read_to_string(root.join(dir).join("manifest.json")) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("aotune: cannot read {shown}: {e}")),
    };
    let corrupt = |what: &str| {
        format!(
            "aotune: {shown} is corrupt ({what}); run `cargo clean -p` on this crate and rebuild"
        )
    };
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| corrupt(&format!("not JSON: {e}")))?;
    let batch = json["batch"]
        .as_u64()
        .filter(|&b| b > 0)
        .ok_or_else(|| corrupt("no batch size"))? as usize;
    let precision = json["precision"]
        .as_str()
        .ok_or_else(|| corrupt("no precision"))?
        .to_ascii_lowercase();
    Ok(Some(Manifest { batch, precision }))
}

/// Every build of model `name` in `root`, as (directory, manifest), sorted
/// by directory; unreadable manifests are left out (they are reported when
/// asked for by name).
fn builds_of(root: &Path, name: &str) -> Vec<(String, Manifest)> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut found: Vec<(String, Manifest)> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|dir| {
            dir == name
                || dir
                    .strip_prefix(name)
                    .and_then(|s| s.strip_prefix("_b"))
                    .is_some_and(|b| !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()))
        })
        .filter_map(|dir| Some((dir.clone(), read_manifest(root, &dir).ok()??)))
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// "batch 1, fp16" or "batches [1, 8], fp16 and fp32".
fn describe_builds(builds: &[(String, Manifest)]) -> String {
    let mut batches: Vec<usize> = builds.iter().map(|(_, m)| m.batch).collect();
    batches.sort_unstable();
    batches.dedup();
    let mut precisions: Vec<&str> = builds.iter().map(|(_, m)| m.precision.as_str()).collect();
    precisions.sort_unstable();
    precisions.dedup();
    format!(
        "{}, {}",
        describe_batches(&batches),
        precisions.join(" and ")
    )
}

/// The executors for every batch `args` asks for, or the message for the
/// first mismatch. `out_dir` is the crate's `OUT_DIR`; `name` the model's
/// module name.
pub(crate) fn check(out_dir: &Path, name: &str, args: &Args) -> Result<Vec<Variant>, String> {
    let root = out_dir.join("aotune");
    let path = args.model.value();
    let hint = args.build_hint();
    let asked = format!("{}, {}", args.describe_batches(), args.precision);
    let mut variants = Vec::with_capacity(args.batches.len());
    for &batch in &args.batches {
        let dir = dir_name(name, &args.batches, batch);
        let Some(manifest) = read_manifest(&root, &dir)? else {
            let others = builds_of(&root, name);
            return Err(if others.is_empty() {
                format!(
                    "aotune: the build step did not run for \"{path}\" (no $OUT_DIR/aotune/{dir}/manifest.json); add to build.rs:\n    {hint}"
                )
            } else {
                format!(
                    "aotune: the build step compiled \"{path}\" for {}, but include_model! asks for {asked} (no $OUT_DIR/aotune/{dir}/manifest.json); make build.rs match:\n    {hint}",
                    describe_builds(&others)
                )
            });
        };
        if manifest.batch != batch || manifest.precision != args.precision {
            return Err(format!(
                "aotune: the build step compiled \"{path}\" for batch {}, {}, but include_model! asks for batch {batch}, {}; make build.rs match:\n    {hint}",
                manifest.batch, manifest.precision, args.precision
            ));
        }
        variants.push(Variant {
            batch,
            executor: root.join(&dir).join("executor.rs"),
        });
    }
    Ok(variants)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh `OUT_DIR` with the given (directory, manifest text) builds.
    fn out_dir(label: &str, builds: &[(&str, &str)]) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("aotune-macros-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (name, manifest) in builds {
            let d = dir.join("aotune").join(name);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("manifest.json"), manifest).unwrap();
        }
        dir
    }

    fn args(s: &str) -> Args {
        syn::parse_str(s).unwrap()
    }

    const B1: &str = r#"{"batch": 1, "precision": "Fp16"}"#;
    const B8: &str = r#"{"batch": 8, "precision": "Fp16"}"#;

    #[test]
    fn matching_builds_give_their_executors() {
        let dir = out_dir("match", &[("m_b1", B1), ("m_b8", B8), ("m", B1)]);
        let v = check(&dir, "m", &args("\"x/m.onnx\", batch = [8, 1]")).unwrap();
        assert_eq!(v.iter().map(|v| v.batch).collect::<Vec<_>>(), vec![8, 1]);
        assert!(v[0].executor.ends_with("aotune/m_b8/executor.rs"));
        let v = check(&dir, "m", &args("\"x/m.onnx\"")).unwrap();
        assert!(v[0].executor.ends_with("aotune/m/executor.rs"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn mismatches_say_what_was_built() {
        let dir = out_dir(
            "mismatch",
            &[("m", B1), ("mm_b1", B1), ("m_bad", B8), ("n", "{")],
        );
        let e = check(&dir, "m", &args("\"m.onnx\", batch = [1, 8]")).unwrap_err();
        assert!(e.contains("compiled \"m.onnx\" for batch 1, fp16, but include_model! asks for batches [1, 8], fp16"), "{e}");
        let e = check(&dir, "m", &args("\"m.onnx\", precision = \"fp32\"")).unwrap_err();
        assert!(
            e.contains("for batch 1, fp16, but include_model! asks for batch 1, fp32"),
            "{e}"
        );
        let e = check(&dir, "q", &args("\"q.onnx\"")).unwrap_err();
        assert!(
            e.contains("did not run") && e.contains("$OUT_DIR/aotune/q/manifest.json"),
            "{e}"
        );
        let e = check(&dir, "n", &args("\"n.onnx\"")).unwrap_err();
        assert!(
            e.contains("$OUT_DIR/aotune/n/manifest.json is corrupt (not JSON"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
