aotune_macros::include_model!("models/resnet50.onnx" batch = 1);

fn main() {}
