// build.rs compiled resnet18 for batches [1, 4], fp32.
aotune_macros::include_model!("models/resnet18.onnx", batch = [1, 8], precision = "fp32");

fn main() {}
