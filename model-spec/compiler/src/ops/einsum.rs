//! ONNX `Einsum`: [`Op::Einsum`] on any number of operands, numpy's
//! semantics: explicit (`"bhid,bhjd->bhij"`) or implicit output (`"ij,jk"`:
//! the labels that occur once, in alphabetical order), repeated labels
//! within an operand (diagonals, traces), summed labels, and `...`
//! ellipses, broadcast right-aligned as numpy broadcasts them. The
//! importer rewrites the equation into the explicit, letters-only form the
//! IR op carries: spaces dropped, each ellipsis dimension given a letter
//! the equation does not use. An equation that does not fit its operands
//! is refused, naming it.

use super::OpDef;
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, einsum::Equation, Ctx, OpResult, OutSpec, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Einsum"],
    summary: "Einsum (explicit or implicit output, diagonals, ellipses)",
    node_types: &[NodeType::Einsum],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Einsum(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let equation = n.config.equation.clone();
    let ins = cx.inputs(1..=usize::MAX)?;
    let ranks: Vec<usize> = ins.iter().map(|&v| cx.shape(v).len()).collect();
    let explicit =
        normalize(&equation, &ranks).map_err(|why| cx.attr_error("equation", &equation, &why))?;
    let shapes: Vec<&[usize]> = ins.iter().map(|&v| cx.shape(v)).collect();
    Equation::parse(&explicit)
        .and_then(|eq| eq.output_shape(&shapes))
        .map_err(|why| cx.attr_error("equation", &equation, &why))?;
    cx.push(Op::Einsum { equation: explicit }, ins)
}

/// One operand term: its labels, and where `...` sits among them.
struct Term {
    labels: Vec<u8>,
    ellipsis: Option<usize>,
}

fn parse_term(term: &str) -> Result<Term, String> {
    let mut labels = Vec::new();
    let mut ellipsis = None;
    let mut rest = term.as_bytes();
    while let Some(&c) = rest.first() {
        if rest.starts_with(b"...") {
            if ellipsis.is_some() {
                return Err(format!("term '{term}' has two ellipses"));
            }
            ellipsis = Some(labels.len());
            rest = &rest[3..];
        } else if c.is_ascii_alphabetic() {
            labels.push(c);
            rest = &rest[1..];
        } else {
            return Err(format!("term '{term}' has the character '{}'", c as char));
        }
    }
    Ok(Term { labels, ellipsis })
}

/// `equation` for operands of `ranks` in explicit, letters-only form.
fn normalize(equation: &str, ranks: &[usize]) -> Result<String, String> {
    let compact: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match compact.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (compact.as_str(), None),
    };
    let terms = lhs
        .split(',')
        .map(parse_term)
        .collect::<Result<Vec<_>, _>>()?;
    if terms.len() != ranks.len() {
        return Err(format!(
            "{} terms for {} operands",
            terms.len(),
            ranks.len()
        ));
    }
    // Dimensions each operand's ellipsis stands for.
    let mut ell = Vec::with_capacity(terms.len());
    for (t, &rank) in terms.iter().zip(ranks) {
        let named = t.labels.len();
        match (t.ellipsis, rank.checked_sub(named)) {
            (Some(_), Some(k)) => ell.push(k),
            (None, Some(0)) => ell.push(0),
            _ => {
                return Err(format!(
                    "term '{}' does not fit an operand of rank {rank}",
                    String::from_utf8_lossy(&t.labels)
                ))
            }
        }
    }
    let max_ell = ell.iter().copied().max().unwrap_or(0);
    let free: Vec<u8> = (b'A'..=b'Z')
        .chain(b'a'..=b'z')
        .filter(|c| !compact.as_bytes().contains(c))
        .take(max_ell)
        .collect();
    if free.len() < max_ell {
        return Err("too many labels to name the ellipsis dimensions".into());
    }
    let expand = |t: &Term, k: usize| -> Vec<u8> {
        let mut labels = t.labels.clone();
        if let Some(at) = t.ellipsis {
            labels.splice(at..at, free[max_ell - k..].iter().copied());
        }
        labels
    };
    let inputs: Vec<Vec<u8>> = terms.iter().zip(&ell).map(|(t, &k)| expand(t, k)).collect();
    let output = match rhs {
        Some(r) => {
            let t = parse_term(r)?;
            expand(&t, max_ell)
        }
        None => {
            let mut once: Vec<u8> = terms
                .iter()
                .flat_map(|t| t.labels.iter().copied())
                .filter(|&l| {
                    terms
                        .iter()
                        .map(|t| t.labels.iter().filter(|&&x| x == l).count())
                        .sum::<usize>()
                        == 1
                })
                .collect();
            once.sort_unstable();
            free.iter().copied().chain(once).collect()
        }
    };
    let join = |t: &[u8]| String::from_utf8_lossy(t).into_owned();
    let lhs: Vec<String> = inputs.iter().map(|t| join(t)).collect();
    Ok(format!("{}->{}", lhs.join(","), join(&output)))
}

/// Output shape of [`Op::Einsum`]: each output label's size.
pub(crate) fn infer_shape(equation: &str, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, usize::MAX)?;
    Equation::parse(equation)?.output_shape(inputs)
}

/// CPU reference of [`Op::Einsum`] (products and sums in the accumulation
/// type).
pub(crate) fn reference(ctx: &Ctx, equation: &str, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    reference::einsum::einsum(ctx, equation, inputs, out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        // Attention scores as ViT-style code writes them.
        Example {
            op_type: "Einsum",
            opset: 12,
            inputs: &[Data(&[1, 2, 5, 4]), Data(&[1, 2, 6, 4])],
            attrs: &[Str("equation", "bhid,bhjd->bhij")],
            output: &[1, 2, 5, 6],
            ir: &["Einsum"],
        },
        // Spaces, and a constant operand.
        Example {
            op_type: "Einsum",
            opset: 12,
            inputs: &[Data(&[2, 3, 4]), Weight(&[2, 4, 5])],
            attrs: &[Str("equation", "bij, bjk -> bik")],
            output: &[2, 3, 5],
            ir: &["Einsum"],
        },
        // Implicit output: the inner product.
        Example {
            op_type: "Einsum",
            opset: 12,
            inputs: &[Data(&[5]), Data(&[5])],
            attrs: &[Str("equation", "i,i")],
            output: &[],
            ir: &["Einsum"],
        },
        // An ellipsis and a diagonal.
        Example {
            op_type: "Einsum",
            opset: 12,
            inputs: &[Data(&[2, 3, 3])],
            attrs: &[Str("equation", "...ii->...i")],
            output: &[2, 3],
            ir: &["Einsum"],
        },
    ];

    #[test]
    fn equations_normalize_to_explicit_letters() {
        assert_eq!(normalize("ij,jk", &[2, 2]).unwrap(), "ij,jk->ik");
        assert_eq!(normalize("ij->ji", &[2]).unwrap(), "ij->ji");
        assert_eq!(
            normalize(" b i j , b j k -> b i k", &[3, 3]).unwrap(),
            "bij,bjk->bik"
        );
        assert_eq!(normalize("...ii->...i", &[4]).unwrap(), "ABii->ABi");
        assert_eq!(normalize("...ij,...jk", &[3, 4]).unwrap(), "Bij,ABjk->ABik");
        assert_eq!(normalize("i,i", &[1, 1]).unwrap(), "i,i->");
        assert!(normalize("ij,jk->ik", &[2]).is_err());
        assert!(normalize("ijk->i", &[2]).is_err());
        assert!(normalize("i.j->i", &[2]).is_err());
    }
}
