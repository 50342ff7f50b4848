//! Features of a (task, config) pair for the learned cost model, laid out
//! once per template group (the tasks sharing one model):
//!
//! | columns | what | why |
//! |---|---|---|
//! | intercept | 1 | |
//! | log prior | ln of the analytic estimate (µs) | lets the model rescale the prior it corrects |
//! | no prior | 1 when the config has no estimate | those configs get their own level |
//! | field | each numeric field's value | |
//! | slog(field) | `sign·log2(1+|v|)` per numeric field | tile sizes act multiplicatively |
//! | one-hot(field = v) | per value of fields with ≤ 16 values, and of text fields | non-monotone effects (stages, split-K, kernel kind) |
//! | a·b | every pair of numeric fields | tile area, warp tile, threads, shared memory |
//! | slog(a)·slog(b) | every pair of numeric fields | smooth interactions on the log scale |
//! | shape(j)·slog(field) | workload feature × config field | which tile suits which GEMM |
//! | task | one-hot of the task | a per-task level, so shared coefficients fit shapes |
//!
//! All but the intercepts are standardized with the mean and spread over a
//! sample of the group's spaces, so one ridge penalty fits every column.
//! The model's target is `ln(µs) − ln(prior µs)` ([`FeatureSchema::offset`]),
//! so with no data it predicts the prior.

use super::space::{ConfigTable, Leaf, TaskSpace};
use std::collections::HashMap;

/// Numeric fields with at most this many distinct values also get one-hot
/// columns.
const ONE_HOT_MAX: usize = 16;
/// Configs per task sampled for the standardization statistics.
const SAMPLE_PER_TASK: usize = 256;
/// Ridge penalties: standardized columns, the intercept, the task levels.
const LAMBDA: f64 = 1.0;
const LAMBDA_INTERCEPT: f64 = 1e-6;
const LAMBDA_TASK: f64 = 1e-2;

/// `sign(v)·log2(1 + |v|)`: log scale for sizes, defined for 0 and negatives.
fn slog(v: f64) -> f64 {
    v.signum() * (1.0 + v.abs()).log2()
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    Num(usize),
    Text(usize),
}

#[derive(Debug, Clone)]
struct NumField {
    one_hot: Vec<f64>,
    col_one_hot: usize,
}

#[derive(Debug, Clone)]
struct TextField {
    values: Vec<String>,
    col: usize,
}

/// Per task of the group: where each of its table's fields goes.
#[derive(Debug, Clone)]
struct Member {
    slots: Vec<Option<Slot>>,
    task_col: usize,
}

/// The column layout and standardization of one template group.
#[derive(Debug, Clone)]
pub(crate) struct FeatureSchema {
    numeric: Vec<NumField>,
    text: Vec<TextField>,
    shape_len: usize,
    members: Vec<Member>,
    col_prior: usize,
    col_no_prior: usize,
    col_raw: usize,
    col_slog: usize,
    col_products: usize,
    col_pairs: usize,
    col_shape: usize,
    /// First column not standardized (the task levels).
    col_tasks: usize,
    dim: usize,
    mean: Vec<f64>,
    scale: Vec<f64>,
}

