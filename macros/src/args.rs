//! The arguments of `include_model!`: a model path (string literal), then
//! optional `tuning = "…"`, `batch = N | [N, …]` and `precision = "…"`, each
//! at most once. Every mistake is a `syn::Error` on the offending tokens, so
//! the user sees it underlined in their own code.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, ExprArray, ExprLit, Ident, Lit, LitStr, Token};

/// The precisions `aotune_compiler::ir::Precision` parses, as written in the macro.
pub(crate) const PRECISIONS: [&str; 4] = ["fp32", "tf32", "fp16", "bf16"];

/// What one `include_model!` call asks for.
pub(crate) struct Args {
    pub model: LitStr,
    pub tuning: Option<LitStr>,
    /// Non-empty, each at least 1, no repeats, in the order written.
    pub batches: Vec<usize>,
    /// One of [`PRECISIONS`].
    pub precision: String,
}

const USAGE: &str = "include_model!(\"models/resnet50.onnx\", tuning = \"models/resnet50.best.json\", batch = [1, 8], precision = \"fp16\")";

fn batch_size(e: &Expr) -> syn::Result<usize> {
    match e {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => i.base10_parse(),
        other => Err(syn::Error::new_spanned(
            other,
            "expected a batch size (integer literal), e.g. `batch = 8` or `batch = [1, 8]`",
        )),
    }
}

/// `batch = N` or `batch = [N, …]`: a non-empty list of distinct sizes ≥ 1.
fn parse_batches(input: ParseStream) -> syn::Result<Vec<usize>> {
    let e: Expr = input.parse()?;
    let elems: Vec<&Expr> = match &e {
        Expr::Array(ExprArray { elems, .. }) => elems.iter().collect(),
        other => vec![other],
    };
    if elems.is_empty() {
        return Err(syn::Error::new_spanned(
            &e,
            "the batch list is empty: give at least one batch size, e.g. `batch = [1, 8]`",
        ));
    }
    let mut batches = Vec::with_capacity(elems.len());
    for elem in elems {
        let b = batch_size(elem)?;
        if b == 0 {
            return Err(syn::Error::new_spanned(
                elem,
                "batch sizes must be at least 1",
            ));
        }
        if batches.contains(&b) {
            return Err(syn::Error::new_spanned(
                elem,
                format!("batch size {b} is listed twice"),
            ));
        }
        batches.push(b);
    }
    Ok(batches)
}

fn parse_precision(input: ParseStream) -> syn::Result<String> {
    let p: LitStr = input.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "expected the precision as a string literal: \"fp32\", \"tf32\", \"fp16\" or \"bf16\"",
        )
    })?;
    if !PRECISIONS.contains(&p.value().as_str()) {
        return Err(syn::Error::new(
            p.span(),
            format!(
                "unknown precision \"{}\": expected \"fp32\", \"tf32\", \"fp16\" or \"bf16\"",
                p.value()
            ),
        ));
    }
    Ok(p.value())
}

fn parse_tuning(input: ParseStream) -> syn::Result<LitStr> {
    input.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "expected the tuning log's path as a string literal, e.g. `tuning = \"models/resnet50.best.json\"`",
        )
    })
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.is_empty() {
            return Err(syn::Error::new(
                Span::call_site(),
                format!("include_model! needs the model path first: {USAGE}"),
            ));
        }
        let model: LitStr = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                format!("expected the model path (a string literal) first: {USAGE}"),
            )
        })?;
        let mut tuning = None;
        let mut batches = None;
        let mut precision = None;
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let key: Ident = input.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "expected `tuning = …`, `batch = …` or `precision = …`",
                )
            })?;
            input.parse::<Token![=]>()?;
            let name = key.to_string();
            let repeated = match name.as_str() {
                "tuning" => tuning.replace(parse_tuning(input)?).is_some(),
                "batch" => batches.replace(parse_batches(input)?).is_some(),
                "precision" => precision.replace(parse_precision(input)?).is_some(),
                other => {
                    return Err(syn::Error::new(
                        key.span(),
                        format!("unknown argument `{other}`: expected tuning, batch or precision"),
                    ))
                }
            };
            if repeated {
                return Err(syn::Error::new(
                    key.span(),
                    format!("`{name}` is given twice"),
                ));
            }
        }
        Ok(Args {
            model,
            tuning,
            batches: batches.unwrap_or_else(|| vec![1]),
            precision: precision.unwrap_or_else(|| "fp16".into()),
        })
    }
}

impl Args {
    /// The `build.rs` line that produces exactly what this call asks for.
    pub fn build_hint(&self) -> String {
        let tuning = self
            .tuning
            .as_ref()
            .map(|t| format!(".tuning(\"{}\")", t.value()))
            .unwrap_or_default();
        let batches = if self.batches.len() == 1 {
            format!(".batch({})", self.batches[0])
        } else {
            format!(".batches(&{:?})", self.batches)
        };
        format!(
            "aotune_compiler::Build::new(\"{}\"){tuning}{batches}.precision(\"{}\".parse().unwrap()).compile().unwrap();",
            self.model.value(),
            self.precision
        )
    }

    /// "batch 8" or "batches [1, 8]", for messages.
    pub fn describe_batches(&self) -> String {
        describe_batches(&self.batches)
    }
}

/// "batch 8" or "batches [1, 8]".
pub(crate) fn describe_batches(batches: &[usize]) -> String {
    match batches {
        [one] => format!("batch {one}"),
        many => format!("batches {many:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> syn::Result<Args> {
        syn::parse_str::<Args>(s)
    }

    fn error(s: &str) -> String {
        match parse(s) {
            Ok(_) => panic!("`{s}` parsed"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn defaults_and_full_form() {
        let a = parse("\"m.onnx\"").unwrap();
        assert_eq!((a.batches, a.precision.as_str()), (vec![1], "fp16"));
        assert!(a.tuning.is_none());
        let a = parse("\"m.onnx\", tuning = \"t.json\", batch = [1, 8], precision = \"bf16\",")
            .unwrap();
        assert_eq!(a.batches, vec![1, 8]);
        assert_eq!(a.precision, "bf16");
        assert_eq!(
            a.build_hint(),
            "aotune_compiler::Build::new(\"m.onnx\").tuning(\"t.json\").batches(&[1, 8]).precision(\"bf16\".parse().unwrap()).compile().unwrap();"
        );
        assert_eq!(parse("\"m.onnx\", batch = 4").unwrap().batches, vec![4]);
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            ("", "needs the model path first"),
            ("batch = 1", "model path"),
            ("\"m\", batches = 1", "unknown argument `batches`"),
            ("\"m\", batch = []", "empty"),
            ("\"m\", batch = [2, 0]", "at least 1"),
            ("\"m\", batch = [8, 8]", "listed twice"),
            ("\"m\", batch = \"8\"", "integer literal"),
            ("\"m\", precision = fp16", "string literal"),
            ("\"m\", precision = \"fp64\"", "unknown precision \"fp64\""),
            ("\"m\", tuning = 3", "tuning log"),
            ("\"m\", batch = 1, batch = 2", "`batch` is given twice"),
            ("\"m\" batch = 1", "expected `,`"),
        ];
        for (input, expected) in cases {
            let message = error(input);
            assert!(message.contains(expected), "`{input}`: {message}");
        }
    }
}
