//! Runs ResNet-50 compiled ahead of time by aotune: kernels and weights are
//! inside this binary; it needs only the NVIDIA driver.

aotune::include_model!(
    "../../models/resnet50.onnx",
    tuning = "../../models/resnet50.best.json",
    batch = [1, 8],
    precision = "fp16"
);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut model = resnet50::Model::load()?;
    for &batch in resnet50::BATCHES {
        let input: Vec<f32> = (0..batch * resnet50::INPUT_LEN).map(|i| ((i % 255) as f32 / 255.0 - 0.5) * 2.0).collect();
        let mut output = vec![0.0f32; batch * resnet50::OUTPUT_LEN];
        let start = std::time::Instant::now();
        model.infer(&input, &mut output)?;
        let top = output[..resnet50::OUTPUT_LEN]
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
            .unwrap_or(0);
        println!("batch {batch}: first image's class {top}, {:.3} ms (first call)", start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(())
}
