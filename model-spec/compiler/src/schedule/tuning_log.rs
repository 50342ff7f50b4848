//! The committed tuning log (`*.best.json`): the best measured kernel config
//! per task per target, sorted by task hash so diffs are stable.
//!
//! The build applies it: a record whose task the model has overrides that
//! task's default config; a record for a task the model lacks, or for another
//! template version, is reported and not used; a task with no record keeps
//! its heuristic default (also reported, by name). Records tuned on another
//! GPU than the one the build targets are used (a config valid for the
//! template runs on any GPU; it may just not be the fastest there) and each
//! is reported. The runtime, which knows the GPU, calls [`target_warning`]
//! at load. `aotune tune` writes the log (`tune::best_log`).

use super::Task;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

pub use aotune_spec::target::{target_warning, Target, Timing, CHAIN_LAUNCHES};

pub const BEST_FORMAT: &str = "aotune-best/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestRecord {
    /// `TaskKey::hash_hex()`.
    pub task: String,
    pub op: String,
    /// `TaskKey::canonical`, for humans reading diffs.
    pub key: String,
    /// Template name and version the config belongs to, e.g. `conv/1`.
    pub template: String,
    pub config: serde_json::Value,
    pub median_us: f64,
    pub target: Target,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestLog {
    pub format: String,
    pub records: Vec<BestRecord>,
}

#[derive(Debug, thiserror::Error)]
pub enum TuningLogError {
    #[error("cannot read tuning log '{path}': {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("tuning log '{path}' is corrupt at line {line}, column {column}: {message}")]
    Corrupt {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("tuning log '{path}' has format '{found}', this aotune reads '{BEST_FORMAT}'")]
    Format { path: String, found: String },
    #[error("cannot write tuning log '{path}': {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// What applying a log to a model decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    /// Task hash → config, for the records that apply.
    pub overrides: HashMap<String, serde_json::Value>,
    /// One line per record not used, record from another GPU, or task left
    /// on its default.
    pub notes: Vec<String>,
    /// Records for tasks this model does not have (a log holding several
    /// batch sizes, precisions or models has many): one line, or none.
    /// Expected, so not among `notes`, which a build script shows as
    /// warnings.
    pub other_tasks: Option<String>,
    /// The targets of the records used, sorted: what the runtime compares
    /// with the GPU it runs on ([`target_warning`]).
    pub targets: Vec<Target>,
}

