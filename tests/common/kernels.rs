//! Running generated kernels on the GPU without a build directory: a
//! planned graph, its `CudaModule` (from `generate_cuda`, or a launch table
//! made by hand, such as one launch per config of one node) and the module's
//! cubin become a `ModelSpec`, a weight blob and a kernel image that the
//! runtime's `Model::load` takes, so the kernels run through the runtime's
//! driver as a build's do (plain launches: no programmatic dependent launch).
//!
//! The runtime takes one f32 row-major input, while test graphs have any
//! number of inputs of any storage type and layout. So every graph input is
//! uploaded with the weights, encoded like a constant (in its storage type
//! and physical order, by the build's own `pack_weights`), and the spec's
//! input is a 4-byte placeholder after the plan's arena. The spec's output is
//! the graph's first output when that is f32 row-major ([`Loaded::output`]),
//! else another placeholder. A view of a graph input that launches nothing
//! reads the input's copy in the weights; every value a launch writes stays
//! at its planned arena offset.
//!
//! [`Loaded::run_traced`] is `Model::run_layers`: each launch's output is
//! poisoned with NaN first (unless the launch writes in place), the launch
//! runs and synchronizes, and its output is read back as logical row-major
//! f32. In a dry run (`super::gpu::Mode::DryRun`) [`load`] builds and checks
//! the spec, then expects the load to fail with `NoDriver`.

use super::gpu::{self, Mode};
use aotune::runtime::{decode_slot, LaunchMode, LoadOptions, Model};
use aotune_compiler::artifact::{Arg, Launch, ModelSpec, TensorSlot, WeightsInfo, FORMAT_VERSION};
use aotune_compiler::build::pack_weights;
use aotune_compiler::codegen::cuda::test_support::nvcc;
use aotune_compiler::codegen::cuda::CudaModule;
use aotune_compiler::ir::{DType, Graph, Layout, NodeId, ValueId, ValueKind};
use aotune_compiler::plan::MemoryPlan;
use std::collections::HashSet;
use std::sync::Arc;

/// Compiles `source` to an sm_90a cubin with nvcc.
pub fn compile(source: &str, label: &str) -> Result<Vec<u8>, String> {
    let nvcc = nvcc::find()?;
    nvcc::compile_cubin(&nvcc, source, label).map(|(cubin, _)| cubin)
}

/// A module loaded with its graph inputs, ready to run.
pub struct Loaded {
    model: Model,
    /// The node of each launch.
    nodes: Vec<NodeId>,
    /// The spec's output is the graph's first output.
    output_is_the_graphs: bool,
}

/// Loads `cubin` (holding every kernel `module` launches) for `graph` and
/// its `plan`, with `feeds` (logical row-major f32, one per graph input) as
/// the graph inputs. `None` in a dry run, after the load failed with
/// `NoDriver` as it must. `label` names the model in errors.
pub fn load(
    label: &str,
    graph: &Graph,
    plan: &MemoryPlan,
    module: &CudaModule,
    cubin: &[u8],
    feeds: &[&[f32]],
    mode: Mode,
) -> Result<Option<Loaded>, String> {
    let (spec, weights) = spec_and_weights(label, graph, plan, module, feeds)?;
    let options = LoadOptions {
        launch: LaunchMode::Plain,
        ..LoadOptions::default()
    };
    let output_is_the_graphs = spec.outputs[0].name != PLACEHOLDER_OUTPUT;
    let model = gpu::loaded(Model::load(&spec, cubin, &weights, &options), mode, label)?;
    Ok(model.map(|model| Loaded {
        model,
        nodes: module.launches.iter().map(|l| l.node).collect(),
        output_is_the_graphs,
    }))
}

impl Loaded {
    /// Runs the launches one by one (each output poisoned first, unless the
    /// launch writes in place) and hands `each(launch index, node, output as
    /// logical row-major f32)` every launch's output as it completes.
    pub fn run_traced(
        &mut self,
        mut each: impl FnMut(usize, NodeId, Vec<f32>),
    ) -> Result<(), String> {
        let nodes = &self.nodes;
        self.model
            .run_layers(&[0.0], |i, slot, bytes| {
                each(i, nodes[i], decode_slot(slot, bytes));
                true
            })
            .map_err(|e| e.to_string())
    }

    /// Runs the forward pass (the runtime's `infer`) and returns the graph's
    /// first output.
    pub fn output(&mut self) -> Result<Vec<f32>, String> {
        if !self.output_is_the_graphs {
            return Err("the graph's first output is not f32 row-major".into());
        }
        let mut out = vec![0.0; self.model.spec().outputs[0].elements()];
        self.model
            .infer(&[0.0], &mut out)
            .map_err(|e| e.to_string())?;
        Ok(out)
    }

    /// Microseconds of the whole forward pass (the mean over `runs`
    /// launches of its CUDA graph, after two warm-up runs) and of each launch
    /// (the median of `runs`, each kernel in a graph of its own:
    /// `Model::time_layers`).
    pub fn time(&mut self, runs: usize) -> Result<(f64, Vec<f64>), String> {
        let forward = self.model.time_graph(2, runs).map_err(|e| e.to_string())?;
        let mean = forward.iter().map(|&ms| f64::from(ms)).sum::<f64>() / forward.len() as f64;
        let each = self.model.time_layers(2, runs).map_err(|e| e.to_string())?;
        Ok((
            mean * 1e3,
            each.into_iter().map(|ms| f64::from(ms) * 1e3).collect(),
        ))
    }
}

