//! Every kernel template, over a sample of its tuning search space, on the
//! GPU against the CPU reference.
//!
//! Small ONNX models are written here (one per test: several branches from
//! one input, flattened and concatenated into the one output the runtime
//! takes), covering convolutions (3×3 s1/s2, 1×1 s1/s2, the 7×7 s2 stem with
//! C = 3, dilation 2, asymmetric pads, groups 2, depthwise (3×3, 7×7, strided,
//! dilated; the vectorized path on 32×32 and the per-element one), C and K not
//! multiples of 8, 7×7 inputs where split-K applies, strided stems that
//! fold into stride-1 convolutions over a space-to-depth image at
//! f16/bf16; with bias, residual Add,
//! Relu and Clip(0, 6)), max and average pools (ceil_mode,
//! count_include_pad), GlobalAveragePool and Gemm/MatMul → Dense (M = 1, 3,
//! 8), Dense and conv epilogues with GELU (exact and tanh), depthwise
//! convolutions with a LayerNorm over channels (one fused kernel), residual Adds
//! and a folded layer scale (M = 1, 8, 197, and a ViT-like MLP over
//! `[1, 197, 48]`), and the templates no tuner reaches (unary/binary elementwise, Sum,
//! BatchNormalization, GlobalMaxPool, Softmax, a Gemm of two activations, the
//! layout converts, Concat), at fp32, tf32, fp16 and bf16, batch 1 and 3.
//!
//! For each (model, precision, batch) every task that runs a kernel gets a
//! sample of its config type's `search_space` (the default config first,
//! then configs chosen to cover every value of every config field, then
//! evenly spaced ones; `AOTUNE_SWEEP_CONFIGS=<n>|all`, default 12): the
//! tuned ones (FusedConv, Dense, MaxPool, AveragePool, whose records carry
//! `template_versions()`) and the others alike. Build `i` is made with a
//! tuning log (`best.json`) holding config `i` (cyclically) of every task,
//! so a model costs as many builds as its largest sample. Each build is
//! loaded and run; its output must match the CPU reference run on the same optimized graph
//! (`built.compiled.graph`) and on the imported fp32 graph within DESIGN.md's
//! tolerance, every launch's output must match the CPU's value of that node,
//! two runs must agree bit for bit (split-K counters are reset by the
//! kernels), and the kernel symbols must carry the configs the log asked
//! for. The worst error per template and precision is printed.
//!
//! Builds run in parallel (`AOTUNE_TEST_JOBS`, default all cores); the GPU
//! checks run on the test's thread as builds finish.
//! `AOTUNE_SWEEP_FILTER=<text>` keeps only the variants whose label
//! (`<model> <precision> b<batch>`, e.g. `c16 bf16 b3`) contains it.

mod common;

use aotune_compiler::build::template_versions;
use aotune_compiler::codegen::cuda::conv::conv_shape;
use aotune_compiler::codegen::cuda::dense::dense_shape;
use aotune_compiler::codegen::cuda::depthwise_norm::depthwise_norm_shape;
use aotune_compiler::codegen::cuda::elementwise::elt_shape;
use aotune_compiler::codegen::cuda::global_pool::global_pool_shape;
use aotune_compiler::codegen::cuda::matmul::matmul_shape;
use aotune_compiler::codegen::cuda::pool::pool_shape;
use aotune_compiler::codegen::cuda::reduce::{reduce_shape, softmax_shape};
use aotune_compiler::codegen::cuda::space_to_depth::space_to_depth_shape;
use aotune_compiler::codegen::cuda::to_nhwc::to_nhwc_shape;
use aotune_compiler::codegen::cuda::{
    generate_cuda, ConfigOverrides, ConvConfig, ConvShape, DenseConfig, DepthwiseNormConfig,
    GlobalPoolConfig, KernelConfig, LinearConfig, LinearShape, MatmulConfig, SpaceToDepthConfig,
    ToNhwcConfig,
};
use aotune_compiler::ir::{Conv2d, Graph, Op, Pool2d, Precision};
use aotune_compiler::plan::MemoryPlan;
use aotune_compiler::reference::{rel_l2, run, run_traced, RunOptions};
use aotune_compiler::schedule::{BestLog, BestRecord, Target, BEST_FORMAT};
use aotune_compiler::zoo::fill;
use aotune_compiler::{compile_bytes, Build, Built, CompileOptions};
use common::gpu::{self, Mode, TempDir};
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Instant;

// ---- a minimal ONNX writer ---------------------------------------------------

/// Protobuf encoding of the few ONNX messages the test models need.
mod proto {
    fn varint(buf: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        buf.push(v as u8);
    }

    fn key(buf: &mut Vec<u8>, field: u32, wire: u32) {
        varint(buf, u64::from(field << 3 | wire));
    }

    pub fn int(buf: &mut Vec<u8>, field: u32, v: i64) {
        key(buf, field, 0);
        varint(buf, v as u64);
    }

