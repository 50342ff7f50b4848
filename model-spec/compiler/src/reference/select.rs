//! `Where`: `y = condition != 0 ? x : y`, the three operands broadcast
//! (numpy rules, row-major) onto the output shape. A NaN condition is true.

use super::broadcast::Broadcast;
use super::op_io::{input, OpResult, OutSpec, Output, Tensor};

/// CPU reference of [`crate::ir::Op::Where`]; inputs are condition, x, y.
pub(crate) fn select(inputs: &[Tensor], out: &OutSpec) -> OpResult {
    let total: usize = out.shape.iter().product();
    let expand = |i: usize| -> Result<Vec<f32>, super::op_io::OpError> {
        let t = input(inputs, i)?;
        let mut data = vec![0.0f32; total];
        Broadcast::new(t.shape, out.shape)?.apply(&mut data, &t.row_major(), |o, v| *o = v);
        Ok(data)
    };
    let (cond, x, mut y) = (expand(0)?, expand(1)?, expand(2)?);
    for ((o, &c), &v) in y.iter_mut().zip(&cond).zip(&x) {
        if c != 0.0 {
            *o = v;
        }
    }
    Ok(Output::row_major(y))
}

#[cfg(test)]
mod tests {
    use super::super::testing::run1;
    use crate::ir::Op;
    use crate::test_graphs::Builder;

    #[test]
    fn picks_x_where_the_condition_holds_with_broadcasting() {
        let mut b = Builder::new();
        let cond = b.input("cond", &[2, 1]);
        let x = b.input("x", &[3]);
        let y = b.input("y", &[2, 3]);
        let out = b.op(Op::Where, &[cond, x, y]);
        b.output(out);
        let graph = b.finish();
        let got = run1(
            &graph,
            &[
                &[1.0, 0.0],
                &[10.0, 20.0, 30.0],
                &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            ],
        );
        assert_eq!(got, [10.0, 20.0, 30.0, 4.0, 5.0, 6.0]);
    }

    #[test]
    fn a_nan_or_negative_condition_is_true() {
        let mut b = Builder::new();
        let cond = b.input("cond", &[3]);
        let x = b.input("x", &[1]);
        let y = b.input("y", &[1]);
        let out = b.op(Op::Where, &[cond, x, y]);
        b.output(out);
        let graph = b.finish();
        let got = run1(&graph, &[&[f32::NAN, -1.0, 0.0], &[7.0], &[9.0]]);
        assert_eq!(got, [7.0, 7.0, 9.0]);
    }
}
