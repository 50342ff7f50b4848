//! One task's search space as the tuner receives it ([`TaskSpace`]), and the
//! field table the search moves in: every config flattened to its leaf
//! fields (`block_m`, `kernel`, `a.b`, …), each field's distinct values in
//! order, and each config as one value index per field, so that "the
//! neighbour with the next larger `block_n`" is a table lookup and a move
//! can only land on a config the template declared valid.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One task's search space, built by the caller from the model: `configs`
/// are the template's `KernelConfig::search_space` serialized, `default`
/// indexes the heuristic default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSpace {
    /// `TaskKey::hash_hex()`.
    pub task: String,
    /// Op kind, e.g. `FusedConv`.
    pub op: String,
    /// `TaskKey::canonical` (human-readable).
    pub key: String,
    /// Template name and version, e.g. `conv/2`. Tasks with the same
    /// template share one learned cost model.
    pub template: String,
    /// Launches of this task per forward pass.
    pub weight: usize,
    pub flops: u64,
    pub bytes: u64,
    pub configs: Vec<serde_json::Value>,
    /// The analytic cost model's estimate per config in ns, if the template
    /// has one; empty means none for any config.
    pub prior_ns: Vec<Option<f64>>,
    /// Numeric description of the workload (e.g. log2 of the GEMM sizes);
    /// may be empty.
    pub shape_features: Vec<f64>,
    pub default: usize,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpaceError {
    #[error("task {task} ({op}): the search space is empty")]
    Empty { task: String, op: String },
    #[error("task {task} ({op}): default config {default} is outside the {len} configs")]
    Default {
        task: String,
        op: String,
        default: usize,
        len: usize,
    },
    #[error("task {task} ({op}): {len} configs but {priors} cost-model estimates")]
    Priors {
        task: String,
        op: String,
        len: usize,
        priors: usize,
    },
    #[error("task {task} ({op}) is given twice")]
    DuplicateTask { task: String, op: String },
    #[error("task {task} ({op}): shape feature {index} is {value}, not a finite number")]
    ShapeFeature {
        task: String,
        op: String,
        index: usize,
        value: f64,
    },
}

impl TaskSpace {
    /// Checks what the search relies on: a non-empty space, a default inside
    /// it, one prior per config (or none), finite shape features.
    pub fn check(&self) -> Result<(), SpaceError> {
        let (task, op) = (self.task.clone(), self.op.clone());
        if self.configs.is_empty() {
            return Err(SpaceError::Empty { task, op });
        }
        if self.default >= self.configs.len() {
            return Err(SpaceError::Default {
                task,
                op,
                default: self.default,
                len: self.configs.len(),
            });
        }
        if !self.prior_ns.is_empty() && self.prior_ns.len() != self.configs.len() {
            return Err(SpaceError::Priors {
                task,
                op,
                len: self.configs.len(),
                priors: self.prior_ns.len(),
            });
        }
        if let Some((index, &value)) = self
            .shape_features
            .iter()
            .enumerate()
            .find(|(_, v)| !v.is_finite())
        {
            return Err(SpaceError::ShapeFeature {
                task,
                op,
                index,
                value,
            });
        }
        Ok(())
    }

    /// The prior of config `i` in µs, when there is a usable one.
    pub fn prior_us(&self, i: usize) -> Option<f64> {
        self.prior_ns
            .get(i)
            .copied()
            .flatten()
            .filter(|p| p.is_finite() && *p > 0.0)
            .map(|ns| ns / 1000.0)
    }
}

/// A leaf of a config's JSON: a number, or anything else as text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Leaf {
    Num(f64),
    Text(String),
}

impl Leaf {
    fn order(&self, other: &Leaf) -> std::cmp::Ordering {
        match (self, other) {
            (Leaf::Num(a), Leaf::Num(b)) => a.total_cmp(b),
            (Leaf::Num(_), Leaf::Text(_)) => std::cmp::Ordering::Less,
            (Leaf::Text(_), Leaf::Num(_)) => std::cmp::Ordering::Greater,
            (Leaf::Text(a), Leaf::Text(b)) => a.cmp(b),
        }
    }
}

