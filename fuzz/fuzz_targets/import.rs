//! Fuzzes the ONNX importer: arbitrary bytes must give a model or a typed
//! error, never a panic, hang or crash. The first byte picks the batch option.
#![no_main]

use aotune_compiler::onnx::{import_bytes, ImportOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, model)) = data.split_first() else {
        return;
    };
    let batch = match selector % 4 {
        0 => None,
        1 => Some(1),
        2 => Some(4),
        _ => Some(selector as usize),
    };
    let options = ImportOptions {
        batch,
        constant_inputs: Vec::new(),
    };
    let _ = import_bytes(model, "fuzz input", &options);
});
