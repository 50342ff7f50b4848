// A crate without build.rs: cargo sets no OUT_DIR.
aotune_macros::include_model!("models/resnet50.onnx", batch = [1, 8]);

fn main() {}
