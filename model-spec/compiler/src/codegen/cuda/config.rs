//! Kernel configurations as data: the [`KernelConfig`] contract every
//! template's config struct implements, the [`ConfigOverrides`] a tuning log
//! supplies, and `choose`, which picks a task's config (a valid override,
//! else the template's heuristic default) and records why an override was
//! not used.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hash::Hash;

/// A template's tunable parameters (tiles, warps, stages, split-K, …).
///
/// `Shape` is everything about the workload the template specializes on.
/// The kernel symbol embeds [`KernelConfig::tag`], and the launch geometry is
/// computed from the same value, so the two cannot drift apart.
pub trait KernelConfig:
    Sized + Clone + PartialEq + Eq + Hash + Debug + Serialize + DeserializeOwned
{
    type Shape;

    /// The heuristic choice when the tuning log has no record (documented on
    /// each implementation). Always valid for `shape`.
    fn default_for(shape: &Self::Shape) -> Self;

    /// Why this config cannot run `shape` (shared memory, threads, registers,
    /// divisibility), or `Ok`.
    fn validate(&self, shape: &Self::Shape) -> Result<(), String>;

    /// Every config the tuner may try for `shape`, all valid, in a stable order.
    fn search_space(shape: &Self::Shape) -> Vec<Self>;

    /// Short identifier used in kernel symbols, e.g. `mma_m64n64k32w2x2p3s1`.
    fn tag(&self) -> String;

    /// The analytic cost model's estimate of this config's time on `shape`
    /// in ns, where the template has one: the tuner's prior.
    fn estimate_ns(&self, _shape: &Self::Shape) -> Option<f64> {
        None
    }

    /// A numeric description of the workload for the tuner's learned cost
    /// model (e.g. log2 of the GEMM sizes); empty when the template has none.
    fn shape_features(_shape: &Self::Shape) -> Vec<f64> {
        Vec::new()
    }
}

/// Tuned configs by task: [`crate::schedule::TaskKey::hash_hex`] → the config
/// as JSON (what the tuning log stores). An entry that does not parse as the
/// task's config type, or is invalid for the task, is not used: the task
/// gets its default and [`super::CudaModule::warnings`] says why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConfigOverrides {
    pub by_task: BTreeMap<String, serde_json::Value>,
}

impl ConfigOverrides {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `config` for the task with hash `task_hash`.
    pub fn insert<C: Serialize>(&mut self, task_hash: impl Into<String>, config: &C) {
        if let Ok(value) = serde_json::to_value(config) {
            self.by_task.insert(task_hash.into(), value);
        }
    }

    pub fn get(&self, task_hash: &str) -> Option<&serde_json::Value> {
        self.by_task.get(task_hash)
    }
}

/// The task a config is chosen for, for messages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskRef<'a> {
    pub hash: &'a str,
    pub op: &'static str,
    pub node: &'a str,
    pub overridden: Option<&'a serde_json::Value>,
}

/// The override for the task when it parses and is valid, else the default;
/// a rejected override adds a warning naming the task.
pub(crate) fn choose<C: KernelConfig>(
    shape: &C::Shape,
    task: &TaskRef,
    warnings: &mut Vec<String>,
) -> C {
    if let Some(value) = task.overridden {
        let reason = match serde_json::from_value::<C>(value.clone()) {
            Ok(config) => match config.validate(shape) {
                Ok(()) => return config,
                Err(why) => format!("is invalid for it: {why}"),
            },
            Err(e) => format!("does not parse: {e}"),
        };
        warnings.push(format!(
            "task {} ({}, node '{}'): tuned config {value} {reason}; using the default",
            task.hash, task.op, task.node
        ));
    }
    C::default_for(shape)
}

/// Grid-stride kernels' config: threads per block and items per thread.
/// Used by the memory-bound templates (elementwise, pools, reductions,
/// direct convolution).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LinearConfig {
    pub block: u32,
    /// Work items per thread; the grid is `ceil(items / (block · per_thread))`.
    pub per_thread: u32,
}

/// Work size of a grid-stride kernel: number of independent items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearShape {
    pub items: u64,
}