impl FeatureSchema {
    /// The layout for the tasks of one group, `members[slot] = (space, table)`.
    pub fn new(members: &[(&TaskSpace, &ConfigTable)]) -> FeatureSchema {
        // Field names of the group: numeric when every value of the name is.
        let mut names: Vec<String> = Vec::new();
        let mut numeric_name: HashMap<String, bool> = HashMap::new();
        for (_, table) in members {
            for f in &table.fields {
                let e = numeric_name.entry(f.name.clone()).or_insert_with(|| {
                    names.push(f.name.clone());
                    true
                });
                *e &= f.numeric();
            }
        }
        let mut slot_of: HashMap<String, Slot> = HashMap::new();
        let (mut n_num, mut n_text) = (0, 0);
        for name in &names {
            if numeric_name[name] {
                slot_of.insert(name.clone(), Slot::Num(n_num));
                n_num += 1;
            } else {
                slot_of.insert(name.clone(), Slot::Text(n_text));
                n_text += 1;
            }
        }
        let mut num_values: Vec<Vec<f64>> = vec![Vec::new(); n_num];
        let mut text_values: Vec<Vec<String>> = vec![Vec::new(); n_text];
        for (_, table) in members {
            for f in &table.fields {
                match slot_of[&f.name] {
                    Slot::Num(k) => num_values[k].extend(f.values.iter().map(leaf_num)),
                    Slot::Text(k) => text_values[k].extend(f.values.iter().map(leaf_text)),
                }
            }
        }
        let shape_len = members
            .iter()
            .map(|(s, _)| s.shape_features.len())
            .max()
            .unwrap_or(0);

        let col_prior = 1;
        let col_no_prior = 2;
        let col_raw = 3;
        let col_slog = col_raw + n_num;
        let mut col = col_slog + n_num;
        let mut numeric = Vec::with_capacity(n_num);
        for mut values in num_values {
            values.sort_by(f64::total_cmp);
            values.dedup();
            if values.len() > ONE_HOT_MAX {
                values.clear();
            }
            numeric.push(NumField {
                col_one_hot: col,
                one_hot: values,
            });
            col += numeric.last().map_or(0, |f| f.one_hot.len());
        }
        let mut text = Vec::with_capacity(n_text);
        for mut values in text_values {
            values.sort();
            values.dedup();
            text.push(TextField { col, values });
            col += text.last().map_or(0, |f| f.values.len());
        }
        let pairs = n_num * n_num.saturating_sub(1) / 2;
        let col_products = col;
        col += pairs;
        let col_pairs = col;
        col += pairs;
        let col_shape = col;
        col += shape_len * n_num;
        let col_tasks = col;
        let dim = col_tasks + members.len();
        let members_out = members
            .iter()
            .enumerate()
            .map(|(i, (_, table))| Member {
                slots: table
                    .fields
                    .iter()
                    .map(|f| slot_of.get(&f.name).copied())
                    .collect(),
                task_col: col_tasks + i,
            })
            .collect();
        let mut schema = FeatureSchema {
            numeric,
            text,
            shape_len,
            members: members_out,
            col_prior,
            col_no_prior,
            col_raw,
            col_slog,
            col_products,
            col_pairs,
            col_shape,
            col_tasks,
            dim,
            mean: vec![0.0; dim],
            scale: vec![1.0; dim],
        };
        schema.standardize(members);
        schema
    }

