//! Emits `executor.rs`: the model's [`ModelSpec`] as a `static`, one `const`
//! per launch with its node, operands (shape, dtype, layout, arena offset,
//! lifetime) as a doc comment, and the embedded kernels and weights.
//! Generated with `quote!` and formatted with prettyplease; the runtime
//! reads the same data from `manifest.json`, so the two cannot disagree.

use crate::artifact::{Arg, Launch, LibraryMatmul, MatmulActivation, ModelSpec, TensorSlot};
use crate::ir::{DType, Layout, Precision};
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

fn dtype(d: DType) -> TokenStream {
    match d {
        DType::F32 => quote!(::aotune::artifact::DType::F32),
        DType::F16 => quote!(::aotune::artifact::DType::F16),
        DType::BF16 => quote!(::aotune::artifact::DType::BF16),
    }
}

fn layout(l: Layout) -> TokenStream {
    match l {
        Layout::RowMajor => quote!(::aotune::artifact::Layout::RowMajor),
        Layout::ChannelsLast => quote!(::aotune::artifact::Layout::ChannelsLast),
    }
}

fn precision(p: Precision) -> TokenStream {
    match p {
        Precision::Fp32 => quote!(::aotune::artifact::Precision::Fp32),
        Precision::Tf32 => quote!(::aotune::artifact::Precision::Tf32),
        Precision::Fp16 => quote!(::aotune::artifact::Precision::Fp16),
        Precision::Bf16 => quote!(::aotune::artifact::Precision::Bf16),
    }
}

