//! Einsum over an explicit equation of single-letter labels
//! (`"bij,bjk->bik"`, no spaces or ellipses: the importer expands those).
//!
//! Every output element is the sum, over every value of the labels absent
//! from the output, of the product of the operands' elements those label
//! values address. A label repeated within one operand addresses its
//! diagonal. A label's size is the largest of its dimensions; a dimension
//! of 1 is broadcast, as numpy broadcasts the dimensions of an ellipsis.
//! Products and sums are in the accumulation type; output elements are
//! computed in parallel.

use super::op_io::{Ctx, OpError, OpResult, OutSpec, Output, Tensor};
use super::scalar::Scalar;
use super::Accumulate;
use rayon::prelude::*;

/// An explicit equation split into its operand terms and output term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Equation {
    pub inputs: Vec<Vec<u8>>,
    pub output: Vec<u8>,
}

impl Equation {
    /// Parses `"ab,bc->ac"`: letters only, `->` and an output term required,
    /// every output label present in some operand and at most once in the
    /// output.
    pub(crate) fn parse(equation: &str) -> Result<Equation, String> {
        let (lhs, rhs) = equation
            .split_once("->")
            .ok_or_else(|| format!("Einsum equation '{equation}' has no '->'"))?;
        let term = |t: &str| -> Result<Vec<u8>, String> {
            if t.bytes().all(|c| c.is_ascii_alphabetic()) {
                Ok(t.bytes().collect())
            } else {
                Err(format!(
                    "Einsum term '{t}' of '{equation}' is not all letters"
                ))
            }
        };
        let inputs = lhs.split(',').map(term).collect::<Result<Vec<_>, _>>()?;
        let output = term(rhs)?;
        for (i, &l) in output.iter().enumerate() {
            if output[..i].contains(&l) {
                return Err(format!(
                    "Einsum '{equation}' repeats output label '{}'",
                    l as char
                ));
            }
            if !inputs.iter().any(|t| t.contains(&l)) {
                return Err(format!(
                    "Einsum '{equation}': output label '{}' is in no operand",
                    l as char
                ));
            }
        }
        Ok(Equation { inputs, output })
    }

    /// Each label's size over `shapes` (the operands' shapes): the largest
    /// of its dimensions, every other one equal or 1.
    pub(crate) fn sizes(&self, shapes: &[&[usize]]) -> Result<[usize; 128], String> {
        if shapes.len() != self.inputs.len() {
            return Err(format!(
                "Einsum has {} terms for {} operands",
                self.inputs.len(),
                shapes.len()
            ));
        }
        let mut sizes = [0usize; 128];
        for (term, shape) in self.inputs.iter().zip(shapes) {
            if term.len() != shape.len() {
                return Err(format!(
                    "Einsum term '{}' does not match operand shape {shape:?}",
                    String::from_utf8_lossy(term)
                ));
            }
            for (&l, &d) in term.iter().zip(shape.iter()) {
                let s = &mut sizes[l as usize];
                if *s == 0 || *s == 1 {
                    *s = d.max(*s);
                } else if d != *s && d != 1 {
                    return Err(format!(
                        "Einsum label '{}' has sizes {} and {d}",
                        l as char, *s
                    ));
                }
            }
        }
        Ok(sizes)
    }

    /// The output shape for operands of `shapes`.
    pub(crate) fn output_shape(&self, shapes: &[&[usize]]) -> Result<Vec<usize>, String> {
        let sizes = self.sizes(shapes)?;
        Ok(self.output.iter().map(|&l| sizes[l as usize]).collect())
    }
}

pub(crate) fn einsum(ctx: &Ctx, equation: &str, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => einsum_in::<f32>(equation, inputs, out),
        Accumulate::F64 => einsum_in::<f64>(equation, inputs, out),
    }
}

