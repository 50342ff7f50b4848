//! The tuning records (`*.records.jsonl`): one JSON object per line per
//! measured candidate, appended and flushed as each is measured, so a killed
//! run loses nothing; `--resume` reads them back.
//!
//! A line holds the format tag ([`RECORD_FORMAT`]), the task (hash, op,
//! canonical key), the template version, the config, the setup it was
//! measured on (target GPU and toolchain, batch, precision, compiler), every
//! repeat in µs and their median, the compile time, the failure stage and
//! reason if it failed, and a UTC timestamp. The reader refuses a corrupt
//! line, a truncated last line or a foreign format with an error naming the
//! file and line.

use super::measure::{FailStage, Trial, TrialOutcome};
use super::space::TaskSpace;
use crate::schedule::Target;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Format tag of every record line; a reader refuses other tags.
pub const RECORD_FORMAT: &str = "aotune-record/1";

/// What a run measures on, beyond the task: written into every record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSetup {
    /// GPU and toolchain. `--resume` reuses only records of an equal target.
    pub target: Target,
    pub batch: usize,
    /// The model's precision (`fp16`, `tf32`, …).
    pub precision: String,
    /// How candidates were compiled (e.g. `nvrtc 13.0 -arch=sm_90`), for
    /// whoever reads the records; not compared on resume.
    pub compiler: String,
}

/// Why a recorded candidate failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordFailure {
    pub stage: FailStage,
    pub reason: String,
}

/// One measured candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneRecord {
    pub format: String,
    /// `TaskKey::hash_hex()`.
    pub task: String,
    pub op: String,
    /// `TaskKey::canonical`.
    pub key: String,
    pub template: String,
    pub config: serde_json::Value,
    pub target: Target,
    pub batch: usize,
    pub precision: String,
    #[serde(default)]
    pub compiler: String,
    /// Every repeat, µs (empty when it failed); written to the nanosecond,
    /// finer than CUDA events resolve (32 ns steps on the H200), so the
    /// committed histories carry no float noise.
    #[serde(serialize_with = "to_the_nanosecond")]
    pub repeats_us: Vec<f64>,
    /// Median of the repeats, µs; `None` when it failed.
    pub median_us: Option<f64>,
    pub compile_ms: f64,
    /// Set when it failed.
    pub failure: Option<RecordFailure>,
    /// When it was measured, RFC 3339 UTC.
    pub timestamp: String,
}

/// Writes µs values rounded to 0.001 (one nanosecond).
fn to_the_nanosecond<S: serde::Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(v.len()))?;
    for x in v {
        seq.serialize_element(&((x * 1e3).round() / 1e3))?;
    }
    seq.end()
}

impl TuneRecord {
    /// The record of `trial` of `space`, measured now under `setup`.
    pub fn new(space: &TaskSpace, trial: &Trial, setup: &RunSetup) -> TuneRecord {
        let (repeats_us, median_us, failure) = match &trial.outcome {
            TrialOutcome::Ok {
                repeats_us,
                median_us,
            } => (repeats_us.clone(), Some(*median_us), None),
            TrialOutcome::Failed { stage, reason } => (
                Vec::new(),
                None,
                Some(RecordFailure {
                    stage: *stage,
                    reason: reason.clone(),
                }),
            ),
        };
        TuneRecord {
            format: RECORD_FORMAT.to_string(),
            task: space.task.clone(),
            op: space.op.clone(),
            key: space.key.clone(),
            template: space.template.clone(),
            config: space
                .configs
                .get(trial.config)
                .cloned()
                .unwrap_or(serde_json::Value::Null),
            target: setup.target.clone(),
            batch: setup.batch,
            precision: setup.precision.clone(),
            compiler: setup.compiler.clone(),
            repeats_us,
            median_us,
            compile_ms: if trial.compile_ms.is_finite() {
                trial.compile_ms
            } else {
                0.0
            },
            failure,
            timestamp: rfc3339_utc(SystemTime::now()),
        }
    }

