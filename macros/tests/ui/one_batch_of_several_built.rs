// build.rs compiled resnet18 for batches [1, 4], fp32: one batch size needs `.batch(4)`.
aotune_macros::include_model!("models/resnet18.onnx", batch = 4, precision = "fp32");

fn main() {}
