//! `include_model!`: a thin proc-macro over what `aotune_spec::Build` wrote
//! to `OUT_DIR` (tonic's `include_proto!` pattern).
//!
//! ```ignore
//! aotune::include_model!("models/resnet50.onnx", tuning = "models/resnet50.best.json",
//!                        batch = [1, 8], precision = "fp16");
//! let mut model = resnet50::Model::load()?;
//! model.infer(&input, &mut output)?;
//! ```
//!
//! It expands to a module named after the model file with one submodule per
//! batch size (`include!`ing the generated `executor.rs`) and a `Model` that
//! picks the batch size by the input's length. When the build step did not
//! run for that model, or ran with other arguments, it expands to a
//! `compile_error!` saying what to put in `build.rs`.

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::{format_ident, quote};
use syn::parse::{Parse, ParseStream};
use syn::{Expr, ExprArray, ExprLit, Ident, Lit, LitStr, Token};

struct Args {
    model: LitStr,
    tuning: Option<LitStr>,
    batches: Vec<usize>,
    precision: String,
}

fn int(e: &Expr) -> syn::Result<usize> {
    match e {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => i.base10_parse(),
        other => Err(syn::Error::new_spanned(
            other,
            "expected a batch size (integer literal)",
        )),
    }
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let model: LitStr = input.parse()?;
        let mut args = Args {
            model,
            tuning: None,
            batches: vec![1],
            precision: "fp16".into(),
        };
        while input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let key: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            match key.to_string().as_str() {
                "tuning" => args.tuning = Some(input.parse()?),
                "precision" => {
                    let p: LitStr = input.parse()?;
                    if !["fp32", "tf32", "fp16", "bf16"].contains(&p.value().as_str()) {
                        return Err(syn::Error::new(
                            p.span(),
                            "precision must be \"fp32\", \"tf32\", \"fp16\" or \"bf16\"",
                        ));
                    }
                    args.precision = p.value();
                }
                "batch" => {
                    let e: Expr = input.parse()?;
                    args.batches = match &e {
                        Expr::Array(ExprArray { elems, .. }) => {
                            elems.iter().map(int).collect::<syn::Result<_>>()?
                        }
                        other => vec![int(other)?],
                    };
                    if args.batches.is_empty() || args.batches.contains(&0) {
                        return Err(syn::Error::new_spanned(e, "batch sizes must be at least 1"));
                    }
                }
                other => {
                    return Err(syn::Error::new(
                        key.span(),
                        format!("unknown argument `{other}`: expected tuning, batch or precision"),
                    ))
                }
            }
        }
        Ok(args)
    }
}

/// The module name the build step uses for a model path (same rule as `aotune_spec::build::model_name`).
fn model_name(path: &str) -> String {
    let stem = std::path::Path::new(path)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("model");
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

fn error(span: Span, message: String) -> TokenStream {
    syn::Error::new(span, message).to_compile_error().into()
}

#[proc_macro]
pub fn include_model(input: TokenStream) -> TokenStream {
    let args = syn::parse_macro_input!(input as Args);
    let path = args.model.value();
    let name = model_name(&path);
    let span = args.model.span();
    let build_hint = {
        let tuning = args
            .tuning
            .as_ref()
            .map(|t| format!(".tuning(\"{}\")", t.value()))
            .unwrap_or_default();
        let batches = if args.batches.len() == 1 {
            format!(".batch({})", args.batches[0])
        } else {
            format!(".batches(&{:?})", args.batches)
        };
        format!(
            "aotune_spec::Build::new(\"{path}\"){tuning}{batches}.precision(\"{}\".parse().unwrap()).compile().unwrap();",
            args.precision
        )
    };
    let Ok(out_dir) = std::env::var("OUT_DIR") else {
        return error(span, format!("aotune: OUT_DIR is not set: this crate needs a build.rs that runs the build step:\n    {build_hint}"));
    };
    let mut variants = Vec::new();
    for &batch in &args.batches {
        let dir_name = if args.batches.len() == 1 {
            name.clone()
        } else {
            format!("{name}_b{batch}")
        };
        let dir = std::path::Path::new(&out_dir)
            .join("aotune")
            .join(&dir_name);
        let manifest = dir.join("manifest.json");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            return error(
                span,
                format!("aotune: the build step did not run for \"{path}\" (no {}); add to build.rs:\n    {build_hint}", manifest.display()),
            );
        };
        let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else {
            return error(
                span,
                format!(
                    "aotune: {} is corrupt; run `cargo clean -p` on this crate and rebuild",
                    manifest.display()
                ),
            );
        };
        let built_batch = json["batch"].as_u64().unwrap_or(0) as usize;
        let built_precision = json["precision"]
            .as_str()
            .unwrap_or("?")
            .to_ascii_lowercase();
        if built_batch != batch || built_precision != args.precision {
            return error(
                span,
                format!(
                    "aotune: the build step compiled \"{path}\" for batch {built_batch}, {built_precision}, but include_model! asks for batch {batch}, {}; make build.rs match:\n    {build_hint}",
                    args.precision
                ),
            );
        }
        let executor = dir.join("executor.rs").display().to_string();
        variants.push((batch, format_ident!("b{}", batch), executor));
    }
    let module = format_ident!("{}", name);
    let mods = variants
        .iter()
        .map(|(_, m, file)| quote!(pub mod #m { include!(#file); }));
    let loads = variants.iter().map(|(_, m, _)| {
        quote!(::aotune::runtime::Model::load_embedded(&#m::SPEC, #m::KERNELS, #m::WEIGHTS)?)
    });
    let lens = variants.iter().map(|(_, m, _)| quote!(#m::INPUT_LEN));
    let first = &variants[0].1;
    let batches = args.batches.iter();
    quote! {
        pub mod #module {
            #(#mods)*

            /// Batch sizes compiled in, in the order `Model` holds them.
            pub const BATCHES: &[usize] = &[#(#batches),*];
            /// f32 elements of one input at each batch size.
            pub const INPUT_LENS: &[usize] = &[#(#lens),*];
            /// f32 elements of the first batch size's input and output.
            pub const INPUT_LEN: usize = #first::INPUT_LEN;
            pub const OUTPUT_LEN: usize = #first::OUTPUT_LEN;

            /// The compiled model: one CUDA graph per batch size.
            pub struct Model {
                variants: ::std::vec::Vec<::aotune::runtime::Model>,
            }

            impl Model {
                /// Creates the CUDA context, uploads the weights, allocates the arena and
                /// captures the forward pass of every batch size. All allocation happens here.
                pub fn load() -> ::std::result::Result<Self, ::aotune::runtime::RuntimeError> {
                    Ok(Model { variants: ::std::vec![#(#loads),*] })
                }

                /// Runs the model; the batch size is chosen by `input.len()`. No allocation.
                pub fn infer(&mut self, input: &[f32], output: &mut [f32]) -> ::std::result::Result<(), ::aotune::runtime::RuntimeError> {
                    let index = INPUT_LENS.iter().position(|&n| n == input.len()).ok_or_else(|| {
                        ::aotune::runtime::RuntimeError::input_length_for_batches(input.len(), INPUT_LENS, BATCHES)
                    })?;
                    self.variants[index].infer(input, output)
                }

                /// The runtime model of one batch size (device-pointer inference, timing, memory report).
                pub fn variant(&mut self, batch: usize) -> ::std::option::Option<&mut ::aotune::runtime::Model> {
                    let index = BATCHES.iter().position(|&b| b == batch)?;
                    self.variants.get_mut(index)
                }
            }
        }
    }
    .into()
}
