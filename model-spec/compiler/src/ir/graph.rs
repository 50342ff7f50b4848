//! The graph: values (inputs, constants, activations) and nodes in
//! topological order, plus the [`Patch`] type every pass rewrites through.

use super::op::Op;
use super::types::{numel, DType, Layout, Precision};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Index of a value in [`Graph::values`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

/// Index of a node in [`Graph::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Where a value comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueKind {
    /// Fed by the caller at run time.
    Input,
    /// Known at compile time. `data` holds f32 elements in the value's
    /// *physical* order (its layout), already rounded to its dtype.
    Constant(Arc<Vec<f32>>),
    /// Produced by exactly one node.
    Activation,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    /// Name for humans (ONNX-derived or pass-made); never used as a key.
    pub name: String,
    /// Logical shape (ONNX order), independent of `layout`.
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub layout: Layout,
    pub kind: ValueKind,
}

impl Value {
    pub fn activation(name: impl Into<String>, shape: Vec<usize>) -> Self {
        Value {
            name: name.into(),
            shape,
            dtype: DType::F32,
            layout: Layout::RowMajor,
            kind: ValueKind::Activation,
        }
    }

    pub fn constant(name: impl Into<String>, shape: Vec<usize>, data: Vec<f32>) -> Self {
        Value {
            name: name.into(),
            shape,
            dtype: DType::F32,
            layout: Layout::RowMajor,
            kind: ValueKind::Constant(Arc::new(data)),
        }
    }

    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// Bytes the value occupies in its storage type.
    pub fn bytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }

    pub fn is_constant(&self) -> bool {
        matches!(self.kind, ValueKind::Constant(_))
    }

    pub fn constant_data(&self) -> Option<&Arc<Vec<f32>>> {
        match &self.kind {
            ValueKind::Constant(data) => Some(data),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Name for humans and error messages (onnx-ir's renamed node, or pass-made).
    pub name: String,
    pub op: Op,
    pub inputs: Vec<ValueId>,
    pub output: ValueId,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub values: Vec<Value>,
    /// Topologically ordered.
    pub nodes: Vec<Node>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Numeric mode the graph was lowered for (`Fp32` until the precision pass runs).
    pub precision: Precision,
}

impl Graph {
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.index()]
    }

    pub fn value_mut(&mut self, id: ValueId) -> &mut Value {
        &mut self.values[id.index()]
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn add_value(&mut self, value: Value) -> ValueId {
        self.values.push(value);
        ValueId((self.values.len() - 1) as u32)
    }

    pub fn node_ids(&self) -> impl DoubleEndedIterator<Item = NodeId> + ExactSizeIterator {
        (0..self.nodes.len() as u32).map(NodeId)
    }

    /// Node producing each activation.
    pub fn producers(&self) -> HashMap<ValueId, NodeId> {
        self.node_ids()
            .map(|id| (self.node(id).output, id))
            .collect()
    }

    /// Nodes consuming each value, in node order (a node appears once per use).
    pub fn users(&self) -> HashMap<ValueId, Vec<NodeId>> {
        let mut users: HashMap<ValueId, Vec<NodeId>> = HashMap::new();
        for id in self.node_ids() {
            for &input in &self.node(id).inputs {
                users.entry(input).or_default().push(id);
            }
        }
        users
    }

    /// Number of uses of each value, counting graph outputs as uses.
    pub fn use_counts(&self) -> HashMap<ValueId, usize> {
        let mut counts: HashMap<ValueId, usize> = HashMap::new();
        for node in &self.nodes {
            for &input in &node.inputs {
                *counts.entry(input).or_default() += 1;
            }
        }
        for &out in &self.outputs {
            *counts.entry(out).or_default() += 1;
        }
        counts
    }

    /// Total bytes of constants (weights) in their storage types.
    pub fn constant_bytes(&self) -> usize {
        self.values
            .iter()
            .filter(|v| v.is_constant())
            .map(Value::bytes)
            .sum()
    }

    /// Drops values nothing refers to and renumbers the rest, keeping order.
    pub fn compact(&mut self) {
        let mut live: HashSet<ValueId> = self.inputs.iter().copied().collect();
        live.extend(self.outputs.iter().copied());
        for node in &self.nodes {
            live.extend(node.inputs.iter().copied());
            live.insert(node.output);
        }
        let mut remap = HashMap::new();
        let mut values = Vec::with_capacity(live.len());
        for (i, value) in std::mem::take(&mut self.values).into_iter().enumerate() {
            let old = ValueId(i as u32);
            if live.contains(&old) {
                remap.insert(old, ValueId(values.len() as u32));
                values.push(value);
            }
        }
        self.values = values;
        let map = |v: &mut ValueId| *v = remap[v];
        self.inputs.iter_mut().for_each(map);
        self.outputs.iter_mut().for_each(map);
        for node in &mut self.nodes {
            node.inputs.iter_mut().for_each(map);
            map(&mut node.output);
        }
    }
}

/// A set of rewrites applied to a graph at once (tract's `ModelPatch`).
///
/// Passes never edit `Graph::nodes` directly: they record removals, insertions
/// and use substitutions here, and [`Patch::apply`] rebuilds the node list,
/// substitutes uses, drops dead values, and (in debug and test builds) the
/// caller verifies the result.
#[derive(Debug, Default)]
pub struct Patch {
    first_new_value: u32,
    new_values: Vec<Value>,
    removed: HashSet<NodeId>,
    /// Nodes to insert immediately before the given original node
    /// (`None`: append at the end).
    inserted: Vec<(Option<NodeId>, Node)>,
    substitutions: HashMap<ValueId, ValueId>,
    value_edits: Vec<(ValueId, Value)>,
}

impl Patch {
    pub fn new(graph: &Graph) -> Self {
        Patch {
            first_new_value: graph.values.len() as u32,
            ..Default::default()
        }
    }

    /// Reserves an id for a new value, valid once the patch is applied.
    pub fn add_value(&mut self, value: Value) -> ValueId {
        self.new_values.push(value);
        ValueId(self.first_new_value + self.new_values.len() as u32 - 1)
    }

    /// Replaces an existing value's metadata or constant data.
    pub fn set_value(&mut self, id: ValueId, value: Value) {
        self.value_edits.push((id, value));
    }

    pub fn remove_node(&mut self, id: NodeId) {
        self.removed.insert(id);
    }

    /// Inserts `node` just before original node `before`.
    pub fn insert_before(&mut self, before: NodeId, node: Node) {
        self.inserted.push((Some(before), node));
    }

    /// Replaces node `id` by `node`, at the same position.
    pub fn replace_node(&mut self, id: NodeId, node: Node) {
        self.insert_before(id, node);
        self.remove_node(id);
    }

    /// Makes every use of `old` (node inputs and graph outputs) use `new`.
    /// Uses inside nodes added by this patch are left as written.
    pub fn substitute(&mut self, old: ValueId, new: ValueId) {
        self.substitutions.insert(old, new);
    }

    pub fn is_empty(&self) -> bool {
        self.new_values.is_empty()
            && self.removed.is_empty()
            && self.inserted.is_empty()
            && self.substitutions.is_empty()
            && self.value_edits.is_empty()
    }

    pub fn apply(self, graph: &mut Graph) {
        assert_eq!(
            graph.values.len() as u32,
            self.first_new_value,
            "patch applied to a graph that changed since it was created"
        );
        graph.values.extend(self.new_values);
        for (id, value) in self.value_edits {
            graph.values[id.index()] = value;
        }
        let resolve = |mut v: ValueId| {
            // Follow chains (a→b, b→c) so the order of substitutions does not matter.
            let mut steps = 0;
            while let Some(&next) = self.substitutions.get(&v) {
                v = next;
                steps += 1;
                assert!(steps <= self.substitutions.len(), "substitution cycle");
            }
            v
        };
        let mut before: HashMap<NodeId, Vec<Node>> = HashMap::new();
        let mut at_end = Vec::new();
        for (position, node) in self.inserted {
            match position {
                Some(id) => before.entry(id).or_default().push(node),
                None => at_end.push(node),
            }
        }
        let old_nodes = std::mem::take(&mut graph.nodes);
        let mut nodes = Vec::with_capacity(old_nodes.len());
        for (i, mut node) in old_nodes.into_iter().enumerate() {
            let id = NodeId(i as u32);
            if let Some(new) = before.remove(&id) {
                nodes.extend(new);
            }
            if !self.removed.contains(&id) {
                node.inputs = node.inputs.into_iter().map(resolve).collect();
                nodes.push(node);
            }
        }
        nodes.extend(at_end);
        graph.nodes = nodes;
        graph.outputs = graph.outputs.iter().map(|&v| resolve(v)).collect();
        graph.compact();
    }
}
