aotune_macros::include_model!("models/resnet50.onnx", batch = "8");
aotune_macros::include_model!("models/resnet50.onnx", batch = [1, 2.5]);

fn main() {}