    /// The usable median: a success with a positive finite time.
    pub fn success_us(&self) -> Option<f64> {
        self.median_us
            .filter(|m| self.failure.is_none() && m.is_finite() && *m > 0.0)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error("cannot {action} tuning records '{path}': {source}")]
    Io {
        action: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("tuning records '{path}' line {line} is not a record: {message}")]
    Corrupt {
        path: String,
        line: usize,
        message: String,
    },
    #[error(
        "tuning records '{path}' end in a truncated line {line} (a run killed while writing?): \
         remove that line to go on"
    )]
    Truncated { path: String, line: usize },
    #[error("tuning records '{path}' line {line} has format '{found}', this aotune reads '{RECORD_FORMAT}'")]
    Format {
        path: String,
        line: usize,
        found: String,
    },
}

/// Reads every record of a `*.records.jsonl` file (blank lines skipped).
pub fn read_records(path: &Path) -> Result<Vec<TuneRecord>, RecordsError> {
    let text = std::fs::read_to_string(path).map_err(|source| RecordsError::Io {
        action: "read",
        path: path.display().to_string(),
        source,
    })?;
    parse_records(&text, &path.display().to_string())
}

/// Parses records text; `source_name` names it in errors.
pub fn parse_records(text: &str, source_name: &str) -> Result<Vec<TuneRecord>, RecordsError> {
    let mut out = Vec::new();
    for (n, raw) in text.split_inclusive('\n').enumerate() {
        let line = n + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = match serde_json::from_str(raw) {
            Ok(v) => v,
            Err(_) if !raw.ends_with('\n') => {
                return Err(RecordsError::Truncated {
                    path: source_name.to_string(),
                    line,
                })
            }
            Err(e) => {
                return Err(RecordsError::Corrupt {
                    path: source_name.to_string(),
                    line,
                    message: e.to_string(),
                })
            }
        };
        let found = value.get("format").and_then(|f| f.as_str()).unwrap_or("");
        if found != RECORD_FORMAT {
            return Err(RecordsError::Format {
                path: source_name.to_string(),
                line,
                found: found.to_string(),
            });
        }
        let record: TuneRecord =
            serde_json::from_value(value).map_err(|e| RecordsError::Corrupt {
                path: source_name.to_string(),
                line,
                message: e.to_string(),
            })?;
        out.push(record);
    }
    Ok(out)
}

/// Where a run's records go, one line per record, flushed at once; it also
/// holds the [`RunSetup`] every record carries (and `--resume` matches).
pub struct RecordSink {
    out: Option<Box<dyn Write>>,
    name: String,
    setup: RunSetup,
    written: usize,
}

impl std::fmt::Debug for RecordSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordSink")
            .field("name", &self.name)
            .field("setup", &self.setup)
            .field("written", &self.written)
            .finish()
    }
}

