//! A model's serving configuration: `DIR/<name>/config.json`, every field
//! optional. Unknown fields are an error (a typo must not be silently
//! ignored).
//!
//! ```json
//! {
//!   "backend": "auto",            // "auto" (GPU when there is a driver, else CPU), "gpu" or "cpu"
//!   "precision": "fp16",          // fp32 | tf32 | fp16 | bf16; default fp16 on the GPU, fp32 on the CPU
//!   "batch_sizes": [1, 8, 32],    // the batch sizes compiled; requests are merged or split into them
//!   "max_queue_delay_us": 500,    // how long the oldest queued request may wait for others
//!   "instances": 1,               // executors pulling from the model's queue
//!   "concurrent_batches": 1,      // at most this many of them run a batch at once (default: all)
//!   "concurrent_kernels": 1,      // GPU: at most this many batches' kernels run at once, in turn (default: all)
//!   "fill_while_gpu_busy": true,  // GPU, concurrent_kernels 1: keep a batch open while earlier ones hold the GPU
//!   "queue_capacity": 1024,       // rows (images) the queue holds before answering 429 / RESOURCE_EXHAUSTED
//!   "timeout_ms": 30000,          // per-request deadline (a request's own `timeout` parameter may shorten it)
//!   "image": { "input": "input" }, // accept encoded JPEG/PNG as BYTES for this input (ImageNet transform)
//!   "input_datatype": "FP16",     // FP32 (default) or FP16: what clients send; FP16 needs the GPU at fp16
//!   "gpu_wait": "block",          // how an executor waits for its batch: "block" (sleeps; default) or "spin"
//!   "pinned_rows": 128,           // GPU: one-row requests copied into this many pinned buffers on arrival
//!                                 // (0: off; default: two full batches per instance, within 256 MiB)
//!   "dense_cublaslt": false       // GPU, fp16/bf16: Dense layers through cuBLASLt (needs libcublasLt)
//! }
//! ```

use super::datatype::Datatype;
use aotune::runtime::WaitMode;
use aotune_spec::Precision;
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// The file name looked for in each model's directory.
pub const CONFIG_FILE: &str = "config.json";

/// Which executor runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// The GPU where the NVIDIA driver is present, else the CPU reference.
    #[default]
    Auto,
    /// The GPU; the model is not ready where there is none.
    Gpu,
    /// The CPU reference executor (`aotune run`'s).
    Cpu,
}

/// `"image"`: which input accepts encoded images as BYTES.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageInput {
    /// The model input fed by the decoded, resized and normalized image; it
    /// must be `[batch, 3, 224, 224]` (torchvision's ImageNet eval transform).
    pub input: String,
}

/// The file as written; `None` = not given.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    backend: Option<BackendChoice>,
    precision: Option<String>,
    batch_sizes: Option<Vec<usize>>,
    max_queue_delay_us: Option<u64>,
    instances: Option<usize>,
    concurrent_batches: Option<usize>,
    concurrent_kernels: Option<usize>,
    fill_while_gpu_busy: Option<bool>,
    queue_capacity: Option<usize>,
    timeout_ms: Option<u64>,
    image: Option<ImageInput>,
    input_datatype: Option<Datatype>,
    gpu_wait: Option<WaitMode>,
    pinned_rows: Option<usize>,
    dense_cublaslt: Option<bool>,
}

