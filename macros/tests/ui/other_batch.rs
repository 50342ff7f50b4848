// build.rs compiled resnet50 for batch 1, fp16.
aotune_macros::include_model!("models/resnet50.onnx", batch = 8);

fn main() {}
