aotune_macros::include_model!("models/resnet50.onnx", precision = "fp16", precision = "fp32");

fn main() {}