    pub fn float(buf: &mut Vec<u8>, field: u32, v: f32) {
        key(buf, field, 5);
        buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn bytes(buf: &mut Vec<u8>, field: u32, v: &[u8]) {
        key(buf, field, 2);
        varint(buf, v.len() as u64);
        buf.extend_from_slice(v);
    }

    pub fn string(buf: &mut Vec<u8>, field: u32, v: &str) {
        bytes(buf, field, v.as_bytes());
    }

    /// `AttributeProto` values.
    pub enum Attr {
        Int(i64),
        Float(f32),
        Ints(Vec<i64>),
        Str(&'static str),
    }

    pub fn attribute(name: &str, value: &Attr) -> Vec<u8> {
        let mut a = Vec::new();
        string(&mut a, 1, name);
        match value {
            Attr::Float(f) => {
                float(&mut a, 2, *f);
                int(&mut a, 20, 1);
            }
            Attr::Int(i) => {
                int(&mut a, 3, *i);
                int(&mut a, 20, 2);
            }
            Attr::Ints(v) => {
                for &i in v {
                    int(&mut a, 8, i);
                }
                int(&mut a, 20, 7);
            }
            Attr::Str(s) => {
                bytes(&mut a, 4, s.as_bytes());
                int(&mut a, 20, 3);
            }
        }
        a
    }

    pub fn node(
        op: &str,
        name: &str,
        inputs: &[&str],
        output: &str,
        attrs: &[(&str, Attr)],
    ) -> Vec<u8> {
        let mut n = Vec::new();
        for i in inputs {
            string(&mut n, 1, i);
        }
        string(&mut n, 2, output);
        string(&mut n, 3, name);
        string(&mut n, 4, op);
        for (k, v) in attrs {
            bytes(&mut n, 5, &attribute(k, v));
        }
        n
    }

    /// A float `TensorProto` with `raw_data`.
    pub fn tensor(name: &str, dims: &[usize], values: &[f32]) -> Vec<u8> {
        let mut t = Vec::new();
        for &d in dims {
            int(&mut t, 1, d as i64);
        }
        int(&mut t, 2, 1);
        string(&mut t, 8, name);
        let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        bytes(&mut t, 9, &raw);
        t
    }

    /// A float `ValueInfoProto`; dimension 0 is the symbolic `batch`.
    pub fn value_info(name: &str, dims_after_batch: &[usize]) -> Vec<u8> {
        let mut shape = Vec::new();
        let mut batch = Vec::new();
        string(&mut batch, 2, "batch");
        bytes(&mut shape, 1, &batch);
        for &d in dims_after_batch {
            let mut dim = Vec::new();
            int(&mut dim, 1, d as i64);
            bytes(&mut shape, 1, &dim);
        }
        let mut tensor = Vec::new();
        int(&mut tensor, 1, 1);
        bytes(&mut tensor, 2, &shape);
        let mut ty = Vec::new();
        bytes(&mut ty, 1, &tensor);
        let mut v = Vec::new();
        string(&mut v, 1, name);
        bytes(&mut v, 2, &ty);
        v
    }

    /// A `ModelProto` (IR 9, default domain at `opset`) around one graph.
    pub fn model(
        name: &str,
        opset: i64,
        nodes: &[Vec<u8>],
        initializers: &[Vec<u8>],
        input: &[u8],
        output: &[u8],
    ) -> Vec<u8> {
        let mut g = Vec::new();
        for n in nodes {
            bytes(&mut g, 1, n);
        }
        string(&mut g, 2, name);
        for t in initializers {
            bytes(&mut g, 5, t);
        }
        bytes(&mut g, 11, input);
        bytes(&mut g, 12, output);
        let mut opset_id = Vec::new();
        string(&mut opset_id, 1, "");
        int(&mut opset_id, 2, opset);
        let mut m = Vec::new();
        int(&mut m, 1, 9);
        string(&mut m, 2, "aotune-gpu-kernels-test");
        bytes(&mut m, 7, &g);
        bytes(&mut m, 8, &opset_id);
        m
    }
}

use proto::Attr;

/// Builds a test model: branches from one input `[batch, ...]`, each ended
/// with [`Net::output`]; [`Net::finish`] flattens and concatenates them.
struct Net {
    name: String,
    nodes: Vec<Vec<u8>>,
    inits: Vec<Vec<u8>>,
    /// Shapes at batch 1.
    shapes: HashMap<String, Vec<usize>>,
    input_dims: Vec<usize>,
    ends: Vec<String>,
    counter: u64,
    /// The default domain's opset: 19, or 20 for a model with `Gelu`.
    opset: i64,
}

fn ints(v: &[usize]) -> Attr {
    Attr::Ints(v.iter().map(|&x| x as i64).collect())
}

impl Net {
    fn new(name: &str, input_dims: &[usize]) -> Net {
        let mut shapes = HashMap::new();
        let mut shape = vec![1];
        shape.extend_from_slice(input_dims);
        shapes.insert("input".to_string(), shape);
        Net {
            name: name.into(),
            nodes: Vec::new(),
            inits: Vec::new(),
            shapes,
            input_dims: input_dims.to_vec(),
            ends: Vec::new(),
            counter: 0,
            opset: 19,
        }
    }

    fn shape(&self, x: &str) -> Vec<usize> {
        self.shapes[x].clone()
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}{}", self.counter)
    }

    /// An initializer uniform in `[-half_width, half_width]`.
    fn constant(&mut self, dims: &[usize], half_width: f32) -> String {
        self.constant_around(dims, 0.0, half_width)
    }

    /// An initializer uniform in `[center - half_width, center + half_width]`.
    fn constant_around(&mut self, dims: &[usize], center: f32, half_width: f32) -> String {
        let name = self.fresh("w");
        let n: usize = dims.iter().product();
        let values = fill(1000 + self.counter, center, half_width, n);
        self.inits.push(proto::tensor(&name, dims, &values));
        name
    }

    fn scalar(&mut self, value: f32) -> String {
        let name = self.fresh("s");
        self.inits.push(proto::tensor(&name, &[], &[value]));
        name
    }

    fn push(
        &mut self,
        op: &str,
        inputs: &[&str],
        shape: Vec<usize>,
        attrs: &[(&str, Attr)],
    ) -> String {
        let out = self.fresh(&op.to_ascii_lowercase());
        let node_name = format!("{out}_node");
        self.nodes
            .push(proto::node(op, &node_name, inputs, &out, attrs));
        self.shapes.insert(out.clone(), shape);
        out
    }

    /// Conv with weights scaled so the output's spread is about `gain / √3`
    /// for inputs uniform in [-1, 1].
    #[allow(clippy::too_many_arguments)]
    fn conv(
        &mut self,
        x: &str,
        k: usize,
        kernel: usize,
        stride: usize,
        pads: [usize; 4],
        dilation: usize,
        groups: usize,
        bias: bool,
        gain: f32,
    ) -> String {
        let [n, c, h, w] = <[usize; 4]>::try_from(self.shape(x)).expect("conv input is 4-D");
        assert!(c % groups == 0 && k % groups == 0, "{}: groups", self.name);
        let geometry = Conv2d {
            kernel: [kernel, kernel],
            strides: [stride, stride],
            pads,
            dilations: [dilation, dilation],
            groups,
        };
        let [p, q] = geometry.output_hw(h, w).expect("conv output size");
        let fan_in = (c / groups) * kernel * kernel;
        let wname = self.constant(
            &[k, c / groups, kernel, kernel],
            gain * (3.0 / fan_in as f32).sqrt(),
        );
        let mut inputs = vec![x.to_string(), wname];
        if bias {
            inputs.push(self.constant(&[k], 0.5));
        }
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.push(
            "Conv",
            &refs,
            vec![n, k, p, q],
            &[
                ("kernel_shape", ints(&[kernel, kernel])),
                ("strides", ints(&[stride, stride])),
                ("pads", ints(&pads)),
                ("dilations", ints(&[dilation, dilation])),
                ("group", Attr::Int(groups as i64)),
            ],
        )
    }

    fn add(&mut self, a: &str, b: &str) -> String {
        assert_eq!(self.shape(a), self.shape(b), "{}: Add operands", self.name);
        let shape = self.shape(a);
        self.push("Add", &[a, b], shape, &[])
    }

    fn relu(&mut self, x: &str) -> String {
        let shape = self.shape(x);
        self.push("Relu", &[x], shape, &[])
    }

    fn clip(&mut self, x: &str, lo: f32, hi: f32) -> String {
        let (lo, hi) = (self.scalar(lo), self.scalar(hi));
        let shape = self.shape(x);
        self.push("Clip", &[x, &lo, &hi], shape, &[])
    }

    fn pool_shape(
        &self,
        x: &str,
        kernel: usize,
        stride: usize,
        pads: [usize; 4],
        ceil: bool,
    ) -> Vec<usize> {
        let [n, c, h, w] = <[usize; 4]>::try_from(self.shape(x)).expect("pool input is 4-D");
        let pool = Pool2d {
            kernel: [kernel, kernel],
            strides: [stride, stride],
            pads,
            dilations: [1, 1],
            ceil_mode: ceil,
        };
        let [p, q] = pool.output_hw(h, w).expect("pool output size");
        vec![n, c, p, q]
    }

    fn maxpool(
        &mut self,
        x: &str,
        kernel: usize,
        stride: usize,
        pads: [usize; 4],
        ceil: bool,
    ) -> String {
        let shape = self.pool_shape(x, kernel, stride, pads, ceil);
        self.push(
            "MaxPool",
            &[x],
            shape,
            &[
                ("kernel_shape", ints(&[kernel, kernel])),
                ("strides", ints(&[stride, stride])),
                ("pads", ints(&pads)),
                ("ceil_mode", Attr::Int(ceil as i64)),
            ],
        )
    }

    fn avgpool(
        &mut self,
        x: &str,
        kernel: usize,
        stride: usize,
        pads: [usize; 4],
        ceil: bool,
        count_include_pad: bool,
    ) -> String {
        let shape = self.pool_shape(x, kernel, stride, pads, ceil);
        self.push(
            "AveragePool",
            &[x],
            shape,
            &[
                ("kernel_shape", ints(&[kernel, kernel])),
                ("strides", ints(&[stride, stride])),
                ("pads", ints(&pads)),
                ("ceil_mode", Attr::Int(ceil as i64)),
                ("count_include_pad", Attr::Int(count_include_pad as i64)),
            ],
        )
    }

    fn global_average_pool(&mut self, x: &str) -> String {
        let s = self.shape(x);
        self.push("GlobalAveragePool", &[x], vec![s[0], s[1], 1, 1], &[])
    }

    fn flatten(&mut self, x: &str) -> String {
        let s = self.shape(x);
        self.push(
            "Flatten",
            &[x],
            vec![s[0], s[1..].iter().product()],
            &[("axis", Attr::Int(1))],
        )
    }

    /// `Gemm(x, W, C)`: W is `[n, k]` with `transB = 1`, else `[k, n]`; C is
    /// a bias `[n]` (constant), or `residual` (an activation `[batch, n]`).
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &mut self,
        x: &str,
        n: usize,
        trans_b: bool,
        alpha: f32,
        beta: f32,
        bias: bool,
        residual: Option<&str>,
    ) -> String {
        let s = self.shape(x);
        let (m, k) = (s[0], s[1]);
        let half = (3.0 / k as f32).sqrt();
        let w = if trans_b {
            self.constant(&[n, k], half)
        } else {
            self.constant(&[k, n], half)
        };
        let mut inputs = vec![x.to_string(), w];
        if let Some(r) = residual {
            assert_eq!(self.shape(r), vec![m, n], "{}: Gemm residual", self.name);
            inputs.push(r.to_string());
        } else if bias {
            inputs.push(self.constant(&[n], 0.5));
        }
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.push(
            "Gemm",
            &refs,
            vec![m, n],
            &[
                ("alpha", Attr::Float(alpha)),
                ("beta", Attr::Float(beta)),
                ("transB", Attr::Int(trans_b as i64)),
            ],
        )
    }

    /// `MatMul(x, B[k, n]) + c[n]`, the other export spelling of a dense layer.
    fn matmul_add(&mut self, x: &str, n: usize) -> String {
        let s = self.shape(x);
        let b = self.constant(&[s[1], n], (3.0 / s[1] as f32).sqrt());
        let y = self.push("MatMul", &[x, &b], vec![s[0], n], &[]);
        let c = self.constant(&[n], 0.5);
        self.push("Add", &[&y, &c], vec![s[0], n], &[])
    }

