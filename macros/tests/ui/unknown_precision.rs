aotune_macros::include_model!("models/resnet50.onnx", precision = "fp64");

fn main() {}
