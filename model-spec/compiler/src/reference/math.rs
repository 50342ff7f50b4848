//! Scalar semantics of the elementwise ops ([`UnaryOp`], [`BinaryOp`]):
//! the one definition the CPU reference, the pass-test oracle and constant
//! evaluation share.
//!
//! Transcendental functions are evaluated in f64 and rounded once to f32,
//! so each result is within an ulp or so of the exact value: `Erf` and the
//! exact `Gelu` use libm's `erf` (not a short polynomial), which keeps the
//! decomposed GELU `x·0.5·(1 + erf(x/√2))` within ~1e-7 relative of ONNX
//! Runtime. `Relu`, `Sigmoid` and `Clip` keep their f32 formulas (the GPU
//! epilogues compute the same). Comparison and logical ops give 1.0 / 0.0
//! and read any non-zero operand as true.

use crate::ir::{BinaryOp, CastTarget, UnaryOp};

/// `sqrt(2/π)`, the tanh-GELU's scale.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

fn truth(b: bool) -> f32 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// `ln(1 + e^x)` without overflow for large `x`.
fn softplus(x: f64) -> f64 {
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

/// The exact GELU, `x/2 · (1 + erf(x/√2))`, in f64.
pub(crate) fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2))
}

/// The tanh approximation of GELU (ONNX `approximate = "tanh"`), in f64.
pub(crate) fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
}

/// `op` applied to `x`.
pub(crate) fn unary(op: UnaryOp, x: f32) -> f32 {
    let d = x as f64;
    let wide = |f: fn(f64) -> f64| f(d) as f32;
    match op {
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Clip { min, max } => x.max(min).min(max),
        UnaryOp::Erf => wide(libm::erf),
        UnaryOp::Tanh => wide(f64::tanh),
        UnaryOp::Exp => wide(f64::exp),
        UnaryOp::Log => wide(f64::ln),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Reciprocal => 1.0 / x,
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Sin => wide(f64::sin),
        UnaryOp::Cos => wide(f64::cos),
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x * 0.0 // 0 stays 0, NaN stays NaN
            }
        }
        UnaryOp::Not => truth(x == 0.0),
        UnaryOp::HardSwish => (d * (d / 6.0 + 0.5).clamp(0.0, 1.0)) as f32,
        UnaryOp::HardSigmoid { alpha, beta } => {
            (alpha as f64 * d + beta as f64).clamp(0.0, 1.0) as f32
        }
        UnaryOp::Softplus => wide(softplus),
        UnaryOp::Softsign => (d / (1.0 + d.abs())) as f32,
        UnaryOp::Mish => (d * softplus(d).tanh()) as f32,
        UnaryOp::Elu { alpha } => {
            if x < 0.0 {
                (alpha as f64 * d.exp_m1()) as f32
            } else {
                x
            }
        }
        UnaryOp::Selu { alpha, gamma } => {
            let v = if x <= 0.0 {
                alpha as f64 * d.exp_m1()
            } else {
                d
            };
            (gamma as f64 * v) as f32
        }
        UnaryOp::LeakyRelu { alpha } => {
            if x < 0.0 {
                alpha * x
            } else {
                x
            }
        }
        UnaryOp::Gelu { tanh: false } => wide(gelu),
        UnaryOp::Gelu { tanh: true } => wide(gelu_tanh),
        UnaryOp::Cast(CastTarget::F16) => half::f16::from_f32(x).to_f32(),
        UnaryOp::Cast(CastTarget::BF16) => half::bf16::from_f32(x).to_f32(),
        UnaryOp::Cast(CastTarget::Int) => x.trunc(),
        UnaryOp::Cast(CastTarget::Bool) => truth(x != 0.0),
    }
}

