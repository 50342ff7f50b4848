aotune_macros::include_model!("models/resnet50.onnx", batch = [8, 1, 8]);

fn main() {}
