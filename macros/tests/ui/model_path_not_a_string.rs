aotune_macros::include_model!(resnet50);

fn main() {}