/// The leaves of `value` with their paths (`a.b`, `a[0]`; `` for a bare
/// scalar), in the JSON's key order.
pub(crate) fn flatten(value: &serde_json::Value) -> Vec<(String, Leaf)> {
    fn walk(value: &serde_json::Value, path: String, out: &mut Vec<(String, Leaf)>) {
        match value {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(v, p, out);
                }
            }
            serde_json::Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, format!("{path}[{i}]"), out);
                }
            }
            serde_json::Value::Number(n) => {
                out.push((path, Leaf::Num(n.as_f64().unwrap_or(0.0))));
            }
            other => {
                let text = match other {
                    serde_json::Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                out.push((path, Leaf::Text(text)));
            }
        }
    }
    let mut out = Vec::new();
    walk(value, String::new(), &mut out);
    out
}

/// One field of a space: its name and distinct values, numbers ascending
/// then texts.
#[derive(Debug, Clone)]
pub(crate) struct Field {
    pub name: String,
    pub values: Vec<Leaf>,
}

impl Field {
    pub fn numeric(&self) -> bool {
        self.values.iter().all(|v| matches!(v, Leaf::Num(_)))
    }

    fn code(&self, leaf: &Leaf) -> Option<u16> {
        self.values
            .binary_search_by(|v| v.order(leaf))
            .ok()
            .map(|i| i as u16)
    }
}

/// A field a config lacks (another kernel variant's field).
pub(crate) const ABSENT: u16 = u16::MAX;

/// The space as a table: fields, and per config one value index per field.
#[derive(Debug, Clone)]
pub(crate) struct ConfigTable {
    pub fields: Vec<Field>,
    pub codes: Vec<Vec<u16>>,
    lookup: HashMap<Vec<u16>, usize>,
}

impl ConfigTable {
    pub fn new(configs: &[serde_json::Value]) -> ConfigTable {
        let flat: Vec<Vec<(String, Leaf)>> = configs.iter().map(flatten).collect();
        let mut fields: Vec<Field> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for leaves in &flat {
            for (name, leaf) in leaves {
                let i = *index.entry(name.clone()).or_insert_with(|| {
                    fields.push(Field {
                        name: name.clone(),
                        values: Vec::new(),
                    });
                    fields.len() - 1
                });
                if !fields[i].values.iter().any(|v| v == leaf) {
                    fields[i].values.push(leaf.clone());
                }
            }
        }
        for f in &mut fields {
            f.values.sort_by(|a, b| a.order(b));
            // More distinct values than a code holds: keep the first ones
            // (lookups of the rest fail, which only narrows local moves).
            f.values.truncate(usize::from(ABSENT));
        }
        let codes: Vec<Vec<u16>> = flat
            .iter()
            .map(|leaves| {
                let mut code = vec![ABSENT; fields.len()];
                for (name, leaf) in leaves {
                    let i = index[name];
                    code[i] = fields[i].code(leaf).unwrap_or(ABSENT);
                }
                code
            })
            .collect();
        let mut lookup = HashMap::with_capacity(codes.len());
        for (i, c) in codes.iter().enumerate() {
            lookup.entry(c.clone()).or_insert(i);
        }
        ConfigTable {
            fields,
            codes,
            lookup,
        }
    }

    /// The index of the config equal to `value`, if the space has it.
    pub fn find(&self, value: &serde_json::Value) -> Option<usize> {
        let mut code = vec![ABSENT; self.fields.len()];
        for (name, leaf) in flatten(value) {
            let i = self.fields.iter().position(|f| f.name == name)?;
            code[i] = self.fields[i].code(&leaf)?;
        }
        self.lookup.get(&code).copied()
    }

    /// The value of field `f` in config `i`.
    pub fn leaf(&self, i: usize, f: usize) -> Option<&Leaf> {
        let c = self.codes[i][f];
        (c != ABSENT).then(|| &self.fields[f].values[usize::from(c)])
    }

