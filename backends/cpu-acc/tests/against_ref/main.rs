//! Every CpuAcc kernel against CpuRef (the oracle) on random inputs: odd sizes (1, 3, 7, 17,
//! 63, 257), padding/stride/dilation/group variants, broadcasting shapes, constant and
//! run-time weights, 1 and 2 threads.
//!
//! Tolerances (|acc - ref| <= atol + rtol·|ref|): GEMM-based ops (MatMul, Gemm, Conv and the
//! fused layers) rtol 1e-4, atol 1e-4·sqrt(K) (f32 sums in a different order vs CpuRef's f64);
//! transcendental functions and normalizations rtol 1e-5, atol 1e-6 (as the op table);
//! exact ops (copies, max/min, Relu) must match exactly.
//!
//! Convolution paths are in `conv`, fused layers in `fused`; the other ops here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../support/mod.rs"]
mod support;

mod conv;
mod fused;

use support::{check, close, reference, run_desc, sole_replacement, Rng};

use backplane_backend_api::{Backend, LayerDesc, SubgraphView, ValueRef};
use backplane_core::ops::{
    AutoPad, BinaryExtOp, BinaryOp, ConvDesc, GemmDesc, MathOp, PoolDesc, PoolKind, ReduceDesc,
    ReduceKind, UnaryOp, Window,
};
use backplane_core::{Network, Op, Tensor};
use backplane_cpu_acc::CpuAccBackend;
use std::sync::Arc;

const SIZES: [usize; 6] = [1, 3, 7, 17, 63, 257];

#[test]
fn matmul_odd_sizes_batches_and_broadcasting() {
    let mut r = Rng(1);
    for &m in &SIZES {
        for &k in &[1, 7, 63, 257] {
            for &n in &[1, 3, 17, 257] {
                let a = r.tensor(&[m, k], 1.0);
                let b = r.tensor(&[k, n], 1.0);
                let atol = 1e-4 * (k as f64).sqrt();
                check(
                    &format!("matmul {m}x{k}x{n}"),
                    &Op::MatMul,
                    &[&a, &b],
                    &[&[false, false], &[false, true]],
                    1e-4,
                    atol,
                );
            }
        }
    }
    let cases: &[(&[usize], &[usize])] = &[
        (&[2, 3, 7, 17], &[17, 5]),
        (&[3, 1, 7, 17], &[1, 4, 17, 3]),
        (&[2, 7, 63], &[2, 63, 17]),
        (&[17], &[17, 7]),
        (&[7, 17], &[17]),
        (&[4, 1, 3], &[3, 1]),
        (&[1, 2, 128, 64], &[1, 2, 64, 128]),
    ];
    for (ad, bd) in cases {
        let a = r.tensor(ad, 1.0);
        let b = r.tensor(bd, 1.0);
        check(
            &format!("matmul {ad:?}x{bd:?}"),
            &Op::MatMul,
            &[&a, &b],
            &[&[false, false], &[false, true]],
            1e-4,
            1e-3,
        );
    }
}

#[test]
fn gemm_transposes_scales_and_c_shapes() {
    let mut r = Rng(2);
    // One row against a constant B (a batch-1 fully connected layer) takes the vector path:
    // odd K, K past one block of 256, column panels with tails.
    let shapes = [
        (1, 1, 1),
        (3, 17, 7),
        (17, 63, 257),
        (63, 7, 3),
        (1, 257, 63),
        (1, 3, 33),
        (1, 513, 100),
    ];
    for (m, k, n) in shapes {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a = r.tensor(&if ta { [k, m] } else { [m, k] }, 1.0);
            let b = r.tensor(&if tb { [n, k] } else { [k, n] }, 1.0);
            let desc = GemmDesc {
                alpha: 0.7,
                beta: -1.3,
                trans_a: ta,
                trans_b: tb,
            };
            let op = Op::Gemm(desc);
            check(
                &format!("gemm {m}x{k}x{n} {ta} {tb}"),
                &op,
                &[&a, &b],
                &[&[false, false], &[false, true]],
                1e-4,
                1e-3,
            );
            let c_shapes: [Vec<usize>; 5] = [vec![n], vec![1, n], vec![m, 1], vec![m, n], vec![]];
            for cd in c_shapes {
                let c = r.tensor(&cd, 1.0);
                check(
                    &format!("gemm {m}x{k}x{n} C{cd:?}"),
                    &op,
                    &[&a, &b, &c],
                    &[&[false, false, false], &[false, true, true]],
                    1e-4,
                    1e-3,
                );
            }
        }
    }
}

