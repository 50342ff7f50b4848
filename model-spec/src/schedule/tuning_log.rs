//! The committed tuning log (`*.best.json`): the best measured kernel config
//! per task per target, sorted by task hash so diffs are stable.
//!
//! The build applies it: a record whose task the model has overrides that
//! task's default config; a record for a task the model lacks, or for another
//! template version, is reported and not used; a task with no record keeps
//! its heuristic default (also reported, by name). `aotune tune` writes it.

use super::Task;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

pub const BEST_FORMAT: &str = "aotune-best/1";

/// The GPU and toolchain a record was measured on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    pub gpu: String,
    pub sm: String,
    pub driver: String,
    pub cuda: String,
}

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
}

/// What applying a log to a model decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    /// Task hash → config, for the records that apply.
    pub overrides: HashMap<String, serde_json::Value>,
    /// One line per record not used or task left on its default.
    pub notes: Vec<String>,
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

    /// Sorted, pretty JSON: one stable text per log.
    pub fn to_json(&self) -> String {
        let mut sorted = self.clone();
        sorted
            .records
            .sort_by(|a, b| (&a.task, &a.target.gpu).cmp(&(&b.task, &b.target.gpu)));
        serde_json::to_string_pretty(&sorted).unwrap_or_default() + "\n"
    }

    /// Matches records to a model's tasks. `templates` maps op kind → the
    /// template version the code generator uses for it.
    pub fn apply(&self, tasks: &[Task], templates: &BTreeMap<String, String>) -> Applied {
        let mut applied = Applied::default();
        let by_hash: HashMap<String, &Task> = tasks.iter().map(|t| (t.key.hash_hex(), t)).collect();
        for r in &self.records {
            match by_hash.get(&r.task) {
                None => applied.notes.push(format!(
                    "record for task {} ({}) is not in this model: ignored",
                    r.task, r.op
                )),
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
                        applied.overrides.insert(r.task.clone(), r.config.clone());
                    }
                }
            }
        }
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
}