    /// Configs one move away from `i`: one numeric field to the adjacent
    /// smaller or larger value, or one text field to any other value,
    /// keeping only moves that land in the space.
    pub fn neighbours(&self, i: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut code = self.codes[i].clone();
        for (f, field) in self.fields.iter().enumerate() {
            let here = code[f];
            if here == ABSENT {
                continue;
            }
            let candidates: Vec<u16> = if field.numeric() {
                [here.checked_sub(1), here.checked_add(1)]
                    .into_iter()
                    .flatten()
                    .filter(|&c| usize::from(c) < field.values.len())
                    .collect()
            } else {
                (0..field.values.len() as u16)
                    .filter(|&c| c != here)
                    .collect()
            };
            for c in candidates {
                code[f] = c;
                if let Some(&j) = self.lookup.get(&code) {
                    out.push(j);
                }
            }
            code[f] = here;
        }
        out
    }

    /// The config taking each field from `a` or `b` as `pick(field)` says,
    /// if the space has it.
    pub fn cross(&self, a: usize, b: usize, pick: impl Fn(usize) -> bool) -> Option<usize> {
        let code: Vec<u16> = (0..self.fields.len())
            .map(|f| {
                if pick(f) {
                    self.codes[a][f]
                } else {
                    self.codes[b][f]
                }
            })
            .collect();
        self.lookup.get(&code).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn space(configs: Vec<serde_json::Value>) -> TaskSpace {
        TaskSpace {
            task: "t".into(),
            op: "FusedConv".into(),
            key: "k".into(),
            template: "conv/2".into(),
            weight: 1,
            flops: 0,
            bytes: 0,
            prior_ns: vec![],
            shape_features: vec![],
            default: 0,
            configs,
        }
    }

    #[test]
    fn check_names_the_task_and_the_problem() {
        let mut s = space(vec![]);
        assert!(matches!(s.check(), Err(SpaceError::Empty { .. })));
        s.configs = vec![json!({"a": 1})];
        s.default = 1;
        let err = s.check().unwrap_err();
        assert!(err.to_string().contains("task t (FusedConv)"), "{err}");
        s.default = 0;
        s.prior_ns = vec![Some(1.0), None];
        assert!(matches!(s.check(), Err(SpaceError::Priors { .. })));
        s.prior_ns = vec![Some(-3.0)];
        assert!(s.check().is_ok());
        assert_eq!(s.prior_us(0), None, "a negative prior is no prior");
        s.shape_features = vec![f64::NAN];
        assert!(matches!(s.check(), Err(SpaceError::ShapeFeature { .. })));
    }

    #[test]
    fn moves_land_only_on_configs_of_the_space() {
        let mut configs = Vec::new();
        for m in [32, 64, 128] {
            for n in [32, 64] {
                configs.push(json!({"kernel": "mma", "block_m": m, "block_n": n}));
            }
        }
        configs.push(json!({"kernel": "simt", "block_m": 64, "block_n": 64, "t": [4, 4]}));
        configs.push(json!({"kernel": "mma", "block_m": 64, "block_n": 64}));
        let table = ConfigTable::new(&configs);
        // (64, 32): up/down in block_m, up in block_n.
        let mut n = table.neighbours(2);
        n.sort();
        assert_eq!(n, vec![0, 3, 4]);
        // The simt config has a field the others lack: no move reaches it by
        // changing `kernel` alone, and its own moves stay in the space.
        assert_eq!(table.neighbours(6), Vec::<usize>::new());
        assert_eq!(
            table.find(&json!({"kernel": "simt", "block_m": 64, "block_n": 64, "t": [4, 4]})),
            Some(6)
        );
        assert_eq!(table.find(&json!({"kernel": "mma", "block_m": 64})), None);
        assert_eq!(
            table.find(&json!({"kernel": "mma", "block_m": 64, "block_n": 96})),
            None
        );
        // The duplicate of config 3 resolves to the first.
        assert_eq!(table.find(&configs[7]), Some(3));
        assert_eq!(
            table.cross(0, 5, |f| table.fields[f].name != "block_n"),
            Some(1)
        );
    }
}
