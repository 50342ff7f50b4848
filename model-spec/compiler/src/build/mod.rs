//! The `Build` API that build scripts, the CLI and the tests call: one
//! model, batch sizes and a precision in; `kernels.cu`, `kernels.fatbin`,
//! `weights.bin`, `manifest.json`, `executor.rs`, `plan.txt` and `tasks.txt`
//! out, in `<out_dir>/aotune/<name>[_b<batch>]/`.
//!
//! ```no_run
//! // in build.rs's main():
//! aotune_compiler::Build::new("models/resnet50.onnx")
//!     .tuning("models/resnet50.best.json")
//!     .precision(aotune_compiler::ir::Precision::Fp16)
//!     .compile()
//!     .unwrap_or_else(|e| panic!("{e}"));
//! ```

mod executor;
mod nvcc;
mod weights;

pub use executor::render_executor;
pub use nvcc::{install_hint, Nvcc};
pub use weights::{pack_weights, WeightBlob, WEIGHT_ALIGNMENT};

use crate::artifact::{Arg, Launch, ModelSpec, TensorSlot, WeightsInfo, FORMAT_VERSION};
use crate::codegen::cuda::{
    generate_cuda, library_matmul, CodegenError, ConfigOverrides, CudaModule,
};
use crate::ir::{DType, Graph, Precision, ValueId};
use crate::plan::MemoryPlan;
use crate::schedule::{render_tasks, BestLog, TuningLogError};
use crate::zoo::fnv1a64;
use crate::{compile_bytes, CompileError, CompileOptions, Compiled};
use std::path::{Path, PathBuf};

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Compile(#[from] CompileError),
    #[error(transparent)]
    TuningLog(#[from] TuningLogError),
    #[error("code generation: {0}")]
    Codegen(#[from] CodegenError),
    #[error("nvcc not found (looked at: {looked}); {hint}")]
    NoNvcc { looked: String, hint: String },
    #[error("nvcc failed: {command}\n{message}")]
    Nvcc { command: String, message: String },
    #[error("cannot {action} '{path}': {source}")]
    Io {
        action: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("launch for node '{node}' refers to value %{value} which is neither in the arena nor a weight")]
    Unplaced { node: String, value: u32 },
}

/// Where the weights live at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightsMode {
    /// `include_bytes!` into the binary.
    Embedded,
    /// A `weights.bin` read beside the binary at load, checked by hash.
    File,
}

/// A build request (builder style).
#[derive(Debug, Clone)]
pub struct Build {
    model: PathBuf,
    tuning: Option<PathBuf>,
    batches: Vec<Option<usize>>,
    precision: Precision,
    input_dtype: DType,
    fuse_depthwise_norm: bool,
    fuse_dense_norm: bool,
    dense_cublaslt: bool,
    out_dir: Option<PathBuf>,
    name: Option<String>,
    weights: WeightsMode,
    skip_nvcc: bool,
}

/// One built (batch, precision) of a model.
#[derive(Debug, Clone)]
pub struct Built {
    pub dir: PathBuf,
    pub spec: ModelSpec,
    pub compiled: Compiled,
    /// Tuning-log decisions and codegen warnings, one line each (a build
    /// script shows them as cargo warnings).
    pub notes: Vec<String>,
    /// What is expected and needs no action, one line each: the log's
    /// records for other batch sizes, precisions or models.
    pub info: Vec<String>,
    /// ptxas's register and spill report.
    pub ptxas_log: String,
}

/// Module-name-safe stem of a model path.
pub fn model_name(path: &Path) -> String {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("model");
    let mut name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, 'm');
    }
    name
}

impl Build {
    pub fn new(model: impl Into<PathBuf>) -> Self {
        Build {
            model: model.into(),
            tuning: None,
            batches: vec![None],
            precision: Precision::Fp16,
            input_dtype: DType::F32,
            fuse_depthwise_norm: false,
            fuse_dense_norm: false,
            dense_cublaslt: false,
            out_dir: None,
            name: None,
            weights: WeightsMode::Embedded,
            skip_nvcc: false,
        }
    }

    /// The committed tuning log (`*.best.json`); a missing file means defaults.
    pub fn tuning(mut self, path: impl Into<PathBuf>) -> Self {
        self.tuning = Some(path.into());
        self
    }

    pub fn batch(mut self, batch: usize) -> Self {
        self.batches = vec![Some(batch)];
        self
    }

