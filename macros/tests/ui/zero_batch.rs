aotune_macros::include_model!("models/resnet50.onnx", batch = [0, 1]);

fn main() {}
