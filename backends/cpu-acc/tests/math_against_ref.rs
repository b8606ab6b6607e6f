//! CpuAcc's f32 math activations (Floor … Atanh) against CpuRef, bit for bit, over special
//! values, each function's breakpoints and random values (the bool-valued ones are in
//! `typed_against_ref.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::MathOp;
use backplane_core::{Op, Tensor};
use support::{acc, reference, Rng};

/// The ops under test.
fn ops() -> Vec<MathOp> {
    vec![
        MathOp::Floor,
        MathOp::Ceil,
        MathOp::Round,
        MathOp::Sign,
        MathOp::Reciprocal,
        MathOp::Softsign,
        MathOp::Celu { alpha: 1.0 },
        MathOp::Celu { alpha: 0.5 },
        MathOp::ThresholdedRelu { alpha: 1.0 },
        MathOp::ThresholdedRelu { alpha: -0.5 },
        MathOp::Shrink {
            bias: 0.0,
            lambd: 0.5,
        },
        MathOp::Shrink {
            bias: 1.5,
            lambd: 1.0,
        },
        MathOp::Sin,
        MathOp::Cos,
        MathOp::Tan,
        MathOp::Asin,
        MathOp::Acos,
        MathOp::Atan,
        MathOp::Sinh,
        MathOp::Cosh,
        MathOp::Asinh,
        MathOp::Acosh,
        MathOp::Atanh,
    ]
}

/// Special values, breakpoints and 2570 random values.
fn values() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.5,
        -0.5,
        1.5,
        -1.5,
        2.5,
        -2.5,
        1.0,
        -1.0,
        1.0000001,
        0.99999994,
        -0.99999994,
        -1.0000001,
        2.0,
        1e-30,
        -1e-30,
        1e-45,
        88.0,
        89.0,
        -89.0,
        1e30,
        -1e30,
        f32::MAX,
        f32::MIN,
        std::f32::consts::FRAC_PI_2,
        -std::f32::consts::FRAC_PI_2,
        std::f32::consts::PI,
    ];
    let mut r = Rng(41);
    for i in 0..2570 {
        let scale = [1.0, 4.0, 100.0][i % 3];
        v.push(r.unit() * scale);
    }
    v
}

#[test]
fn math_ops_match_cpu_ref_bit_for_bit() {
    let v = values();
    let x = Tensor::from_vec(vec![v.len()], v).unwrap();
    for m in ops() {
        let op = Op::Math(m);
        let want = reference(&op, &[&x]).remove(0);
        let want = want.as_slice::<f32>().unwrap().to_vec();
        for threads in [1, 2] {
            let got = acc(&op, &[&x], &[false], threads).remove(0);
            let got = got.as_slice::<f32>().unwrap();
            let xs = x.as_slice::<f32>().unwrap();
            for ((g, w), xv) in got.iter().zip(&want).zip(xs) {
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{m:?}({xv}) = {g}, CpuRef {w}"
                );
            }
        }
    }
}
