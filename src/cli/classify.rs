//! `aotune classify`: one JPEG or PNG image through an ImageNet classifier,
//! printing the top-K classes with their softmax probabilities and labels.
//!
//! The image is decoded with the `image` crate (JPEG or PNG, chosen by its
//! contents, else by its extension) and converted to 8-bit RGB (alpha dropped,
//! grey replicated, no EXIF rotation: what PIL's `Image.open(f).convert("RGB")`
//! gives). Then torchvision's standard ImageNet eval transform,
//! `Resize(256)`, `CenterCrop(224)`, `ToTensor()`,
//! `Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])`:
//!
//! 1. **Resize** so that the shorter side is 256, aspect kept: the longer side
//!    becomes `floor(256 · long / short)` (torchvision truncates). Resampling
//!    is PIL's antialiased bilinear filter (`Image.resize(…, BILINEAR)`, what
//!    torchvision uses on PIL images), reproduced exactly: a triangle filter
//!    whose support is stretched by the scale factor when shrinking, weights
//!    normalized per output pixel and held in 22-bit fixed point, a
//!    horizontal pass then a vertical pass, each rounded and clamped to u8.
//! 2. **Center crop** 224×224, the offsets `round((side − 224) / 2)` with
//!    Python's round-half-to-even, as torchvision computes them.
//! 3. **To tensor**: each channel value `v` becomes `v / 255` (f32, in [0, 1]).
//! 4. **Normalize** per channel: `(x − mean[c]) / std[c]` in f32, with mean
//!    (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225) for R, G, B.
//!
//! The result is NCHW, batch 1: `[1, 3, 224, 224]`, the shape the model's one
//! input must have. For a PNG it is bit for bit the tensor that PIL 13 and
//! torchvision compute; a JPEG's pixels can differ by a few levels in some
//! pixels, because the JPEG decoder differs (zune-jpeg here, libjpeg-turbo in
//! PIL), not the transform.
//!
//! The model runs on the GPU where there is one (built with nvcc at run time,
//! as `bench` does), else — or with `--cpu` — on the CPU reference executor.
//! Labels are the 1000 ImageNet class names of `imagenet_classes.txt`.

use super::gpu_model;
use super::model_args::ModelArgs;
use anyhow::{bail, Context};
use aotune::runtime::driver_present;
use aotune_compiler::reference::{run_planned, RunOptions};
use clap::Args;
use image::{ImageFormat, RgbImage};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Args)]
pub struct ClassifyArgs {
    /// The image to classify (JPEG or PNG).
    pub image: PathBuf,
    #[command(flatten)]
    pub model: ModelArgs,
    /// How many of the most probable classes to print.
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// Run on the CPU reference executor even where there is a GPU.
    #[arg(long)]
    pub cpu: bool,
}

/// Shorter side after the resize.
pub const RESIZE: usize = 256;
/// Side of the center crop, and of the model's input.
pub const CROP: usize = 224;
/// ImageNet per-channel mean and standard deviation (R, G, B).
pub const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const STD: [f32; 3] = [0.229, 0.224, 0.225];

const CLASSES_TXT: &str = include_str!("imagenet_classes.txt");

/// The ImageNet class names, in class-index order.
pub fn labels() -> Vec<&'static str> {
    CLASSES_TXT
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect()
}

/// Reads and decodes a JPEG or PNG file to 8-bit RGB.
pub fn load_image(path: &Path) -> anyhow::Result<RgbImage> {
    if !path.exists() {
        bail!("image '{}' does not exist", path.display());
    }
    let bytes =
        std::fs::read(path).with_context(|| format!("reading image '{}'", path.display()))?;
    let (format, from) = match image::guess_format(&bytes) {
        Ok(f) => (f, "its contents"),
        Err(_) => match ImageFormat::from_path(path) {
            Ok(f) => (f, "its extension"),
            Err(_) => bail!(
                "cannot decode image '{}': neither its contents nor its extension name an image \
                 format (format guess: unknown; JPEG and PNG are supported)",
                path.display()
            ),
        },
    };
    let decoded = image::load_from_memory_with_format(&bytes, format).map_err(|e| {
        anyhow::anyhow!(
            "cannot decode image '{}' (format guess: {format:?}, from {from}; JPEG and PNG are \
             supported): {e}",
            path.display()
        )
    })?;
    Ok(decoded.to_rgb8())
}