/// A model's configuration with every default applied, except the
/// precision, whose default depends on the backend that ends up running it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub backend: BackendChoice,
    /// `None`: the backend's default (fp16 on the GPU, fp32 on the CPU).
    pub precision: Option<Precision>,
    /// Sorted, distinct, each at least 1.
    pub batch_sizes: Vec<usize>,
    pub max_queue_delay: Duration,
    pub instances: usize,
    /// How many executors may run a batch at the same time (1..=instances):
    /// the others take their next batch only when one finishes, so requests
    /// that arrive meanwhile join it.
    pub concurrent_batches: usize,
    /// GPU: how many batches' kernels may run at once (1..=instances); the
    /// others wait on the GPU for their turn, in the order they were
    /// submitted, while their input copies run. `instances`: no turns.
    pub concurrent_kernels: usize,
    /// GPU, with `concurrent_kernels` 1: an executor taking a batch while
    /// earlier batches' kernels hold the GPU keeps it open for more requests
    /// until its input copy would end as the GPU frees up (predicted from
    /// the batches that ran), instead of closing it after
    /// `max_queue_delay` and waiting for its turn.
    pub fill_while_gpu_busy: bool,
    pub queue_capacity: usize,
    pub timeout: Duration,
    pub image: Option<ImageInput>,
    /// What clients send for the model's input: FP32, or FP16 (the GPU
    /// backend builds the model with an f16 input, which needs fp16
    /// precision; checked by [`ModelConfig::check_input_datatype`] once the
    /// backend is known).
    pub input_datatype: Datatype,
    /// How a GPU executor waits for its batch (spin, or sleep on an event).
    pub gpu_wait: WaitMode,
    /// Pinned row buffers of the GPU backend's arrival copy (0: none, every
    /// batch is gathered into the executor's staging buffer); `None`: sized
    /// by [`ModelConfig::pinned_pool_rows`] once the row's bytes are known.
    pub pinned_rows: Option<usize>,
    /// Build with every eligible Dense layer run by cuBLASLt
    /// (`Build::dense_cublaslt`; the transformers' GEMMs at large batches).
    pub dense_cublaslt: bool,
}

/// The batch sizes compiled when the config names none.
pub const DEFAULT_BATCH_SIZES: [usize; 3] = [1, 8, 32];
pub const DEFAULT_MAX_QUEUE_DELAY: Duration = Duration::from_micros(500);
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The pinned memory a row pool sized by default may take.
pub const DEFAULT_PINNED_POOL_BYTES: usize = 256 << 20;
/// More executors than this per model is a config mistake, not a wish.
pub const MAX_INSTANCES: usize = 64;
/// The largest batch size a config may ask to compile.
pub const MAX_BATCH_SIZE: usize = 4096;

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            backend: BackendChoice::Auto,
            precision: None,
            batch_sizes: DEFAULT_BATCH_SIZES.to_vec(),
            max_queue_delay: DEFAULT_MAX_QUEUE_DELAY,
            instances: 1,
            concurrent_batches: 1,
            concurrent_kernels: 1,
            fill_while_gpu_busy: false,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            timeout: DEFAULT_TIMEOUT,
            image: None,
            input_datatype: Datatype::FP32,
            gpu_wait: WaitMode::Block,
            pinned_rows: None,
            dense_cublaslt: false,
        }
    }
}

/// Why a config file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading '{path}': {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("'{path}': {source}")]
    Parse {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("'{path}': {message}")]
    Invalid { path: String, message: String },
}

impl ModelConfig {
    /// Reads `dir/config.json`, or the defaults where there is none.
    pub fn load(dir: &Path) -> Result<ModelConfig, ConfigError> {
        let path = dir.join(CONFIG_FILE);
        if !path.exists() {
            return Ok(ModelConfig::default());
        }
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        ModelConfig::parse(&text).map_err(|e| match e {
            ParseFailure::Json(source) => ConfigError::Parse {
                path: path.display().to_string(),
                source,
            },
            ParseFailure::Invalid(message) => ConfigError::Invalid {
                path: path.display().to_string(),
                message,
            },
        })
    }