    /// `x · B[k, n] + c[n]` over an input of any rank (k its last axis):
    /// a transformer's linear layer as the exporters write it.
    fn linear(&mut self, x: &str, n: usize) -> String {
        let mut shape = self.shape(x);
        let k = *shape.last().expect("a linear layer's input has an axis");
        let b = self.constant(&[k, n], (3.0 / k as f32).sqrt());
        *shape.last_mut().expect("same rank") = n;
        let y = self.push("MatMul", &[x, &b], shape.clone(), &[]);
        let c = self.constant(&[n], 0.5);
        self.push("Add", &[&y, &c], shape, &[])
    }

    /// ONNX `Gelu` (opset 20), `approximate` = tanh or none.
    fn gelu(&mut self, x: &str, tanh: bool) -> String {
        self.opset = self.opset.max(20);
        let shape = self.shape(x);
        let approximate = Attr::Str(if tanh { "tanh" } else { "none" });
        self.push("Gelu", &[x], shape, &[("approximate", approximate)])
    }

    /// The exact GELU spelt out as older exports write it,
    /// `x · 0.5 · (1 + erf(x / √2))` (the passes fuse it into one Gelu).
    fn gelu_decomposed(&mut self, x: &str) -> String {
        let sqrt2 = self.scalar(std::f32::consts::SQRT_2);
        let scaled = self.binary("Div", x, &sqrt2);
        let erf = self.unary("Erf", &scaled);
        let one = self.scalar(1.0);
        let t = self.binary("Add", &erf, &one);
        let xt = self.binary("Mul", x, &t);
        let half = self.scalar(0.5);
        self.binary("Mul", &xt, &half)
    }

    /// A one-input op keeping the shape (Relu, Sigmoid, ...).
    fn unary(&mut self, op: &str, x: &str) -> String {
        let shape = self.shape(x);
        self.push(op, &[x], shape, &[])
    }

    /// `op(x, y)` where `y` broadcasts to `x`'s shape.
    fn binary(&mut self, op: &str, x: &str, y: &str) -> String {
        let shape = self.shape(x);
        self.push(op, &[x, y], shape, &[])
    }

    fn sum(&mut self, xs: &[&str]) -> String {
        let shape = self.shape(xs[0]);
        self.push("Sum", xs, shape, &[])
    }

    /// Inference BatchNormalization with per-channel constants.
    fn batch_norm(&mut self, x: &str) -> String {
        let c = self.shape(x)[1];
        let scale = self.constant_around(&[c], 1.0, 0.5);
        let bias = self.constant(&[c], 0.5);
        let mean = self.constant(&[c], 0.3);
        let var = self.constant_around(&[c], 1.0, 0.5);
        let shape = self.shape(x);
        self.push(
            "BatchNormalization",
            &[x, &scale, &bias, &mean, &var],
            shape,
            &[("epsilon", Attr::Float(1e-5))],
        )
    }

    fn softmax(&mut self, x: &str, axis: i64) -> String {
        let shape = self.shape(x);
        self.push("Softmax", &[x], shape, &[("axis", Attr::Int(axis))])
    }

    fn global_max_pool(&mut self, x: &str) -> String {
        let s = self.shape(x);
        self.push("GlobalMaxPool", &[x], vec![s[0], s[1], 1, 1], &[])
    }

    /// `Gemm(a, b, transB = 1)` with both operands activations: `a·bᵀ`.
    fn gemm_runtime(&mut self, a: &str, b: &str) -> String {
        let (sa, sb) = (self.shape(a), self.shape(b));
        self.push(
            "Gemm",
            &[a, b],
            vec![sa[0], sb[0]],
            &[("transB", Attr::Int(1))],
        )
    }

    /// ONNX `Transpose` with `perm` (counted with the batch axis).
    fn transpose(&mut self, x: &str, perm: &[usize]) -> String {
        let s = self.shape(x);
        let shape = perm.iter().map(|&a| s[a]).collect();
        self.push("Transpose", &[x], shape, &[("perm", ints(perm))])
    }

    /// LayerNormalization over the last axis, with a scale around 1 and,
    /// when `bias`, a bias.
    fn layer_norm_last(&mut self, x: &str, bias: bool) -> String {
        let shape = self.shape(x);
        let c = *shape.last().expect("a normalized axis");
        let scale = self.constant_around(&[c], 1.0, 0.5);
        let mut inputs = vec![x.to_string(), scale];
        if bias {
            inputs.push(self.constant(&[c], 0.5));
        }
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.push(
            "LayerNormalization",
            &refs,
            shape,
            &[("axis", Attr::Int(-1)), ("epsilon", Attr::Float(1e-6))],
        )
    }

    /// Marks `x` as one of the model's results.
    fn output(&mut self, x: &str) {
        self.ends.push(x.to_string());
    }

    /// The serialized model: every result flattened, concatenated on axis 1.
    fn finish(mut self) -> Vec<u8> {
        let ends = std::mem::take(&mut self.ends);
        assert!(
            ends.len() >= 2,
            "{}: a test model needs two or more results",
            self.name
        );
        let flat: Vec<String> = ends
            .iter()
            .map(|e| {
                if self.shape(e).len() == 2 {
                    e.clone()
                } else {
                    self.flatten(e)
                }
            })
            .collect();
        let total: usize = flat.iter().map(|f| self.shape(f)[1]).sum();
        let refs: Vec<&str> = flat.iter().map(String::as_str).collect();
        self.nodes.push(proto::node(
            "Concat",
            "concat_output",
            &refs,
            "output",
            &[("axis", Attr::Int(1))],
        ));
        proto::model(
            &self.name,
            self.opset,
            &self.nodes,
            &self.inits,
            &proto::value_info("input", &self.input_dims),
            &proto::value_info("output", &[total]),
        )
    }
}

const NONE: [usize; 4] = [0; 4];
const SAME1: [usize; 4] = [1; 4];

// ---- the test models -----------------------------------------------------------

/// C = 16, 14×14: every conv geometry, pools, and the head.
fn net_c16() -> Net {
    let mut m = Net::new("c16", &[16, 14, 14]);
    let x = "input";
    // 3×3 s1 p1, bias, Relu.
    let a = m.conv(x, 32, 3, 1, SAME1, 1, 1, true, 2.0);
    let a = m.relu(&a);
    m.output(&a);
    // 3×3 s2 p1 (no bias) + 1×1 s2 (bias): the downsample block's residual Add, Relu.
    let b = m.conv(x, 32, 3, 2, SAME1, 1, 1, false, 2.0);
    let d = m.conv(x, 32, 1, 2, NONE, 1, 1, true, 2.0);
    let s = m.add(&b, &d);
    let s = m.relu(&s);
    m.output(&s);
    // A downsample block's tail in torchvision's order: the 1×1 s2
    // projection, then the 1×1 expand over the block's 7×7 grid, added:
    // one GEMM over both K ranges (a FusedConv with a shortcut), Relu.
    let r = m.conv(x, 24, 1, 2, NONE, 1, 1, true, 2.0);
    let r = m.relu(&r);
    let proj = m.conv(x, 32, 1, 2, NONE, 1, 1, true, 2.0);
    let main = m.conv(&r, 32, 1, 1, NONE, 1, 1, true, 2.0);
    let s = m.add(&main, &proj);
    let s = m.relu(&s);
    m.output(&s);
    // 1×1 s1, bias, Clip(0, 6) (large gain so the clip bites).
    let c = m.conv(x, 24, 1, 1, NONE, 1, 1, true, 8.0);
    let c = m.clip(&c, 0.0, 6.0);
    m.output(&c);
    // 3×3 dilation 2 p2, bias, residual = the input, Relu.
    let e = m.conv(x, 16, 3, 1, [2; 4], 2, 1, true, 2.0);
    let e = m.add(&e, x);
    let e = m.relu(&e);
    m.output(&e);
    // 3×3 asymmetric pads (top 0, left 1, bottom 2, right 1), bias, Clip.
    let f = m.conv(x, 16, 3, 1, [0, 1, 2, 1], 1, 1, true, 8.0);
    let f = m.clip(&f, 0.0, 6.0);
    m.output(&f);
    // Groups 2.
    let g = m.conv(x, 32, 3, 1, SAME1, 1, 2, true, 2.0);
    let g = m.relu(&g);
    m.output(&g);
    // Depthwise 3×3 s1 with Clip (MobileNet) and s2 with Relu.
    let h = m.conv(x, 16, 3, 1, SAME1, 1, 16, true, 8.0);
    let h = m.clip(&h, 0.0, 6.0);
    m.output(&h);
    let i = m.conv(x, 16, 3, 2, SAME1, 1, 16, true, 2.0);
    let i = m.relu(&i);
    m.output(&i);
    // Depthwise 7×7 p3 with bias (ConvNeXt's) and 3×3 dilation 2 with a
    // residual Add, on a 14×14 map (the per-element path).
    let j = m.conv(x, 16, 7, 1, [3; 4], 1, 16, true, 2.0);
    m.output(&j);
    let l = m.conv(x, 16, 3, 1, [2; 4], 2, 16, true, 2.0);
    let l = m.add(&l, x);
    m.output(&l);
    // Pools.
    let p = m.maxpool(x, 3, 2, SAME1, false);
    m.output(&p);
    let p = m.maxpool(x, 3, 2, SAME1, true);
    m.output(&p);
    let p = m.avgpool(x, 3, 2, SAME1, false, false);
    m.output(&p);
    let p = m.avgpool(x, 3, 2, SAME1, true, true);
    m.output(&p);
    // Head: GlobalAveragePool → Flatten → Gemm (Dense, M = batch).
    let gp = m.global_average_pool(x);
    m.output(&gp);
    let fl = m.flatten(&gp);
    let fc = m.gemm(&fl, 10, true, 1.0, 1.0, true, None);
    m.output(&fc);
    m
}

