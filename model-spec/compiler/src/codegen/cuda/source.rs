//! Rendering primitives: C++ names of storage types, exact float literals,
//! the per-instantiation parameter struct, the `extern "C"` wrapper and the
//! embedded `.cu` templates. The bottom of code generation: it imports no
//! template (`assemble.rs` puts a module together).
//!
//! An instantiation is a `struct <symbol>_p` of `static constexpr` members
//! (shape, dtypes, epilogue, config) plus, where a template needs index
//! plumbing, small `static __device__` functions; the wrapper
//! `extern "C" __global__ void <symbol>(pointers…)` calls the template with
//! it. Nothing but pointers crosses the launch.

use crate::ir::DType;
use std::fmt::Write;

/// The `.cu` template files, embedded; each is included at most once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Template {
    /// `activate` specializations for the GELU epilogues: included only by
    /// the modules whose instantiations use them ([`Instance::helpers`]).
    EpilogueGelu,
    ConvSimt,
    ConvMma,
    ConvWgmma,
    /// `conv_wgmma.cu`'s warp-specialized, persistent form.
    ConvWgmmaWs,
    ConvDirect,
    DenseGemv,
    Pool,
    Reduce,
    Elementwise,
    Matmul,
    Attention,
    Rows,
    Movement,
}

impl Template {
    pub fn file_name(self) -> &'static str {
        match self {
            Template::EpilogueGelu => "epilogue_gelu.cuh",
            Template::ConvSimt => "conv_simt.cu",
            Template::ConvMma => "conv_mma.cu",
            Template::ConvWgmma => "conv_wgmma.cu",
            Template::ConvWgmmaWs => "conv_wgmma_ws.cu",
            Template::ConvDirect => "conv_direct.cu",
            Template::DenseGemv => "dense_gemv.cu",
            Template::Pool => "pool.cu",
            Template::Reduce => "reduce.cu",
            Template::Elementwise => "elementwise.cu",
            Template::Matmul => "matmul.cu",
            Template::Attention => "attention.cu",
            Template::Rows => "rows.cu",
            Template::Movement => "movement.cu",
        }
    }

    pub fn source(self) -> &'static str {
        match self {
            Template::EpilogueGelu => include_str!("templates/epilogue_gelu.cuh"),
            Template::ConvSimt => include_str!("templates/conv_simt.cu"),
            Template::ConvMma => include_str!("templates/conv_mma.cu"),
            Template::ConvWgmma => include_str!("templates/conv_wgmma.cu"),
            Template::ConvWgmmaWs => include_str!("templates/conv_wgmma_ws.cu"),
            Template::ConvDirect => include_str!("templates/conv_direct.cu"),
            Template::DenseGemv => include_str!("templates/dense_gemv.cu"),
            Template::Pool => include_str!("templates/pool.cu"),
            Template::Reduce => include_str!("templates/reduce.cu"),
            Template::Elementwise => include_str!("templates/elementwise.cu"),
            Template::Matmul => include_str!("templates/matmul.cu"),
            Template::Attention => include_str!("templates/attention.cu"),
            Template::Rows => include_str!("templates/rows.cu"),
            Template::Movement => include_str!("templates/movement.cu"),
        }
    }
}

impl Template {
    /// Templates whose helpers this one uses (included before it).
    pub fn requires(self) -> &'static [Template] {
        match self {
            Template::ConvWgmma => &[Template::ConvMma],
            Template::ConvWgmmaWs => &[Template::ConvMma, Template::ConvWgmma],
            Template::Rows => &[Template::Reduce],
            _ => &[],
        }
    }
}

/// Device helpers every module starts with.
pub const COMMON: &str = include_str!("templates/common.cuh");

/// C++ name of a storage type.
pub fn ctype(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float",
        DType::F16 => "__half",
        DType::BF16 => "__nv_bfloat16",
    }
}

/// A C++ `float` constant expression equal to `x` bit for bit (Rust prints
/// the shortest decimal that round-trips, which C++ parses back to the same
/// float). NaN and the infinities are bit casts: NVRTC knows neither
/// `__builtin_huge_valf` nor `__builtin_nanf`, and `__int_as_float` is not
/// `constexpr`.
pub fn f32_literal(x: f32) -> String {
    if x.is_nan() || x.is_infinite() {
        format!("__builtin_bit_cast(float, {:#010x}u)", x.to_bits())
    } else {
        let s = format!("{x:?}");
        let s = if s.contains(['.', 'e', 'E']) {
            s
        } else {
            format!("{s}.0")
        };
        format!("{s}f")
    }
}