impl RecordSink {
    /// Appends to `path`, creating it. Refuses a file whose last line is
    /// truncated (appending would glue a record onto it); a complete last
    /// line that only lacks its newline gets one.
    pub fn append_to(path: &Path, setup: RunSetup) -> Result<RecordSink, RecordsError> {
        let name = path.display().to_string();
        let io = |action: &'static str| {
            let name = name.clone();
            move |source| RecordsError::Io {
                action,
                path: name,
                source,
            }
        };
        let mut file: File = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(path)
            .map_err(io("open"))?;
        let len = file.metadata().map_err(io("read"))?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::Start(len - 1)).map_err(io("read"))?;
            file.read_exact(&mut last).map_err(io("read"))?;
            if last[0] != b'\n' {
                let text = std::fs::read_to_string(path).map_err(io("read"))?;
                let tail = text.rsplit('\n').next().unwrap_or("");
                if serde_json::from_str::<serde_json::Value>(tail).is_err() {
                    return Err(RecordsError::Truncated {
                        path: name,
                        line: text.split_inclusive('\n').count(),
                    });
                }
                file.write_all(b"\n").map_err(io("write"))?;
            }
        }
        Ok(RecordSink {
            out: Some(Box::new(file)),
            name,
            setup,
            written: 0,
        })
    }

    /// Writes to any writer (`name` is what errors call it).
    pub fn to_writer(
        out: impl Write + 'static,
        name: impl Into<String>,
        setup: RunSetup,
    ) -> RecordSink {
        RecordSink {
            out: Some(Box::new(out)),
            name: name.into(),
            setup,
            written: 0,
        }
    }

    /// Keeps nothing (a dry run; the outcome still lists the records).
    pub fn discard(setup: RunSetup) -> RecordSink {
        RecordSink {
            out: None,
            name: "(discarded)".into(),
            setup,
            written: 0,
        }
    }

    pub fn setup(&self) -> &RunSetup {
        &self.setup
    }

    /// Writes one record as one line and flushes it.
    pub fn append(&mut self, record: &TuneRecord) -> Result<(), RecordsError> {
        if let Some(out) = &mut self.out {
            let mut line = serde_json::to_string(record).map_err(|e| RecordsError::Io {
                action: "serialize",
                path: self.name.clone(),
                source: std::io::Error::other(e),
            })?;
            line.push('\n');
            // One write of the whole line, so a kill leaves whole lines.
            out.write_all(line.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|source| RecordsError::Io {
                    action: "write",
                    path: self.name.clone(),
                    source,
                })?;
        }
        self.written += 1;
        Ok(())
    }

    /// Records written so far.
    pub fn written(&self) -> usize {
        self.written
    }
}