/// `op` applied to `a` and `b`.
pub(crate) fn binary(op: BinaryOp, a: f32, b: f32) -> f32 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Pow => (a as f64).powf(b as f64) as f32,
        BinaryOp::Max | BinaryOp::Min if a.is_nan() || b.is_nan() => f32::NAN,
        BinaryOp::Max => a.max(b),
        BinaryOp::Min => a.min(b),
        // Rust's `%` on floats is C's fmod (exact).
        BinaryOp::Mod { fmod: true } => a % b,
        BinaryOp::Mod { fmod: false } => {
            let r = a % b;
            if r != 0.0 && (r < 0.0) != (b < 0.0) {
                r + b
            } else {
                r
            }
        }
        BinaryOp::Equal => truth(a == b),
        BinaryOp::Less => truth(a < b),
        BinaryOp::LessOrEqual => truth(a <= b),
        BinaryOp::Greater => truth(a > b),
        BinaryOp::GreaterOrEqual => truth(a >= b),
        BinaryOp::And => truth(a != 0.0 && b != 0.0),
        BinaryOp::Or => truth(a != 0.0 || b != 0.0),
        BinaryOp::Xor => truth((a != 0.0) != (b != 0.0)),
        BinaryOp::PRelu => {
            if a < 0.0 {
                a * b
            } else {
                a
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// erf at points whose values are tabulated to 20 digits (A&S table 7.1
    /// and mpmath): libm must be f32-exact, which A&S 7.1.26 (|ε| ≤ 1.5e-7
    /// absolute, far worse relatively near 0) is not.
    #[test]
    fn erf_is_accurate_to_an_ulp() {
        let table: [(f32, f64); 7] = [
            (1e-4, 1.128_379_163_334_248_8e-4),
            (0.1, 0.112_462_916_018_284_9),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (-1.5, -0.966_105_146_475_310_7),
            (2.5, 0.999_593_047_982_555),
            (4.0, 0.999_999_984_582_742_1),
        ];
        for (x, want) in table {
            let got = unary(UnaryOp::Erf, x);
            let rel = ((got as f64 - want) / want).abs();
            assert!(rel < 1.2e-7, "erf({x}) = {got}, want {want} (rel {rel:e})");
        }
        assert_eq!(unary(UnaryOp::Erf, 0.0), 0.0);
        assert_eq!(unary(UnaryOp::Erf, f32::INFINITY), 1.0);
    }

    #[test]
    fn gelu_matches_its_decomposition_and_known_values() {
        // GELU(1) = 0.8413447460685429, GELU(-2) = -0.04550026389635842.
        let exact = UnaryOp::Gelu { tanh: false };
        assert!((unary(exact, 1.0) as f64 - 0.841_344_746_068_542_9).abs() < 1e-7);
        assert!((unary(exact, -2.0) as f64 + 0.045_500_263_896_358_42).abs() < 1e-8);
        for i in -40..=40 {
            let x = i as f32 * 0.173;
            // The decomposed ONNX graph, each step rounded to f32.
            let erf = unary(UnaryOp::Erf, x / std::f32::consts::SQRT_2);
            let decomposed = x * 0.5 * (1.0 + erf);
            let got = unary(exact, x);
            assert!(
                (got - decomposed).abs() <= 1e-6 * decomposed.abs() + 1e-7,
                "gelu({x}) = {got}, decomposed {decomposed}"
            );
        }
        // tanh form: GELU_tanh(1) = 0.8411919906082768.
        let approx = unary(UnaryOp::Gelu { tanh: true }, 1.0) as f64;
        assert!((approx - 0.841_191_990_608_276_8).abs() < 1e-7);
    }

    #[test]
    fn activations_follow_their_formulas() {
        assert_eq!(unary(UnaryOp::HardSwish, 3.0), 3.0);
        assert_eq!(unary(UnaryOp::HardSwish, -3.0), 0.0);
        assert_eq!(
            unary(UnaryOp::HardSwish, 1.0),
            1.0 * (1.0 / 6.0 + 0.5) as f32
        );
        let hs = UnaryOp::HardSigmoid {
            alpha: 0.5,
            beta: 0.6,
        };
        assert!((unary(hs, 0.2) - 0.7).abs() < 1e-7);
        assert_eq!(unary(hs, 4.0), 1.0);
        assert_eq!(unary(hs, -4.0), 0.0);
        // Softplus does not overflow and is ln 2 at 0.
        assert_eq!(unary(UnaryOp::Softplus, 1000.0), 1000.0);
        assert!((unary(UnaryOp::Softplus, 0.0) - std::f32::consts::LN_2).abs() < 1e-7);
        assert_eq!(unary(UnaryOp::Softsign, 3.0), 0.75);
        // mish(1) = tanh(ln(1 + e)) = 0.8650983882673103.
        assert!((unary(UnaryOp::Mish, 1.0) - 0.865_098_4).abs() < 1e-7);
        assert_eq!(unary(UnaryOp::Elu { alpha: 2.0 }, 1.5), 1.5);
        let elu = unary(UnaryOp::Elu { alpha: 2.0 }, -1.0);
        assert!((elu - 2.0 * ((-1.0f32).exp() - 1.0)).abs() < 1e-7);
        let selu = UnaryOp::Selu {
            alpha: 2.0,
            gamma: 3.0,
        };
        assert_eq!(unary(selu, 1.0), 3.0);
        assert!((unary(selu, -1.0) - 6.0 * ((-1.0f32).exp() - 1.0)).abs() < 1e-6);
        assert_eq!(unary(UnaryOp::LeakyRelu { alpha: 0.1 }, -2.0), -0.2);
        assert_eq!(unary(UnaryOp::Sign, -0.5), -1.0);
        assert_eq!(unary(UnaryOp::Sign, 0.0), 0.0);
        assert!(unary(UnaryOp::Sign, f32::NAN).is_nan());
        assert_eq!(unary(UnaryOp::Not, 0.0), 1.0);
        assert_eq!(unary(UnaryOp::Not, -2.0), 0.0);
    }

    #[test]
    fn casts_round_to_the_target_type() {
        // 1 + 2^-11 is a float16 tie: it rounds to even (1.0); 1 + 3·2^-11 up.
        let f16 = UnaryOp::Cast(CastTarget::F16);
        assert_eq!(unary(f16, 1.0 + 2f32.powi(-11)), 1.0);
        assert_eq!(unary(f16, 1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2f32.powi(-9));
        assert_eq!(unary(f16, 70000.0), f32::INFINITY);
        let bf16 = UnaryOp::Cast(CastTarget::BF16);
        assert_eq!(unary(bf16, 1.0 + 2f32.powi(-8)), 1.0);
        assert_eq!(unary(bf16, 1.0 + 3.0 * 2f32.powi(-9)), 1.0 + 2f32.powi(-7));
        let int = UnaryOp::Cast(CastTarget::Int);
        assert_eq!(unary(int, -2.7), -2.0);
        assert_eq!(unary(int, 2.7), 2.0);
        let boolean = UnaryOp::Cast(CastTarget::Bool);
        assert_eq!(unary(boolean, -0.1), 1.0);
        assert_eq!(unary(boolean, 0.0), 0.0);
        assert_eq!(unary(boolean, f32::NAN), 1.0);
    }

    #[test]
    fn binary_ops_follow_numpy() {
        assert_eq!(binary(BinaryOp::Pow, 2.0, 10.0), 1024.0);
        assert_eq!(binary(BinaryOp::Pow, 4.0, 0.5), 2.0);
        assert!(binary(BinaryOp::Max, 1.0, f32::NAN).is_nan());
        assert!(binary(BinaryOp::Min, f32::NAN, 1.0).is_nan());
        assert_eq!(binary(BinaryOp::Max, -1.0, 2.0), 2.0);
        assert_eq!(binary(BinaryOp::Min, -1.0, 2.0), -1.0);
        // fmod keeps the dividend's sign, integer Mod the divisor's.
        assert_eq!(binary(BinaryOp::Mod { fmod: true }, -7.0, 3.0), -1.0);
        assert_eq!(binary(BinaryOp::Mod { fmod: false }, -7.0, 3.0), 2.0);
        assert_eq!(binary(BinaryOp::Mod { fmod: false }, 7.0, -3.0), -2.0);
        assert_eq!(binary(BinaryOp::Mod { fmod: false }, 6.0, -3.0), 0.0);
        assert_eq!(binary(BinaryOp::Equal, 1.5, 1.5), 1.0);
        assert_eq!(binary(BinaryOp::Less, 1.5, 1.5), 0.0);
        assert_eq!(binary(BinaryOp::LessOrEqual, 1.5, 1.5), 1.0);
        assert_eq!(binary(BinaryOp::Greater, 2.0, 1.5), 1.0);
        assert_eq!(binary(BinaryOp::GreaterOrEqual, 1.0, 1.5), 0.0);
        assert_eq!(binary(BinaryOp::And, 1.0, 0.0), 0.0);
        assert_eq!(binary(BinaryOp::Or, 1.0, 0.0), 1.0);
        assert_eq!(binary(BinaryOp::Xor, 1.0, 2.0), 0.0);
        assert_eq!(binary(BinaryOp::PRelu, -2.0, 0.25), -0.5);
        assert_eq!(binary(BinaryOp::PRelu, 2.0, 0.25), 2.0);
    }
}