#[test]
fn elementwise_broadcasting_shapes() {
    let mut r = Rng(4);
    let shapes: &[(&[usize], &[usize])] = &[
        (&[257], &[257]),
        (&[2, 3, 4], &[4]),
        (&[2, 1, 4], &[3, 1]),
        (&[1], &[5, 6]),
        (&[7, 1, 17], &[1, 3, 1]),
        (&[], &[3, 7]),
        (&[2, 17, 7, 7], &[1, 17, 1, 1]),
        (&[63, 1], &[1, 63]),
        (&[3, 1, 257], &[3, 7, 257]),
    ];
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ] {
        for (ad, bd) in shapes {
            let a = r.tensor(ad, 3.0);
            let b = r.tensor(bd, 3.0);
            check(
                &format!("{op:?} {ad:?} {bd:?}"),
                &Op::Binary(op),
                &[&a, &b],
                &[&[false, false]],
                1e-6,
                0.0,
            );
        }
    }
    // Pow as CpuRef computes it (in f64, rounded once): exactly equal, squares included;
    // negative bases to fractional powers are NaN, zero to negative powers infinite.
    for (ad, bd) in shapes {
        let a = r.tensor(ad, 3.0);
        let b = r.tensor(bd, 3.0);
        check(
            &format!("Pow {ad:?} {bd:?}"),
            &Op::Binary(BinaryOp::Pow),
            &[&a, &b],
            &[&[false, false]],
            0.0,
            0.0,
        );
    }
    let bases: Vec<f32> = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e-20, 3e10, f32::NAN]
        .into_iter()
        .chain([f32::INFINITY, f32::NEG_INFINITY])
        .chain((0..63).map(|_| r.unit() * 4.0))
        .collect();
    let base = Tensor::from_vec(vec![bases.len()], bases).unwrap();
    for e in [2.0, 0.5, 3.0, -1.0, -1.5, 0.0, 1.0, f32::NAN, 40.0] {
        let e = Tensor::from_vec(vec![1], vec![e]).unwrap();
        check(
            &format!("Pow by {:?}", e.as_slice::<f32>().unwrap()),
            &Op::Binary(BinaryOp::Pow),
            &[&base, &e],
            &[&[false, false], &[false, true]],
            0.0,
            0.0,
        );
    }
    let mut values: Vec<f32> = (0..2570).map(|_| r.unit() * 8.0).collect();
    values.extend([
        0.0,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-30,
        -30.0,
        30.0,
        88.0,
        -88.0,
    ]);
    let x = Tensor::from_vec(vec![values.len()], values.clone()).unwrap();
    let pos =
        Tensor::from_vec(vec![values.len()], values.iter().map(|v| v.abs()).collect()).unwrap();
    for u in [
        UnaryOp::Relu,
        UnaryOp::LeakyRelu { alpha: 0.1 },
        UnaryOp::Clip {
            min: -1.0,
            max: 6.0,
        },
        UnaryOp::Sigmoid,
        UnaryOp::Tanh,
        UnaryOp::Erf,
        UnaryOp::Gelu {
            tanh_approximation: false,
        },
        UnaryOp::Gelu {
            tanh_approximation: true,
        },
        UnaryOp::Exp,
        UnaryOp::Neg,
        UnaryOp::Abs,
    ] {
        check(
            &format!("{u:?}"),
            &Op::Unary(u),
            &[&x],
            &[&[false]],
            1e-5,
            1e-6,
        );
    }
    for u in [UnaryOp::Sqrt, UnaryOp::Log] {
        check(
            &format!("{u:?}"),
            &Op::Unary(u),
            &[&pos],
            &[&[false]],
            1e-6,
            1e-7,
        );
    }
    // The activations of the math ops CpuAcc runs, over the same values (±0, NaN, ±inf,
    // and the sides of each function's breaks).
    for m in [
        MathOp::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        },
        MathOp::HardSigmoid {
            alpha: 1.0 / 6.0,
            beta: 0.5,
        },
        MathOp::HardSwish,
        MathOp::Elu { alpha: 1.0 },
        MathOp::Elu { alpha: 0.3 },
        MathOp::Selu {
            alpha: 1.673_263_2,
            gamma: 1.050_701,
        },
        MathOp::Softplus,
        MathOp::Mish,
    ] {
        check(
            &format!("{m:?}"),
            &Op::Math(m),
            &[&x],
            &[&[false]],
            1e-5,
            1e-6,
        );
    }
    let edges: [f32; 10] = [
        -3.0, -2.5, 3.0, 2.5, -1e-4, 1e-4, 50.0, -50.0, -100.0, 100.0,
    ];
    let e = Tensor::from_vec(vec![edges.len()], edges.to_vec()).unwrap();
    for m in [
        MathOp::HardSwish,
        MathOp::Softplus,
        MathOp::Mish,
        MathOp::Elu { alpha: 2.0 },
    ] {
        check(
            &format!("{m:?} edges"),
            &Op::Math(m),
            &[&e],
            &[&[false]],
            1e-5,
            1e-6,
        );
    }
    // PRelu: per-channel, scalar and full slopes (constant, as in models, and run-time).
    for (xd, sd) in [
        (&[2, 17, 7, 7][..], &[17, 1, 1][..]),
        (&[1, 63, 3], &[1]),
        (&[257], &[257]),
        (&[3, 7, 1], &[7, 1]),
    ] {
        let a = r.tensor(xd, 3.0);
        let slope = r.tensor(sd, 1.0);
        check(
            &format!("PRelu {xd:?} {sd:?}"),
            &Op::BinaryExt(BinaryExtOp::PRelu),
            &[&a, &slope],
            &[&[false, true], &[false, false]],
            0.0,
            0.0,
        );
    }
}

