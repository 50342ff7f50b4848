//! What the tuner asks of the GPU side: measure some configs of one task and
//! say, per config, either every repeat's time or at which stage it failed.

use super::space::TaskSpace;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a candidate failed. The search never proposes a failed config again
/// (in this run or a resumed one): all of these are properties of the
/// kernel, not of the moment, except perhaps `Timeout` and `WorkerCrash`,
/// which a fresh `aotune tune` without `--resume` retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailStage {
    /// NVRTC or ptxas rejected it (or the compile timed out).
    Compile,
    /// The launch failed: too many resources, illegal or misaligned access.
    Launch,
    /// The output differed from the reference.
    WrongResult,
    /// It ran past the runner's time limit.
    Timeout,
    /// The worker process died while running it.
    WorkerCrash,
    /// The measurer returned a time that is not a positive finite number
    /// (the tuner's own check, so a bad timer never becomes a "best").
    Timing,
}

impl fmt::Display for FailStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailStage::Compile => "compile",
            FailStage::Launch => "launch",
            FailStage::WrongResult => "wrong result",
            FailStage::Timeout => "timeout",
            FailStage::WorkerCrash => "worker crash",
            FailStage::Timing => "timing",
        })
    }
}

/// Outcome of measuring one config.
#[derive(Debug, Clone, PartialEq)]
pub enum TrialOutcome {
    /// Every repeat in µs and their median (the figure the search uses).
    Ok {
        repeats_us: Vec<f64>,
        median_us: f64,
    },
    Failed {
        stage: FailStage,
        reason: String,
    },
}

impl TrialOutcome {
    /// The median when it is a usable time; a non-finite or non-positive
    /// median counts as a [`FailStage::Timing`] failure.
    pub fn median_us(&self) -> Option<f64> {
        match self {
            TrialOutcome::Ok { median_us, .. } if median_us.is_finite() && *median_us > 0.0 => {
                Some(*median_us)
            }
            _ => None,
        }
    }

    /// The outcome with an unusable median turned into a `Timing` failure and
    /// non-finite repeats dropped, so that what is recorded reads back.
    pub(crate) fn sanitized(self) -> TrialOutcome {
        match self {
            TrialOutcome::Ok {
                repeats_us,
                median_us,
            } if median_us.is_finite() && median_us > 0.0 => TrialOutcome::Ok {
                repeats_us: repeats_us.into_iter().filter(|r| r.is_finite()).collect(),
                median_us,
            },
            TrialOutcome::Ok { median_us, .. } => TrialOutcome::Failed {
                stage: FailStage::Timing,
                reason: format!("the measured median {median_us} µs is not a positive time"),
            },
            failed => failed,
        }
    }
}

/// One measured config: its index in [`TaskSpace::configs`].
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    pub config: usize,
    pub outcome: TrialOutcome,
    /// Time spent compiling it (0 when a cached binary was reused).
    pub compile_ms: f64,
}

/// Measures candidates of one task. The GPU implementation compiles the batch
/// in parallel and times each config in an isolated worker; the tests use a
/// synthetic latency function.
///
/// Contract: return one [`Trial`] per requested index, a failed one when a
/// candidate could not be measured. A requested config without a trial is
/// not recorded and not proposed again in this run (the tuner notes it); a
/// round without any trial ends the task ([`super::FinishReason::NoResults`]);
/// a trial for a config that was not requested is ignored with a note.
pub trait Measurer {
    fn measure(&mut self, space: &TaskSpace, configs: &[usize]) -> Vec<Trial>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_medians_become_timing_failures() {
        for bad in [f64::NAN, 0.0, -1.0, f64::INFINITY] {
            let o = TrialOutcome::Ok {
                repeats_us: vec![bad],
                median_us: bad,
            };
            assert_eq!(o.median_us(), None);
            assert!(matches!(
                o.sanitized(),
                TrialOutcome::Failed {
                    stage: FailStage::Timing,
                    ..
                }
            ));
        }
        let ok = TrialOutcome::Ok {
            repeats_us: vec![1.0, f64::NAN, 2.0],
            median_us: 1.5,
        }
        .sanitized();
        assert_eq!(
            ok,
            TrialOutcome::Ok {
                repeats_us: vec![1.0, 2.0],
                median_us: 1.5
            }
        );
    }
}