/// The ResNet stem: C = 3, 7×7 s2 p3, then MaxPool 3×3 s2 p1; depthwise
/// convolutions on a 32×32 map.
fn net_stem() -> Net {
    let mut m = Net::new("stem", &[3, 32, 32]);
    let x = "input";
    let a = m.conv(x, 16, 7, 2, [3; 4], 1, 1, true, 2.0);
    let a = m.relu(&a);
    let p = m.maxpool(&a, 3, 2, SAME1, false);
    m.output(&p);
    let b = m.conv(x, 8, 3, 1, SAME1, 1, 1, true, 8.0);
    let b = m.clip(&b, 0.0, 6.0);
    m.output(&b);
    let c = m.conv(x, 3, 3, 2, SAME1, 1, 3, false, 2.0);
    m.output(&c);
    // Depthwise on a 32×32 map (the vectorized path): 7×7 p3 with bias
    // (ConvNeXt's), and 3×3 dilation 2 with a residual Add.
    let e = m.conv(x, 16, 1, 1, NONE, 1, 1, true, 2.0);
    let d = m.conv(&e, 16, 7, 1, [3; 4], 1, 16, true, 2.0);
    m.output(&d);
    let d = m.conv(&e, 16, 3, 1, [2; 4], 2, 16, true, 2.0);
    let d = m.add(&d, &e);
    m.output(&d);
    m
}

/// Strided convolutions that the space-to-depth pass folds at f16/bf16, on
/// an odd-sized image: a 7×7 s2 p3 stem, two 3×3 s2 p1 convs (one image
/// for both) added together, and a 5×5 s2 conv with asymmetric pads.
fn net_s2d() -> Net {
    let mut m = Net::new("s2d", &[3, 19, 17]);
    let x = "input";
    let a = m.conv(x, 16, 7, 2, [3; 4], 1, 1, true, 2.0);
    let a = m.relu(&a);
    m.output(&a);
    let b = m.conv(x, 8, 3, 2, SAME1, 1, 1, false, 2.0);
    let c = m.conv(x, 8, 3, 2, SAME1, 1, 1, true, 2.0);
    let s = m.add(&b, &c);
    let s = m.clip(&s, 0.0, 6.0);
    m.output(&s);
    let d = m.conv(x, 5, 5, 2, [2, 1, 3, 3], 1, 1, true, 2.0);
    m.output(&d);
    m
}

/// C = 5, K = 7: channel counts that are not multiples of 8 (scalar loads).
fn net_odd() -> Net {
    let mut m = Net::new("odd", &[5, 9, 9]);
    let x = "input";
    let a = m.conv(x, 7, 3, 1, SAME1, 1, 1, true, 2.0);
    let a = m.relu(&a);
    m.output(&a);
    let b = m.conv(x, 7, 1, 1, NONE, 1, 1, true, 8.0);
    let b = m.clip(&b, 0.0, 6.0);
    m.output(&b);
    let c = m.conv(x, 7, 3, 2, SAME1, 1, 1, false, 2.0);
    let d = m.conv(x, 7, 1, 2, NONE, 1, 1, true, 2.0);
    let s = m.add(&c, &d);
    let s = m.relu(&s);
    m.output(&s);
    // A stride-1 shortcut over odd channel counts (7 + 5: gathered, not
    // 16-byte chunks), the projection without a bias.
    let r = m.conv(x, 7, 1, 1, NONE, 1, 1, true, 2.0);
    let proj = m.conv(x, 6, 1, 1, NONE, 1, 1, false, 2.0);
    let main = m.conv(&r, 6, 1, 1, NONE, 1, 1, true, 2.0);
    let s = m.add(&main, &proj);
    m.output(&s);
    let e = m.conv(x, 5, 3, 1, [2; 4], 2, 1, true, 2.0);
    let e = m.add(&e, x);
    m.output(&e);
    let f = m.conv(x, 5, 3, 1, SAME1, 1, 5, true, 2.0);
    let f = m.relu(&f);
    m.output(&f);
    let g = m.conv(x, 7, 3, 1, [1, 0, 0, 2], 1, 1, true, 2.0);
    m.output(&g);
    let p = m.maxpool(x, 3, 2, SAME1, true);
    m.output(&p);
    let p = m.avgpool(x, 3, 2, SAME1, false, true);
    m.output(&p);
    let p = m.avgpool(x, 2, 2, NONE, true, false);
    m.output(&p);
    let gp = m.global_average_pool(x);
    let fl = m.flatten(&gp);
    let fc = m.gemm(&fl, 7, true, 1.0, 1.0, true, None);
    let fc = m.relu(&fc);
    m.output(&fc);
    m
}

/// 7×7 inputs with many channels: M = 49·batch against K = 576, where the
/// split-K configs are in the search space.
fn net_tiny() -> Net {
    let mut m = Net::new("tiny", &[64, 7, 7]);
    let x = "input";
    let a = m.conv(x, 64, 3, 1, SAME1, 1, 1, true, 2.0);
    let a = m.add(&a, x);
    let a = m.relu(&a);
    m.output(&a);
    let b = m.conv(x, 96, 1, 1, NONE, 1, 1, true, 2.0);
    m.output(&b);
    let c = m.conv(x, 32, 3, 2, SAME1, 1, 1, false, 8.0);
    let c = m.clip(&c, 0.0, 6.0);
    m.output(&c);
    let d = m.conv(x, 64, 3, 1, SAME1, 1, 2, true, 2.0);
    m.output(&d);
    let gp = m.global_average_pool(x);
    let fl = m.flatten(&gp);
    let fc = m.gemm(&fl, 10, true, 1.0, 1.0, true, None);
    m.output(&fc);
    m
}

/// The templates no tuning log reaches: unary and broadcasting binary
/// elementwise ops, Sum, a standalone BatchNormalization, GlobalMaxPool,
/// Softmax, and a Gemm of two activations (the matmul template).
fn net_misc() -> Net {
    let mut m = Net::new("misc", &[16, 6, 6]);
    let x = "input";
    let s = m.unary("Sigmoid", x);
    m.output(&s);
    let r = m.unary("Relu", x);
    let c = m.clip(x, -0.5, 0.5);
    m.output(&c);
    let per_channel = m.constant(&[16, 1, 1], 1.0);
    let mul = m.binary("Mul", x, &per_channel);
    let divisor = m.constant_around(&[1], 2.0, 0.5);
    let div = m.binary("Div", &mul, &divisor);
    m.output(&div);
    let sub = m.binary("Sub", x, &s);
    m.output(&sub);
    let add = m.binary("Add", &r, &mul);
    m.output(&add);
    let sum = m.sum(&[x, &r, &s]);
    m.output(&sum);
    let bn = m.batch_norm(x);
    m.output(&bn);
    let gmp = m.global_max_pool(x);
    m.output(&gmp);
    let flat = m.flatten(x);
    let sm = m.softmax(&flat, 1);
    m.output(&sm);
    let gram = m.gemm_runtime(&flat, &flat);
    m.output(&gram);
    m
}

/// Dense layers from a `[batch, 64]` input: Gemm (transB = 1, bias, Relu),
/// MatMul + Add + Clip, Gemm (transB = 0, alpha, beta, N = 17) and Gemm with
/// an activation as C (residual).
fn net_dense() -> Net {
    let mut m = Net::new("dense", &[64]);
    let x = "input";
    let a = m.gemm(x, 40, true, 1.0, 1.0, true, None);
    let a = m.relu(&a);
    m.output(&a);
    let b = m.matmul_add(x, 24);
    let b = m.clip(&b, 0.0, 6.0);
    m.output(&b);
    let c = m.gemm(x, 17, false, 0.5, 2.0, true, None);
    m.output(&c);
    let d = m.gemm(x, 40, true, 1.0, 1.0, false, Some(&a));
    m.output(&d);
    m
}