#[test]
fn pooling_variants() {
    let mut r = Rng(5);
    for kind in [PoolKind::Max, PoolKind::Average] {
        for (k, s, p, d, ceil, inc) in [
            (
                vec![3, 3],
                vec![2, 2],
                vec![1, 1, 1, 1],
                vec![],
                false,
                false,
            ),
            (vec![2, 2], vec![2, 2], vec![], vec![], false, false),
            (
                vec![3, 3],
                vec![1, 1],
                vec![1, 0, 2, 1],
                vec![],
                false,
                false,
            ),
            (vec![3, 2], vec![1, 3], vec![1, 0, 2, 1], vec![], true, true),
            (
                vec![3, 3],
                vec![2, 2],
                vec![1, 1, 1, 1],
                vec![],
                true,
                false,
            ),
            (
                vec![5, 5],
                vec![3, 3],
                vec![2, 2, 2, 2],
                vec![],
                false,
                true,
            ),
            (vec![2, 3], vec![1, 1], vec![], vec![2, 2], false, false),
        ] {
            if kind == PoolKind::Average && !d.is_empty() {
                continue;
            }
            let op = Op::Pool(PoolDesc {
                kind,
                window: Window {
                    kernel: k,
                    strides: s,
                    dilations: d,
                    pads: p,
                    auto_pad: AutoPad::NotSet,
                },
                ceil_mode: ceil,
                count_include_pad: inc,
            });
            // 19 and 2×16 planes: max pooling takes the channels-last blocks (with AVX-512);
            // 3×3 windows with outputs at least 14 wide (of the 63- and 31-wide planes), the
            // rows path. Many 4×4 planes: Inception's pools (TFLite's SAME, padding left out
            // of the count: the depthwise sums scaled per pixel).
            for dims in [
                [1, 3, 17, 17],
                [2, 7, 7, 63],
                [1, 1, 3, 3],
                [1, 19, 17, 17],
                [2, 16, 30, 31],
                [1, 131, 4, 4],
            ] {
                let x = r.tensor(&dims, 2.0);
                if op.infer(&[x.info()]).is_err() {
                    continue;
                }
                check(
                    &format!("{op:?} {dims:?}"),
                    &op,
                    &[&x],
                    &[&[false]],
                    1e-5,
                    1e-6,
                );
                // A NaN in one plane propagates to the windows that cover it (max takes a
                // separate loop for planes holding a NaN).
                let mut xn = x.clone();
                let values = xn.as_mut_slice::<f32>().unwrap();
                values[values.len() / 2] = f32::NAN;
                check(
                    &format!("{op:?} {dims:?} with a NaN"),
                    &op,
                    &[&xn],
                    &[&[false]],
                    1e-5,
                    1e-6,
                );
            }
        }
        let x = r.tensor(&[2, 17, 7, 7], 2.0);
        check(
            "global pool",
            &Op::GlobalPool(kind),
            &[&x],
            &[&[false]],
            1e-5,
            1e-6,
        );
        let x = r.tensor(&[1, 3, 257], 2.0);
        check(
            "global pool 1d",
            &Op::GlobalPool(kind),
            &[&x],
            &[&[false]],
            1e-5,
            1e-6,
        );
    }
}

