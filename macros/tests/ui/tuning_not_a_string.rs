aotune_macros::include_model!("models/resnet50.onnx", tuning = models::best);

fn main() {}
