//! From records to the committed best log: per task, target and template
//! version, the successful record with the lowest median (the earlier one
//! on a tie). Keeping one per template version means a record of an older
//! template never hides the best of the current one (the build ignores the
//! older one and says so).

use super::records::TuneRecord;
use crate::schedule::{BestLog, BestRecord, Target, Timing, BEST_FORMAT};
use std::collections::{BTreeMap, BTreeSet};

/// What a best log holds one record of, in its order: task, target, template.
type SlotKey = (String, String, String, String, String, Timing, String);

fn slot_key(task: &str, target: &Target, template: &str) -> SlotKey {
    (
        task.to_string(),
        target.gpu.clone(),
        target.sm.clone(),
        target.driver.clone(),
        target.cuda.clone(),
        target.timing,
        template.to_string(),
    )
}

/// The best log's record of `r`: its config and median (infinite when it
/// failed) for its task, template and target.
pub fn best_record(r: &TuneRecord) -> BestRecord {
    BestRecord {
        task: r.task.clone(),
        op: r.op.clone(),
        key: r.key.clone(),
        template: r.template.clone(),
        config: r.config.clone(),
        median_us: r.success_us().unwrap_or(f64::INFINITY),
        target: r.target.clone(),
    }
}

/// The best log of `records`, sorted as [`BestLog::to_json`] writes it.
pub fn best_log(records: &[TuneRecord]) -> BestLog {
    let mut best: BTreeMap<SlotKey, &TuneRecord> = BTreeMap::new();
    for r in records {
        let Some(us) = r.success_us() else {
            continue;
        };
        let key = slot_key(&r.task, &r.target, &r.template);
        match best.get(&key) {
            Some(b) if b.success_us().is_some_and(|b| b <= us) => {}
            _ => {
                best.insert(key, r);
            }
        }
    }
    BestLog {
        format: BEST_FORMAT.to_string(),
        records: best.into_values().map(best_record).collect(),
    }
}

/// `fresh` (one run's best log) with the records of `existing` (the
/// `--best` file as it was) for every task `fresh` has no record of kept as
/// they were — other batch sizes, precisions or models sharing one
/// committed log, and tasks the run did not reach within its budget —
/// sorted by task and target for stable diffs.
pub fn merge_into(existing: &BestLog, fresh: &BestLog) -> BestLog {
    let replaced: BTreeSet<&str> = fresh.records.iter().map(|r| r.task.as_str()).collect();
    let mut records: Vec<BestRecord> = existing
        .records
        .iter()
        .filter(|r| !replaced.contains(r.task.as_str()))
        .cloned()
        .chain(fresh.records.iter().cloned())
        .collect();
    records.sort_by_cached_key(|r| slot_key(&r.task, &r.target, &r.template));
    BestLog {
        format: BEST_FORMAT.to_string(),
        records,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::tune::records::{RecordFailure, RECORD_FORMAT};
    use crate::tune::FailStage;
    use serde_json::json;

    /// A record of `task` on `gpu`: measured at `us`, or (`None`) a compile
    /// failure.
    pub(crate) fn rec(
        task: &str,
        gpu: &str,
        template: &str,
        block: u32,
        us: Option<f64>,
    ) -> TuneRecord {
        TuneRecord {
            format: RECORD_FORMAT.into(),
            task: task.into(),
            op: "FusedConv".into(),
            key: format!("key of {task}"),
            template: template.into(),
            config: json!({ "block": block }),
            target: Target {
                gpu: gpu.into(),
                sm: "90".into(),
                driver: "580".into(),
                cuda: "13.0".into(),
                timing: Default::default(),
            },
            batch: 1,
            precision: "fp16".into(),
            compiler: String::new(),
            repeats_us: us.into_iter().collect(),
            median_us: us,
            compile_ms: 1.0,
            failure: us.is_none().then(|| RecordFailure {
                stage: FailStage::Compile,
                reason: "ptxas".into(),
            }),
            timestamp: "2026-11-30T00:00:00.000Z".into(),
        }
    }

    #[test]
    fn a_run_replaces_the_tasks_it_measured_and_keeps_the_others() {
        // b1-late: a task of the run's model that its budget did not reach.
        let old = best_log(&[
            rec("b1-conv", "H200", "conv/2", 16, Some(9.0)),
            rec("b1-late", "H200", "conv/2", 8, Some(5.0)),
            rec("b8-conv", "H200", "conv/2", 32, Some(20.0)),
        ]);
        let fresh = best_log(&[
            rec("b1-conv", "H200", "conv/2", 64, Some(7.0)),
            rec("b1-late", "H200", "conv/2", 4, None),
        ]);
        let merged = merge_into(&old, &fresh);
        let got: Vec<(&str, i64)> = merged
            .records
            .iter()
            .map(|r| (r.task.as_str(), r.config["block"].as_i64().unwrap()))
            .collect();
        assert_eq!(got, vec![("b1-conv", 64), ("b1-late", 8), ("b8-conv", 32)]);
    }

    #[test]
    fn best_per_task_target_and_template_sorted_and_stable() {
        let h200 = "NVIDIA H200";
        let records = vec![
            rec("bb", h200, "conv/2", 1, Some(5.0)),
            rec("bb", h200, "conv/2", 2, Some(4.0)),
            rec("bb", h200, "conv/2", 3, None),
            rec("bb", h200, "conv/2", 4, Some(4.0)),
            rec("aa", h200, "conv/2", 5, Some(9.0)),
            rec("aa", "NVIDIA A100", "conv/2", 6, Some(7.0)),
            rec("aa", h200, "conv/1", 7, Some(1.0)),
            rec("cc", h200, "conv/2", 8, None),
        ];
        let log = best_log(&records);
        let got: Vec<(&str, &str, &str, u64)> = log
            .records
            .iter()
            .map(|r| {
                (
                    r.task.as_str(),
                    r.target.gpu.as_str(),
                    r.template.as_str(),
                    r.config["block"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("aa", "NVIDIA A100", "conv/2", 6),
                ("aa", h200, "conv/1", 7),
                ("aa", h200, "conv/2", 5),
                ("bb", h200, "conv/2", 2),
            ]
        );
        assert_eq!(log.records[3].median_us, 4.0);
        // The text is the sorted one, so writing it twice changes nothing.
        let text = log.to_json();
        assert!(text.ends_with("}\n"));
        let mut shuffled = records.clone();
        shuffled.reverse();
        shuffled.retain(|r| r.config["block"] != 4);
        assert_eq!(best_log(&shuffled).to_json(), text);
    }

    #[test]
    fn records_timed_in_chains_keep_their_own_best() {
        let mut warm = rec("aa", "H200", "conv/2", 2, Some(3.0));
        warm.target.timing = Timing::Chained;
        let records = vec![rec("aa", "H200", "conv/2", 1, Some(5.0)), warm];
        let log = best_log(&records);
        let got: Vec<(Timing, u64)> = log
            .records
            .iter()
            .map(|r| (r.target.timing, r.config["block"].as_u64().unwrap()))
            .collect();
        assert_eq!(got, vec![(Timing::Flushed, 1), (Timing::Chained, 2)]);
    }
}