/// torchvision's `Resize(short)` output size `(width, height)`: the shorter
/// side becomes `short`, the longer `floor(short · long / shorter)`.
pub fn resized_size(width: usize, height: usize, short: usize) -> (usize, usize) {
    let long_side = |long: usize, shorter: usize| ((short * long) as f64 / shorter as f64) as usize;
    if width <= height {
        (short, long_side(height, width))
    } else {
        (long_side(width, height), short)
    }
}

/// Bits of fraction in PIL's fixed-point resampling weights.
const PRECISION_BITS: u32 = 32 - 8 - 2;

/// PIL's `precompute_coeffs` for the bilinear filter (support 1) followed by
/// `normalize_coeffs_8bpc`: for each output index, the first input index and
/// the fixed-point weights of the inputs it reads.
fn coefficients(in_size: usize, out_size: usize) -> Vec<(usize, Vec<i32>)> {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filterscale; // bilinear support 1.0, stretched
    let ss = 1.0 / filterscale;
    let triangle = |x: f64| {
        let x = x.abs();
        if x < 1.0 {
            1.0 - x
        } else {
            0.0
        }
    };
    (0..out_size)
        .map(|xx| {
            let center = (xx as f64 + 0.5) * scale;
            // C's (int) casts truncate toward zero, as `as` does.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let w: Vec<f64> = (xmin..xmax)
                .map(|x| triangle((x as f64 - center + 0.5) * ss))
                .collect();
            let total: f64 = w.iter().sum();
            let fixed = w
                .iter()
                .map(|&k| {
                    let k = if total != 0.0 { k / total } else { k };
                    let scaled = k * f64::from(1u32 << PRECISION_BITS);
                    if k < 0.0 {
                        (scaled - 0.5) as i32
                    } else {
                        (scaled + 0.5) as i32
                    }
                })
                .collect();
            (xmin, fixed)
        })
        .collect()
}

/// PIL's `clip8`: a fixed-point sum (already holding the rounding half) to u8.
fn clip8(v: i32) -> u8 {
    if v >= (1 << PRECISION_BITS << 8) {
        255
    } else if v <= 0 {
        0
    } else {
        (v >> PRECISION_BITS) as u8
    }
}

/// Resizes like PIL's `Image.resize((width, height), Image.BILINEAR)` on an
/// RGB image: antialiased, horizontal pass first, u8 between the passes.
pub fn resize_bilinear(src: &RgbImage, width: usize, height: usize) -> RgbImage {
    let (in_w, in_h) = (src.width() as usize, src.height() as usize);
    let mut pixels: Vec<u8> = src.as_raw().clone();
    let mut cur_w = in_w;
    if width != in_w {
        let coeffs = coefficients(in_w, width);
        let mut out = vec![0u8; width * in_h * 3];
        for y in 0..in_h {
            let row = &pixels[y * in_w * 3..(y + 1) * in_w * 3];
            for (x, (xmin, k)) in coeffs.iter().enumerate() {
                for c in 0..3 {
                    let mut ss: i32 = 1 << (PRECISION_BITS - 1);
                    for (i, &w) in k.iter().enumerate() {
                        ss += i32::from(row[(xmin + i) * 3 + c]) * w;
                    }
                    out[(y * width + x) * 3 + c] = clip8(ss);
                }
            }
        }
        pixels = out;
        cur_w = width;
    }
    if height != in_h {
        let coeffs = coefficients(in_h, height);
        let mut out = vec![0u8; cur_w * height * 3];
        for (y, (ymin, k)) in coeffs.iter().enumerate() {
            for x in 0..cur_w * 3 {
                let mut ss: i32 = 1 << (PRECISION_BITS - 1);
                for (i, &w) in k.iter().enumerate() {
                    ss += i32::from(pixels[(ymin + i) * cur_w * 3 + x]) * w;
                }
                out[y * cur_w * 3 + x] = clip8(ss);
            }
        }
        pixels = out;
    }
    RgbImage::from_raw(width as u32, height as u32, pixels).expect("resized buffer size")
}

