//! Compiles the default model (zoo ResNet-50, batch 1, fp16, with
//! `models/resnet50.best.json` when present) into the `aotune` binary.
//! Without nvcc the binary is built without it and says so; the GPU
//! subcommands then compile kernels at run time.

fn main() {
    let model = std::path::Path::new("models/resnet50.onnx");
    if let Err(e) = aotune_spec::default_model::embed(model, "models/resnet50.best.json") {
        println!("cargo:warning={e}");
        println!("cargo:rustc-cfg=aotune_no_default_model");
    }
    println!("cargo:rustc-check-cfg=cfg(aotune_no_default_model)");
}
