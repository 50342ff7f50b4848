//! Runs a model compiled ahead of time by aotune: kernels and weights are
//! inside this binary; it needs only the NVIDIA driver. The model is
//! ResNet-50 (fp16, batches 1 and 8); with the `small` feature ResNet-18
//! (batch 1); with the `vit` feature the tiny ViT fixture
//! (batch 1).
//!
//! `resnet50-app` runs each compiled batch size on a deterministic input and
//! prints the first image's class. `resnet50-app INPUT OUTPUT` reads INPUT
//! (raw little-endian f32, NCHW, one batch) and writes the output logits as
//! raw f32 to OUTPUT, for comparison with `aotune run` (the CPU reference).

#[cfg(not(any(feature = "small", feature = "vit")))]
aotune::include_model!(
    "../../models/resnet50.onnx",
    tuning = "../../models/resnet50.best.json",
    batch = [1, 8],
    precision = "fp16"
);
#[cfg(not(any(feature = "small", feature = "vit")))]
use resnet50 as net;

#[cfg(feature = "small")]
aotune::include_model!(
    "../../models/resnet18.onnx",
    batch = [1],
    precision = "fp16"
);
#[cfg(feature = "small")]
use resnet18 as net;

// The tiny ViT that build.rs refilled into $OUT_DIR (the macro finds a
// build by the model's file name).
#[cfg(feature = "vit")]
aotune::include_model!("tiny_vit.onnx", batch = [1], precision = "fp16");
#[cfg(feature = "vit")]
use tiny_vit as net;

#[cfg(all(feature = "small", feature = "vit"))]
compile_error!("the features `small` and `vit` each choose the embedded model: enable one");

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("resnet50-app: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut model = net::Model::load()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [input, output] = args.as_slice() {
        let bytes = std::fs::read(input)?;
        let x: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if x.is_empty() || !x.len().is_multiple_of(net::INPUT_LEN) {
            return Err(format!(
                "{input}: {} floats is not a whole number of images of {}",
                x.len(),
                net::INPUT_LEN
            )
            .into());
        }
        let mut y = vec![0.0f32; x.len() / net::INPUT_LEN * net::OUTPUT_LEN];
        model.infer(&x, &mut y)?;
        std::fs::write(
            output,
            y.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
        )?;
        return Ok(());
    }
    for &batch in net::BATCHES {
        let input: Vec<f32> = (0..batch * net::INPUT_LEN)
            .map(|i| ((i % 255) as f32 / 255.0 - 0.5) * 2.0)
            .collect();
        let mut output = vec![0.0f32; batch * net::OUTPUT_LEN];
        let start = std::time::Instant::now();
        model.infer(&input, &mut output)?;
        let top = output[..net::OUTPUT_LEN]
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
            .unwrap_or(0);
        println!(
            "batch {batch}: first image's class {top}, {:.3} ms (first call)",
            start.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(())
}