/// torchvision's center-crop offset: `int(round((len - crop) / 2))`, Python's
/// round (half to even).
pub fn center_offset(len: usize, crop: usize) -> usize {
    let d = len - crop;
    let half = d / 2;
    if d % 2 == 1 && half % 2 == 1 {
        half + 1
    } else {
        half
    }
}

/// The ImageNet eval transform (see the module doc): `[1, 3, 224, 224]` NCHW f32.
pub fn preprocess(img: &RgbImage) -> Vec<f32> {
    let (w, h) = resized_size(img.width() as usize, img.height() as usize, RESIZE);
    let resized = resize_bilinear(img, w, h);
    let (left, top) = (center_offset(w, CROP), center_offset(h, CROP));
    let mut out = vec![0.0f32; 3 * CROP * CROP];
    for y in 0..CROP {
        for x in 0..CROP {
            let p = resized.get_pixel((left + x) as u32, (top + y) as u32);
            for c in 0..3 {
                let v = f32::from(p[c]) / 255.0;
                out[(c * CROP + y) * CROP + x] = (v - MEAN[c]) / STD[c];
            }
        }
    }
    out
}

/// Softmax over the logits (in f64, max subtracted).
pub fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits
        .iter()
        .fold(f64::NEG_INFINITY, |m, &x| m.max(f64::from(x)));
    let exp: Vec<f64> = logits.iter().map(|&x| (f64::from(x) - max).exp()).collect();
    let total: f64 = exp.iter().sum();
    exp.iter().map(|e| e / total).collect()
}

