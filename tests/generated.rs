//! `generated/` holds the default model's `kernels.cu`, `executor.rs` and
//! `plan.txt` as committed, reviewed text. This test regenerates them (no
//! GPU, no nvcc) and fails on any difference; `make generated` rewrites them.
//! The model is written afresh by the zoo, so a stale `models/resnet50.onnx`
//! on a developer's machine cannot hide a difference CI would see.

use aotune_compiler::default_model;
use aotune_compiler::zoo::{resnet_onnx, ResNetDepth, DEFAULT_SEED};
use std::path::Path;

const FILES: [&str; 3] = ["kernels.cu", "executor.rs", "plan.txt"];

#[test]
fn generated_sources_are_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::temp_dir().join(format!("aotune-generated-{}", std::process::id()));
    let model = out.join("resnet50.onnx");
    std::fs::create_dir_all(&out).expect("temp dir");
    std::fs::write(&model, resnet_onnx(ResNetDepth::R50, DEFAULT_SEED)).expect("zoo model");
    let built = default_model::build(&model, "models/resnet50.best.json")
        .expect("default model")
        .skip_nvcc(true)
        .out_dir(&out)
        .compile()
        .expect("build of the default model");
    let dir = &built[0].dir;
    let bless = std::env::var_os("AOTUNE_BLESS").is_some();
    let mut stale = Vec::new();
    for file in FILES {
        let fresh = std::fs::read_to_string(dir.join(file)).expect("fresh file");
        let committed_path = root.join("generated").join(file);
        if bless {
            std::fs::create_dir_all(root.join("generated")).unwrap();
            std::fs::write(&committed_path, &fresh).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&committed_path).unwrap_or_default();
        if committed != fresh {
            let line = committed
                .lines()
                .zip(fresh.lines())
                .position(|(a, b)| a != b)
                .map(|i| i + 1)
                .unwrap_or(committed.lines().count().min(fresh.lines().count()) + 1);
            stale.push(format!(
                "generated/{file} (first difference at line {line})"
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(
        stale.is_empty(),
        "generated/ is stale: {}; run `make generated` and commit the diff",
        stale.join(", ")
    );
}
