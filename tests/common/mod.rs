//! Helpers shared by the integration tests: where `../shared` is, and how to
//! compare outputs.

#![allow(dead_code)]

use std::path::PathBuf;

pub mod fixture;
pub mod gpu;
pub mod kernels;
pub mod onnx;
pub mod template_cases;

/// The shared test data (`../shared` beside the checkout, or `$AOTUNE_SHARED`).
/// `None` when absent: tests that need it print why and return.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("AOTUNE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    dir.is_dir().then_some(dir)
}

/// Records a skip (`aotune_compiler::skip`): printed, logged for `make
/// test`'s summary, a failure under `AOTUNE_REQUIRE_GPU=1`.
pub fn skip(test: &str, why: &str) {
    aotune_compiler::skip::skip(test, why);
}

pub fn read_f32(path: &std::path::Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (i, &x)| {
            if x > best.1 {
                (i, x)
            } else {
                best
            }
        })
        .0
}