/// Builder of an instantiation's parameter struct.
#[derive(Debug, Clone)]
pub struct Params {
    name: String,
    lines: Vec<String>,
}

impl Params {
    pub fn new(name: impl Into<String>) -> Self {
        Params {
            name: name.into(),
            lines: Vec::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `typedef <ctype> alias;`
    pub fn ty(&mut self, alias: &str, dtype: DType) -> &mut Self {
        self.lines
            .push(format!("typedef {} {alias};", ctype(dtype)));
        self
    }

    /// `static constexpr int name = value;` (values are checked to fit an
    /// `int` by the callers, which reject tensors of 2^31 elements or more).
    pub fn int(&mut self, name: &str, value: impl Into<i64>) -> &mut Self {
        self.lines
            .push(format!("static constexpr int {name} = {};", value.into()));
        self
    }

    /// Several ints on one line, for readability of shapes.
    pub fn ints(&mut self, items: &[(&str, i64)]) -> &mut Self {
        let body: Vec<String> = items.iter().map(|(n, v)| format!("{n} = {v}")).collect();
        self.lines
            .push(format!("static constexpr int {};", body.join(", ")));
        self
    }

    /// `static constexpr int name = expr;` for a constant named by a
    /// template (e.g. `aotune::ACT_GELU`).
    pub fn int_expr(&mut self, name: &str, expr: &str) -> &mut Self {
        self.lines
            .push(format!("static constexpr int {name} = {expr};"));
        self
    }

    pub fn boolean(&mut self, name: &str, value: bool) -> &mut Self {
        self.lines
            .push(format!("static constexpr bool {name} = {value};"));
        self
    }

    pub fn float(&mut self, name: &str, value: f32) -> &mut Self {
        self.lines.push(format!(
            "static constexpr float {name} = {};",
            f32_literal(value)
        ));
        self
    }

    /// A `static __device__ __forceinline__ int name(int j)`-style function;
    /// `signature` is e.g. `int src(int i, int j)`, `body` its statements.
    pub fn func(&mut self, signature: &str, body: &str) -> &mut Self {
        self.lines.push(format!(
            "static __device__ __forceinline__ {signature} {{ {body} }}"
        ));
        self
    }

    pub fn render(&self) -> String {
        let mut s = format!("struct {} {{\n", self.name);
        for line in &self.lines {
            let _ = writeln!(s, "  {line}");
        }
        s.push_str("};\n");
        s
    }
}

/// One pointer parameter of a kernel.
#[derive(Debug, Clone)]
pub struct Arg {
    pub name: String,
    pub dtype: DType,
    /// The output (non-const); every other pointer is a read-only input.
    pub output: bool,
}

impl Arg {
    pub fn input(name: impl Into<String>, dtype: DType) -> Self {
        Arg {
            name: name.into(),
            dtype,
            output: false,
        }
    }

    pub fn output(name: impl Into<String>, dtype: DType) -> Self {
        Arg {
            name: name.into(),
            dtype,
            output: true,
        }
    }
}

pub use aotune_spec::launch::PROGRAMMATIC_MAX_BATCH;

/// Where a kernel waits for the previous one under a programmatic dependent
/// launch and lets the next one start (`common.cuh`): both at entry, or
/// inside its template, which reads its first weight tiles before the wait
/// and lets the next kernel start after its k loop (the tensor-core convs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DependencyWait {
    AtEntry,
    InTemplate,
}

/// `extern "C" __global__ void __launch_bounds__(threads) symbol(args) { call; }`
pub fn wrapper(symbol: &str, threads: u32, args: &[Arg], call: &str) -> String {
    wrapper_with_attributes(
        symbol,
        &format!("__launch_bounds__({threads})"),
        DependencyWait::AtEntry,
        args,
        call,
    )
}

/// [`tiled_wrapper`] for a kernel whose CTAs run in thread-block clusters
/// of `cluster_z` along z (`__cluster_dims__(1, 1, cluster_z)`, sm_90):
/// the grid's z extent must be a multiple of it.
pub fn clustered_wrapper(
    symbol: &str,
    threads: u32,
    min_blocks: u32,
    cluster_z: u32,
    wait: DependencyWait,
    args: &[Arg],
    call: &str,
) -> String {
    let attributes = format!(
        "__cluster_dims__(1, 1, {cluster_z}) __launch_bounds__({threads}, {})",
        min_blocks.max(1)
    );
    wrapper_with_attributes(symbol, &attributes, wait, args, call)
}

/// [`wrapper`] for the tiled templates: `__launch_bounds__(threads,
/// min_blocks)`. The minimum block count is the config's: with 1 (the
/// default) ptxas does not cap registers to raise occupancy (at 64 for 128
/// threads it would spill), and the configs' validity rules bound their
/// registers instead; a config asking for more resident CTAs per SM caps
/// them at 65536 / (threads · min_blocks).
pub fn tiled_wrapper(
    symbol: &str,
    threads: u32,
    min_blocks: u32,
    wait: DependencyWait,
    args: &[Arg],
    call: &str,
) -> String {
    wrapper_with_attributes(
        symbol,
        &format!("__launch_bounds__({threads}, {})", min_blocks.max(1)),
        wait,
        args,
        call,
    )
}

/// `extern "C" __global__ void {attributes} symbol(args) { call; }`, the
/// call preceded by the grid dependency wait and `launch_dependents` unless
/// the template places them itself.
fn wrapper_with_attributes(
    symbol: &str,
    attributes: &str,
    wait: DependencyWait,
    args: &[Arg],
    call: &str,
) -> String {
    let params: Vec<String> = args
        .iter()
        .map(|a| {
            format!(
                "{}{}* __restrict__ {}",
                if a.output { "" } else { "const " },
                ctype(a.dtype),
                a.name
            )
        })
        .collect();
    let entry = match wait {
        DependencyWait::AtEntry => {
            "aotune::grid_dependency_wait();\n  aotune::launch_dependents();\n  "
        }
        DependencyWait::InTemplate => "",
    };
    format!(
        "extern \"C\" __global__ void {attributes} {symbol}(\n    {}) {{\n  \
         {entry}{call};\n}}\n",
        params.join(",\n    ")
    )
}

/// Launch geometry of one kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory bytes.
    pub smem_bytes: u32,
}

