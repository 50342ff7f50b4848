//! The compiler's stages, called in order from one place:
//! import → passes → memory plan → tasks.
//!
//! The CLI, the build step and the tuner all call [`compile_file`] or
//! [`compile_bytes`], so what the tuner measures is what the build emits.

use crate::ir::{DType, Graph, Precision};
use crate::onnx::{import_bytes, ImportError, ImportOptions};
use crate::passes::{optimize, PassError, PassOptions, PassReport};
use crate::plan::{plan_memory, MemoryPlan, PlanError};
use crate::schedule::{extract_tasks, Task};
use std::path::Path;

/// What to compile for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileOptions {
    /// Value of a symbolic batch dimension (`None`: 1, or the exported batch).
    pub batch: Option<usize>,
    pub precision: Precision,
    /// Lay activations out NHWC and pre-pack conv weights OHWI.
    pub channels_last: bool,
    /// The graph inputs' dtype: f32, or the 16-bit storage type of
    /// `precision` (f16 at fp16, bf16 at bf16), so the caller passes
    /// half-size data; anything else is [`CompileError::InputDtype`].
    pub input_dtype: DType,
    /// Fuse a LayerNorm over channels into the depthwise conv before it
    /// (`passes::fuse_conv_layer_norm`; ConvNeXt). Off by default: measured
    /// slower at its kernel's default config (H100, 2026-12-06), to be
    /// tuned and timed against the unfused graph.
    pub fuse_depthwise_norm: bool,
    /// Fold a LayerNorm over the last axis into the Dense layers that read
    /// it (`passes::fuse_dense_layer_norm`; ViT's block norms), at fp16 and
    /// bf16. Off by default: correct, but measured slower than the
    /// unfused graph on ViT-B/16 at b1 and b64 (H100, 2026-12-06;
    /// docs/design/layernorm-into-dense.md).
    pub fuse_dense_norm: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            batch: None,
            precision: Precision::Fp32,
            channels_last: true,
            input_dtype: DType::F32,
            fuse_depthwise_norm: false,
            fuse_dense_norm: false,
        }
    }
}

/// Everything the compiler derived from one model.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The imported graph before any pass (the reference for checks).
    pub imported: Graph,
    pub opset: i64,
    /// The batch size a symbolic batch was resolved to, if the model had one.
    pub batch: Option<usize>,
    /// The optimized graph.
    pub graph: Graph,
    pub report: PassReport,
    pub plan: MemoryPlan,
    pub tasks: Vec<Task>,
}

/// Why compilation failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Pass(#[from] PassError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(
        "input dtype {input_dtype} needs a precision that stores activations as \
         {input_dtype} (fp16 for f16 inputs, bf16 for bf16); this build is {precision}"
    )]
    InputDtype {
        input_dtype: DType,
        precision: Precision,
    },
}

impl CompileOptions {
    /// `Err(CompileError::InputDtype)` unless the inputs are f32 or the
    /// precision's 16-bit storage type.
    pub fn check_input_dtype(&self) -> Result<(), CompileError> {
        let storage = self.precision.storage();
        if self.input_dtype == DType::F32 || (storage != DType::F32 && self.input_dtype == storage)
        {
            Ok(())
        } else {
            Err(CompileError::InputDtype {
                input_dtype: self.input_dtype,
                precision: self.precision,
            })
        }
    }
}

pub fn compile_file(path: &Path, options: &CompileOptions) -> Result<Compiled, CompileError> {
    let bytes = crate::onnx::read_model_file(path)?;
    compile_bytes(&bytes, &path.display().to_string(), options)
}

pub fn compile_bytes(
    bytes: &[u8],
    source_name: &str,
    options: &CompileOptions,
) -> Result<Compiled, CompileError> {
    options.check_input_dtype()?;
    let imported = import_bytes(
        bytes,
        source_name,
        &ImportOptions {
            batch: options.batch,
            constant_inputs: Vec::new(),
        },
    )?;
    let mut graph = imported.graph.clone();
    let report = optimize(
        &mut graph,
        &PassOptions {
            precision: options.precision,
            channels_last: options.channels_last,
            input_dtype: options.input_dtype,
            fuse_depthwise_norm: options.fuse_depthwise_norm,
            fuse_dense_norm: options.fuse_dense_norm,
        },
    )?;
    let plan = plan_memory(&graph)?;
    let tasks = extract_tasks(&graph);
    Ok(Compiled {
        imported: imported.graph,
        opset: imported.opset,
        batch: imported.batch,
        graph,
        report,
        plan,
        tasks,
    })
}