/// `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn rfc3339_utc(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn setup() -> RunSetup {
        RunSetup {
            target: Target {
                gpu: "NVIDIA H200".into(),
                sm: "90".into(),
                driver: "580.95".into(),
                cuda: "13.0".into(),
                timing: Default::default(),
            },
            batch: 1,
            precision: "fp16".into(),
            compiler: "nvrtc 13.0".into(),
        }
    }

    fn space() -> TaskSpace {
        TaskSpace {
            task: "00000000000000aa".into(),
            op: "FusedConv".into(),
            key: "conv k".into(),
            template: "conv/2".into(),
            weight: 3,
            flops: 10,
            bytes: 20,
            configs: vec![
                serde_json::json!({"kernel": "mma", "block_m": 64}),
                serde_json::json!({"kernel": "simt", "block_m": 32}),
            ],
            prior_ns: vec![],
            shape_features: vec![],
            default: 0,
        }
    }

    fn temp(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("aotune-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn records_round_trip_through_a_file() {
        let s = space();
        let trials = [
            Trial {
                config: 0,
                outcome: TrialOutcome::Ok {
                    repeats_us: vec![10.5, 10.25, 11.0],
                    median_us: 10.5,
                },
                compile_ms: 120.0,
            },
            Trial {
                config: 1,
                outcome: TrialOutcome::Failed {
                    stage: FailStage::Launch,
                    reason: "misaligned address".into(),
                },
                compile_ms: 80.0,
            },
        ];
        let path = temp("roundtrip.records.jsonl");
        let mut written = Vec::new();
        for t in &trials {
            // A fresh sink each time: appending keeps what is there.
            let mut sink = RecordSink::append_to(&path, setup()).unwrap();
            let r = TuneRecord::new(&s, t, &setup());
            sink.append(&r).unwrap();
            assert_eq!(sink.written(), 1);
            written.push(r);
        }
        let back = read_records(&path).unwrap();
        assert_eq!(back, written);
        assert_eq!(back[0].success_us(), Some(10.5));
        assert_eq!(back[1].success_us(), None);
        assert_eq!(back[1].failure.as_ref().unwrap().stage, FailStage::Launch);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.ends_with('\n'));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn repeats_are_written_to_the_nanosecond() {
        let trial = Trial {
            config: 0,
            outcome: TrialOutcome::Ok {
                // f32 milliseconds from CUDA events, widened: float noise.
                repeats_us: vec![5.504000000655651, 6.0800001956522465, 393.47200095653534],
                median_us: 6.0800001956522465,
            },
            compile_ms: 1.0,
        };
        let r = TuneRecord::new(&space(), &trial, &setup());
        let line = serde_json::to_string(&r).unwrap();
        assert!(
            line.contains(r#""repeats_us":[5.504,6.08,393.472]"#),
            "{line}"
        );
        // The median is kept as measured: the best log and resume read it.
        assert!(line.contains(r#""median_us":6.0800001956522465"#), "{line}");
    }

    #[test]
    fn truncated_corrupt_and_foreign_lines_name_their_line() {
        let s = space();
        let trial = Trial {
            config: 0,
            outcome: TrialOutcome::Ok {
                repeats_us: vec![1.0],
                median_us: 1.0,
            },
            compile_ms: 1.0,
        };
        let line = serde_json::to_string(&TuneRecord::new(&s, &trial, &setup())).unwrap();
        let good = format!("{line}\n\n{line}\n");
        assert_eq!(parse_records(&good, "r.jsonl").unwrap().len(), 2);

        let truncated = format!("{good}{}", &line[..line.len() / 2]);
        let err = parse_records(&truncated, "r.jsonl").unwrap_err();
        assert!(
            matches!(err, RecordsError::Truncated { line: 4, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("'r.jsonl'") && err.to_string().contains("line 4"));

        let corrupt = format!("{line}\n{{\"format\": \n{line}\n");
        let err = parse_records(&corrupt, "r.jsonl").unwrap_err();
        assert!(
            matches!(err, RecordsError::Corrupt { line: 2, .. }),
            "{err}"
        );

        let missing_field = format!("{line}\n{{\"format\": \"{RECORD_FORMAT}\"}}\n");
        let err = parse_records(&missing_field, "r.jsonl").unwrap_err();
        assert!(
            matches!(err, RecordsError::Corrupt { line: 2, .. }),
            "{err}"
        );

        let foreign = line.replace(RECORD_FORMAT, "aotune-record/9");
        let err = parse_records(&format!("{foreign}\n"), "r.jsonl").unwrap_err();
        assert!(
            matches!(&err, RecordsError::Format { line: 1, found, .. } if found == "aotune-record/9"),
            "{err}"
        );
    }

    #[test]
    fn appending_to_a_truncated_file_is_refused() {
        let path = temp("truncated.records.jsonl");
        std::fs::write(&path, "{\"a\": 1}\n{\"format\": \"aot").unwrap();
        let err = RecordSink::append_to(&path, setup()).unwrap_err();
        assert!(
            matches!(err, RecordsError::Truncated { line: 2, .. }),
            "{err}"
        );
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_complete_last_line_without_newline_gets_one_before_appending() {
        let s = space();
        let trial = Trial {
            config: 1,
            outcome: TrialOutcome::Failed {
                stage: FailStage::Compile,
                reason: "nvrtc".into(),
            },
            compile_ms: 3.0,
        };
        let line = serde_json::to_string(&TuneRecord::new(&s, &trial, &setup())).unwrap();
        let path = temp("no-newline.records.jsonl");
        std::fs::write(&path, &line).unwrap();
        let mut sink = RecordSink::append_to(&path, setup()).unwrap();
        sink.append(&TuneRecord::new(&s, &trial, &setup())).unwrap();
        drop(sink);
        assert_eq!(read_records(&path).unwrap().len(), 2);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2026-11-30T12:34:56.789Z
        let t = UNIX_EPOCH + Duration::from_millis(1_796_042_096_789);
        assert_eq!(rfc3339_utc(t), "2026-11-30T12:34:56.789Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339_utc(leap), "2000-02-29T00:00:00.000Z");
    }
}
