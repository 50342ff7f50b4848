// build.rs compiled resnet50 for batch 1 only; several batch sizes need `.batches(..)`.
aotune_macros::include_model!("models/resnet50.onnx", batch = [1, 8]);

fn main() {}
