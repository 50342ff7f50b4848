//! Tasks and kernel configurations. A task is one distinct kernel workload
//! with a canonical, hashed key and a weight; kernel configs and their
//! search spaces join it with the GPU path.

mod task;
mod tuning_log;

pub use task::{extract_tasks, is_free, node_flops, render_tasks, task_key, Task, TaskKey};
pub use tuning_log::{
    target_warning, Applied, BestLog, BestRecord, Target, Timing, TuningLogError, BEST_FORMAT,
    CHAIN_LAUNCHES,
};
