fn main() {
    let build = aotune_compiler::Build::new("../../models/resnet50.onnx").tuning("../../models/resnet50.best.json");
    build.batches(&[1, 8]).precision("fp16".parse().unwrap()).compile().unwrap_or_else(|e| panic!("{e}"));
}
