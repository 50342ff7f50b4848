// $OUT_DIR/aotune/broken/manifest.json was cut short.
aotune_macros::include_model!("models/broken.onnx");

fn main() {}