    /// Several batch sizes: one plan and one kernel set each.
    pub fn batches(mut self, batches: &[usize]) -> Self {
        self.batches = batches.iter().map(|&b| Some(b)).collect();
        self
    }

    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// The dtype of the model's input (default f32): `DType::F16` at fp16
    /// (or `BF16` at bf16) makes `spec.inputs[0]` that type, so callers
    /// copy half the bytes and the stem's conversion only changes layout.
    /// Another combination fails the build with
    /// [`CompileError::InputDtype`].
    pub fn input_dtype(mut self, dtype: DType) -> Self {
        self.input_dtype = dtype;
        self
    }

    /// Fuse each LayerNorm over channels into the depthwise conv before it
    /// ([`CompileOptions::fuse_depthwise_norm`]; default off).
    pub fn fuse_depthwise_norm(mut self, on: bool) -> Self {
        self.fuse_depthwise_norm = on;
        self
    }

    /// Fold each LayerNorm over the last axis into the Dense layers that
    /// read it ([`CompileOptions::fuse_dense_norm`]; default off).
    pub fn fuse_dense_norm(mut self, on: bool) -> Self {
        self.fuse_dense_norm = on;
        self
    }

    /// Run every Dense layer cuBLASLt can run through it
    /// (`codegen::cuda::library_matmul`; fp16 and bf16), over the tuning
    /// log's configs for them. The built model then needs libcublasLt at
    /// run time. Default off: the tuning log decides per task.
    pub fn dense_cublaslt(mut self, on: bool) -> Self {
        self.dense_cublaslt = on;
        self
    }

    /// Defaults to `$OUT_DIR` (in a build script).
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Module name (defaults to the model file's stem).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    pub fn weights(mut self, mode: WeightsMode) -> Self {
        self.weights = mode;
        self
    }

    /// Render everything but do not call nvcc (for `generated/` and tests without CUDA).
    pub fn skip_nvcc(mut self, skip: bool) -> Self {
        self.skip_nvcc = skip;
        self
    }

    fn in_build_script() -> bool {
        std::env::var_os("CARGO_MANIFEST_DIR").is_some()
            && std::env::var_os("OUT_DIR").is_some()
            && std::env::var_os("TARGET").is_some()
    }

    /// Runs the whole build, once per batch size.
    pub fn compile(&self) -> Result<Vec<Built>, BuildError> {
        let script = Self::in_build_script();
        if script {
            println!("cargo:rerun-if-changed={}", self.model.display());
            if let Some(t) = &self.tuning {
                println!("cargo:rerun-if-changed={}", t.display());
            }
            println!("cargo:rerun-if-env-changed=NVCC");
            println!("cargo:rerun-if-env-changed=CUDA_HOME");
        }
        let out_root = match (&self.out_dir, std::env::var_os("OUT_DIR")) {
            (Some(d), _) => d.clone(),
            (None, Some(d)) => PathBuf::from(d),
            (None, None) => PathBuf::from("target/aotune"),
        };
        // External data files beside the model are inlined, so the build
        // key below covers the weights wherever they are stored.
        let model_bytes = crate::onnx::read_model_file(&self.model).map_err(CompileError::from)?;
        let tuning = match &self.tuning {
            Some(p) if p.is_file() => {
                Some((BestLog::read(p)?, std::fs::read(p).unwrap_or_default()))
            }
            _ => None,
        };
        let nvcc = if self.skip_nvcc {
            None
        } else {
            Some(Nvcc::find()?)
        };
        let base = self.name.clone().unwrap_or_else(|| model_name(&self.model));
        let mut built = Vec::new();
        for &batch in &self.batches {
            let name = match (self.batches.len(), batch) {
                (1, _) | (_, None) => base.clone(),
                (_, Some(b)) => format!("{base}_b{b}"),
            };
            let dir = out_root.join("aotune").join(&name);
            let one = self.build_one(
                &model_bytes,
                batch,
                &name,
                &dir,
                tuning.as_ref(),
                nvcc.as_ref(),
            )?;
            if script {
                // Tuning-log decisions (ignored records, untuned tasks) reach the user.
                for note in &one.notes {
                    println!("cargo:warning=aotune {name}: {note}");
                }
            }
            built.push(one);
        }
        if script {
            let kept: Vec<PathBuf> = built.iter().map(|b| b.dir.clone()).collect();
            remove_stale_builds(&out_root.join("aotune"), &base, &kept);
        }
        Ok(built)
    }