    /// Parses a config file's text and applies the defaults.
    fn parse(text: &str) -> Result<ModelConfig, ParseFailure> {
        let file: ConfigFile = serde_json::from_str(text).map_err(ParseFailure::Json)?;
        let defaults = ModelConfig::default();
        let precision = match file.precision {
            None => None,
            Some(p) => Some(
                p.parse::<Precision>()
                    .map_err(|e| ParseFailure::Invalid(format!("\"precision\": {e}")))?,
            ),
        };
        let mut batch_sizes = file.batch_sizes.unwrap_or(defaults.batch_sizes);
        batch_sizes.sort_unstable();
        batch_sizes.dedup();
        if batch_sizes.is_empty() || batch_sizes[0] == 0 {
            return Err(ParseFailure::Invalid(
                "\"batch_sizes\" must list at least one size, each at least 1".into(),
            ));
        }
        if batch_sizes.last().is_some_and(|&b| b > MAX_BATCH_SIZE) {
            return Err(ParseFailure::Invalid(format!(
                "\"batch_sizes\": at most {MAX_BATCH_SIZE}"
            )));
        }
        let instances = file.instances.unwrap_or(defaults.instances);
        if !(1..=MAX_INSTANCES).contains(&instances) {
            return Err(ParseFailure::Invalid(format!(
                "\"instances\" must be between 1 and {MAX_INSTANCES}"
            )));
        }
        let concurrent_batches = file.concurrent_batches.unwrap_or(instances);
        if !(1..=instances).contains(&concurrent_batches) {
            return Err(ParseFailure::Invalid(format!(
                "\"concurrent_batches\" must be between 1 and \"instances\" ({instances})"
            )));
        }
        let concurrent_kernels = file.concurrent_kernels.unwrap_or(instances);
        if !(1..=instances).contains(&concurrent_kernels) {
            return Err(ParseFailure::Invalid(format!(
                "\"concurrent_kernels\" must be between 1 and \"instances\" ({instances})"
            )));
        }
        let fill_while_gpu_busy = file.fill_while_gpu_busy.unwrap_or(false);
        if fill_while_gpu_busy && concurrent_kernels != 1 {
            return Err(ParseFailure::Invalid(format!(
                "\"fill_while_gpu_busy\" predicts when the GPU frees up from batches whose \
                 kernels run one at a time: it needs \"concurrent_kernels\": 1 (it is \
                 {concurrent_kernels})"
            )));
        }
        let queue_capacity = file.queue_capacity.unwrap_or(defaults.queue_capacity);
        if queue_capacity == 0 {
            return Err(ParseFailure::Invalid(
                "\"queue_capacity\" must be at least 1".into(),
            ));
        }
        let pinned_rows = file.pinned_rows;
        if let Some(pinned_rows) = pinned_rows.filter(|&rows| rows > queue_capacity) {
            return Err(ParseFailure::Invalid(format!(
                "\"pinned_rows\" ({pinned_rows}) is more than the queue holds \
                 (\"queue_capacity\": {queue_capacity}); more buffers than waiting rows are \
                 never used"
            )));
        }
        let timeout = file
            .timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(defaults.timeout);
        if timeout.is_zero() {
            return Err(ParseFailure::Invalid(
                "\"timeout_ms\" must be at least 1".into(),
            ));
        }
        Ok(ModelConfig {
            backend: file.backend.unwrap_or_default(),
            precision,
            batch_sizes,
            max_queue_delay: file
                .max_queue_delay_us
                .map(Duration::from_micros)
                .unwrap_or(defaults.max_queue_delay),
            instances,
            concurrent_batches,
            concurrent_kernels,
            fill_while_gpu_busy,
            queue_capacity,
            timeout,
            image: file.image,
            input_datatype: file.input_datatype.unwrap_or_default(),
            gpu_wait: file.gpu_wait.unwrap_or(defaults.gpu_wait),
            pinned_rows,
            dense_cublaslt: file.dense_cublaslt.unwrap_or(defaults.dense_cublaslt),
        })
    }