/// LogSoftmax along contiguous and strided axes (inputs that make some probabilities
/// underflow, where ln(softmax) would be -inf), and InstanceNormalization of ranks 2-5 with
/// constant and run-time parameters.
#[test]
fn log_softmax_and_instance_norm() {
    let mut r = Rng(13);
    for (dims, axis, scale) in [
        (vec![3, 257], -1, 5.0),
        (vec![2, 17, 7], 1, 5.0),
        (vec![2, 17, 7], 0, 5.0),
        (vec![1, 2, 128, 128], -1, 5.0),
        (vec![7], 0, 5.0),
        (vec![1, 1], 1, 5.0),
        (vec![4, 63], 1, 200.0),
    ] {
        let x = r.tensor(&dims, scale);
        check(
            &format!("log softmax {dims:?} {axis}"),
            &Op::LogSoftmax { axis },
            &[&x],
            &[&[false]],
            1e-5,
            1e-5,
        );
    }
    for dims in [
        vec![1, 3],
        vec![2, 3, 17],
        vec![1, 7, 63, 17],
        vec![2, 17, 1, 1],
        vec![1, 1, 257, 257],
        vec![2, 3, 3, 7, 5],
    ] {
        let x = r.tensor(&dims, 3.0);
        // A channel offset far from zero, as after a convolution with bias.
        let x = Tensor::from_vec(
            dims.clone(),
            x.as_slice::<f32>()
                .unwrap()
                .iter()
                .map(|v| v + 4.0)
                .collect(),
        )
        .unwrap();
        let s = r.tensor(&[dims[1]], 2.0);
        let b = r.tensor(&[dims[1]], 1.0);
        check(
            &format!("instance norm {dims:?}"),
            &Op::InstanceNormalization { epsilon: 1e-5 },
            &[&x, &s, &b],
            &[&[false, true, true], &[false, false, false]],
            1e-4,
            1e-5,
        );
    }
}

/// LogSoftmax and Softmax of inputs far from zero (around ±1e5, ±1e4, spread over a few
/// units): the row maximum's ulp (0.0078 at 1e5) must not reach the results, so `x - max` is
/// taken before the logarithm of the sum is subtracted. Rows of 1, primes and large sizes,
/// contiguous and strided.
#[test]
fn log_softmax_and_softmax_of_large_magnitudes() {
    let mut r = Rng(29);
    for offset in [1e5f32, -1e5, 1e4, 3.3e5] {
        for (dims, axis) in [
            (vec![1, 1], -1),
            (vec![3, 2], -1),
            (vec![2, 7], -1),
            (vec![5, 13], 1),
            (vec![3, 31], -1),
            (vec![2, 257], -1),
            (vec![1, 4099], -1),
            (vec![2, 17, 3], 1),
            (vec![1, 63, 5], 1),
        ] {
            let x = r.tensor(&dims, 3.0);
            let x = Tensor::from_vec(
                dims.clone(),
                x.as_slice::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| v + offset)
                    .collect(),
            )
            .unwrap();
            for op in [Op::LogSoftmax { axis }, Op::Softmax { axis }] {
                check(
                    &format!("{} {dims:?} {axis} around {offset}", op.name()),
                    &op,
                    &[&x],
                    &[&[false]],
                    1e-5,
                    1e-5,
                );
            }
        }
    }
}

