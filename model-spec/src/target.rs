//! The GPU a kernel config was measured on, and the warning the runtime
//! gives when a model's tuning records come from another GPU.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The GPU and toolchain a record was measured on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Target {
    /// Device name as the driver reports it, e.g. `NVIDIA H200`.
    pub gpu: String,
    /// Compute capability, e.g. `90`.
    pub sm: String,
    pub driver: String,
    pub cuda: String,
    /// How the kernels were timed. Records of two regimes are different
    /// targets: `--resume` never mixes them. Absent from logs (and so read
    /// as `flushed`) unless chained.
    #[serde(default, skip_serializing_if = "Timing::is_flushed")]
    pub timing: Timing,
}

/// How the tuner times a candidate kernel.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// One launch between two events, after 128 MiB written to evict the
    /// L2: weights and activations come from DRAM.
    #[default]
    Flushed,
    /// A CUDA graph of [`CHAIN_LAUNCHES`] launches back to back, timed as
    /// a whole and divided by their count, programmatic dependent launches
    /// between them where the model runs that way: each launch's prologue
    /// overlaps the previous one's tail as in the model's graph, and no
    /// event or host launch sits between them (as `bench --per-layer`).
    Chained,
    /// Chosen by `aotune refine` from the task's flushed records: the
    /// config that made the whole model's CUDA graph fastest with it in
    /// place. `median_us` stays the config's flushed median.
    Graph,
}

/// Launches in one timed graph of [`Timing::Chained`].
pub const CHAIN_LAUNCHES: u32 = 10;

impl Timing {
    pub fn is_flushed(&self) -> bool {
        *self == Timing::Flushed
    }
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Timing::Flushed => "flushed",
            Timing::Chained => "chained",
            Timing::Graph => "graph",
        })
    }
}

impl Target {
    /// True when this is the GPU named `gpu` with compute capability `sm`
    /// (when given): names compared ignoring case and surrounding spaces,
    /// `sm_90` and `90` alike. Driver and CUDA versions do not matter here:
    /// they change a kernel's speed far less than the GPU does.
    pub fn is_gpu(&self, gpu: &str, sm: Option<&str>) -> bool {
        let norm_sm = |s: &str| s.trim().trim_start_matches("sm_").to_string();
        self.gpu.trim().eq_ignore_ascii_case(gpu.trim())
            && sm.is_none_or(|sm| norm_sm(sm) == norm_sm(&self.sm))
    }

    /// True when both name the same GPU (name and compute capability).
    pub fn same_gpu(&self, other: &Target) -> bool {
        self.is_gpu(&other.gpu, Some(&other.sm))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (sm_{}, driver {}, CUDA {}{})",
            self.gpu,
            self.sm.trim_start_matches("sm_"),
            self.driver,
            self.cuda,
            match self.timing {
                Timing::Flushed => "",
                Timing::Chained => ", timed in chains of launches",
                Timing::Graph => ", chosen in the model's graph",
            }
        )
    }
}

/// The warning the runtime prints at load when the kernels' tuning records
/// (`tuned_on`, e.g. [`Applied::targets`]) come from another GPU than the
/// one it runs on (`gpu` name, compute capability `sm` if known); `None`
/// when they all match or there were none. The model still runs correctly:
/// only its speed may be below what tuning on this GPU would give.
pub fn target_warning(tuned_on: &[Target], gpu: &str, sm: Option<&str>) -> Option<String> {
    let others: Vec<String> = tuned_on
        .iter()
        .filter(|t| !t.is_gpu(gpu, sm))
        .map(|t| t.to_string())
        .collect();
    if others.is_empty() {
        return None;
    }
    let here = match sm {
        Some(sm) => format!("{gpu} (sm_{})", sm.trim_start_matches("sm_")),
        None => gpu.to_string(),
    };
    let share = if others.len() == tuned_on.len() {
        "its kernels were"
    } else {
        "some of its kernels were"
    };
    Some(format!(
        "this model runs on {here} but {share} tuned on {}: results are correct, speed may be \
         below what tuning here gives (run `aotune tune` on this GPU and rebuild)",
        others.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(gpu: &str, sm: &str) -> Target {
        Target {
            gpu: gpu.into(),
            sm: sm.into(),
            driver: "580".into(),
            cuda: "13.0".into(),
            timing: Timing::Flushed,
        }
    }

    #[test]
    fn the_runtime_warns_only_for_other_gpus() {
        let (a100, h200) = (target("NVIDIA A100", "80"), target("NVIDIA H200", "90"));
        assert_eq!(target_warning(&[], "NVIDIA H200", Some("90")), None);
        assert_eq!(
            target_warning(std::slice::from_ref(&h200), "NVIDIA H200", Some("sm_90")),
            None
        );
        assert_eq!(
            target_warning(std::slice::from_ref(&h200), " nvidia h200", None),
            None
        );
        let w = target_warning(std::slice::from_ref(&a100), "NVIDIA H200", Some("90")).unwrap();
        assert!(
            w.contains(
                "runs on NVIDIA H200 (sm_90) but its kernels were tuned on NVIDIA A100 (sm_80"
            ),
            "{w}"
        );
        assert!(w.contains("aotune tune"), "{w}");
        let w = target_warning(&[a100, h200.clone()], "NVIDIA H200", None).unwrap();
        assert!(w.contains("some of its kernels"), "{w}");
        // Same name, other compute capability (e.g. a MIG or a renamed part).
        assert!(target_warning(&[h200], "NVIDIA H200", Some("100")).is_some());
    }
}