fn einsum_in<T: Scalar>(equation: &str, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    let eq = Equation::parse(equation)?;
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape).collect();
    let sizes = eq.sizes(&shapes)?;
    if eq.output_shape(&shapes)? != out.shape {
        return Err(OpError(format!(
            "internal: Einsum output {:?} differs from the equation's",
            out.shape
        )));
    }
    // The loop labels: the output's, then the summed ones.
    let mut labels = eq.output.clone();
    for term in &eq.inputs {
        for &l in term {
            if !labels.contains(&l) {
                labels.push(l);
            }
        }
    }
    let sizes: Vec<usize> = labels.iter().map(|&l| sizes[l as usize]).collect();
    // strides[o][k]: operand o's element stride for loop label k (summed
    // over repeated positions, 0 where broadcast or absent).
    let strides: Vec<Vec<usize>> = eq
        .inputs
        .iter()
        .zip(&shapes)
        .map(|(term, shape)| {
            let mut s = vec![0; labels.len()];
            let mut stride = 1;
            for (&l, &d) in term.iter().zip(shape.iter()).rev() {
                let k = labels.iter().position(|&x| x == l).unwrap_or(0);
                if d != 1 {
                    s[k] += stride;
                }
                stride *= d;
            }
            s
        })
        .collect();
    let data: Vec<_> = inputs.iter().map(|t| t.row_major()).collect();
    let n_out = eq.output.len();
    let out_len: usize = sizes[..n_out].iter().product();
    let summed = &sizes[n_out..];
    let summed_len: usize = summed.iter().product();
    let result: Vec<f32> = (0..out_len)
        .into_par_iter()
        .map(|o| {
            // Each operand's offset of this output element.
            let mut base = vec![0usize; data.len()];
            let mut rest = o;
            for k in (0..n_out).rev() {
                let idx = rest % sizes[k];
                rest /= sizes[k];
                for (b, s) in base.iter_mut().zip(&strides) {
                    *b += idx * s[k];
                }
            }
            let mut acc = T::ZERO;
            let mut index = vec![0usize; summed.len()];
            let mut offset = base.clone();
            for _ in 0..summed_len {
                let mut prod = T::of(1.0);
                for (d, &off) in data.iter().zip(&offset) {
                    prod = prod * T::of(d[off]);
                }
                acc += prod;
                // Advance the odometer over the summed labels.
                for j in (0..summed.len()).rev() {
                    index[j] += 1;
                    for (off, s) in offset.iter_mut().zip(&strides) {
                        *off += s[n_out + j];
                    }
                    if index[j] < summed[j] {
                        break;
                    }
                    for (off, s) in offset.iter_mut().zip(&strides) {
                        *off -= s[n_out + j] * summed[j];
                    }
                    index[j] = 0;
                }
            }
            acc.to_f32()
        })
        .collect();
    Ok(Output::row_major(result))
}

#[cfg(test)]
mod tests {
    use super::super::rel_l2;
    use super::super::testing::{run1, Rng};
    use super::Equation;
    use crate::ir::Op;
    use crate::test_graphs::Builder;

    fn einsum(equation: &str, shapes: &[&[usize]], data: &[&[f32]]) -> Vec<f32> {
        let mut b = Builder::new();
        let ins: Vec<_> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| b.input(&format!("x{i}"), s))
            .collect();
        let y = b.op(
            Op::Einsum {
                equation: equation.into(),
            },
            &ins,
        );
        b.output(y);
        let graph = b.finish();
        run1(&graph, data)
    }

    #[test]
    fn batched_matmul_and_attention_spellings() {
        let (b, h, i, j, d) = (2, 3, 4, 5, 6);
        let q = Rng::new(1).vec(b * h * i * d);
        let k = Rng::new(2).vec(b * h * j * d);
        let got = einsum(
            "bhid,bhjd->bhij",
            &[&[b, h, i, d], &[b, h, j, d]],
            &[&q, &k],
        );
        let mut want = vec![0.0f32; b * h * i * j];
        for bh in 0..b * h {
            for ii in 0..i {
                for jj in 0..j {
                    let s: f64 = (0..d)
                        .map(|dd| {
                            f64::from(q[(bh * i + ii) * d + dd])
                                * f64::from(k[(bh * j + jj) * d + dd])
                        })
                        .sum();
                    want[(bh * i + ii) * j + jj] = s as f32;
                }
            }
        }
        assert!(rel_l2(&got, &want) < 1e-6);
    }

    #[test]
    fn transpose_sum_diagonal_and_scalar() {
        let x = Rng::new(3).vec(12);
        assert_eq!(
            einsum("ij->ji", &[&[3, 4]], &[&x]),
            (0..12).map(|e| x[(e % 3) * 4 + e / 3]).collect::<Vec<_>>()
        );
        let sums = einsum("ij->i", &[&[3, 4]], &[&x]);
        for (r, &s) in sums.iter().enumerate() {
            assert!((s - x[r * 4..][..4].iter().sum::<f32>()).abs() < 1e-6);
        }
        let sq = Rng::new(4).vec(9);
        assert_eq!(
            einsum("ii->i", &[&[3, 3]], &[&sq]),
            vec![sq[0], sq[4], sq[8]]
        );
        let trace = einsum("ii->", &[&[3, 3]], &[&sq]);
        assert!((trace[0] - (sq[0] + sq[4] + sq[8])).abs() < 1e-6);
        // Broadcast of a size-1 dimension.
        let a = Rng::new(5).vec(4);
        let bb = Rng::new(6).vec(6);
        let got = einsum("Ai,Aj->Aij", &[&[1, 4], &[3, 2]], &[&a, &bb]);
        assert_eq!(got.len(), 3 * 4 * 2);
        assert_eq!(got[(2 * 4 + 1) * 2 + 1], a[1] * bb[2 * 2 + 1]);
    }

    #[test]
    fn parse_rejects_malformed_equations() {
        assert!(Equation::parse("ij").is_err());
        assert!(Equation::parse("ij->ii").is_err());
        assert!(Equation::parse("ij->k").is_err());
        assert!(Equation::parse("i j->i").is_err());
        let eq = Equation::parse("ij,jk->ik").unwrap();
        assert_eq!(eq.output_shape(&[&[2, 3], &[3, 4]]), Ok(vec![2, 4]));
        assert!(eq.output_shape(&[&[2, 3], &[5, 4]]).is_err());
    }
}