/// ArgMax / ArgMin along every axis position (last, inner, outer), with ties (values from a
/// few levels), NaNs, both tie rules and keepdims; class maps large enough for 2 threads.
#[test]
fn arg_max_and_min() {
    let mut r = Rng(17);
    for (dims, axis) in [
        (vec![3, 257], -1),
        (vec![1, 21, 63, 17], 1),
        (vec![2, 7, 17], 0),
        (vec![2, 7, 17], -2),
        (vec![1], 0),
        (vec![5, 1, 3], 1),
        (vec![1, 3, 257, 63], 1),
        (vec![63, 3], -1),
        (vec![17, 2], 1),
    ] {
        let n: usize = dims.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|k| match r.next() % 23 {
                0 if k % 5 == 0 => f32::NAN,
                v => (v % 7) as f32 - 3.0,
            })
            .collect();
        let x = Tensor::from_vec(dims.clone(), values).unwrap();
        for (max, keepdims, last) in [
            (true, true, false),
            (false, false, false),
            (true, false, true),
            (false, true, true),
        ] {
            let op = Op::ArgReduce(backplane_core::ops::ArgReduceDesc {
                max,
                axis,
                keepdims,
                select_last_index: last,
            });
            check(
                &format!("arg {dims:?} {axis} max={max} keep={keepdims} last={last}"),
                &op,
                &[&x],
                &[&[false]],
                0.0,
                0.0,
            );
        }
    }
}

#[test]
fn softmax_layernorm_batchnorm_reduce() {
    let mut r = Rng(6);
    for (dims, axis) in [
        (vec![3, 257], -1),
        (vec![2, 17, 7], 1),
        (vec![1, 2, 128, 128], -1),
        (vec![7], 0),
    ] {
        let x = r.tensor(&dims, 5.0);
        check(
            &format!("softmax {dims:?} {axis}"),
            &Op::Softmax { axis },
            &[&x],
            &[&[false]],
            1e-5,
            1e-6,
        );
    }
    for (dims, axis, sd) in [
        (vec![3, 128], -1, vec![128]),
        (vec![2, 7, 17], -2, vec![7, 17]),
        (vec![2, 7, 17], -2, vec![17]),
        (vec![5, 257], 1, vec![1]),
    ] {
        let x = r.tensor(&dims, 3.0);
        let s = r.tensor(&sd, 1.0);
        let b = r.tensor(&sd, 1.0);
        let op = Op::LayerNormalization {
            axis,
            epsilon: 1e-5,
        };
        check(
            &format!("layernorm {dims:?}"),
            &op,
            &[&x, &s, &b],
            &[&[false, true, true], &[false, false, false]],
            1e-4,
            1e-5,
        );
        check(
            &format!("layernorm {dims:?} no bias"),
            &op,
            &[&x, &s],
            &[&[false, true]],
            1e-4,
            1e-5,
        );
    }
    let x = r.tensor(&[2, 17, 7, 3], 3.0);
    let p: Vec<Tensor> = (0..4)
        .map(|i| {
            let t = r.tensor(&[17], 1.0);
            if i == 3 {
                Tensor::from_vec(
                    vec![17],
                    t.as_slice::<f32>()
                        .unwrap()
                        .iter()
                        .map(|v| v.abs() + 0.1)
                        .collect(),
                )
                .unwrap()
            } else {
                t
            }
        })
        .collect();
    let op = Op::BatchNormalization { epsilon: 1e-5 };
    check(
        "batchnorm",
        &op,
        &[&x, &p[0], &p[1], &p[2], &p[3]],
        &[&[false, true, true, true, true], &[false; 5]],
        1e-5,
        1e-5,
    );
    for kind in [
        ReduceKind::Sum,
        ReduceKind::Mean,
        ReduceKind::Max,
        ReduceKind::Min,
        ReduceKind::L1,
        ReduceKind::L2,
        ReduceKind::SumSquare,
    ] {
        for (dims, axes, keep) in [
            (vec![3, 257], vec![-1], true),
            (vec![2, 17, 7], vec![1], false),
            (vec![2, 17, 7], vec![1, 2], true),
            (vec![7, 3, 63], vec![0], false),
            (vec![1, 3, 1, 5], vec![1, 2], true),
            // A channels-last mean over the pixels: each image's channels in parts.
            (vec![2, 5, 6, 64], vec![1, 2], true),
            (vec![1, 7, 7, 48], vec![1, 2], false),
            // Only size-1 axes reduced (a classifier's mean over a 1×1 image).
            (vec![1, 37, 1, 1], vec![2, 3], false),
            (vec![2, 5, 1, 1], vec![2, -1], true),
        ] {
            let x = r.tensor(&dims, 2.0);
            let op = Op::Reduce(ReduceDesc {
                kind,
                axes,
                keepdims: keep,
                noop_with_empty_axes: false,
            });
            check(
                &format!("{op:?} {dims:?}"),
                &op,
                &[&x],
                &[&[false]],
                1e-5,
                1e-5,
            );
        }
    }
}