    /// How many pinned row buffers the GPU backend keeps for input rows of
    /// `row_bytes`: `"pinned_rows"` when the config sets it, else two full
    /// batches of the largest size per instance (enough for every row that
    /// can wait while each instance runs one), at most the queue's capacity
    /// and [`DEFAULT_PINNED_POOL_BYTES`] of memory.
    pub fn pinned_pool_rows(&self, row_bytes: usize) -> usize {
        self.pinned_rows.unwrap_or_else(|| {
            let largest = self.batch_sizes.last().copied().unwrap_or(1);
            (2 * largest * self.instances)
                .min(self.queue_capacity)
                .min(DEFAULT_PINNED_POOL_BYTES / row_bytes.max(1))
        })
    }

    /// `"input_datatype": "FP16"` needs the GPU backend (`gpu`) at fp16
    /// (`precision`, the precision that backend will use); the message says
    /// why not, for the model's not-ready reason.
    pub fn check_input_datatype(&self, gpu: bool, precision: Precision) -> Result<(), String> {
        match self.input_datatype {
            Datatype::FP32 => Ok(()),
            Datatype::FP16 if !gpu => Err(
                "\"input_datatype\": \"FP16\" needs the GPU backend (the model is built with an \
                 f16 input); this model runs on the CPU reference: drop the setting or serve it \
                 on a GPU"
                    .into(),
            ),
            Datatype::FP16 if precision != Precision::Fp16 => Err(format!(
                "\"input_datatype\": \"FP16\" needs \"precision\": \"fp16\" (activations \
                 stored as f16); this model is {precision}"
            )),
            Datatype::FP16 => Ok(()),
        }
    }
}

