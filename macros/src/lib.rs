//! `include_model!`: a thin proc-macro over what `aotune_compiler::Build` wrote
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

mod args;
mod built;

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::{format_ident, quote};

use args::Args;

/// The module name the build step uses for a model path (same rule as `aotune_compiler::build::model_name`).
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
    let name = model_name(&args.model.value());
    let span = args.model.span();
    let Some(out_dir) = std::env::var_os("OUT_DIR") else {
        return error(
            span,
            format!(
                "aotune: OUT_DIR is not set: this crate needs a build.rs that runs the build step:\n    {}",
                args.build_hint()
            ),
        );
    };
    let variants = match built::check(std::path::Path::new(&out_dir), &name, &args) {
        Ok(variants) => variants,
        Err(message) => return error(span, message),
    };
    let variants: Vec<_> = variants
        .iter()
        .map(|v| {
            (
                format_ident!("b{}", v.batch),
                v.executor.display().to_string(),
            )
        })
        .collect();
    let module = format_ident!("{}", name);
    let mods = variants
        .iter()
        .map(|(m, file)| quote!(pub mod #m { include!(#file); }));
    let loads = variants.iter().map(|(m, _)| {
        quote!(::aotune::runtime::Model::load_embedded(&#m::SPEC, #m::KERNELS, #m::WEIGHTS)?)
    });
    let lens = variants.iter().map(|(m, _)| quote!(#m::INPUT_LEN));
    let first = &variants[0].0;
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
