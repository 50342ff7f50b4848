aotune_macros::include_model!("models/resnet50.onnx", batch = []);

fn main() {}