/// Split-K workspace a kernel needs from the module's static buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Workspace {
    /// f32 partial sums.
    pub partials: usize,
    /// Per-tile arrival counters.
    pub counters: usize,
}

/// One rendered kernel: its symbol, the template it instantiates, its code
/// (parameter struct and wrapper) and how to launch it.
#[derive(Debug, Clone)]
pub struct Instance {
    pub symbol: String,
    pub template: Template,
    /// The config as JSON, for the comment above the instantiation.
    pub config: String,
    pub code: String,
    pub geometry: Geometry,
    pub workspace: Workspace,
}

/// What an instantiation's parameter struct sets its `ACT` to for the
/// exact and the tanh GELU epilogue (constants of `epilogue_gelu.cuh`).
pub const GELU_ACTIVATIONS: [&str; 2] = ["aotune::ACT_GELU", "aotune::ACT_GELU_TANH"];

impl Instance {
    /// Templates the instantiation needs besides its own (and what that
    /// one requires): [`Template::EpilogueGelu`] when its epilogue is a
    /// GELU. They are left out of every other module, so a model without
    /// GELU compiles to the same `kernels.cu` as before they existed.
    pub fn helpers(&self) -> impl Iterator<Item = Template> {
        GELU_ACTIVATIONS
            .iter()
            .any(|act| self.code.contains(act))
            .then_some(Template::EpilogueGelu)
            .into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_literals_round_trip() {
        assert_eq!(f32_literal(6.0), "6.0f");
        assert_eq!(f32_literal(0.1), "0.1f");
        assert_eq!(f32_literal(-1e-30), "-1e-30f");
        assert_eq!(
            f32_literal(f32::INFINITY),
            "__builtin_bit_cast(float, 0x7f800000u)"
        );
        assert_eq!(
            f32_literal(f32::NEG_INFINITY),
            "__builtin_bit_cast(float, 0xff800000u)"
        );
        for x in [0.1f32, 1.0 / 3.0, 1e-42, 3.4028235e38] {
            let lit = f32_literal(x);
            let parsed: f32 = lit.trim_end_matches('f').parse().unwrap();
            assert_eq!(parsed.to_bits(), x.to_bits(), "{lit}");
        }
    }

    #[test]
    fn wrapper_lists_inputs_const_and_the_output_last() {
        let w = wrapper(
            "k",
            128,
            &[Arg::input("x", DType::F16), Arg::output("y", DType::F32)],
            "aotune::f(x, y)",
        );
        assert!(w.contains("const __half* __restrict__ x"), "{w}");
        assert!(w.contains("float* __restrict__ y"), "{w}");
        assert!(w.contains("__launch_bounds__(128) k("), "{w}");
    }
}
