//! The stored real exports (`<shared>/fixtures/<name>/`) ship their graph
//! without weights (`model.graph.onnx`) and the rule that refills them
//! (`fill.json`: a seed, centre and half-width per initializer); this puts
//! the weights back, for the CPU (`tests/fixtures.rs`) and GPU
//! (`tests/gpu_fixtures.rs`) checks alike.

use aotune_compiler::onnx::{fill_initializers, WeightFill};
use serde_json::Value as Json;
use std::path::Path;

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// `fill.json`'s records, one per initializer.
fn fill_rule(dir: &Path) -> Vec<WeightFill> {
    let path = dir.join("fill.json");
    WeightFill::parse_rule(&read(&path), &path.display().to_string())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The fixture's model with its weights: `model.onnx` when the directory
/// has one (a pack may carry it ready-made), else `model.graph.onnx`
/// refilled by `fill.json`.
pub fn refilled_model(dir: &Path) -> Vec<u8> {
    let full = dir.join("model.onnx");
    if full.is_file() {
        return read(&full);
    }
    let bytes = read(&dir.join("model.graph.onnx"));
    fill_initializers(&bytes, &dir.display().to_string(), &fill_rule(dir))
        .unwrap_or_else(|e| panic!("refilling {}: {e}", dir.display()))
}

/// The input of one case: its `input` file, or the fixture's `input_fill`
/// rule over the case's `input_shape`.
pub fn case_input(dir: &Path, meta: &Json, case: &Json) -> Vec<f32> {
    if let Some(file) = case["input"].as_str() {
        return super::read_f32(&dir.join(file));
    }
    let rule = &meta["input_fill"];
    let numel: u64 = case["input_shape"]
        .as_array()
        .expect("a case without `input` gives `input_shape`")
        .iter()
        .map(|d| d.as_u64().unwrap())
        .product();
    aotune_compiler::zoo::fill(
        rule["seed"].as_u64().expect("input_fill.seed"),
        rule["center"].as_f64().unwrap() as f32,
        rule["half_width"].as_f64().unwrap() as f32,
        numel as usize,
    )
}