    /// Mean and 1/spread of every standardized column over a sample of the
    /// group's configs (a constant column is zeroed).
    fn standardize(&mut self, members: &[(&TaskSpace, &ConfigTable)]) {
        let mut sum = vec![0.0; self.dim];
        let mut sq = vec![0.0; self.dim];
        let mut count: f64 = 0.0;
        let mut x = vec![0.0; self.dim];
        for (slot, (space, table)) in members.iter().enumerate() {
            let step = space.configs.len().div_ceil(SAMPLE_PER_TASK).max(1);
            for i in (0..space.configs.len()).step_by(step) {
                self.raw(slot, space, table, i, &mut x);
                for c in 1..self.col_tasks {
                    sum[c] += x[c];
                    sq[c] += x[c] * x[c];
                }
                count += 1.0;
            }
        }
        for c in 1..self.col_tasks {
            let mean = sum[c] / count.max(1.0);
            let var = (sq[c] / count.max(1.0) - mean * mean).max(0.0);
            self.mean[c] = mean;
            self.scale[c] = if var > 1e-12 { 1.0 / var.sqrt() } else { 0.0 };
        }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The leading columns that describe the config alone (intercept,
    /// prior, values, logs, one-hots), what a per-task correction uses.
    pub fn config_columns(&self) -> usize {
        self.col_products
    }

    /// Tasks in the group.
    pub fn tasks(&self) -> usize {
        self.members.len()
    }

    /// Ridge penalty per column.
    pub fn penalty(&self) -> Vec<f64> {
        (0..self.dim)
            .map(|c| match c {
                0 => LAMBDA_INTERCEPT,
                c if c >= self.col_tasks => LAMBDA_TASK,
                _ => LAMBDA,
            })
            .collect()
    }

    /// What the model's prediction is added to: ln of the prior in µs, or 0.
    pub fn offset(space: &TaskSpace, i: usize) -> f64 {
        space.prior_us(i).map_or(0.0, f64::ln)
    }

    /// The standardized features of config `i` of the task in `slot`.
    pub fn write(
        &self,
        slot: usize,
        space: &TaskSpace,
        table: &ConfigTable,
        i: usize,
        out: &mut [f64],
    ) {
        self.raw(slot, space, table, i, out);
        let columns = out.iter_mut().zip(self.mean.iter().zip(&self.scale));
        for (v, (mean, scale)) in columns.take(self.col_tasks).skip(1) {
            *v = (*v - mean) * scale;
        }
    }

    fn raw(&self, slot: usize, space: &TaskSpace, table: &ConfigTable, i: usize, out: &mut [f64]) {
        out.iter_mut().for_each(|v| *v = 0.0);
        out[0] = 1.0;
        match space.prior_us(i) {
            Some(p) => out[self.col_prior] = p.ln(),
            None => out[self.col_no_prior] = 1.0,
        }
        let member = &self.members[slot];
        let n_num = self.numeric.len();
        for (f, slot) in member.slots.iter().enumerate() {
            let Some(leaf) = table.leaf(i, f) else {
                continue;
            };
            match slot {
                Some(Slot::Num(k)) => {
                    let v = leaf_num(leaf);
                    out[self.col_raw + k] = v;
                    out[self.col_slog + k] = slog(v);
                    let field = &self.numeric[*k];
                    if let Some(pos) = field.one_hot.iter().position(|&u| u == v) {
                        out[field.col_one_hot + pos] = 1.0;
                    }
                }
                Some(Slot::Text(k)) => {
                    let field = &self.text[*k];
                    let v = leaf_text(leaf);
                    if let Some(pos) = field.values.iter().position(|u| *u == v) {
                        out[field.col + pos] = 1.0;
                    }
                }
                None => {}
            }
        }
        let mut pair = 0;
        for a in 0..n_num {
            for b in a + 1..n_num {
                out[self.col_products + pair] = out[self.col_raw + a] * out[self.col_raw + b];
                out[self.col_pairs + pair] = out[self.col_slog + a] * out[self.col_slog + b];
                pair += 1;
            }
        }
        for j in 0..self.shape_len {
            let s = space.shape_features.get(j).copied().unwrap_or(0.0);
            for a in 0..n_num {
                out[self.col_shape + j * n_num + a] = s * out[self.col_slog + a];
            }
        }
        out[member.task_col] = 1.0;
    }
}

fn leaf_num(leaf: &Leaf) -> f64 {
    match leaf {
        Leaf::Num(v) => *v,
        Leaf::Text(_) => 0.0,
    }
}

fn leaf_text(leaf: &Leaf) -> String {
    match leaf {
        Leaf::Num(v) => v.to_string(),
        Leaf::Text(t) => t.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn space(configs: Vec<serde_json::Value>, shape: Vec<f64>) -> TaskSpace {
        let n = configs.len();
        TaskSpace {
            task: "t".into(),
            op: "FusedConv".into(),
            key: "k".into(),
            template: "conv/2".into(),
            weight: 1,
            flops: 0,
            bytes: 0,
            prior_ns: (0..n)
                .map(|i| (i > 0).then_some(1000.0 * i as f64))
                .collect(),
            shape_features: shape,
            default: 0,
            configs,
        }
    }

    #[test]
    fn layout_covers_fields_pairs_shapes_and_tasks() {
        let a = space(
            vec![
                json!({"kernel": "mma", "block_m": 32, "stages": 2}),
                json!({"kernel": "mma", "block_m": 64, "stages": 3}),
                json!({"kernel": "simt", "block_m": 128, "thread_m": 4}),
            ],
            vec![1.0, 2.0],
        );
        let b = space(
            vec![json!({"kernel": "mma", "block_m": 64, "stages": 4})],
            vec![5.0],
        );
        let (ta, tb) = (ConfigTable::new(&a.configs), ConfigTable::new(&b.configs));
        let s = FeatureSchema::new(&[(&a, &ta), (&b, &tb)]);
        // 3 + 3 raw + 3 slog + one-hots (3 block_m, 3 stages, 1 thread_m,
        // 2 kernel) + 3 products + 3 log products + 2·3 shape terms + 2 tasks.
        assert_eq!(s.dim(), 3 + 3 + 3 + 9 + 3 + 3 + 6 + 2);
        let mut x = vec![0.0; s.dim()];
        s.raw(0, &a, &ta, 0, &mut x);
        assert_eq!(x[0], 1.0);
        assert_eq!(x[s.col_no_prior], 1.0, "config 0 has no prior");
        s.raw(0, &a, &ta, 1, &mut x);
        assert_eq!(x[s.col_prior], 1.0f64.ln());
        assert_eq!(x[s.col_tasks], 1.0);
        assert_eq!(x[s.col_tasks + 1], 0.0);
        // Numeric fields block_m, stages, thread_m: values, logs, products.
        assert_eq!(x[s.col_raw..s.col_raw + 3], [64.0, 3.0, 0.0]);
        assert_eq!(x[s.col_slog], 65f64.log2());
        assert_eq!(x[s.col_products..s.col_products + 3], [192.0, 0.0, 0.0]);
        // One one-hot per present field, none for the absent thread_m.
        let hot: f64 = x[s.col_slog + 3..s.col_products].iter().sum();
        assert_eq!(hot, 3.0);
        // Standardized columns have mean 0 over the sample.
        let mut total = vec![0.0; s.dim()];
        for (slot, (sp, t)) in [(&a, &ta), (&b, &tb)].into_iter().enumerate() {
            for i in 0..sp.configs.len() {
                s.write(slot, sp, t, i, &mut x);
                total.iter_mut().zip(&x).for_each(|(t, v)| *t += v);
            }
        }
        for v in &total[1..s.col_tasks] {
            assert!(v.abs() < 1e-9, "{total:?}");
        }
    }
}
