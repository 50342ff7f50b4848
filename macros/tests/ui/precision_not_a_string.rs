aotune_macros::include_model!("models/resnet50.onnx", precision = fp16);

fn main() {}