impl LinearConfig {
    /// Blocks to launch for `shape`.
    pub fn grid(&self, shape: &LinearShape) -> u32 {
        let per_block = u64::from(self.block) * u64::from(self.per_thread.max(1));
        shape
            .items
            .div_ceil(per_block.max(1))
            .clamp(1, u64::from(i32::MAX as u32)) as u32
    }
}

impl KernelConfig for LinearConfig {
    type Shape = LinearShape;

    /// 256 threads, one item each, unless that leaves fewer than two blocks
    /// per SM on the H200 (132 SMs) while more than 64 items remain, in which
    /// case 128 or 64 threads per block spread the work over more SMs.
    fn default_for(shape: &LinearShape) -> Self {
        let block = [256u32, 128, 64]
            .into_iter()
            .find(|&b| shape.items.div_ceil(u64::from(b)) >= 264)
            .unwrap_or(if shape.items > 64 { 64 } else { 32 });
        LinearConfig {
            block,
            per_thread: 1,
        }
    }

    fn validate(&self, _shape: &LinearShape) -> Result<(), String> {
        if !(32..=1024).contains(&self.block) || self.block % 32 != 0 {
            return Err(format!(
                "block {} must be a multiple of 32 in 32..=1024",
                self.block
            ));
        }
        if !(1..=64).contains(&self.per_thread) {
            return Err(format!("per_thread {} must be in 1..=64", self.per_thread));
        }
        Ok(())
    }

    fn search_space(shape: &LinearShape) -> Vec<Self> {
        let mut out = Vec::new();
        for block in [64, 128, 256, 512] {
            for per_thread in [1, 2, 4, 8] {
                let c = LinearConfig { block, per_thread };
                if c.validate(shape).is_ok() {
                    out.push(c);
                }
            }
        }
        out
    }

    fn tag(&self) -> String {
        format!("b{}i{}", self.block, self.per_thread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_and_invalid_overrides_fall_back_with_a_warning() {
        let shape = LinearShape { items: 1 << 20 };
        let mut warnings = Vec::new();
        let good = serde_json::json!({"block": 512, "per_thread": 2});
        let task = TaskRef {
            hash: "00000000deadbeef",
            op: "Relu",
            node: "relu1",
            overridden: Some(&good),
        };
        let c: LinearConfig = choose(&shape, &task, &mut warnings);
        assert_eq!((c.block, c.per_thread), (512, 2));
        assert!(warnings.is_empty());

        for bad in [
            serde_json::json!({"block": 100, "per_thread": 1}),
            serde_json::json!({"tiles": 3}),
        ] {
            let task = TaskRef {
                overridden: Some(&bad),
                ..task
            };
            let c: LinearConfig = choose(&shape, &task, &mut warnings);
            assert_eq!(c, LinearConfig::default_for(&shape));
        }
        assert_eq!(warnings.len(), 2);
        assert!(warnings.iter().all(|w| w.contains("00000000deadbeef")));
        assert!(warnings[0].contains("invalid"), "{}", warnings[0]);
        assert!(warnings[1].contains("does not parse"), "{}", warnings[1]);
    }

    #[test]
    fn overrides_round_trip_as_a_plain_map() {
        let mut o = ConfigOverrides::new();
        o.insert(
            "0123456789abcdef",
            &LinearConfig {
                block: 128,
                per_thread: 4,
            },
        );
        let text = serde_json::to_string(&o).unwrap();
        assert_eq!(text, r#"{"0123456789abcdef":{"block":128,"per_thread":4}}"#);
        let back: ConfigOverrides = serde_json::from_str(&text).unwrap();
        assert_eq!(back, o);
    }

    #[test]
    fn linear_search_space_is_valid_and_contains_the_default() {
        for items in [1u64, 100, 1 << 20] {
            let shape = LinearShape { items };
            let space = LinearConfig::search_space(&shape);
            assert!(space.iter().all(|c| c.validate(&shape).is_ok()));
            assert!(LinearConfig::default_for(&shape).validate(&shape).is_ok());
        }
    }
}