/// Dense epilogues with GELU and residuals from a `[batch, 64]` input (M =
/// batch: the GEMV at 1, the tiled templates from 8): bias + exact GELU
/// (Gemm), bias + tanh GELU (MatMul + Add), a residual Add after a Dense
/// whose input is a GELU output, and a residual Add then GELU (all one
/// epilogue: `act(acc + bias + residual)`).
fn net_dense_gelu() -> Net {
    let mut m = Net::new("dense_gelu", &[64]);
    let x = "input";
    let a = m.gemm(x, 96, true, 1.0, 1.0, true, None);
    let a = m.gelu(&a, false);
    m.output(&a);
    let b = m.matmul_add(x, 40);
    let b = m.gelu(&b, true);
    m.output(&b);
    let c = m.gemm(&a, 64, true, 1.0, 1.0, true, None);
    let c = m.add(x, &c);
    m.output(&c);
    let d = m.matmul_add(x, 64);
    let d = m.add(&d, x);
    let d = m.gelu(&d, false);
    m.output(&d);
    m
}

/// A transformer MLP over a `[batch, 197, 48]` input, as ViT-B/16's at
/// width 48 (M = 197 rows at batch 1: the tiled tensor-core templates, a
/// ragged last tile): `x + fc2(GELU(fc1(x)))` through the N-D Dense's
/// views, with the GELU spelt out (`Erf`) as the TorchScript exporter
/// writes it; and a layer-scaled branch `x + gamma · fc(x)` whose per-feature
/// `gamma` folds into the weights.
fn net_mlp() -> Net {
    let mut m = Net::new("mlp", &[197, 48]);
    let x = "input";
    let h = m.linear(x, 96);
    let h = m.gelu_decomposed(&h);
    let y = m.linear(&h, 48);
    let y = m.add(x, &y);
    m.output(&y);
    let s = m.linear(x, 48);
    let gamma = m.constant_around(&[48], 1.0, 0.5);
    let s = m.binary("Mul", &s, &gamma);
    let s = m.add(&s, x);
    let s = m.gelu(&s, true);
    m.output(&s);
    m
}

/// Convolutions with GELU epilogues: 3×3 + bias (exact), 1×1 + residual
/// Add (tanh) and depthwise (the direct template).
fn net_conv_gelu() -> Net {
    let mut m = Net::new("conv_gelu", &[16, 8, 8]);
    let x = "input";
    let a = m.conv(x, 32, 3, 1, SAME1, 1, 1, true, 2.0);
    let a = m.gelu(&a, false);
    m.output(&a);
    let b = m.conv(x, 16, 1, 1, NONE, 1, 1, true, 2.0);
    let b = m.add(&b, x);
    let b = m.gelu(&b, true);
    m.output(&b);
    let c = m.conv(x, 16, 3, 1, SAME1, 1, 16, true, 2.0);
    let c = m.gelu(&c, false);
    m.output(&c);
    m
}

/// Depthwise convolutions each followed by a LayerNorm over its channels,
/// written as ConvNeXt's exports write them (NCHW → NHWC `Transpose`, then
/// LayerNorm over the last axis), which the passes fuse into one kernel
/// (`dwln`): 7×7 p3 over C = 24 with bias (6 lanes a pixel, 14×14), 7×7
/// over C = 96 without a conv bias or LayerNorm bias (24 lanes, 14×14),
/// and 3×3 s2 over C = 16 (4 lanes, a 7×7 output). No C / 4 is a
/// multiple of 32.
fn net_conv_norm() -> Net {
    let mut m = Net::new("conv_norm", &[24, 14, 14]);
    let x = "input";
    let nhwc = [0, 2, 3, 1];
    let a = m.conv(x, 24, 7, 1, [3; 4], 1, 24, true, 2.0);
    let a = m.transpose(&a, &nhwc);
    let a = m.layer_norm_last(&a, true);
    m.output(&a);
    let e = m.conv(x, 96, 1, 1, NONE, 1, 1, true, 2.0);
    let b = m.conv(&e, 96, 7, 1, [3; 4], 1, 96, false, 2.0);
    let b = m.transpose(&b, &nhwc);
    let b = m.layer_norm_last(&b, false);
    m.output(&b);
    let f = m.conv(x, 16, 1, 1, NONE, 1, 1, true, 2.0);
    let c = m.conv(&f, 16, 3, 2, SAME1, 1, 16, true, 2.0);
    let c = m.transpose(&c, &nhwc);
    let c = m.layer_norm_last(&c, true);
    m.output(&c);
    m
}

// ---- the sweep -------------------------------------------------------------------

/// One candidate config of a task: its JSON (what the log stores), its
/// symbol tag, and the features the coverage sample counts.
#[derive(Debug, Clone)]
struct Candidate {
    json: Json,
    tag: String,
    features: Vec<String>,
}

fn candidate<C: KernelConfig>(c: &C, big_smem: bool) -> Candidate {
    let json = serde_json::to_value(c).expect("config serializes");
    let kind = json
        .get("kernel")
        .and_then(Json::as_str)
        .unwrap_or("linear")
        .to_string();
    let mut features = vec![format!("kernel={kind}")];
    if let Some(obj) = json.as_object() {
        for (k, v) in obj {
            if k != "kernel" {
                features.push(format!("{kind}.{k}={v}"));
            }
        }
    }
    if big_smem {
        features.push(format!("{kind}.smem>48KiB"));
    }
    Candidate {
        tag: c.tag(),
        json,
        features,
    }
}

/// Default and search space of a template without big shared memory.
fn plain<C: KernelConfig>(shape: &C::Shape) -> (Candidate, Vec<Candidate>) {
    let space = C::search_space(shape);
    (
        candidate(&C::default_for(shape), false),
        space.iter().map(|c| candidate(c, false)).collect(),
    )
}

fn dense_smem(c: &DenseConfig, shape: &ConvShape) -> usize {
    match c {
        DenseConfig::Mma(m) => m.smem_bytes(shape),
        DenseConfig::Wgmma(m) => m.smem_bytes(shape),
        DenseConfig::Simt(s) => s.smem_bytes(),
        DenseConfig::Gemv(_) => 0,
    }
}

const SMEM_DEFAULT: usize = 48 * 1024;

/// Configs per task: `AOTUNE_SWEEP_CONFIGS` (a number or `all`), default 12.
fn sample_size() -> usize {
    match std::env::var("AOTUNE_SWEEP_CONFIGS").ok().as_deref() {
        Some("all") => usize::MAX,
        Some(n) => n.parse().ok().filter(|&n| n > 0).unwrap_or(12),
        None => 12,
    }
}

/// The default first, then greedily the config covering the most
/// not-yet-covered feature values, then evenly spaced ones, up to `n`.
fn cover_sample(default: Candidate, space: Vec<Candidate>, n: usize) -> Vec<Candidate> {
    let mut chosen = vec![default];
    let mut covered: BTreeSet<String> = chosen[0].features.iter().cloned().collect();
    let mut taken = vec![false; space.len()];
    if let Some(i) = space.iter().position(|c| c.json == chosen[0].json) {
        taken[i] = true;
    }
    while chosen.len() < n {
        let best = space
            .iter()
            .enumerate()
            .filter(|(i, _)| !taken[*i])
            .map(|(i, c)| {
                (
                    c.features.iter().filter(|f| !covered.contains(*f)).count(),
                    i,
                )
            })
            .max_by_key(|&(new, i)| (new, std::cmp::Reverse(i)));
        match best {
            Some((new, i)) if new > 0 => {
                taken[i] = true;
                covered.extend(space[i].features.iter().cloned());
                chosen.push(space[i].clone());
            }
            _ => break,
        }
    }
    let left = n.saturating_sub(chosen.len());
    let free: Vec<usize> = (0..space.len()).filter(|&i| !taken[i]).collect();
    if left > 0 && !free.is_empty() {
        let picks = left.min(free.len());
        for j in 0..picks {
            let at = if picks == 1 {
                0
            } else {
                j * (free.len() - 1) / (picks - 1)
            };
            chosen.push(space[free[at]].clone());
        }
    }
    chosen
}

/// One tuned task of a variant and the configs it is swept over.
#[derive(Debug, Clone)]
struct Swept {
    hash: String,
    op: String,
    key: String,
    template: String,
    configs: Vec<Candidate>,
    /// Size of the whole search space.
    space: usize,
    /// Distinct config field values in the space, and in the sample.
    values: usize,
    values_sampled: usize,
}