fn text(s: &str) -> TokenStream {
    quote!(::std::borrow::Cow::Borrowed(#s))
}

fn slot(t: &TensorSlot) -> TokenStream {
    let name = text(&t.name);
    let shape = t.shape.iter().map(|&d| Literal::usize_unsuffixed(d));
    let (dt, ly) = (dtype(t.dtype), layout(t.layout));
    let (offset, bytes) = (
        Literal::u64_unsuffixed(t.offset),
        Literal::u64_unsuffixed(t.bytes),
    );
    quote! {
        ::aotune::artifact::TensorSlot {
            name: #name,
            shape: ::std::borrow::Cow::Borrowed(&[#(#shape),*]),
            dtype: #dt,
            layout: #ly,
            offset: #offset,
            bytes: #bytes,
        }
    }
}

fn slots(list: &[TensorSlot]) -> TokenStream {
    let items = list.iter().map(slot);
    quote!(::std::borrow::Cow::Borrowed(&[#(#items),*]))
}

fn launch(l: &Launch) -> TokenStream {
    let node = text(&l.node);
    let kernel = Literal::u32_unsuffixed(l.kernel);
    let [gx, gy, gz] = l.grid.map(Literal::u32_unsuffixed);
    let [bx, by, bz] = l.block.map(Literal::u32_unsuffixed);
    let smem = Literal::u32_unsuffixed(l.smem_bytes);
    let output = Literal::u32_unsuffixed(l.output);
    let matmul = matmul(l.matmul.as_ref());
    let args = l.args.iter().map(|a| match a {
        Arg::Arena(o) => {
            let o = Literal::u64_unsuffixed(*o);
            quote!(::aotune::artifact::Arg::Arena(#o))
        }
        Arg::Weights(o) => {
            let o = Literal::u64_unsuffixed(*o);
            quote!(::aotune::artifact::Arg::Weights(#o))
        }
    });
    quote! {
        ::aotune::artifact::Launch {
            node: #node,
            kernel: #kernel,
            grid: [#gx, #gy, #gz],
            block: [#bx, #by, #bz],
            smem_bytes: #smem,
            args: ::std::borrow::Cow::Borrowed(&[#(#args),*]),
            output: #output,
            matmul: #matmul,
        }
    }
}

fn matmul(m: Option<&LibraryMatmul>) -> TokenStream {
    let Some(m) = m else {
        return quote!(::core::option::Option::None);
    };
    let [mm, n, k] = [m.m, m.n, m.k].map(Literal::u64_unsuffixed);
    let ty = dtype(m.dtype);
    let (bias, residual) = (m.bias, m.residual);
    let activation = match m.activation {
        MatmulActivation::None => quote!(::aotune::artifact::MatmulActivation::None),
        MatmulActivation::Relu => quote!(::aotune::artifact::MatmulActivation::Relu),
        MatmulActivation::Gelu => quote!(::aotune::artifact::MatmulActivation::Gelu),
    };
    let algo = Literal::u32_unsuffixed(m.algo);
    quote! {
        ::core::option::Option::Some(::aotune::artifact::LibraryMatmul {
            m: #mm,
            n: #n,
            k: #k,
            dtype: #ty,
            bias: #bias,
            residual: #residual,
            activation: #activation,
            algo: #algo,
        })
    }
}

/// Renders `executor.rs`. `launch_docs[i]` describes launch `i` (operands,
/// lifetimes); `header` is the file's opening comment; `embed_weights`
/// chooses `include_bytes!` of the weight blob over reading the file at load.
pub fn render_executor(
    spec: &ModelSpec,
    launch_docs: &[String],
    header: &str,
    embed_weights: bool,
) -> String {
    let consts = spec.launches.iter().enumerate().map(|(i, l)| {
        let ident = format_ident!("LAUNCH_{}", i);
        let doc = launch_docs.get(i).cloned().unwrap_or_default();
        let lines = doc
            .lines()
            .map(|line| format!(" {}", line.trim_start()))
            .collect::<Vec<_>>();
        let body = launch(l);
        quote! {
            #(#[doc = #lines])*
            const #ident: ::aotune::artifact::Launch = #body;
        }
    });
    let idents = (0..spec.launches.len()).map(|i| format_ident!("LAUNCH_{}", i));
    let kernels = spec.kernels.iter().map(|k| text(k));
    let tuned_on = spec.tuned_on.iter().map(|k| text(k));
    let name = text(&spec.name);
    let key = text(&spec.build_key);
    let batch = Literal::usize_unsuffixed(spec.batch);
    let prec = precision(spec.precision);
    let arena = Literal::u64_unsuffixed(spec.arena_bytes);
    let wbytes = Literal::u64_unsuffixed(spec.weights.bytes);
    let wfnv = Literal::u64_unsuffixed(spec.weights.fnv1a64);
    let wfile = text(&spec.weights.file_name);
    let (inputs, outputs, values) = (
        slots(&spec.inputs),
        slots(&spec.outputs),
        slots(&spec.values),
    );
    let fmt = Literal::u32_unsuffixed(spec.format_version);
    let input_len =
        Literal::usize_unsuffixed(spec.inputs.first().map(TensorSlot::elements).unwrap_or(0));
    let output_len =
        Literal::usize_unsuffixed(spec.outputs.first().map(TensorSlot::elements).unwrap_or(0));
    let weights = if embed_weights {
        let file = spec.weights.file_name.to_string();
        quote!(
            pub static WEIGHTS: Option<&[u8]> = Some(include_bytes!(#file));
        )
    } else {
        quote!(
            pub static WEIGHTS: Option<&[u8]> = None;
        )
    };
    let tokens = quote! {
        #(#consts)*

        /// The compiled model: launch table, tensor slots, weights description.
        pub static SPEC: ::aotune::artifact::ModelSpec = ::aotune::artifact::ModelSpec {
            format_version: #fmt,
            name: #name,
            build_key: #key,
            batch: #batch,
            precision: #prec,
            arena_bytes: #arena,
            weights: ::aotune::artifact::WeightsInfo { bytes: #wbytes, fnv1a64: #wfnv, file_name: #wfile },
            kernels: ::std::borrow::Cow::Borrowed(&[#(#kernels),*]),
            launches: ::std::borrow::Cow::Borrowed(&[#(#idents),*]),
            inputs: #inputs,
            outputs: #outputs,
            values: #values,
            tuned_on: ::std::borrow::Cow::Borrowed(&[#(#tuned_on),*]),
        };

        /// f32 elements of the (first) input.
        pub const INPUT_LEN: usize = #input_len;
        /// f32 elements of the (first) output.
        pub const OUTPUT_LEN: usize = #output_len;
        /// sm_90a SASS and compute_90 PTX of every kernel.
        pub static KERNELS: &[u8] = include_bytes!("kernels.fatbin");
        /// The weight blob, when embedded (else read from `SPEC.weights.file_name` at load).
        #weights
    };
    let file = syn::parse2::<syn::File>(tokens).map(|f| prettyplease::unparse(&f));
    let body = file.unwrap_or_else(|e| {
        format!("compile_error!(\"aotune: generated executor did not parse: {e}\");\n")
    });
    format!("{header}{body}")
}
