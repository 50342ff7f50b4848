aotune_macros::include_model!();
aotune_macros::include_model!(batch = 1);

fn main() {}