impl BestLog {
    pub fn read(path: &Path) -> Result<BestLog, TuningLogError> {
        let text = std::fs::read_to_string(path).map_err(|source| TuningLogError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, source_name: &str) -> Result<BestLog, TuningLogError> {
        let log: BestLog = serde_json::from_str(text).map_err(|e| TuningLogError::Corrupt {
            path: source_name.to_string(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        if log.format != BEST_FORMAT {
            return Err(TuningLogError::Format {
                path: source_name.to_string(),
                found: log.format,
            });
        }
        Ok(log)
    }

    /// Writes [`BestLog::to_json`] beside `path` and renames it over `path`
    /// (creating the directory): an interrupted write never leaves a
    /// half-written log for a build to read.
    pub fn write(&self, path: &Path) -> Result<(), TuningLogError> {
        let err = |source| TuningLogError::Write {
            path: path.display().to_string(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let partial = path.with_extension("json.partial");
        std::fs::write(&partial, self.to_json())
            .and_then(|()| std::fs::rename(&partial, path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&partial);
                err(e)
            })
    }

    /// Keeps the records whose task hash is in `tasks` and returns the
    /// others, in the log's sorted order: what `aotune prune` drops (records
    /// of tasks that a pass has since fused away or renamed).
    pub fn retain_tasks(&mut self, tasks: &BTreeSet<String>) -> Vec<BestRecord> {
        let (kept, mut dropped): (Vec<_>, Vec<_>) = std::mem::take(&mut self.records)
            .into_iter()
            .partition(|r| tasks.contains(&r.task));
        self.records = kept;
        dropped.sort_by(|a, b| record_order(a).cmp(&record_order(b)));
        dropped
    }

    /// Sorted, pretty JSON: one stable text per log.
    pub fn to_json(&self) -> String {
        let mut sorted = self.clone();
        sorted
            .records
            .sort_by(|a, b| record_order(a).cmp(&record_order(b)));
        serde_json::to_string_pretty(&sorted).unwrap_or_default() + "\n"
    }

    /// The distinct targets of the log's records, sorted.
    pub fn targets(&self) -> Vec<Target> {
        let set: BTreeSet<&Target> = self.records.iter().map(|r| &r.target).collect();
        set.into_iter().cloned().collect()
    }

    /// Matches records to a model's tasks for an unknown GPU (the build
    /// step's case): [`BestLog::apply_for`] without a target.
    pub fn apply(&self, tasks: &[Task], templates: &BTreeMap<String, String>) -> Applied {
        self.apply_for(tasks, templates, None)
    }

    /// Matches records to a model's tasks. `templates` maps op kind → the
    /// template version the code generator uses for it; `target` is the GPU
    /// the build is for, when known.
    ///
    /// Per task, among its records of the current template: the one tuned
    /// on `target` if any; otherwise the first in log order (sorted by
    /// target), used with a note: another GPU's best config still runs here
    /// (configs are validated per template, not per GPU) and is usually
    /// closer to this GPU's best than the heuristic default is. With no
    /// `target` and records from several GPUs for a task, the note says
    /// which one was taken.
    pub fn apply_for(
        &self,
        tasks: &[Task],
        templates: &BTreeMap<String, String>,
        target: Option<&Target>,
    ) -> Applied {
        let mut applied = Applied::default();
        let by_hash: HashMap<String, &Task> = tasks.iter().map(|t| (t.key.hash_hex(), t)).collect();
        let mut records: Vec<&BestRecord> = self.records.iter().collect();
        records.sort_by(|a, b| record_order(a).cmp(&record_order(b)));
        let mut usable: BTreeMap<&str, Vec<&BestRecord>> = BTreeMap::new();
        let mut missing: Vec<String> = Vec::new();
        for r in records {
            match by_hash.get(&r.task) {
                None => missing.push(format!("{} ({})", r.task, r.op)),
                Some(task) => {
                    let current = templates.get(&task.key.op);
                    if current.is_some_and(|v| v != &r.template) {
                        applied.notes.push(format!(
                            "record for task {} ({}) was tuned for template {}, the build uses {}: ignored, default config used",
                            r.task,
                            r.op,
                            r.template,
                            current.map(String::as_str).unwrap_or("?")
                        ));
                    } else {
                        usable.entry(r.task.as_str()).or_default().push(r);
                    }
                }
            }
        }
        // A log may hold several batch sizes or precisions of a model: the
        // foreign records make one line.
        applied.other_tasks = match missing.len() {
            0 => None,
            n => Some(format!(
                "{n} record(s) are for tasks not in this model (another batch size, precision \
                 or model): ignored ({}{})",
                missing[..n.min(3)].join(", "),
                if n > 3 { ", …" } else { "" }
            )),
        };
        let mut used: BTreeSet<Target> = BTreeSet::new();
        for (hash, candidates) in usable {
            let matching = target.and_then(|t| candidates.iter().find(|r| r.target.same_gpu(t)));
            let Some(chosen) = matching.or(candidates.first()) else {
                continue;
            };
            let gpus: BTreeSet<(&str, &str)> = candidates
                .iter()
                .map(|r| (r.target.gpu.as_str(), r.target.sm.as_str()))
                .collect();
            match target {
                Some(t) if matching.is_none() => applied.notes.push(format!(
                    "record for task {hash} ({}) was tuned on {}, this build is for {}: its \
                     config is used (valid on any GPU, maybe not the fastest here); tune on \
                     this GPU to replace it",
                    chosen.op, chosen.target, t
                )),
                None if gpus.len() > 1 => applied.notes.push(format!(
                    "task {hash} ({}) has records for {} GPUs; the build does not know which \
                     it runs on and uses the one tuned on {}",
                    chosen.op,
                    gpus.len(),
                    chosen.target
                )),
                _ => {}
            }
            used.insert(chosen.target.clone());
            applied
                .overrides
                .insert(hash.to_string(), chosen.config.clone());
        }
        applied.targets = used.into_iter().collect();
        for t in tasks {
            let hash = t.key.hash_hex();
            if templates.contains_key(&t.key.op) && !applied.overrides.contains_key(&hash) {
                applied.notes.push(format!(
                    "task {hash} ({}, weight {}) has no tuning record: default config",
                    t.key.op, t.weight
                ));
            }
        }
        applied
    }
}

/// The order of records in a written log: task, then target, then template.
fn record_order(r: &BestRecord) -> (&str, &Target, &str) {
    (&r.task, &r.target, &r.template)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_log_names_the_line() {
        let text = "{\n  \"format\": \"aotune-best/1\",\n  \"records\": [ {\"task\": 3 ]\n}";
        let err = BestLog::parse(text, "x.best.json").unwrap_err();
        assert!(
            matches!(err, TuningLogError::Corrupt { line: 3, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("x.best.json"));
    }

    #[test]
    fn foreign_format_is_refused() {
        let err = BestLog::parse(r#"{"format": "tvm/9", "records": []}"#, "y").unwrap_err();
        assert!(matches!(err, TuningLogError::Format { .. }));
    }

    #[test]
    fn round_trip_is_sorted_and_stable() {
        let rec = |task: &str| BestRecord {
            task: task.into(),
            op: "FusedConv".into(),
            key: "k".into(),
            template: "conv/1".into(),
            config: serde_json::json!({"block_m": 64}),
            median_us: 1.5,
            target: Target {
                gpu: "NVIDIA H200".into(),
                sm: "90".into(),
                driver: "580".into(),
                cuda: "13.0".into(),
                timing: Default::default(),
            },
        };
        let log = BestLog {
            format: BEST_FORMAT.into(),
            records: vec![rec("b"), rec("a")],
        };
        let text = log.to_json();
        let back = BestLog::parse(&text, "z").unwrap();
        assert_eq!(back.records[0].task, "a");
        assert_eq!(back.to_json(), text);
    }

    #[test]
    fn the_timing_regime_is_written_only_when_chained_and_read_back() {
        let flushed = target("NVIDIA H200", "90");
        let text = serde_json::to_string(&flushed).unwrap();
        assert!(!text.contains("timing"), "{text}");
        // Logs written before the field existed read as flushed.
        let old: Target = serde_json::from_str(
            r#"{"gpu": "NVIDIA H200", "sm": "90", "driver": "580.95", "cuda": "13.0"}"#,
        )
        .unwrap();
        assert_eq!(old, flushed);
        let chained = Target {
            timing: Timing::Chained,
            ..flushed.clone()
        };
        let text = serde_json::to_string(&chained).unwrap();
        assert!(text.contains(r#""timing":"chained""#), "{text}");
        assert_eq!(serde_json::from_str::<Target>(&text).unwrap(), chained);
        assert_ne!(chained, flushed);
        assert!(
            chained.same_gpu(&flushed),
            "the regime does not change the GPU"
        );
        assert!(
            chained
                .to_string()
                .ends_with("timed in chains of launches)"),
            "{chained}"
        );
    }

    use crate::schedule::TaskKey;

    fn target(gpu: &str, sm: &str) -> Target {
        Target {
            gpu: gpu.into(),
            sm: sm.into(),
            driver: "580.95".into(),
            cuda: "13.0".into(),
            timing: Default::default(),
        }
    }

    fn task(canonical: &str) -> Task {
        Task {
            key: TaskKey {
                op: "FusedConv".into(),
                canonical: canonical.into(),
            },
            weight: 2,
            flops: 0,
            bytes: 0,
            nodes: vec![],
        }
    }

    fn record(task: &Task, template: &str, block: u32, on: Target) -> BestRecord {
        BestRecord {
            task: task.key.hash_hex(),
            op: task.key.op.clone(),
            key: task.key.canonical.clone(),
            template: template.into(),
            config: serde_json::json!({ "block_m": block }),
            median_us: 1.0,
            target: on,
        }
    }

    fn templates() -> BTreeMap<String, String> {
        [("FusedConv".to_string(), "conv/2".to_string())].into()
    }

    fn log(records: Vec<BestRecord>) -> BestLog {
        BestLog {
            format: BEST_FORMAT.into(),
            records,
        }
    }

    #[test]
    fn many_records_for_other_models_make_one_note() {
        let a = task("a");
        let h200 = target("NVIDIA H200", "90");
        let mut records = vec![record(&a, "conv/2", 64, h200.clone())];
        for name in ["b8-1", "b8-2", "b8-3", "b8-4", "b8-5"] {
            records.push(record(&task(name), "conv/2", 32, h200.clone()));
        }
        let applied = log(records).apply(std::slice::from_ref(&a), &templates());
        assert_eq!(applied.overrides.len(), 1);
        assert!(applied.notes.is_empty(), "{:?}", applied.notes);
        let other = applied.other_tasks.unwrap();
        assert!(
            other.starts_with("5 record(s) are for tasks not in this model"),
            "{other}"
        );
    }

    #[test]
    fn retain_tasks_keeps_every_record_of_the_given_tasks_and_returns_the_rest_sorted() {
        let (a, gone, old) = (task("a"), task("gone"), task("old"));
        let (h200, h100) = (target("NVIDIA H200", "90"), target("NVIDIA H100", "90"));
        let mut l = log(vec![
            record(&old, "conv/2", 16, h200.clone()),
            record(&a, "conv/2", 64, h200.clone()),
            record(&gone, "conv/2", 32, h200.clone()),
            record(&a, "conv/1", 32, h100.clone()),
        ]);
        let keep: BTreeSet<String> = [a.key.hash_hex()].into();
        let dropped = l.retain_tasks(&keep);
        assert_eq!(
            l.records.len(),
            2,
            "both of a's records, any GPU or template"
        );
        assert!(l.records.iter().all(|r| r.task == a.key.hash_hex()));
        let mut want = vec![gone.key.hash_hex(), old.key.hash_hex()];
        want.sort();
        let got: Vec<_> = dropped.iter().map(|r| r.task.clone()).collect();
        assert_eq!(got, want);
        assert!(l.retain_tasks(&keep).is_empty(), "idempotent");
    }

    #[test]
    fn write_replaces_the_file_whole_and_names_the_path_on_failure() {
        let dir = std::env::temp_dir().join(format!("aotune-best-write-{}", std::process::id()));
        let path = dir.join("sub").join("x.best.json");
        let l = log(vec![record(
            &task("a"),
            "conv/2",
            64,
            target("NVIDIA H200", "90"),
        )]);
        l.write(&path).unwrap();
        assert_eq!(BestLog::read(&path).unwrap(), l);
        assert!(!path.with_extension("json.partial").exists());
        // A directory where the file should be: the rename fails, naming it.
        let blocked = dir.join("blocked.best.json");
        std::fs::create_dir_all(blocked.join("inside")).unwrap();
        let err = l.write(&blocked).unwrap_err();
        assert!(matches!(err, TuningLogError::Write { .. }), "{err}");
        assert!(err.to_string().contains("blocked.best.json"), "{err}");
        assert!(!blocked.with_extension("json.partial").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn records_for_missing_tasks_and_other_templates_are_reported_not_used() {
        let (a, b, gone) = (task("a"), task("b"), task("gone"));
        let h200 = target("NVIDIA H200", "90");
        let l = log(vec![
            record(&a, "conv/2", 64, h200.clone()),
            record(&b, "conv/1", 32, h200.clone()),
            record(&gone, "conv/2", 16, h200.clone()),
        ]);
        let applied = l.apply(&[a.clone(), b.clone()], &templates());
        assert_eq!(applied.overrides.len(), 1);
        assert_eq!(applied.overrides[&a.key.hash_hex()]["block_m"], 64);
        assert_eq!(applied.targets, vec![h200]);
        let notes = applied.notes.join("\n");
        let other = applied.other_tasks.clone().unwrap_or_default();
        assert!(
            other.starts_with("1 record(s) are for tasks not in this model")
                && other.contains(&format!("{} (FusedConv)", gone.key.hash_hex())),
            "{other}"
        );
        assert!(
            notes.contains("template conv/1, the build uses conv/2"),
            "{notes}"
        );
        assert!(
            notes.contains(&format!(
                "task {} (FusedConv, weight 2) has no tuning record",
                b.key.hash_hex()
            )),
            "{notes}"
        );
    }

    #[test]
    fn another_gpus_record_is_used_with_a_note() {
        let a = task("a");
        let (a100, h200) = (
            target("NVIDIA A100-SXM4-80GB", "80"),
            target("NVIDIA H200", "90"),
        );
        let l = log(vec![record(&a, "conv/2", 128, a100.clone())]);
        let applied = l.apply_for(std::slice::from_ref(&a), &templates(), Some(&h200));
        assert_eq!(applied.overrides[&a.key.hash_hex()]["block_m"], 128);
        assert_eq!(applied.targets, vec![a100.clone()]);
        assert_eq!(applied.notes.len(), 1, "{:?}", applied.notes);
        let note = &applied.notes[0];
        assert!(
            note.contains("tuned on NVIDIA A100-SXM4-80GB (sm_80, driver 580.95, CUDA 13.0)"),
            "{note}"
        );
        assert!(
            note.contains("this build is for NVIDIA H200 (sm_90"),
            "{note}"
        );
        assert!(note.contains("its config is used"), "{note}");
        // The same GPU, spelled differently, on another driver: no note.
        let same = Target {
            gpu: "nvidia a100-sxm4-80gb ".into(),
            sm: "sm_80".into(),
            driver: "590.1".into(),
            ..a100.clone()
        };
        let applied = l.apply_for(std::slice::from_ref(&a), &templates(), Some(&same));
        assert!(applied.notes.is_empty(), "{:?}", applied.notes);
    }

    #[test]
    fn the_records_of_the_given_gpu_win_and_without_one_the_choice_is_said() {
        let a = task("a");
        let (a100, h200) = (target("NVIDIA A100", "80"), target("NVIDIA H200", "90"));
        let l = log(vec![
            record(&a, "conv/2", 256, h200.clone()),
            record(&a, "conv/2", 128, a100.clone()),
        ]);
        let applied = l.apply_for(std::slice::from_ref(&a), &templates(), Some(&h200));
        assert_eq!(applied.overrides[&a.key.hash_hex()]["block_m"], 256);
        assert!(applied.notes.is_empty(), "{:?}", applied.notes);
        assert_eq!(applied.targets, vec![h200.clone()]);

        // Unknown GPU: the first target in log order (A100 < H200), said so.
        let applied = l.apply(std::slice::from_ref(&a), &templates());
        assert_eq!(applied.overrides[&a.key.hash_hex()]["block_m"], 128);
        assert_eq!(applied.notes.len(), 1);
        assert!(
            applied.notes[0].contains("records for 2 GPUs"),
            "{}",
            applied.notes[0]
        );
        assert!(
            applied.notes[0].contains("uses the one tuned on NVIDIA A100 (sm_80"),
            "{}",
            applied.notes[0]
        );
        assert_eq!(l.targets(), vec![a100, h200]);
    }

    #[test]
    fn several_targets_per_task_sort_stably() {
        let a = task("a");
        let (a100, h200) = (target("NVIDIA A100", "80"), target("NVIDIA H200", "90"));
        let one = log(vec![
            record(&a, "conv/2", 1, h200.clone()),
            record(&a, "conv/2", 2, a100.clone()),
            record(&a, "conv/1", 3, h200.clone()),
        ]);
        let mut reversed = one.clone();
        reversed.records.reverse();
        assert_eq!(one.to_json(), reversed.to_json());
        let back = BestLog::parse(&one.to_json(), "z").unwrap();
        let order: Vec<u64> = back
            .records
            .iter()
            .map(|r| r.config["block_m"].as_u64().unwrap())
            .collect();
        assert_eq!(order, vec![2, 3, 1]);
    }
}
