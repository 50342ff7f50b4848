//! `aotune classify` end to end on the CPU reference: a synthetic PNG through
//! a zoo ResNet-18, and its error messages.

use std::path::PathBuf;
use std::process::Command;

fn aotune(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_aotune"))
        .args(args)
        .output()
        .expect("run aotune");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aotune-classify-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The ranked lines: `rank  class-index  probability  label…`.
fn ranked(out: &str) -> Vec<(usize, usize, f64, String)> {
    out.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let rank = words.next()?.parse().ok()?;
            let class = words.next()?.parse().ok()?;
            let p = words.next()?.parse().ok()?;
            Some((rank, class, p, words.collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

#[test]
fn classify_a_png_with_resnet18_on_the_cpu() {
    let dir = scratch("r18");
    let model = dir.join("r18.onnx");
    let model_s = model.to_str().unwrap();
    let (ok, _, err) = aotune(&["zoo", "resnet18", "-o", model_s]);
    assert!(ok, "{err}");

    let png = dir.join("gradient.png");
    image::RgbImage::from_fn(300, 200, |x, y| {
        image::Rgb([(x * 255 / 299) as u8, (y * 255 / 199) as u8, 128])
    })
    .save(&png)
    .unwrap();
    let png_s = png.to_str().unwrap();

    let (ok, out, err) = aotune(&["classify", png_s, model_s, "--cpu"]);
    assert!(ok, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("CPU reference"), "{err}");
    assert!(out.contains("CPU reference"), "which device ran it: {out}");
    assert!(out.contains(" ms"), "the time: {out}");
    assert!(out.contains("rank  class  probability  label"), "{out}");
    let rows = ranked(&out);
    assert_eq!(rows.len(), 5, "{out}");
    let mut sum = 0.0;
    let mut last = f64::INFINITY;
    for (i, (rank, class, p, label)) in rows.iter().enumerate() {
        assert_eq!(*rank, i + 1, "{out}");
        assert!(*class < 1000, "{out}");
        assert!(*p > 0.0 && *p < 1.0, "{out}");
        assert!(*p <= last, "ranked by probability: {out}");
        assert!(!label.is_empty(), "labelled: {out}");
        last = *p;
        sum += p;
    }
    assert!(sum <= 1.0 + 1e-6, "{out}");

    // --top changes how many are printed.
    let (ok, out, err) = aotune(&["classify", png_s, model_s, "--cpu", "--top", "2"]);
    assert!(ok, "{err}");
    assert_eq!(ranked(&out).len(), 2, "{out}");

    // A model input other than [1, 3, 224, 224] is a message saying what it expects.
    let (ok, _, err) = aotune(&["classify", png_s, model_s, "--cpu", "--batch", "2"]);
    assert!(!ok);
    assert!(
        err.contains("[2, 3, 224, 224]") && err.contains("[1, 3, 224, 224]"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn classify_errors_name_the_file() {
    let dir = scratch("errors");
    let model = dir.join("absent.onnx");
    let model_s = model.to_str().unwrap();

    // Not an image at all: the message names the file and the format guess.
    let text = dir.join("notes.txt");
    std::fs::write(&text, "not an image\n").unwrap();
    let (ok, _, err) = aotune(&["classify", text.to_str().unwrap(), model_s, "--cpu"]);
    assert!(!ok);
    assert!(
        err.contains("notes.txt") && err.contains("format guess"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    // A truncated PNG: recognised by its contents, fails to decode.
    let fake = dir.join("broken.png");
    std::fs::write(&fake, b"\x89PNG\r\n\x1a\n garbage").unwrap();
    let (ok, _, err) = aotune(&["classify", fake.to_str().unwrap(), model_s, "--cpu"]);
    assert!(!ok);
    assert!(err.contains("broken.png") && err.contains("Png"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    // A missing file.
    let (ok, _, err) = aotune(&["classify", "no/such/picture.jpg", model_s, "--cpu"]);
    assert!(!ok);
    assert!(
        err.contains("no/such/picture.jpg") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