enum ParseFailure {
    Json(serde_json::Error),
    Invalid(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ModelConfig, String> {
        ModelConfig::parse(text).map_err(|e| match e {
            ParseFailure::Json(e) => e.to_string(),
            ParseFailure::Invalid(m) => m,
        })
    }

    #[test]
    fn empty_object_is_the_defaults() {
        assert_eq!(parse("{}").unwrap(), ModelConfig::default());
        assert_eq!(ModelConfig::default().batch_sizes, vec![1, 8, 32]);
    }

    #[test]
    fn fields_are_read_and_batch_sizes_sorted() {
        let c = parse(
            r#"{"backend": "cpu", "precision": "bf16", "batch_sizes": [16, 2, 2],
                "max_queue_delay_us": 50000, "instances": 3, "concurrent_batches": 2,
                "concurrent_kernels": 1, "fill_while_gpu_busy": true, "queue_capacity": 7,
                "timeout_ms": 100, "image": {"input": "x"}, "input_datatype": "FP16",
                "gpu_wait": "spin", "pinned_rows": 5, "dense_cublaslt": true}"#,
        )
        .unwrap();
        assert_eq!(c.backend, BackendChoice::Cpu);
        assert_eq!(c.precision, Some(Precision::Bf16));
        assert_eq!(c.batch_sizes, vec![2, 16]);
        assert_eq!(c.max_queue_delay, Duration::from_millis(50));
        assert_eq!(
            (
                c.instances,
                c.concurrent_batches,
                c.concurrent_kernels,
                c.queue_capacity
            ),
            (3, 2, 1, 7)
        );
        let all = parse(r#"{"instances": 4}"#).unwrap();
        assert_eq!(
            (all.concurrent_batches, all.concurrent_kernels),
            (4, 4),
            "by default every instance may run at once"
        );
        assert_eq!(c.timeout, Duration::from_millis(100));
        assert_eq!(c.image.as_ref().unwrap().input, "x");
        assert_eq!(c.input_datatype, Datatype::FP16);
        assert_eq!(c.gpu_wait, WaitMode::Spin);
        assert_eq!(c.pinned_rows, Some(5));
        assert_eq!(c.pinned_pool_rows(1 << 30), 5, "a set size is kept");
        assert!(c.dense_cublaslt);
        assert!(!ModelConfig::default().dense_cublaslt);
        assert!(c.fill_while_gpu_busy);
        assert!(!all.fill_while_gpu_busy);
    }

    #[test]
    fn the_default_row_pool_holds_two_batches_per_instance_within_its_bounds() {
        let c = parse(r#"{"batch_sizes": [1, 64], "instances": 4}"#).unwrap();
        assert_eq!(c.gpu_wait, WaitMode::Block);
        assert_eq!(c.pinned_pool_rows(301_056), 512);
        // The queue's capacity bounds it,
        let small_queue = parse(r#"{"batch_sizes": [64], "instances": 4, "queue_capacity": 100}"#);
        assert_eq!(small_queue.unwrap().pinned_pool_rows(1000), 100);
        // and so does the memory: 256 MiB of 4 MiB rows is 64 rows.
        assert_eq!(c.pinned_pool_rows(4 << 20), 64);
        let off = parse(r#"{"pinned_rows": 0}"#).unwrap();
        assert_eq!(off.pinned_pool_rows(1000), 0);
    }

    #[test]
    fn fp16_input_needs_the_gpu_at_fp16() {
        let fp16 = parse(r#"{"input_datatype": "FP16"}"#).unwrap();
        assert!(fp16.check_input_datatype(true, Precision::Fp16).is_ok());
        let cpu = fp16
            .check_input_datatype(false, Precision::Fp16)
            .unwrap_err();
        assert!(cpu.contains("needs the GPU backend"), "{cpu}");
        let bf16 = fp16
            .check_input_datatype(true, Precision::Bf16)
            .unwrap_err();
        assert!(
            bf16.contains("needs \"precision\": \"fp16\"") && bf16.contains("bf16"),
            "{bf16}"
        );
        let fp32 = parse(r#"{"input_datatype": "FP32"}"#).unwrap();
        assert_eq!(fp32, ModelConfig::default());
        assert!(fp32.check_input_datatype(false, Precision::Fp32).is_ok());
    }

    #[test]
    fn mistakes_are_named() {
        for (text, needle) in [
            (r#"{"batch_size": [1]}"#, "unknown field `batch_size`"),
            (r#"{"batch_sizes": []}"#, "at least one size"),
            (r#"{"batch_sizes": [0, 4]}"#, "at least 1"),
            (r#"{"batch_sizes": [100000]}"#, "at most"),
            (r#"{"precision": "fp8"}"#, "\"precision\""),
            (r#"{"instances": 0}"#, "\"instances\""),
            (
                r#"{"instances": 2, "concurrent_batches": 3}"#,
                "\"concurrent_batches\" must be between 1 and \"instances\" (2)",
            ),
            (r#"{"concurrent_batches": 0}"#, "\"concurrent_batches\""),
            (
                r#"{"instances": 3, "concurrent_kernels": 4}"#,
                "\"concurrent_kernels\" must be between 1 and \"instances\" (3)",
            ),
            (r#"{"concurrent_kernels": 0}"#, "\"concurrent_kernels\""),
            (
                r#"{"instances": 3, "concurrent_kernels": 2, "fill_while_gpu_busy": true}"#,
                "needs \"concurrent_kernels\": 1 (it is 2)",
            ),
            (
                r#"{"instances": 2, "fill_while_gpu_busy": true}"#,
                "needs \"concurrent_kernels\": 1 (it is 2)",
            ),
            (r#"{"queue_capacity": 0}"#, "\"queue_capacity\""),
            (r#"{"timeout_ms": 0}"#, "\"timeout_ms\""),
            (r#"{"backend": "tpu"}"#, "unknown variant `tpu`"),
            (r#"{"input_datatype": "FP64"}"#, "unknown variant `FP64`"),
            (r#"{"input_datatype": "fp16"}"#, "expected `FP32` or `FP16`"),
            (r#"{"gpu_wait": "yield"}"#, "expected `spin` or `block`"),
            (
                r#"{"pinned_rows": 2048}"#,
                "\"pinned_rows\" (2048) is more than the queue",
            ),
            ("[1, 2]", "line 1"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