#[test]
fn data_movement() {
    let mut r = Rng(7);
    let x = r.tensor(&[2, 3, 17, 7], 1.0);
    for perm in [
        vec![0, 2, 1, 3],
        vec![3, 2, 1, 0],
        vec![0, 1, 3, 2],
        vec![0, 1, 2, 3],
    ] {
        check(
            &format!("transpose {perm:?}"),
            &Op::Transpose { perm },
            &[&x],
            &[&[false]],
            0.0,
            0.0,
        );
    }
    // NCHW ↔ NHWC, the blocked matrix path: sizes across and off the 16-wide blocks.
    for dims in [[2, 3, 17, 7], [1, 33, 1, 1], [1, 1, 5, 3], [1, 40, 7, 7]] {
        let t = r.tensor(&dims, 1.0);
        for perm in [vec![0, 2, 3, 1], vec![0, 3, 1, 2]] {
            check(
                &format!("transpose {dims:?} {perm:?}"),
                &Op::Transpose { perm },
                &[&t],
                &[&[false]],
                0.0,
                0.0,
            );
        }
    }
    // Two to four channels at a layout border (an image's input), the pass-per-lane path,
    // both ways; a prime plane and one of two images.
    for dims in [
        [1, 96, 96, 3],
        [1, 13, 11, 2],
        [2, 17, 5, 4],
        [1, 3, 19, 23],
        [2, 2, 7, 1],
        [1, 4, 1, 997],
    ] {
        let t = r.tensor(&dims, 1.0);
        for perm in [vec![0, 3, 1, 2], vec![0, 2, 3, 1]] {
            check(
                &format!("transpose {dims:?} {perm:?}"),
                &Op::Transpose { perm },
                &[&t],
                &[&[false]],
                0.0,
                0.0,
            );
        }
    }
    let y = r.tensor(&[2, 5, 17, 7], 1.0);
    check(
        "concat",
        &Op::Concat { axis: 1 },
        &[&x, &y],
        &[&[false, false]],
        0.0,
        0.0,
    );
    check(
        "reshape",
        &Op::Reshape {
            shape: vec![6, 119],
        },
        &[&x],
        &[&[false]],
        0.0,
        0.0,
    );
}

