//! The CPU reference backend: the model compiled once per batch size and run
//! by `aotune_compiler::reference::run_planned`, exactly what `aotune run`
//! does (channels-last, the planned arena, f32 accumulation), so a served
//! result equals `aotune run`'s on the same input.

use super::backend::{Backend, BackendError, Executor, Fill, Signature, TensorSpec};
use aotune::runtime::InputStaging;
use aotune_compiler::ir::Graph;
use aotune_compiler::reference::{run_planned, RunOptions};
use aotune_compiler::{compile_file, CompileOptions, Compiled};
use aotune_spec::Precision;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// The model compiled at each batch size; shared by every executor.
pub struct CpuBackend {
    signature: Signature,
    precision: Precision,
    graphs: Arc<BTreeMap<usize, Compiled>>,
}

impl CpuBackend {
    /// Compiles `model` at each of `batch_sizes` (or once, at its exported
    /// batch, when its batch is fixed).
    pub fn load(
        model: &Path,
        precision: Precision,
        batch_sizes: &[usize],
    ) -> Result<CpuBackend, BackendError> {
        let compile = |batch: Option<usize>| {
            let options = CompileOptions {
                batch,
                precision,
                channels_last: true,
                ..Default::default()
            };
            compile_file(model, &options)
                .map_err(|e| BackendError::Compile(format!("compiling '{}': {e}", model.display())))
        };
        let probe = compile(None)?;
        let mut graphs = BTreeMap::new();
        let signature = if probe.batch.is_none() {
            // Batch fixed at export: one graph, each request the whole tensor.
            let signature = signature_of(&probe.graph, None)?;
            graphs.insert(1, probe);
            signature
        } else {
            for &batch in batch_sizes {
                graphs.insert(batch, compile(Some(batch))?);
            }
            let (&first, compiled) = graphs
                .iter()
                .next()
                .ok_or_else(|| BackendError::Unsupported("no batch size to compile".into()))?;
            let mut signature = signature_of(&compiled.graph, Some(first))?;
            for (&batch, compiled) in &graphs {
                let other = signature_of(&compiled.graph, Some(batch))?;
                if other.inputs != signature.inputs || other.outputs != signature.outputs {
                    return Err(BackendError::Unsupported(format!(
                        "the model's tensors at batch {batch} are not those at batch {first} \
                         with another first dimension"
                    )));
                }
            }
            signature.batch_sizes = graphs.keys().copied().collect();
            signature
        };
        Ok(CpuBackend {
            signature,
            precision,
            graphs: Arc::new(graphs),
        })
    }
}

/// The signature of `graph`; with `batch`, every input and output must have
/// that first dimension, which the signature then leaves out.
pub fn signature_of(graph: &Graph, batch: Option<usize>) -> Result<Signature, BackendError> {
    let tensor = |id, role: &str| {
        let value = graph.value(id);
        match batch {
            None => Ok(TensorSpec::fp32(&value.name, value.shape.clone())),
            Some(b) if value.shape.first() == Some(&b) => {
                Ok(TensorSpec::fp32(&value.name, value.shape[1..].to_vec()))
            }
            Some(b) => Err(BackendError::Unsupported(format!(
                "{role} '{}' {:?}: its first dimension is not the batch ({b}); \
                 only a leading batch dimension is served",
                value.name, value.shape
            ))),
        }
    };
    Ok(Signature {
        inputs: graph
            .inputs
            .iter()
            .map(|&id| tensor(id, "input"))
            .collect::<Result<_, _>>()?,
        outputs: graph
            .outputs
            .iter()
            .map(|&id| tensor(id, "output"))
            .collect::<Result<_, _>>()?,
        batched: batch.is_some(),
        batch_sizes: vec![batch.unwrap_or(1)],
    })
}

impl Backend for CpuBackend {
    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn describe(&self) -> String {
        format!("cpu-reference {}", self.precision)
    }

    fn executor(&self) -> Result<Box<dyn Executor>, BackendError> {
        Ok(Box::new(CpuExecutor {
            graphs: Arc::clone(&self.graphs),
            inputs: Vec::new(),
        }))
    }
}

struct CpuExecutor {
    graphs: Arc<BTreeMap<usize, Compiled>>,
    /// The batch's inputs, reused across batches.
    inputs: Vec<Vec<f32>>,
}

impl Executor for CpuExecutor {
    fn run(
        &mut self,
        batch: usize,
        rows: usize,
        fill: &mut Fill<'_>,
    ) -> Result<Vec<Vec<f32>>, BackendError> {
        let compiled = self.graphs.get(&batch).ok_or_else(|| {
            BackendError::Reference(format!("no graph compiled at batch {batch}"))
        })?;
        let count = compiled.graph.inputs.len();
        self.inputs.resize_with(count, Vec::new);
        for (i, (data, &id)) in self
            .inputs
            .iter_mut()
            .zip(&compiled.graph.inputs)
            .enumerate()
        {
            data.resize(compiled.graph.value(id).shape.iter().product(), 0.0);
            fill(i, InputStaging::F32(data));
        }
        let refs: Vec<&[f32]> = self.inputs.iter().map(Vec::as_slice).collect();
        let mut outputs = run_planned(
            &compiled.graph,
            &compiled.plan,
            &refs,
            &RunOptions::default(),
        )
        .map_err(|e| BackendError::Reference(e.to_string()))?;
        // Only the request rows go back (the whole tensor when unbatched).
        for output in &mut outputs {
            output.truncate(output.len() / batch.max(1) * rows);
        }
        Ok(outputs)
    }
}
