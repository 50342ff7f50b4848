aotune_macros::include_model!("models/resnet50.onnx", batches = [1, 8]);

fn main() {}