/// Every permutation of rank 3 and 4, and ShuffleNet's rank-5 channel shuffle, on shapes with
/// size-1 axes, primes and a large one (split between threads), in 1-, 2-, 4- and 8-byte
/// types: equal to CpuRef (the axes that move together are merged before copying).
#[test]
fn transposes_of_every_permutation_and_element_type() {
    fn perms(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![vec![]];
        }
        let mut all = Vec::new();
        for p in perms(n - 1) {
            for at in 0..n {
                let mut q = p.clone();
                q.insert(at, n - 1);
                all.push(q);
            }
        }
        all
    }
    fn typed(values: &[f32], dims: &[usize]) -> Vec<Tensor> {
        let ints: Vec<i64> = values.iter().map(|v| (v * 1000.0) as i64).collect();
        vec![
            Tensor::from_vec(dims.to_vec(), values.to_vec()).unwrap(),
            Tensor::from_vec(dims.to_vec(), ints.clone()).unwrap(),
            Tensor::from_vec(
                dims.to_vec(),
                ints.iter().map(|&v| v as u8).collect::<Vec<_>>(),
            )
            .unwrap(),
            Tensor::from_vec(
                dims.to_vec(),
                ints.iter().map(|&v| v as i16).collect::<Vec<_>>(),
            )
            .unwrap(),
        ]
    }
    let mut r = Rng(45);
    let mut checked = 0;
    let mut check_all = |dims: &[usize], perms: &[Vec<usize>]| {
        let x = r.tensor(dims, 1.0);
        let values: Vec<f32> = x.to_f64_vec().iter().map(|&v| v as f32).collect();
        for t in typed(&values, dims) {
            for perm in perms {
                check(
                    &format!("transpose {:?} {dims:?} {perm:?}", t.dtype()),
                    &Op::Transpose { perm: perm.clone() },
                    &[&t],
                    &[&[false]],
                    0.0,
                    0.0,
                );
                checked += 1;
            }
        }
    };
    let shapes: &[&[usize]] = &[
        &[2, 3, 5],
        &[1, 7, 1],
        &[3, 1, 4, 5],
        &[2, 3, 17, 7],
        &[1, 1, 1, 13],
        &[1, 5, 7, 1],
        &[4, 33, 41, 3],
    ];
    for dims in shapes {
        check_all(dims, &perms(dims.len()));
    }
    let shuffles = [
        vec![0, 2, 1, 3, 4],
        vec![0, 3, 4, 1, 2],
        vec![4, 3, 2, 1, 0],
    ];
    for dims in [[1, 2, 58, 28, 28], [1, 2, 232, 7, 7], [3, 2, 5, 1, 7]] {
        check_all(&dims, &shuffles);
    }
    assert_eq!(checked, 4 * (2 * 6 + 5 * 24) + 3 * 4 * 3);
}

#[test]
fn unsupported_layers_are_refused_with_a_reason() {
    let backend = CpuAccBackend::new();
    let x = Tensor::from_vec(vec![3], vec![1i64, 2, 3]).unwrap();
    let op = Op::Unary(UnaryOp::Relu);
    let desc = LayerDesc {
        name: "r".into(),
        op: op.clone(),
        inputs: vec![x.info().clone()],
        outputs: op.infer(&[x.info()]).unwrap(),
        constants: vec![None],
    };
    match backend.layer_support().is_layer_supported(&desc) {
        backplane_backend_api::Support::Unsupported(reason) => {
            assert!(reason.contains("f32"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(backend
        .create_workload_factory(None)
        .unwrap()
        .create_workload(&desc)
        .is_err());
    assert_eq!(backend.id().as_str(), "CpuAcc");
    assert_eq!(CpuAccBackend::with_threads(3).threads(), 3);
}

/// The `threads` backend option reaches every backend object of one registry factory.
#[test]
fn threads_option_is_shared_by_the_factory_backends() {
    let factory = CpuAccBackend::factory();
    let mut opts = backplane_backend_api::BackendOptions::default();
    opts.values.insert("threads".into(), "2".into());
    assert!(factory().create_backend_context(&opts).is_ok());
    let caps = factory().capabilities();
    assert_eq!(
        caps.get("Threads"),
        Some(&backplane_backend_api::CapabilityValue::Int(2))
    );
    opts.values.insert("threads".into(), "zero".into());
    assert!(factory().create_backend_context(&opts).is_err());
}
