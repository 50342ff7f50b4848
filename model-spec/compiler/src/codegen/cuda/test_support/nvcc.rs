//! Test support: finding nvcc, compiling generated CUDA to an sm_90a cubin
//! with `-Xptxas -v`, and reading ptxas's per-kernel report (registers,
//! stack, spills). Tests without nvcc skip (`crate::skip`).

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use crate::toolchain::NvccPath as Nvcc;

/// The first nvcc found ([`crate::toolchain::find_nvcc`]), or why not.
pub fn find() -> Result<Nvcc, String> {
    crate::toolchain::find_nvcc().map_err(|e| e.to_string())
}

/// nvcc, or `None` after printing why the calling test is skipped.
pub fn find_or_skip() -> Option<Nvcc> {
    match find() {
        Ok(n) => Some(n),
        Err(message) => {
            crate::skip::here(&message);
            None
        }
    }
}

/// What ptxas reports for one kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelReport {
    pub name: String,
    pub registers: u32,
    pub stack_bytes: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
}

impl KernelReport {
    pub fn spills(&self) -> bool {
        self.spill_stores > 0 || self.spill_loads > 0
    }
}

/// Numbers before each occurrence of `unit` in `line`, e.g. "bytes spill stores".
fn number_before(line: &str, unit: &str) -> Option<u32> {
    let at = line.find(unit)?;
    line[..at]
        .split_whitespace()
        .last()?
        .trim_matches(',')
        .parse()
        .ok()
}

/// Parses `-Xptxas -v` output into one report per entry function.
pub fn parse_ptxas(log: &str) -> Vec<KernelReport> {
    let mut out: Vec<KernelReport> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            out.push(KernelReport {
                name: rest.trim().to_string(),
                ..Default::default()
            });
        } else if let Some(last) = out.last_mut() {
            if line.contains("bytes stack frame") {
                last.stack_bytes = number_before(line, "bytes stack frame").unwrap_or(0);
                last.spill_stores = number_before(line, "bytes spill stores").unwrap_or(0);
                last.spill_loads = number_before(line, "bytes spill loads").unwrap_or(0);
            } else if line.contains("Used ") && line.contains(" registers") {
                last.registers = line
                    .split("Used ")
                    .nth(1)
                    .and_then(|s| s.split_whitespace().next())
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
            }
        }
    }
    out
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Compiles `source` with `nvcc -cubin` for sm_90a and `-Xptxas -v`; returns the
/// per-kernel reports, or nvcc's output on failure.
pub fn compile(nvcc: &Nvcc, source: &str, label: &str) -> Result<Vec<KernelReport>, String> {
    compile_cubin(nvcc, source, label).map(|(_, reports)| reports)
}

/// [`compile`], also returning the cubin.
pub fn compile_cubin(
    nvcc: &Nvcc,
    source: &str,
    label: &str,
) -> Result<(Vec<u8>, Vec<KernelReport>), String> {
    let dir = std::env::temp_dir().join(format!(
        "aotune-nvcc-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let cu = dir.join(format!("{label}.cu"));
    std::fs::write(&cu, source).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(&nvcc.path);
    cmd.arg("-cubin")
        .arg("-gencode=arch=compute_90a,code=sm_90a")
        .arg("-Xptxas")
        .arg("-v")
        .arg("-o")
        .arg(dir.join(format!("{label}.cubin")))
        .arg(&cu);
    if let Some(include) = &nvcc.include {
        cmd.arg(format!("-I{}", include.display()));
    }
    let output = cmd.output().map_err(|e| format!("cannot run nvcc: {e}"))?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        // Keep the source for inspection.
        return Err(format!(
            "nvcc failed on {} ({}):\n{}",
            cu.display(),
            output.status,
            log.lines().take(60).collect::<Vec<_>>().join("\n")
        ));
    }
    let cubin = std::fs::read(dir.join(format!("{label}.cubin"))).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok((cubin, parse_ptxas(&log)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_report_is_parsed_per_kernel() {
        let log = "ptxas info    : 0 bytes gmem\n\
            ptxas info    : Compiling entry function 'k1' for 'sm_90'\n\
            ptxas info    : Function properties for k1\n\
            \x20   8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
            ptxas info    : Used 168 registers, used 1 barriers, 16 bytes smem\n\
            ptxas info    : Function properties for k2\n\
            \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
            ptxas info    : Used 10 registers, used 0 barriers\n";
        let r = parse_ptxas(log);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0],
            KernelReport {
                name: "k1".into(),
                registers: 168,
                stack_bytes: 8,
                spill_stores: 4,
                spill_loads: 12
            }
        );
        assert!(r[0].spills() && !r[1].spills());
        assert_eq!(r[1].registers, 10);
    }
}