    fn build_one(
        &self,
        model_bytes: &[u8],
        batch: Option<usize>,
        name: &str,
        dir: &Path,
        tuning: Option<&(BestLog, Vec<u8>)>,
        nvcc: Option<&Nvcc>,
    ) -> Result<Built, BuildError> {
        let options = CompileOptions {
            batch,
            precision: self.precision,
            channels_last: true,
            input_dtype: self.input_dtype,
            fuse_depthwise_norm: self.fuse_depthwise_norm,
            fuse_dense_norm: self.fuse_dense_norm,
        };
        let compiled = compile_bytes(model_bytes, &self.model.display().to_string(), &options)?;
        let mut notes = Vec::new();
        let mut info = Vec::new();
        let mut tuned_on = Vec::new();
        let overrides = match tuning {
            Some((log, _)) => {
                let applied = log.apply(&compiled.tasks, &template_versions());
                notes.extend(applied.notes);
                info.extend(applied.other_tasks);
                tuned_on = applied
                    .targets
                    .iter()
                    .map(|t| format!("{}|{}", t.gpu, t.sm))
                    .collect();
                ConfigOverrides {
                    by_task: applied.overrides.into_iter().collect(),
                }
            }
            None => ConfigOverrides::default(),
        };
        let mut overrides = overrides;
        if self.dense_cublaslt {
            let set = library_matmul::force_all(&compiled.graph, &mut overrides);
            info.push(format!(
                "--dense-cublaslt: {set} Dense task(s) run through cuBLASLt"
            ));
        }
        let module = generate_cuda(&compiled.graph, &compiled.plan, &overrides)?;
        notes.extend(module.warnings.iter().cloned());
        let weights = pack_weights(
            &compiled.graph,
            module.launches.iter().flat_map(|l| l.args.iter().copied()),
        );
        let mut key_parts = vec![
            format!("{:016x}", fnv1a64(model_bytes)),
            format!("batch={batch:?}"),
            format!("precision={}", self.precision),
            format!("format={FORMAT_VERSION}"),
            format!("aotune-compiler={}", env!("CARGO_PKG_VERSION")),
            format!("{:016x}", fnv1a64(module.source.as_bytes())),
        ];
        if self.input_dtype != DType::F32 {
            // Only when set, so f32-input builds keep their keys.
            key_parts.push(format!("input_dtype={}", self.input_dtype));
        }
        if self.fuse_depthwise_norm {
            key_parts.push("fuse_depthwise_norm".into());
        }
        if self.fuse_dense_norm {
            key_parts.push("fuse_dense_norm".into());
        }
        if self.dense_cublaslt {
            key_parts.push("dense_cublaslt".into());
        }
        if let Some((_, bytes)) = tuning {
            key_parts.push(format!("tuning={:016x}", fnv1a64(bytes)));
        }
        let build_key = format!("{:016x}", fnv1a64(key_parts.join("|").as_bytes()));
        let (mut spec, docs) = make_spec(
            name,
            &build_key,
            &compiled,
            &module,
            &weights,
            self.precision,
        )?;
        spec.tuned_on = tuned_on
            .into_iter()
            .map(Into::into)
            .collect::<Vec<_>>()
            .into();

        let write = |file: &str, bytes: &[u8]| -> Result<(), BuildError> {
            let path = dir.join(file);
            std::fs::write(&path, bytes).map_err(|source| BuildError::Io {
                action: "write",
                path: path.display().to_string(),
                source,
            })
        };
        std::fs::create_dir_all(dir).map_err(|source| BuildError::Io {
            action: "create directory",
            path: dir.display().to_string(),
            source,
        })?;
        write("kernels.cu", module.source.as_bytes())?;
        write(&spec.weights.file_name, &weights.bytes)?;
        let manifest = serde_json::to_string_pretty(&spec).unwrap_or_default();
        write("manifest.json", manifest.as_bytes())?;
        let header = format!(
            "// @generated by aotune-compiler {} from {} (batch {}, {}). Do not edit.\n// build key {build_key}\n\n",
            env!("CARGO_PKG_VERSION"),
            self.model.file_name().map(|f| f.to_string_lossy()).unwrap_or_default(),
            spec.batch,
            self.precision
        );
        let executor =
            render_executor(&spec, &docs, &header, self.weights == WeightsMode::Embedded);
        write("executor.rs", executor.as_bytes())?;
        write(
            "plan.txt",
            crate::plan::render_plan(&compiled.graph, &compiled.plan).as_bytes(),
        )?;
        write("tasks.txt", render_tasks(&compiled.tasks).as_bytes())?;
        let fatbin = dir.join("kernels.fatbin");
        let previous = std::fs::read_to_string(dir.join("built.key")).unwrap_or_default();
        let ptxas_log = match nvcc {
            // Same inputs, same kernels.cu: the fatbin from last time is current.
            Some(_) if previous == build_key && fatbin.is_file() => {
                std::fs::read_to_string(dir.join("ptxas.log")).unwrap_or_default()
            }
            Some(nvcc) => {
                let log =
                    nvcc.compile_fatbin(&dir.join("kernels.cu"), &dir.join("kernels.fatbin"))?;
                write("ptxas.log", log.as_bytes())?;
                write("built.key", build_key.as_bytes())?;
                log
            }
            None => String::new(),
        };
        Ok(Built {
            dir: dir.to_path_buf(),
            spec,
            compiled,
            notes,
            info,
            ptxas_log,
        })
    }
}

