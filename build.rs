//! With the `cli` feature: compiles the default model (zoo ResNet-50, batch
//! 1, fp16, with `models/resnet50.best.json`) into the `aotune` binary for
//! `aotune bench --embedded`. Without nvcc the binary is built without it and
//! says so; with nvcc, a failure to embed it fails the build. The runtime
//! library alone (no feature) builds nothing here.

fn main() {
    println!("cargo:rustc-check-cfg=cfg(aotune_no_default_model)");
    #[cfg(feature = "cli")]
    embed_default_model();
    #[cfg(not(feature = "cli"))]
    println!("cargo:rustc-cfg=aotune_no_default_model");
}

#[cfg(feature = "cli")]
fn embed_default_model() {
    let model = std::path::Path::new("models/resnet50.onnx");
    use aotune_compiler::default_model::{embed, Embedded};
    match embed(model, "models/resnet50.best.json") {
        Ok(Embedded::Built) => {}
        Ok(Embedded::Skipped(why)) => {
            println!("cargo:warning={why}");
            println!("cargo:rustc-cfg=aotune_no_default_model");
        }
        Err(e) => panic!("{e}"),
    }
}