const PLACEHOLDER_INPUT: &str = "(placeholder input)";
const PLACEHOLDER_OUTPUT: &str = "(placeholder output)";

/// The spec and weight blob [`load`] loads (see the module documentation).
pub fn spec_and_weights(
    label: &str,
    graph: &Graph,
    plan: &MemoryPlan,
    module: &CudaModule,
    feeds: &[&[f32]],
) -> Result<(ModelSpec, Vec<u8>), String> {
    if feeds.len() != graph.inputs.len() {
        return Err(format!(
            "{label}: {} feeds for {} graph inputs",
            feeds.len(),
            graph.inputs.len()
        ));
    }
    // The graph inputs become constants holding the feeds, so that the
    // build's weight packing places and encodes them.
    let mut with_feeds = graph.clone();
    for (&id, feed) in graph.inputs.iter().zip(feeds) {
        let value = with_feeds.value_mut(id);
        if feed.len() != value.numel() {
            return Err(format!(
                "{label}: input %{} has {} elements, its feed {}",
                id.0,
                value.numel(),
                feed.len()
            ));
        }
        let physical = to_physical(feed, &value.shape, value.layout);
        value.kind = ValueKind::Constant(Arc::new(physical));
    }
    let written: HashSet<ValueId> = module
        .launches
        .iter()
        .map(|l| graph.node(l.node).output)
        .collect();
    // Where a value's bytes are: its own, or (a view that launches nothing)
    // those of the value it aliases.
    let root = |v: ValueId| match plan.buffer(v).and_then(|b| b.alias_of) {
        Some(r) if !written.contains(&v) => r,
        _ => v,
    };
    let blob = pack_weights(
        &with_feeds,
        module
            .launches
            .iter()
            .flat_map(|l| l.args.iter().map(|&v| root(v))),
    );
    let slot = |v: ValueId| -> Result<TensorSlot, String> {
        let value = graph.value(v);
        let b = plan
            .buffer(v)
            .ok_or_else(|| format!("{label}: %{} is not planned", v.0))?;
        Ok(TensorSlot {
            name: value.name.clone().into(),
            shape: value.shape.clone().into(),
            dtype: value.dtype,
            layout: value.layout,
            offset: b.offset as u64,
            bytes: b.bytes as u64,
        })
    };
    let mut values = Vec::new();
    let mut launches = Vec::new();
    for l in &module.launches {
        let node = graph.node(l.node);
        let args = l
            .args
            .iter()
            .map(|&v| match blob.offsets.get(&root(v)) {
                Some(&offset) => Ok(Arg::Weights(offset)),
                None => slot(v).map(|s| Arg::Arena(s.offset)),
            })
            .collect::<Result<Vec<_>, String>>()?;
        values.push(slot(node.output)?);
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
    let tail = (plan.arena_bytes as u64).next_multiple_of(256);
    let placeholder = |name: &'static str, offset: u64| TensorSlot {
        name: name.into(),
        shape: vec![1].into(),
        dtype: DType::F32,
        layout: Layout::RowMajor,
        offset,
        bytes: 4,
    };
    let output = match graph.outputs.first() {
        Some(&o)
            if graph.value(o).dtype == DType::F32
                && graph.value(o).layout == Layout::RowMajor
                && plan.buffer(o).is_some() =>
        {
            slot(o)?
        }
        _ => placeholder(PLACEHOLDER_OUTPUT, tail + 256),
    };
    let batch = graph
        .inputs
        .first()
        .and_then(|&i| graph.value(i).shape.first().copied())
        .unwrap_or(1);
    let spec = ModelSpec {
        format_version: FORMAT_VERSION,
        name: label.to_string().into(),
        build_key: String::new().into(),
        batch,
        precision: graph.precision,
        arena_bytes: tail + 512,
        weights: WeightsInfo {
            bytes: blob.bytes.len() as u64,
            fnv1a64: aotune_spec::hash::fnv1a64(&blob.bytes),
            file_name: "weights.bin".into(),
        },
        kernels: module
            .kernels
            .iter()
            .map(|k| k.clone().into())
            .collect::<Vec<_>>()
            .into(),
        launches: launches.into(),
        inputs: vec![placeholder(PLACEHOLDER_INPUT, tail)].into(),
        outputs: vec![output].into(),
        values: values.into(),
        tuned_on: Vec::new().into(),
    };
    Ok((spec, blob.bytes))
}

/// Logical row-major `values` of a tensor of `shape` in `layout`'s order.
pub fn to_physical(values: &[f32], shape: &[usize], layout: Layout) -> Vec<f32> {
    if shape.len() != 4 || layout == Layout::RowMajor {
        return values.to_vec();
    }
    let strides = layout.strides(shape);
    let mut out = vec![0.0; values.len()];
    for (i, &x) in values.iter().enumerate() {
        let (mut rest, mut offset) = (i, 0);
        for axis in (0..4).rev() {
            offset += (rest % shape[axis]) * strides[axis];
            rest /= shape[axis];
        }
        out[offset] = x;
    }
    out
}