/// Template name/version the code generator uses per op kind; a tuning
/// record made for another version is not applied.
/// Removes builds of model `base` under `root` (`base/` or `base_b<N>/`)
/// that this run did not write, so `include_model!` never finds an executor
/// a previous `build.rs` (e.g. with other batch sizes) left behind.
fn remove_stale_builds(root: &Path, base: &str, kept: &[PathBuf]) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(dir) = entry.file_name().into_string() else {
            continue;
        };
        let ours = dir == base
            || dir
                .strip_prefix(base)
                .and_then(|s| s.strip_prefix("_b"))
                .is_some_and(|b| !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()));
        if ours && !kept.contains(&entry.path()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

pub fn template_versions() -> std::collections::BTreeMap<String, String> {
    [
        // 2: staged epilogue, swizzled tiles, tf32 on the tensor cores.
        ("FusedConv", "conv/2"),
        ("Dense", "dense/2"),
        ("MaxPool", "pool/1"),
        ("AveragePool", "pool/1"),
        ("Attention", "attention/1"),
        // The row kernel (rows.cu) of the transformers' norms: its grid.
        ("LayerNormalization", "rows/1"),
    ]
    .into_iter()
    .map(|(op, t)| (op.to_string(), t.to_string()))
    .collect()
}

fn slot(graph: &Graph, plan: &MemoryPlan, id: ValueId) -> Option<TensorSlot> {
    let v = graph.value(id);
    let b = plan.buffer(id)?;
    Some(TensorSlot {
        name: v.name.clone().into(),
        shape: v.shape.clone().into(),
        dtype: v.dtype,
        layout: v.layout,
        offset: b.offset as u64,
        bytes: b.bytes as u64,
    })
}

fn describe(graph: &Graph, plan: &MemoryPlan, id: ValueId) -> String {
    let v = graph.value(id);
    let dims: Vec<String> = v.shape.iter().map(|d| d.to_string()).collect();
    let place = match (plan.buffer(id), v.is_constant()) {
        (Some(b), _) => format!("arena @{:#x} life [{}, {}]", b.offset, b.first, b.last),
        (None, true) => "weights".to_string(),
        (None, false) => "?".to_string(),
    };
    format!(
        "%{} {} {}[{}] {} {place}",
        id.0,
        v.name,
        v.dtype,
        dims.join(","),
        v.layout.name()
    )
}

/// Resolves value ids to arena and weight offsets.
fn make_spec(
    name: &str,
    build_key: &str,
    compiled: &Compiled,
    module: &CudaModule,
    weights: &WeightBlob,
    precision: Precision,
) -> Result<(ModelSpec, Vec<String>), BuildError> {
    let (graph, plan) = (&compiled.graph, &compiled.plan);
    let mut values: Vec<TensorSlot> = Vec::new();
    let mut launches = Vec::new();
    let mut docs = Vec::new();
    for l in &module.launches {
        let node = graph.node(l.node);
        let args = l
            .args
            .iter()
            .map(|&v| {
                if let Some(&off) = weights.offsets.get(&v) {
                    Ok(Arg::Weights(off))
                } else if let Some(b) = plan.buffer(v) {
                    Ok(Arg::Arena(b.offset as u64))
                } else {
                    Err(BuildError::Unplaced {
                        node: node.name.clone(),
                        value: v.0,
                    })
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out_slot = slot(graph, plan, node.output).ok_or(BuildError::Unplaced {
            node: node.name.clone(),
            value: node.output.0,
        })?;
        values.push(out_slot);
        let operands: Vec<String> = l.args.iter().map(|&v| describe(graph, plan, v)).collect();
        docs.push(format!(
            "{} = {}({}) {}\n{}",
            node.name,
            node.op.kind(),
            node.inputs
                .iter()
                .map(|v| format!("%{}", v.0))
                .collect::<Vec<_>>()
                .join(", "),
            node.op.attrs(),
            operands.join("\n")
        ));
        launches.push(Launch {
            node: node.name.clone().into(),
            kernel: l.kernel,
            grid: l.grid,
            block: l.block,
            smem_bytes: l.smem_bytes,
            args: args.into(),
            output: (values.len() - 1) as u32,
            matmul: l.matmul,
        });
    }
    let io = |ids: &[ValueId]| -> Result<Vec<TensorSlot>, BuildError> {
        ids.iter()
            .map(|&v| {
                slot(graph, plan, v).ok_or(BuildError::Unplaced {
                    node: "(graph input/output)".into(),
                    value: v.0,
                })
            })
            .collect()
    };
    let inputs = io(&graph.inputs)?;
    let batch = inputs
        .first()
        .and_then(|t| t.shape.first().copied())
        .unwrap_or(1);
    let spec = ModelSpec {
        format_version: FORMAT_VERSION,
        name: name.to_string().into(),
        build_key: build_key.to_string().into(),
        batch,
        precision,
        arena_bytes: plan.arena_bytes as u64,
        weights: WeightsInfo {
            bytes: weights.bytes.len() as u64,
            fnv1a64: fnv1a64(&weights.bytes),
            file_name: format!("{name}.weights.bin").into(),
        },
        kernels: module
            .kernels
            .iter()
            .map(|k| k.clone().into())
            .collect::<Vec<_>>()
            .into(),
        launches: launches.into(),
        inputs: inputs.into(),
        outputs: io(&graph.outputs)?.into(),
        values: values.into(),
        tuned_on: Vec::new().into(),
    };
    Ok((spec, docs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_f16_input_build_declares_an_f16_input_slot_and_its_own_key() {
        let dir = std::env::temp_dir().join(format!("aotune-f16-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let onnx = dir.join("resnet18.onnx");
        crate::zoo::write_resnet(crate::zoo::ResNetDepth::R18, 0, &onnx).unwrap();
        let build = |precision: Precision, input: DType| {
            Build::new(&onnx)
                .batch(2)
                .precision(precision)
                .input_dtype(input)
                .name(format!("r18_{precision}_{input}"))
                .out_dir(&dir)
                .skip_nvcc(true)
                .compile()
                .map(|mut b| b.remove(0))
        };
        let f32_in = build(Precision::Fp16, DType::F32).unwrap();
        let f16_in = build(Precision::Fp16, DType::F16).unwrap();
        let (a, b) = (&f32_in.spec.inputs[0], &f16_in.spec.inputs[0]);
        assert_eq!((a.dtype, a.bytes), (DType::F32, 4 * 2 * 3 * 224 * 224));
        assert_eq!((b.dtype, b.bytes), (DType::F16, 2 * 2 * 3 * 224 * 224));
        assert_eq!((a.shape.clone(), a.layout), (b.shape.clone(), b.layout));
        assert_eq!(f16_in.spec.outputs[0].dtype, DType::F32);
        assert_ne!(f32_in.spec.build_key, f16_in.spec.build_key);
        // The stem's conversion kernel reads half.
        let source = std::fs::read_to_string(f16_in.dir.join("kernels.cu")).unwrap();
        assert!(
            source.contains("typedef __half TIn;"),
            "no f16-reading kernel"
        );
        // A 16-bit input at another precision is a typed error.
        for (precision, input) in [
            (Precision::Fp32, DType::F16),
            (Precision::Fp16, DType::BF16),
        ] {
            let e = build(precision, input).unwrap_err();
            assert!(
                matches!(
                    e,
                    BuildError::Compile(CompileError::InputDtype { input_dtype, .. })
                        if input_dtype == input
                ),
                "{e}"
            );
            assert!(
                e.to_string()
                    .contains(&format!("this build is {precision}")),
                "{e}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn stale_builds_of_the_model_are_removed_and_nothing_else() {
        let root = std::env::temp_dir().join(format!("aotune-stale-{}", std::process::id()));
        for d in [
            "resnet50",
            "resnet50_b8",
            "resnet50_b1",
            "resnet50_bx",
            "resnet501",
            "other",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        remove_stale_builds(&root, "resnet50", &[root.join("resnet50_b1")]);
        let mut left: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["other", "resnet501", "resnet50_b1", "resnet50_bx"]);
        let _ = std::fs::remove_dir_all(&root);
    }
}