fn sweeps(
    graph: &Graph,
    plan: &MemoryPlan,
    tasks: &[aotune_compiler::schedule::Task],
    n: usize,
) -> Result<Vec<Swept>, String> {
    let versions = template_versions();
    let mut out = Vec::new();
    for task in tasks {
        let node = task.nodes[0];
        let op = &graph.node(node).op;
        let output = graph.node(node).output;
        if op.is_view() && plan.buffer(output).is_some_and(|b| b.alias_of.is_some()) {
            continue; // an aliased view: no kernel
        }
        let linear = |items: LinearShape| {
            let d = LinearConfig::default_for(&items);
            let space = LinearConfig::search_space(&items);
            (
                candidate(&d, false),
                space
                    .iter()
                    .map(|c| candidate(c, false))
                    .collect::<Vec<_>>(),
            )
        };
        let (default, space) = match op {
            Op::FusedConv { norm: Some(_), .. } => {
                let shape = depthwise_norm_shape(graph, node)?;
                let d = DepthwiseNormConfig::default_for(&shape);
                let space = DepthwiseNormConfig::search_space(&shape);
                let big = |c: &DepthwiseNormConfig| c.smem_bytes(&shape) > SMEM_DEFAULT;
                (
                    candidate(&d, big(&d)),
                    space.iter().map(|c| candidate(c, big(c))).collect(),
                )
            }
            Op::FusedConv { .. } | Op::Conv(_) => {
                let shape = conv_shape(graph, node)?;
                let d = ConvConfig::default_for(&shape);
                let space = ConvConfig::search_space(&shape);
                (
                    candidate(&d, d.smem(&shape) > SMEM_DEFAULT),
                    space
                        .iter()
                        .map(|c| candidate(c, c.smem(&shape) > SMEM_DEFAULT))
                        .collect::<Vec<_>>(),
                )
            }
            Op::Dense { .. } => {
                let shape = dense_shape(graph, node)?;
                let d = DenseConfig::default_for(&shape);
                let space = DenseConfig::search_space(&shape);
                (
                    candidate(&d, dense_smem(&d, &shape) > SMEM_DEFAULT),
                    space
                        .iter()
                        .map(|c| candidate(c, dense_smem(c, &shape) > SMEM_DEFAULT))
                        .collect(),
                )
            }
            Op::MaxPool(_) | Op::AveragePool { .. } => linear(pool_shape(graph, node)?.items()),
            Op::GlobalAveragePool | Op::GlobalMaxPool
                if global_pool_shape(graph, node).is_some() =>
            {
                plain::<GlobalPoolConfig>(&global_pool_shape(graph, node).ok_or("no NHWC pool")?)
            }
            Op::GlobalAveragePool | Op::GlobalMaxPool | Op::ReduceMean { .. } => {
                linear(reduce_shape(graph, node)?.items())
            }
            Op::Convert | Op::PadChannels { .. } if to_nhwc_shape(graph, node)?.is_some() => {
                plain::<ToNhwcConfig>(&to_nhwc_shape(graph, node)?.ok_or("no NHWC conversion")?)
            }
            Op::SpaceToDepth { .. } => {
                plain::<SpaceToDepthConfig>(&space_to_depth_shape(graph, node)?)
            }
            Op::Softmax { .. } => linear(softmax_shape(graph, node)?.items()),
            Op::Gemm { .. } | Op::MatMul => {
                let shape = matmul_shape(graph, node)?;
                let d = MatmulConfig::default_for(&shape);
                let space = MatmulConfig::search_space(&shape);
                (
                    candidate(&d, false),
                    space.iter().map(|c| candidate(c, false)).collect(),
                )
            }
            _ => linear(elt_shape(graph, node)?.items()),
        };
        // Ops the tuner does not tune have no template version; the build
        // applies their records all the same.
        let template = versions
            .get(&task.key.op)
            .cloned()
            .unwrap_or_else(|| "-".into());
        if space.is_empty() {
            return Err(format!(
                "task {} ({}) has an empty search space",
                task.key.hash_hex(),
                task.key.op
            ));
        }
        let all: BTreeSet<String> = space
            .iter()
            .flat_map(|c| c.features.iter().cloned())
            .collect();
        let values = all.len();
        let size = space.len();
        let configs = cover_sample(default, space, n);
        let sampled: BTreeSet<&String> = configs.iter().flat_map(|c| c.features.iter()).collect();
        out.push(Swept {
            hash: task.key.hash_hex(),
            op: task.key.op.clone(),
            key: task.key.canonical.clone(),
            template,
            values_sampled: sampled.iter().filter(|f| all.contains(f.as_str())).count(),
            configs,
            space: size,
            values,
        });
    }
    Ok(out)
}

/// The tuning log of build `index`: config `index` (cyclically) of every task.
fn best_log(sweeps: &[Swept], index: usize) -> BestLog {
    BestLog {
        format: BEST_FORMAT.to_string(),
        records: sweeps
            .iter()
            .map(|s| BestRecord {
                task: s.hash.clone(),
                op: s.op.clone(),
                key: s.key.clone(),
                template: s.template.clone(),
                config: s.configs[index % s.configs.len()].json.clone(),
                median_us: 1.0,
                target: Target {
                    gpu: "gpu_kernels test".into(),
                    sm: "90".into(),
                    driver: "-".into(),
                    cuda: "-".into(),
                    timing: Default::default(),
                },
            })
            .collect(),
    }
}

/// One (model, precision, batch).
struct Variant {
    label: String,
    precision: Precision,
    batch: usize,
    sweeps: Vec<Swept>,
    builds: usize,
}

struct Job {
    variant: usize,
    index: usize,
}

/// A finished build and the CPU's answers for its graph.
struct Done {
    variant: usize,
    index: usize,
    result: Result<Checked, String>,
}

struct Checked {
    built: Built,
    input: Vec<f32>,
    /// CPU reference of the optimized graph (same precision).
    emulated: Vec<f32>,
    /// Every node's output on the CPU, node order.
    traced: Vec<Vec<f32>>,
    /// CPU reference of the imported graph (fp32).
    reference: Vec<f32>,
    seconds: f64,
}

/// Worst error seen per template and precision.
#[derive(Default)]
struct Stats {
    worst: BTreeMap<String, BTreeMap<String, (f64, String)>>,
    kernels: BTreeMap<String, BTreeSet<String>>,
    spills: BTreeMap<String, usize>,
    failures: Vec<String>,
    builds: usize,
    build_seconds: f64,
}

impl Stats {
    fn note(
        &mut self,
        template: &str,
        precision: Precision,
        err: f64,
        at: impl FnOnce() -> String,
    ) {
        let slot = self
            .worst
            .entry(template.to_string())
            .or_default()
            .entry(precision.to_string())
            .or_insert((0.0, String::new()));
        if err > slot.0 || err.is_nan() {
            *slot = (err, at());
        }
    }

    fn fail(&mut self, message: String) {
        eprintln!("FAIL {message}");
        self.failures.push(message);
    }

    fn report(&self, test: &str) {
        println!("{test}: {} builds ({:.0} s of build time); worst rel. L2 per template vs the CPU emulation of the same graph:", self.builds, self.build_seconds);
        let precisions: Vec<String> = Precision::ALL.iter().map(|p| p.to_string()).collect();
        println!(
            "  {:<14} {}  kernels  worst at",
            "template",
            precisions
                .iter()
                .map(|p| format!("{p:>9}"))
                .collect::<String>()
        );
        let empty = BTreeMap::new();
        let templates: BTreeSet<&String> = self.worst.keys().chain(self.kernels.keys()).collect();
        for template in templates {
            let by_p = self.worst.get(template).unwrap_or(&empty);
            let cells: String = precisions
                .iter()
                .map(|p| match by_p.get(p) {
                    Some((e, _)) => format!("{e:>9.2e}"),
                    None => format!("{:>9}", "-"),
                })
                .collect();
            let worst = by_p
                .values()
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|w| w.1.as_str())
                .unwrap_or("");
            println!(
                "  {template:<14} {cells}  {:>7}  {worst}",
                self.kernels.get(template).map_or(0, BTreeSet::len)
            );
        }
        for (template, n) in &self.spills {
            println!("  note: {n} {template} kernel(s) spill registers (ptxas)");
        }
    }
}

