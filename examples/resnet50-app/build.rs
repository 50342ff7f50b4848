//! Compiles the model `main.rs` embeds: ResNet-50 fp16 at batch 1 and 8, or
//! with the `small` feature ResNet-18 fp16 at batch 1.

fn main() {
    let build = if std::env::var_os("CARGO_FEATURE_SMALL").is_some() {
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
