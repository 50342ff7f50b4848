//! Compiles the model `main.rs` embeds: ResNet-50 fp16 at batch 1 and 8; with
//! the `small` feature ResNet-18 fp16 at batch 1; with the `vit` feature the
//! tiny ViT fixture (a torchvision ViT exported by PyTorch's dynamo exporter:
//! batch 1, 32×32 input, 10 classes) fp16.

use aotune_compiler::onnx::{fill_initializers, WeightFill};
use std::path::{Path, PathBuf};

fn main() {
    let feature = |name: &str| std::env::var_os(format!("CARGO_FEATURE_{name}")).is_some();
    let build = if feature("VIT") {
        aotune_compiler::Build::new(tiny_vit()).batches(&[1])
    } else if feature("SMALL") {
        aotune_compiler::Build::new("../../models/resnet18.onnx").batches(&[1])
    } else {
        aotune_compiler::Build::new("../../models/resnet50.onnx")
            .tuning("../../models/resnet50.best.json")
            .batches(&[1, 8])
    };
    build
        .precision("fp16".parse().unwrap())
        .compile()
        .unwrap_or_else(|e| panic!("{e}"));
}

/// `$OUT_DIR/tiny_vit.onnx`: the fixture `tests/fixtures/tiny_vit_dynamo`,
/// which is stored without its weights, refilled by its `fill.json`. The
/// file is rewritten only when its bytes change, so that the build's
/// `rerun-if-changed` on it does not rerun every build.
fn tiny_vit() -> PathBuf {
    let dir = Path::new("../../tests/fixtures/tiny_vit_dynamo");
    println!("cargo:rerun-if-changed={}", dir.display());
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    };
    let rule = dir.join("fill.json");
    let fills = WeightFill::parse_rule(&read("fill.json"), &rule.display().to_string())
        .unwrap_or_else(|e| panic!("{e}"));
    let model = fill_initializers(&read("model.graph.onnx"), "tiny_vit_dynamo", &fills)
        .unwrap_or_else(|e| panic!("refilling {}: {e}", dir.display()));
    let out =
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("tiny_vit.onnx");
    if std::fs::read(&out).ok().as_deref() != Some(model.as_slice()) {
        std::fs::write(&out, model).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
    }
    out
}
