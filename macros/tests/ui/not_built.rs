// build.rs never compiled this model.
aotune_macros::include_model!("models/mobilenet_v2.onnx", precision = "fp32");

fn main() {}