fn compare_build(variant: &Variant, index: usize, checked: Checked, mode: Mode, stats: &mut Stats) {
    let Checked {
        built,
        input,
        emulated,
        traced,
        reference,
        seconds,
    } = checked;
    stats.builds += 1;
    stats.build_seconds += seconds;
    let p = variant.precision;
    let tol = gpu::tolerance(p);
    let what = format!("{} build {index}", variant.label);
    let spec = &built.spec;
    for symbol in spec.kernels.iter() {
        let template = gpu::template_of(symbol);
        stats
            .kernels
            .entry(template)
            .or_default()
            .insert(format!("{p} {symbol}"));
    }
    count_spills(&built.ptxas_log, stats);
    let mut model = match gpu::load(&built.dir, mode) {
        Ok(Some(model)) => model,
        Ok(None) => {
            gpu::discard_build(&built.dir);
            return;
        }
        Err(e) => {
            stats.fail(format!("{what}: {e}"));
            return;
        }
    };
    let mut out = vec![f32::NAN; spec.outputs[0].elements()];
    if let Err(e) = model.infer(&input, &mut out) {
        stats.fail(format!("{what}: infer: {e}"));
        return;
    }
    let mut again = vec![f32::NAN; out.len()];
    if let Err(e) = model.infer(&input, &mut again) {
        stats.fail(format!("{what}: second infer: {e}"));
        return;
    }
    if out
        .iter()
        .zip(&again)
        .any(|(a, b)| a.to_bits() != b.to_bits())
    {
        stats.fail(format!(
            "{what}: two runs of the same input differ (split-K counters or races?)"
        ));
    }
    if out.iter().any(|x| !x.is_finite()) {
        stats.fail(format!("{what}: the output holds NaN or infinity"));
    }
    let err_emu = rel_l2(&out, &emulated);
    let err_ref = rel_l2(&out, &reference);
    stats.note("(model output)", p, err_emu, || what.clone());
    // Against the fp32 reference of the imported graph, DESIGN's bar for
    // the precision; against the emulation of the same precision, the
    // tighter one.
    let tol_ref = gpu::tolerance_vs_fp32(p);
    if gpu::exceeds(err_emu, tol) {
        stats.fail(format!(
            "{what}: output vs CPU emulation rel. L2 {err_emu:.3e} > {tol:e}"
        ));
    }
    if gpu::exceeds(err_ref, tol_ref) {
        stats.fail(format!(
            "{what}: output vs fp32 reference rel. L2 {err_ref:.3e} > {tol_ref:e}"
        ));
    }
    let graph = &built.compiled.graph;
    let node_of: HashMap<&str, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (graph.value(n.output).name.as_str(), i))
        .collect();
    let mut layer_failures = Vec::new();
    let mut layer_errors = Vec::new();
    let ran = model.run_layers(&input, |i, slot, bytes| {
        let got = aotune::runtime::decode_slot(slot, bytes);
        let launch = &spec.launches[i];
        let symbol = spec.kernels[launch.kernel as usize].to_string();
        let Some(&node) = node_of.get(&*slot.name) else {
            layer_failures.push(format!(
                "launch {i} writes '{}', which no node of the graph outputs",
                slot.name
            ));
            return true;
        };
        let err = rel_l2(&got, &traced[node]);
        if gpu::exceeds(err, tol) {
            layer_failures.push(format!(
                "launch {i} node '{}' kernel {symbol}: rel. L2 {err:.3e} > {tol:e} vs the CPU",
                launch.node
            ));
        }
        layer_errors.push((gpu::template_of(&symbol), err, format!("{what} {symbol}")));
        true
    });
    if let Err(e) = ran {
        stats.fail(format!("{what}: run_layers: {e}"));
    }
    // The captured graph still gives the same bits after launch-by-launch runs.
    match model.infer(&input, &mut again) {
        Ok(())
            if out
                .iter()
                .zip(&again)
                .all(|(a, b)| a.to_bits() == b.to_bits()) => {}
        Ok(()) => stats.fail(format!(
            "{what}: infer after run_layers differs from the first infer"
        )),
        Err(e) => stats.fail(format!("{what}: infer after run_layers: {e}")),
    }
    for (template, err, at) in layer_errors {
        stats.note(&template, p, err, || at);
    }
    for f in layer_failures {
        stats.fail(format!("{what}: {f}"));
    }
    drop(model);
    gpu::discard_build(&built.dir);
}

fn count_spills(ptxas_log: &str, stats: &mut Stats) {
    let mut function = "";
    for line in ptxas_log.lines() {
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            function = rest.trim();
        } else if line.contains("bytes spill stores") && !line.contains(" 0 bytes spill stores") {
            *stats.spills.entry(gpu::template_of(function)).or_default() += 1;
        }
    }
}