/// Indices of the `k` largest values, largest first (ties: lower index first).
pub fn top_k(values: &[f64], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    idx.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

const INPUT_SHAPE: [usize; 4] = [1, 3, CROP, CROP];

fn check_input(model: &Path, inputs: &[(String, Vec<usize>)]) -> anyhow::Result<()> {
    match inputs {
        [(_, shape)] if shape.as_slice() == INPUT_SHAPE => Ok(()),
        [(name, shape)] => bail!(
            "model '{}' expects input '{name}' of shape {shape:?}; `aotune classify` feeds one \
             ImageNet image as {INPUT_SHAPE:?}{}",
            model.display(),
            if shape.len() == 4 && shape[0] != 1 {
                " (batch 1 is needed: leave out --batch, or give --batch 1)"
            } else {
                ""
            }
        ),
        _ => bail!(
            "model '{}' expects {} inputs ({}); `aotune classify` feeds one image as {INPUT_SHAPE:?}",
            model.display(),
            inputs.len(),
            inputs
                .iter()
                .map(|(n, s)| format!("'{n}' {s:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

pub fn classify(args: ClassifyArgs) -> anyhow::Result<()> {
    let img = load_image(&args.image)?;
    let (img_w, img_h) = img.dimensions();
    let input = preprocess(&img);

    let use_gpu = !args.cpu && driver_present();
    let (logits, device, precision, seconds) = if use_gpu {
        let mut gpu = gpu_model::load(&args.model, None)?;
        let spec = gpu.model.spec().clone();
        let inputs: Vec<_> = spec
            .inputs
            .iter()
            .map(|s| (s.name.to_string(), s.shape.to_vec()))
            .collect();
        check_input(&args.model.model, &inputs)?;
        let mut output = vec![0.0f32; spec.outputs[0].elements()];
        let start = Instant::now();
        gpu.model.infer(&input, &mut output)?;
        let seconds = start.elapsed().as_secs_f64();
        let device = format!("GPU {}", gpu.model.device_name());
        (output, device, spec.precision, seconds)
    } else {
        if args.cpu {
            eprintln!("--cpu: running the CPU reference executor");
        } else {
            eprintln!("no NVIDIA GPU driver on this machine: running the CPU reference executor");
        }
        let compiled = args.model.compile()?;
        let graph = &compiled.graph;
        let inputs: Vec<_> = graph
            .inputs
            .iter()
            .map(|&i| (graph.value(i).name.clone(), graph.value(i).shape.clone()))
            .collect();
        check_input(&args.model.model, &inputs)?;
        let start = Instant::now();
        let mut outputs = run_planned(graph, &compiled.plan, &[&input], &RunOptions::default())?;
        let seconds = start.elapsed().as_secs_f64();
        (
            outputs.swap_remove(0),
            "CPU reference".to_string(),
            graph.precision,
            seconds,
        )
    };

    if logits.iter().any(|x| !x.is_finite()) {
        bail!("the model's output holds NaN or infinity");
    }
    let probs = softmax(&logits);
    let labels = labels();
    let named = logits.len() == labels.len();
    let mut text = format!(
        "image {} ({img_w}×{img_h})  model {}  {precision}\n\
         ran on {device} in {:.3} ms{}\n\
         rank  class  probability  label\n",
        args.image.display(),
        args.model.model.display(),
        seconds * 1e3,
        if named {
            String::new()
        } else {
            format!(
                " ({} outputs, not the {} ImageNet classes: no labels)",
                logits.len(),
                labels.len()
            )
        }
    );
    for (rank, &i) in top_k(&probs, args.top).iter().enumerate() {
        let label = if named { labels[i] } else { "" };
        text += &format!("{:>4}  {i:>5}  {:>11.6}  {label}\n", rank + 1, probs[i]);
    }
    super::print_stdout(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::Rgb;

    #[test]
    fn labels_are_the_1000_imagenet_classes() {
        let labels = labels();
        assert_eq!(labels.len(), 1000);
        assert_eq!(labels[0], "tench");
        assert_eq!(labels[1], "goldfish");
        assert_eq!(labels[281], "tabby");
        assert_eq!(labels[999], "toilet tissue");
        assert!(labels.iter().all(|l| !l.is_empty() && !l.contains('_')));
    }

    #[test]
    fn uniform_image_normalizes_to_the_formula_everywhere() {
        let colour = [200u8, 100, 30];
        for (w, h) in [(300, 200), (224, 224), (200, 611), (1, 1)] {
            let img = RgbImage::from_pixel(w, h, Rgb(colour));
            let x = preprocess(&img);
            assert_eq!(x.len(), 3 * 224 * 224);
            for c in 0..3 {
                let want = (f32::from(colour[c]) / 255.0 - MEAN[c]) / STD[c];
                let plane = &x[c * 224 * 224..(c + 1) * 224 * 224];
                assert!(plane.iter().all(|&v| v == want), "{w}x{h} channel {c}");
            }
        }
        // The same numbers by hand: (200/255 − 0.485)/0.229, (100/255 − 0.456)/0.224,
        // (30/255 − 0.406)/0.225.
        let x = preprocess(&RgbImage::from_pixel(300, 200, Rgb(colour)));
        let hand = [1.3070468, -0.285014, -1.2815686];
        for c in 0..3 {
            assert!((x[c * 224 * 224] - hand[c]).abs() < 1e-5, "{c}");
        }
        // Black and white hit the ends of the range.
        let black = preprocess(&RgbImage::from_pixel(8, 8, Rgb([0, 0, 0])));
        assert!((black[0] + 0.485 / 0.229).abs() < 1e-6);
        let white = preprocess(&RgbImage::from_pixel(8, 8, Rgb([255, 255, 255])));
        assert!((white[2 * 224 * 224] - (1.0 - 0.406) / 0.225).abs() < 1e-6);
    }

    #[test]
    fn resize_keeps_aspect_and_truncates_like_torchvision() {
        assert_eq!(resized_size(300, 200, 256), (384, 256));
        assert_eq!(resized_size(200, 300, 256), (256, 384));
        assert_eq!(resized_size(640, 480, 256), (341, 256)); // 341.33
        assert_eq!(resized_size(500, 375, 256), (341, 256)); // 341.33
        assert_eq!(resized_size(100, 100, 256), (256, 256));
        assert_eq!(resized_size(256, 999, 256), (256, 999));
    }

    #[test]
    fn center_crop_rounds_half_to_even() {
        assert_eq!(center_offset(256, 224), 16);
        assert_eq!(center_offset(384, 224), 80);
        assert_eq!(center_offset(341, 224), 58); // round(58.5) = 58
        assert_eq!(center_offset(343, 224), 60); // round(59.5) = 60
        assert_eq!(center_offset(224, 224), 0);
    }

    #[test]
    fn bilinear_resample_matches_pil_by_hand() {
        // Shrinking 4 → 2: the triangle is stretched to support 2; output 0
        // reads inputs 0..3 with weights 3/7, 3/7, 1/7, output 1 inputs 1..4
        // with 1/7, 3/7, 3/7.
        let row = |v: &[u8]| {
            RgbImage::from_raw(
                v.len() as u32,
                1,
                v.iter().flat_map(|&x| [x, x, 255 - x]).collect(),
            )
            .unwrap()
        };
        let out = resize_bilinear(&row(&[0, 70, 140, 210]), 2, 1);
        assert_eq!(out.as_raw(), &[50, 50, 205, 160, 160, 95]);
        // Growing 2 → 4: plain bilinear with pixel centres at half-integers.
        let out = resize_bilinear(&row(&[0, 100]), 4, 1);
        let red: Vec<u8> = out.pixels().map(|p| p[0]).collect();
        assert_eq!(red, [0, 25, 75, 100]);
        // The vertical pass is the same filter on columns.
        let col = RgbImage::from_fn(1, 4, |_, y| Rgb([[0, 70, 140, 210][y as usize]; 3]));
        let out = resize_bilinear(&col, 1, 2);
        assert_eq!(out.as_raw(), &[50, 50, 50, 160, 160, 160]);
    }

    #[test]
    fn softmax_and_top_k() {
        let p = softmax(&[1.0, 3.0, 2.0, 3.0]);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let e = [1f64.exp(), 3f64.exp(), 2f64.exp(), 3f64.exp()];
        let total: f64 = e.iter().sum();
        assert!((p[1] - e[1] / total).abs() < 1e-15);
        assert_eq!(top_k(&p, 3), [1, 3, 2]);
        assert_eq!(top_k(&p, 10).len(), 4);
        // Large logits do not overflow.
        let p = softmax(&[1000.0, 1000.0]);
        assert_eq!(p, [0.5, 0.5]);
    }

    #[test]
    fn input_shape_errors_say_what_the_model_expects() {
        let m = Path::new("m.onnx");
        assert!(check_input(m, &[("x".into(), vec![1, 3, 224, 224])]).is_ok());
        let e = check_input(m, &[("x".into(), vec![2, 3, 224, 224])]).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("[2, 3, 224, 224]") && e.contains("--batch 1"),
            "{e}"
        );
        let e = check_input(m, &[("x".into(), vec![1, 3, 299, 299])])
            .unwrap_err()
            .to_string();
        assert!(e.contains("'x' of shape [1, 3, 299, 299]"), "{e}");
        let e = check_input(m, &[("a".into(), vec![1]), ("b".into(), vec![2])])
            .unwrap_err()
            .to_string();
        assert!(e.contains("expects 2 inputs"), "{e}");
    }
}