/// Builds, runs and checks every variant of `net` over the precisions and
/// batches given; fails listing every disagreement.
fn sweep(test: &str, net: fn() -> Net, batches: &[usize]) {
    let Some(mode) = gpu::mode_or_skip(test) else {
        return;
    };
    let started = Instant::now();
    let tmp = TempDir::new(&format!("gpu-kernels-{test}"));
    let onnx = tmp.path().join(format!("{test}.onnx"));
    std::fs::write(&onnx, net().finish()).expect("write test model");
    let model_bytes = std::fs::read(&onnx).expect("read test model");
    let n = sample_size();
    let mut variants = Vec::new();
    let filter = std::env::var("AOTUNE_SWEEP_FILTER").unwrap_or_default();
    for &precision in &Precision::ALL {
        for &batch in batches {
            let label = format!("{test} {precision} b{batch}");
            if !label.contains(filter.as_str()) {
                continue;
            }
            // The depthwise conv + LayerNorm fusion is opt-in; the nets
            // that have the pair test the fused kernel.
            let options = CompileOptions {
                batch: Some(batch),
                precision,
                channels_last: true,
                fuse_depthwise_norm: true,
                ..Default::default()
            };
            let compiled = compile_bytes(&model_bytes, test, &options)
                .unwrap_or_else(|e| panic!("{test} {precision} b{batch}: compile: {e}"));
            let sweeps = sweeps(&compiled.graph, &compiled.plan, &compiled.tasks, n)
                .unwrap_or_else(|e| panic!("{test} {precision} b{batch}: {e}"));
            let builds = sweeps.iter().map(|s| s.configs.len()).max().unwrap_or(1);
            println!(
                "{label}: {} swept tasks, {} of {} configs, {} of {} config field values",
                sweeps.len(),
                sweeps.iter().map(|s| s.configs.len()).sum::<usize>(),
                sweeps.iter().map(|s| s.space).sum::<usize>(),
                sweeps.iter().map(|s| s.values_sampled).sum::<usize>(),
                sweeps.iter().map(|s| s.values).sum::<usize>(),
            );
            variants.push(Variant {
                label,
                precision,
                batch,
                sweeps,
                builds,
            });
        }
    }
    let jobs: Vec<Job> = variants
        .iter()
        .enumerate()
        .flat_map(|(v, var)| (0..var.builds).map(move |index| Job { variant: v, index }))
        .collect();
    println!(
        "{test}: {} builds over {} variants (up to {n} configs per tuned task), {} at a time",
        jobs.len(),
        variants.len(),
        gpu::jobs()
    );
    let work = |job: Job| -> Done {
        let v = &variants[job.variant];
        Done {
            variant: job.variant,
            index: job.index,
            result: gpu::catch(|| build_and_reference(v, job.index, &onnx, tmp.path())),
        }
    };
    let mut stats = Stats::default();
    gpu::pipeline(jobs, work, |done: Done| {
        let v = &variants[done.variant];
        match done.result {
            Ok(checked) => compare_build(v, done.index, checked, mode, &mut stats),
            Err(e) => stats.fail(format!("{} build {}: {e}", v.label, done.index)),
        }
    });
    stats.report(test);
    println!("{test}: {:.0} s", started.elapsed().as_secs_f64());
    let shown: Vec<&String> = stats.failures.iter().take(40).collect();
    assert!(
        stats.failures.is_empty(),
        "{test}: {} failure(s):\n{}",
        stats.failures.len(),
        shown
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Worker side: write the log, build (nvcc), check the configs landed, run
/// the CPU references.
fn build_and_reference(
    v: &Variant,
    index: usize,
    onnx: &std::path::Path,
    tmp: &std::path::Path,
) -> Result<Checked, String> {
    let started = Instant::now();
    let dir: PathBuf = tmp.join(format!(
        "{}_{}_b{}_{index}",
        v.label.split(' ').next().unwrap_or("m"),
        v.precision,
        v.batch
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let log = best_log(&v.sweeps, index);
    let log_path = dir.join("best.json");
    std::fs::write(&log_path, log.to_json()).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let built = Build::new(onnx)
        .batch(v.batch)
        .precision(v.precision)
        .tuning(&log_path)
        .name("k")
        .out_dir(&dir)
        .compile()
        .map_err(|e| format!("build: {e}"))?
        .into_iter()
        .next()
        .ok_or("the build returned nothing")?;
    let rejected: Vec<&String> = built
        .notes
        .iter()
        .filter(|n| n.contains("using the default") || n.contains("ignored"))
        .collect();
    if !rejected.is_empty() {
        return Err(format!("tuned configs not applied: {rejected:?}"));
    }
    for s in &v.sweeps {
        let tag = &s.configs[index % s.configs.len()].tag;
        let found = built
            .spec
            .kernels
            .iter()
            .any(|k| k.contains(&s.hash[..8]) && k.ends_with(&format!("_{tag}")));
        if !found {
            return Err(format!(
                "task {} ({}): no kernel with config tag {tag} among {:?}",
                s.hash, s.op, built.spec.kernels
            ));
        }
    }
    let input = fill(7 + index as u64, 0.0, 1.0, built.spec.inputs[0].elements());
    let opts = RunOptions::default();
    let graph = &built.compiled.graph;
    let emulated = run(graph, &[&input], &opts)
        .map_err(|e| format!("CPU emulation: {e}"))?
        .swap_remove(0);
    let traced = run_traced(graph, &[&input], &opts).map_err(|e| format!("CPU trace: {e}"))?;
    let reference = run(&built.compiled.imported, &[&input], &opts)
        .map_err(|e| format!("CPU reference: {e}"))?
        .swap_remove(0);
    Ok(Checked {
        built,
        input,
        emulated,
        traced,
        reference,
        seconds: started.elapsed().as_secs_f64(),
    })
}

// ---- tests --------------------------------------------------------------------------

#[test]
fn c16_convs_pools_and_head() {
    sweep("c16", net_c16, &[1, 3]);
}

#[test]
fn stem_c3() {
    sweep("stem", net_stem, &[1, 3]);
}

#[test]
fn space_to_depth_stems() {
    sweep("s2d", net_s2d, &[1, 3]);
}

#[test]
fn odd_channels_c5_k7() {
    sweep("odd", net_odd, &[1, 3]);
}

#[test]
fn tiny_spatial_split_k() {
    sweep("tiny", net_tiny, &[1, 3]);
}

#[test]
fn dense_m1_m3_m8() {
    sweep("dense", net_dense, &[1, 3, 8]);
}

#[test]
fn dense_gelu_and_residual_epilogues_m1_m8_m197() {
    sweep("dense_gelu", net_dense_gelu, &[1, 8, 197]);
}

#[test]
fn transformer_mlp_m197() {
    sweep("mlp", net_mlp, &[1]);
}

#[test]
fn conv_gelu_epilogues() {
    sweep("conv_gelu", net_conv_gelu, &[1, 3]);
}

#[test]
fn depthwise_conv_with_layer_norm() {
    sweep("conv_norm", net_conv_norm, &[1, 3]);
}

#[test]
fn elementwise_softmax_matmul() {
    sweep("misc", net_misc, &[1, 3]);
}

/// Without a GPU: the test models import, optimize into the intended ops,
/// and every tuned task has a non-empty sample whose configs are valid.
#[test]
fn test_models_compile_and_sample() {
    for (name, net) in [
        ("c16", net_c16 as fn() -> Net),
        ("stem", net_stem),
        ("s2d", net_s2d),
        ("odd", net_odd),
        ("tiny", net_tiny),
        ("dense", net_dense),
        ("misc", net_misc),
        ("dense_gelu", net_dense_gelu),
        ("mlp", net_mlp),
        ("conv_gelu", net_conv_gelu),
        ("conv_norm", net_conv_norm),
    ] {
        let bytes = net().finish();
        for precision in [Precision::Fp32, Precision::Fp16] {
            let options = CompileOptions {
                batch: Some(3),
                precision,
                channels_last: true,
                fuse_depthwise_norm: true,
                ..Default::default()
            };
            let compiled = compile_bytes(&bytes, name, &options)
                .unwrap_or_else(|e| panic!("{name} {precision}: {e}"));
            let sw = sweeps(&compiled.graph, &compiled.plan, &compiled.tasks, 12)
                .unwrap_or_else(|e| panic!("{name} {precision}: {e}"));
            assert!(!sw.is_empty(), "{name}: no task to sweep");
            // Code generation (no nvcc) accepts every node, with every sampled config.
            for i in 0..sw.iter().map(|s| s.configs.len()).max().unwrap_or(1) {
                let overrides = ConfigOverrides {
                    by_task: sw
                        .iter()
                        .map(|s| (s.hash.clone(), s.configs[i % s.configs.len()].json.clone()))
                        .collect(),
                };
                let module = generate_cuda(&compiled.graph, &compiled.plan, &overrides)
                    .unwrap_or_else(|e| panic!("{name} {precision} configs {i}: {e}"));
                assert!(
                    module.warnings.is_empty(),
                    "{name} {precision}: {:?}",
                    module.warnings
                );
            }
            for s in &sw {
                assert!(
                    !s.configs.is_empty() && s.configs.len() <= 12,
                    "{name}: {}",
                    s.op
                );
                let distinct: BTreeSet<String> =
                    s.configs.iter().map(|c| c.json.to_string()).collect();
                assert_eq!(distinct.len(), s.configs.len(), "{name}: duplicate configs");
            }
            let counts = op_counts(&compiled.graph);
            println!(
                "{name} {precision}: {counts:?}; {} swept tasks, configs {:?}",
                sw.len(),
                sw.iter().map(|s| s.configs.len()).collect::<Vec<_>>()
            );
            let expect_dense = matches!(
                name,
                "c16" | "odd" | "tiny" | "dense" | "dense_gelu" | "mlp"
            );
            if name == "misc" {
                for op in [
                    "Softmax",
                    "Gemm",
                    "BatchNormalization",
                    "GlobalMaxPool",
                    "Sum",
                ] {
                    assert!(counts.contains_key(op), "{name}: no {op} in {counts:?}");
                }
            }
            assert_eq!(
                counts.contains_key("Dense"),
                expect_dense,
                "{name}: {counts:?}"
            );
            if !matches!(name, "dense" | "misc" | "dense_gelu" | "mlp") {
                assert!(counts.contains_key("FusedConv"), "{name}: {counts:?}");
                assert!(!counts.contains_key("Conv"), "{name}: unfused Conv left");
            }
            if name == "dense" {
                assert_eq!(counts.get("Dense"), Some(&4), "{name}: {counts:?}");
            }
            // Every GELU, residual Add and layer scale of the GELU models
            // is an epilogue: only views, the output Concat and the kernels
            // with epilogues are left.
            if matches!(name, "dense_gelu" | "mlp" | "conv_gelu") {
                for op in ["Gelu", "Erf", "Add", "Mul", "Div"] {
                    assert!(!counts.contains_key(op), "{name}: {op} left in {counts:?}");
                }
                let epilogues: BTreeSet<String> = compiled
                    .graph
                    .nodes
                    .iter()
                    .filter_map(|n| match n.op {
                        Op::Dense { epilogue, .. } | Op::FusedConv { epilogue, .. } => {
                            Some(epilogue.to_string())
                        }
                        _ => None,
                    })
                    .collect();
                let want: &[&str] = match name {
                    "dense_gelu" => &[
                        "bias+gelu",
                        "bias+gelu_tanh",
                        "bias+residual",
                        "bias+residual+gelu",
                    ],
                    "mlp" => &["bias+gelu", "bias+residual", "bias+residual+gelu_tanh"],
                    _ => &["bias+gelu", "bias+residual+gelu_tanh"],
                };
                let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
                assert_eq!(epilogues, want, "{name} {precision}");
            }
            // Every LayerNorm of the conv_norm model joins its depthwise conv.
            if name == "conv_norm" {
                assert!(
                    !counts.contains_key("LayerNormalization"),
                    "{name}: {counts:?}"
                );
                let normed = compiled
                    .graph
                    .nodes
                    .iter()
                    .filter(|n| matches!(n.op, Op::FusedConv { norm: Some(_), .. }))
                    .count();
                assert_eq!(normed, 3, "{name} {precision}");
                assert!(sw.iter().any(|s| s.key.contains("layernorm")), "{name}");
            }
            // At f16 the s2d convs read three space-to-depth images (the
            // two 3×3s share one), and nothing else reads any.
            let images = counts.get("SpaceToDepth").copied().unwrap_or(0);
            let want = if name == "s2d" && precision == Precision::Fp16 {
                3
            } else {
                0
            };
            assert_eq!(images, want, "{name} {precision}: {counts:?}");
        }
    }
    // The fp16 conv sample covers both tensor-core and SIMT kernels, and split-K.
    let bytes = net_tiny().finish();
    let options = CompileOptions {
        batch: Some(1),
        precision: Precision::Fp16,
        channels_last: true,
        ..Default::default()
    };
    let compiled = compile_bytes(&bytes, "tiny", &options).unwrap();
    let sw = sweeps(&compiled.graph, &compiled.plan, &compiled.tasks, 12).unwrap();
    let features: BTreeSet<&str> = sw
        .iter()
        .flat_map(|s| {
            s.configs
                .iter()
                .flat_map(|c| c.features.iter().map(String::as_str))
        })
        .collect();
    for f in ["kernel=mma", "kernel=wgmma", "kernel=simt"] {
        assert!(features.contains(f), "{f} not sampled: {features:?}");
    }
    // Split-K of every tiled template (the slice counts sampled vary).
    for kernel in ["mma", "wgmma", "simt"] {
        let split = features.iter().any(|f| {
            f.strip_prefix(&format!("{kernel}.split_k="))
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n > 1)
        });
        assert!(split, "{kernel} split-K not sampled: {features:?}");
    }
}

fn op_counts(graph: &Graph) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for n in &graph.nodes {
        *counts.entry(n.op.kind()).or_insert(0) += 1;
    }
    counts
}
