//! Every GpuAcc kernel against CpuRef's on the same inputs, over odd shapes (size 1, primes,
//! one past a tile, large), with weights as constants and as run-time inputs, through a
//! runtime as users build one (GpuAcc alone, so a refusal fails the case); then the backend
//! test kit's op table and random sweeps on GpuAcc.
//!
//! Needs a Vulkan adapter: a software one (lavapipe) is accepted through the backend option
//! `allow_software=true`. Without any adapter the tests print why and pass, unless
//! `BACKPLANE_REQUIRE_GPU_ADAPTER=1` (set in CI, where lavapipe is installed) makes that a
//! failure.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::type_complexity
)]

use backplane::core::ops::{
    BinaryOp, ConvDesc, GemmDesc, MathOp, PoolDesc, PoolKind, UnaryOp, Window,
};
use backplane::core::{DataType, Op};
use backplane_backend_tests::sweeps::{Rng, SweepCase};
use backplane_backend_tests::{check, KitOptions};

mod common;

use common::{case, expect_pass, gpu, runtime, t};

const ODD: [&[usize]; 6] = [&[1], &[7], &[1, 1], &[3, 17], &[2, 3, 5, 7], &[1000003]];

#[test]
fn elementwise_kernels_match_cpu_ref() {
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(7);
    let mut cases = Vec::new();
    let unary = [
        UnaryOp::Relu,
        UnaryOp::LeakyRelu { alpha: 0.1 },
        UnaryOp::Clip {
            min: -0.5,
            max: f32::INFINITY,
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
    ];
    for (k, u) in unary.iter().enumerate() {
        let dims = ODD[k % ODD.len()];
        cases.push(case(Op::Unary(*u), vec![(t(&mut r, dims), false)]));
    }
    // Sqrt and Log on positive values.
    for u in [UnaryOp::Sqrt, UnaryOp::Log] {
        let x = r.tensor(DataType::F32, &[3, 17], 0.1, 4.0).expect("tensor");
        cases.push(case(Op::Unary(u), vec![(x, false)]));
    }
    for m in [
        MathOp::Softplus,
        MathOp::Softsign,
        MathOp::HardSwish,
        MathOp::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        },
        MathOp::Elu { alpha: 1.0 },
        MathOp::Floor,
    ] {
        cases.push(case(Op::Math(m), vec![(t(&mut r, &[2, 31]), false)]));
    }
    let pairs: [(&[usize], &[usize]); 6] = [
        (&[1], &[1]),
        (&[7], &[1]),
        (&[3, 1, 5], &[4, 1]),
        (&[2, 3, 5, 7], &[7]),
        (&[1, 17], &[13, 1]),
        (&[257, 129], &[257, 129]),
    ];
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ];
    for (k, (a, b)) in pairs.iter().enumerate() {
        for (j, op) in ops.iter().enumerate() {
            let b_const = (k + j) % 2 == 0;
            let bt = if *op == BinaryOp::Div {
                r.tensor(DataType::F32, b, 0.5, 2.0).expect("tensor")
            } else {
                t(&mut r, b)
            };
            cases.push(case(
                Op::Binary(*op),
                vec![(t(&mut r, a), false), (bt, b_const)],
            ));
        }
    }
    // Pow: positive bases with any exponent, negative bases with integral ones.
    let base = r.tensor(DataType::F32, &[5, 3], 0.1, 3.0).expect("tensor");
    let exp = t(&mut r, &[3]);
    cases.push(case(
        Op::Binary(BinaryOp::Pow),
        vec![(base, false), (exp, false)],
    ));
    let base = t(&mut r, &[2, 3]);
    let exp = backplane::Tensor::from_f64_values(
        backplane::TensorInfo::new(DataType::F32, vec![3]),
        &[2.0, 3.0, -1.0],
    )
    .unwrap();
    cases.push(case(
        Op::Binary(BinaryOp::Pow),
        vec![(base, false), (exp, true)],
    ));
    expect_pass(&rt, cases);
}

/// Exact where the CPU is exact, on any GPU: Div rounded to nearest (a GPU's `/` may be off
/// by 2.5 ULP, NVIDIA's is), and Relu keeping NaN and -0.0 (a driver may turn the select into
/// a `max` that drops NaN). Compared with no tolerance at all.
#[test]
fn division_reciprocal_and_relu_are_exact() {
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(11);
    let a = t(&mut r, &[100003]);
    let b = r
        .tensor(DataType::F32, &[100003], 0.3, 3.0)
        .expect("tensor");
    let special = backplane::Tensor::from_f64_values(
        backplane::TensorInfo::new(DataType::F32, vec![9]),
        &[
            f64::NAN,
            -f64::NAN,
            -0.0,
            0.0,
            -1e-40,
            1e-40,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -3.5,
        ],
    )
    .unwrap();
    let b_again = b.clone();
    let exact = |op, inputs| SweepCase {
        rtol: 0.0,
        atol: 0.0,
        ..case(op, inputs)
    };
    // DynamicQuantizeLinear's expanded test: scale = 5 / 255, then -2.5 / scale sits next
    // to a rounding boundary (-127.49999, which Round takes to -127; a scale one ULP low
    // gives -127.50001, rounded to -128: the value off by one on an H200). Also ties and
    // operands whose significands divide evenly.
    let num = [5.0f32, -2.5, -3.0, 1.0, 7.0, 1.5, -9.0, 0.75];
    let den = [
        255.0f32,
        5.0 / 255.0,
        5.0 / 255.0,
        3.0,
        0.1,
        1.0 / 3.0,
        4.5,
        -0.375,
    ];
    assert_ne!(
        -2.5f32 / (5.0f32 / 255.0),
        -127.5,
        "the pinned case is off the tie"
    );
    let f32s = |v: &[f32]| {
        let values: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
        backplane::Tensor::from_f64_values(
            backplane::TensorInfo::new(DataType::F32, vec![v.len()]),
            &values,
        )
        .unwrap()
    };
    expect_pass(
        &rt,
        vec![
            exact(Op::Binary(BinaryOp::Div), vec![(a, false), (b, false)]),
            exact(Op::Unary(UnaryOp::Relu), vec![(special, false)]),
            exact(
                Op::Binary(BinaryOp::Div),
                vec![(f32s(&num), false), (f32s(&den), false)],
            ),
            // Reciprocal divides as Div does: exact on the same operands.
            exact(Op::Math(MathOp::Reciprocal), vec![(f32s(&den), false)]),
            exact(Op::Math(MathOp::Reciprocal), vec![(b_again, false)]),
        ],
    );
}

#[test]
fn products_match_cpu_ref() {
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(11);
    let mut cases = Vec::new();
    let matmuls: [(&[usize], &[usize]); 10] = [
        (&[1, 1], &[1, 1]),
        (&[3, 17], &[17, 5]),
        (&[17, 16], &[16, 33]),
        (&[7], &[7, 3]),
        (&[4, 7], &[7]),
        (&[2, 3, 5, 7], &[7, 11]),
        (&[2, 1, 5, 7], &[3, 7, 2]),
        (&[64, 129], &[129, 31]),
        // 64x64 register-blocked tiles: past a tile both ways, batched and broadcast.
        (&[65, 33], &[33, 70]),
        (&[2, 3, 37, 45], &[45, 32]),
    ];
    for (k, (a, b)) in matmuls.iter().enumerate() {
        cases.push(case(
            Op::MatMul,
            vec![(t(&mut r, a), false), (t(&mut r, b), k % 2 == 0)],
        ));
    }
    for (ta, tb, m, k, n, c) in [
        (false, false, 1, 1, 1, Some(vec![1])),
        (false, true, 3, 17, 5, Some(vec![5])),
        (true, false, 17, 3, 19, None),
        (true, true, 16, 16, 16, Some(vec![16, 1])),
        (false, false, 33, 31, 37, Some(vec![33, 37])),
        (true, true, 40, 17, 66, Some(vec![66])),
    ] {
        let a = if ta { vec![k, m] } else { vec![m, k] };
        let b = if tb { vec![n, k] } else { vec![k, n] };
        let mut inputs = vec![(t(&mut r, &a), false), (t(&mut r, &b), true)];
        if let Some(c) = c {
            inputs.push((t(&mut r, &c), true));
        }
        let desc = GemmDesc {
            alpha: 0.5,
            beta: 2.0,
            trans_a: ta,
            trans_b: tb,
        };
        cases.push(case(Op::Gemm(desc), inputs));
    }
    expect_pass(&rt, cases);
}

fn window(
    kernel: Vec<usize>,
    strides: Vec<usize>,
    pads: Vec<usize>,
    dilations: Vec<usize>,
) -> Window {
    Window {
        kernel,
        strides,
        dilations,
        pads,
        ..Window::default()
    }
}

#[test]
fn convolutions_and_pools_match_cpu_ref() {
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(13);
    let mut cases = Vec::new();
    // (x, w, group, strides, pads, dilations, bias)
    let convs: Vec<(
        Vec<usize>,
        Vec<usize>,
        usize,
        Vec<usize>,
        Vec<usize>,
        Vec<usize>,
        bool,
    )> = vec![
        (
            vec![1, 1, 1, 1],
            vec![1, 1, 1, 1],
            1,
            vec![],
            vec![],
            vec![],
            false,
        ),
        (
            vec![1, 3, 7, 5],
            vec![4, 3, 3, 3],
            1,
            vec![],
            vec![1, 1, 1, 1],
            vec![],
            true,
        ),
        (
            vec![2, 4, 11, 13],
            vec![6, 2, 3, 2],
            2,
            vec![2, 1],
            vec![1, 0, 0, 1],
            vec![],
            true,
        ),
        (
            vec![1, 5, 9, 9],
            vec![5, 1, 3, 3],
            5,
            vec![1, 1],
            vec![1, 1, 1, 1],
            vec![],
            true,
        ),
        (
            vec![1, 2, 17, 17],
            vec![3, 2, 3, 3],
            1,
            vec![2, 2],
            vec![0, 0, 0, 0],
            vec![2, 2],
            false,
        ),
        (
            vec![2, 3, 31],
            vec![4, 3, 5],
            1,
            vec![2],
            vec![2, 1],
            vec![],
            true,
        ),
        (
            vec![1, 16, 28, 28],
            vec![16, 16, 3, 3],
            1,
            vec![],
            vec![1, 1, 1, 1],
            vec![],
            true,
        ),
        // Wide enough for the implicit GEMM: 1x1, strided + padded + dilated 3x3, grouped
        // with 8 channels per group, 1-D, and one output channel past a tile.
        (
            vec![1, 5, 7, 9],
            vec![8, 5, 1, 1],
            1,
            vec![],
            vec![],
            vec![],
            true,
        ),
        (
            vec![2, 3, 11, 13],
            vec![17, 3, 3, 3],
            1,
            vec![2, 2],
            vec![1, 0, 2, 1],
            vec![2, 1],
            true,
        ),
        (
            vec![1, 8, 9, 9],
            vec![16, 4, 3, 3],
            2,
            vec![],
            vec![1, 1, 1, 1],
            vec![],
            false,
        ),
        (
            vec![2, 3, 31],
            vec![9, 3, 5],
            1,
            vec![2],
            vec![2, 1],
            vec![],
            true,
        ),
        (
            vec![1, 1, 1, 1],
            vec![8, 1, 1, 1],
            1,
            vec![],
            vec![],
            vec![],
            false,
        ),
        // Wide enough for the 64x64 blocked tiles: a padded 3x3 and a 1x1 past a tile in
        // both directions, and two groups of 33 channels.
        (
            vec![1, 8, 12, 11],
            vec![40, 8, 3, 3],
            1,
            vec![],
            vec![1, 1, 1, 1],
            vec![],
            true,
        ),
        (
            vec![2, 33, 9, 9],
            vec![65, 33, 1, 1],
            1,
            vec![],
            vec![],
            vec![],
            true,
        ),
        (
            vec![1, 4, 10, 17],
            vec![66, 2, 3, 3],
            2,
            vec![1, 2],
            vec![0, 1, 2, 0],
            vec![],
            false,
        ),
    ];
    for (k, (x, w, group, strides, pads, dilations, bias)) in convs.into_iter().enumerate() {
        let kernel = w[2..].to_vec();
        let desc = ConvDesc {
            window: window(kernel, strides, pads, dilations),
            group,
        };
        let mut inputs = vec![(t(&mut r, &x), false), (t(&mut r, &w), k != 3)];
        if bias {
            inputs.push((t(&mut r, &[w[0]]), true));
        }
        cases.push(case(Op::Conv(desc), inputs));
    }
    // (x, kernel, strides, pads, ceil, include_pad)
    let pools: Vec<(Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>, bool, bool)> = vec![
        (vec![1, 1, 1, 1], vec![1, 1], vec![], vec![], false, false),
        (
            vec![2, 3, 7, 7],
            vec![3, 3],
            vec![2, 2],
            vec![1, 1, 1, 1],
            false,
            false,
        ),
        (
            vec![1, 2, 8, 11],
            vec![2, 3],
            vec![2, 2],
            vec![0, 1, 0, 1],
            true,
            true,
        ),
        (
            vec![1, 2, 8, 11],
            vec![2, 3],
            vec![2, 2],
            vec![0, 1, 0, 1],
            true,
            false,
        ),
        (vec![1, 3, 13], vec![4], vec![3], vec![1, 2], false, true),
    ];
    for (x, kernel, strides, pads, ceil_mode, count_include_pad) in pools {
        for kind in [PoolKind::Max, PoolKind::Average] {
            let desc = PoolDesc {
                kind,
                window: window(kernel.clone(), strides.clone(), pads.clone(), vec![]),
                ceil_mode,
                count_include_pad,
            };
            cases.push(case(Op::Pool(desc), vec![(t(&mut r, &x), false)]));
        }
    }
    // Planes past 256 values reduce with a workgroup per channel (EfficientNet's 112x112).
    for x in [
        vec![1, 1, 1, 1],
        vec![2, 3, 7, 5],
        vec![1, 7, 13],
        vec![1, 3, 17, 19],
        vec![1, 2, 112, 112],
    ] {
        for kind in [PoolKind::Max, PoolKind::Average] {
            cases.push(case(Op::GlobalPool(kind), vec![(t(&mut r, &x), false)]));
        }
    }
    expect_pass(&rt, cases);
}

#[test]
fn normalizations_and_movement_match_cpu_ref() {
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(17);
    let mut cases = Vec::new();
    for (x, axis) in [
        (vec![1], 0),
        (vec![3, 17], -1),
        (vec![2, 7, 5], 1),
        (vec![4, 1000], 1),
        // Rows past one workgroup of threads, not a multiple of it.
        (vec![3, 65], -1),
        (vec![2, 3, 200], 2),
    ] {
        cases.push(case(Op::Softmax { axis }, vec![(t(&mut r, &x), false)]));
        cases.push(case(Op::LogSoftmax { axis }, vec![(t(&mut r, &x), false)]));
    }
    for (x, axis) in [
        (vec![3, 17], -1i64),
        (vec![2, 5, 7], 1),
        (vec![5, 130], -1),
        (vec![1, 1], 1),
    ] {
        let a = (if axis < 0 {
            x.len() as i64 + axis
        } else {
            axis
        }) as usize;
        let row: Vec<usize> = x[a..].to_vec();
        cases.push(case(
            Op::LayerNormalization {
                axis,
                epsilon: 1e-5,
            },
            vec![
                (t(&mut r, &x), false),
                (t(&mut r, &row), true),
                (t(&mut r, &row), true),
            ],
        ));
    }
    for x in [vec![1, 1, 1, 1], vec![2, 3, 5, 7], vec![1, 17]] {
        let c = x[1];
        cases.push(case(
            Op::BatchNormalization { epsilon: 1e-5 },
            vec![
                (t(&mut r, &x), false),
                (t(&mut r, &[c]), true),
                (t(&mut r, &[c]), true),
                (t(&mut r, &[c]), true),
                (
                    r.tensor(DataType::F32, &[c], 0.5, 2.0).expect("tensor"),
                    true,
                ),
            ],
        ));
    }
    for (x, perm) in [
        (vec![1, 1], vec![1, 0]),
        (vec![3, 17], vec![1, 0]),
        (vec![2, 3, 5, 7], vec![0, 2, 3, 1]),
        (vec![2, 3, 5, 7], vec![3, 1, 0, 2]),
    ] {
        cases.push(case(Op::Transpose { perm }, vec![(t(&mut r, &x), false)]));
    }
    for (a, b, axis) in [
        (vec![1], vec![1], 0),
        (vec![2, 3, 5], vec![2, 7, 5], 1),
        (vec![3, 17], vec![3, 2], -1),
        (vec![0, 4], vec![3, 4], 0),
    ] {
        cases.push(case(
            Op::Concat { axis },
            vec![(t(&mut r, &a), false), (t(&mut r, &b), true)],
        ));
    }
    cases.push(case(
        Op::Reshape { shape: vec![17, 3] },
        vec![(t(&mut r, &[3, 17]), false)],
    ));
    cases.push(case(
        Op::Flatten { axis: 1 },
        vec![(t(&mut r, &[2, 3, 5]), false)],
    ));
    expect_pass(&rt, cases);
}

#[test]
fn reductions_match_cpu_ref() {
    use backplane::core::ops::{ReduceDesc, ReduceKind};
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(11);
    let mut cases = Vec::new();
    let reduce = |kind, axes: &[i64], keepdims| {
        Op::Reduce(ReduceDesc {
            kind,
            axes: axes.to_vec(),
            keepdims,
            noop_with_empty_axes: false,
        })
    };
    // (shape, axes): size 1, primes, one axis, several, all (empty axes), a negative axis,
    // and long reductions (a workgroup per output from 256 values): strided, contiguous,
    // around kept axes, and 13485 values over three axes (past where lavapipe stopped one
    // thread's loop).
    let shapes: [(&[usize], &[i64]); 10] = [
        (&[1], &[0]),
        (&[7], &[]),
        (&[3, 17], &[1]),
        (&[2, 3, 5, 7], &[0, 2]),
        (&[2, 3, 5, 7], &[-1, 1]),
        (&[1, 13, 1], &[]),
        (&[1009, 3], &[0]),
        (&[3, 257], &[1]),
        (&[2, 300, 3], &[1]),
        (&[29, 31, 15], &[]),
    ];
    let kinds = [
        ReduceKind::Mean,
        ReduceKind::Sum,
        ReduceKind::Max,
        ReduceKind::Min,
        ReduceKind::L1,
        ReduceKind::L2,
        ReduceKind::SumSquare,
        ReduceKind::LogSumExp,
    ];
    for (k, kind) in kinds.iter().enumerate() {
        for (s, (dims, axes)) in shapes.iter().enumerate() {
            let x = t(&mut r, dims);
            cases.push(case(
                reduce(*kind, axes, (k + s) % 2 == 0),
                vec![(x, false)],
            ));
        }
    }
    // Prod on few values and on many near 1; LogSum on positive ones.
    let x = r.tensor(DataType::F32, &[3, 5], 0.5, 1.5).expect("tensor");
    cases.push(case(reduce(ReduceKind::Prod, &[1], true), vec![(x, false)]));
    let x = r
        .tensor(DataType::F32, &[2, 521], 0.99, 1.01)
        .expect("tensor");
    cases.push(case(
        reduce(ReduceKind::Prod, &[1], false),
        vec![(x, false)],
    ));
    let x = r
        .tensor(DataType::F32, &[300, 2], 0.1, 2.0)
        .expect("tensor");
    cases.push(case(
        reduce(ReduceKind::LogSum, &[0], true),
        vec![(x, false)],
    ));
    let x = r
        .tensor(DataType::F32, &[2, 3, 5], 0.1, 2.0)
        .expect("tensor");
    cases.push(case(
        reduce(ReduceKind::LogSum, &[0, 2], false),
        vec![(x, false)],
    ));
    // With noop_with_empty_axes and no axes: the input unchanged.
    let noop = Op::Reduce(ReduceDesc {
        kind: ReduceKind::Max,
        axes: vec![],
        keepdims: true,
        noop_with_empty_axes: true,
    });
    cases.push(case(noop, vec![(t(&mut r, &[3, 7]), false)]));
    expect_pass(&rt, cases);
}

#[test]
fn slices_match_cpu_ref() {
    use backplane::core::ops::SliceDesc;
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(13);
    let slice = |starts: &[i64], ends: &[i64], axes: &[i64], steps: &[i64]| {
        Op::Slice(SliceDesc {
            starts: starts.to_vec(),
            ends: ends.to_vec(),
            axes: axes.to_vec(),
            steps: steps.to_vec(),
        })
    };
    let cases = vec![
        case(slice(&[0], &[1], &[], &[]), vec![(t(&mut r, &[1]), false)]),
        case(slice(&[2], &[6], &[0], &[]), vec![(t(&mut r, &[7]), false)]),
        // Negative bounds, a negative axis, steps of 2 and -3.
        case(
            slice(&[-5, 1], &[i64::MAX, 16], &[-1, 0], &[2, 1]),
            vec![(t(&mut r, &[3, 17]), false)],
        ),
        case(
            slice(&[6, 4], &[-100, 0], &[3, 2], &[-3, -1]),
            vec![(t(&mut r, &[2, 3, 5, 7]), false)],
        ),
        case(
            slice(&[11], &[1_000_003], &[0], &[7]),
            vec![(t(&mut r, &[1_000_003]), false)],
        ),
    ];
    expect_pass(&rt, cases);
}

#[test]
fn expand_tile_and_pad_match_cpu_ref() {
    use backplane::core::ops::{PadDesc, PadMode};
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(17);
    let mut cases = vec![
        case(
            Op::Expand { shape: vec![3, 1] },
            vec![(t(&mut r, &[1]), false)],
        ),
        case(
            Op::Expand {
                shape: vec![2, 3, 5, 7],
            },
            vec![(t(&mut r, &[3, 1, 7]), false)],
        ),
        case(
            Op::Expand { shape: vec![1, 1] },
            vec![(t(&mut r, &[13, 1]), false)],
        ),
        case(
            Op::Tile { repeats: vec![1] },
            vec![(t(&mut r, &[1]), false)],
        ),
        case(
            Op::Tile {
                repeats: vec![3, 1, 2],
            },
            vec![(t(&mut r, &[2, 5, 7]), false)],
        ),
        case(
            Op::Tile { repeats: vec![7] },
            vec![(t(&mut r, &[10_007]), false)],
        ),
    ];
    let pads: [(&[usize], &[i64]); 4] = [
        (&[1], &[0, 0]),
        (&[7], &[2, 3]),
        (&[3, 17], &[1, -2, 0, 5]),
        (&[2, 3, 5, 7], &[0, 1, 2, 3, 1, 0, 4, 6]),
    ];
    for mode in [
        PadMode::Constant,
        PadMode::Reflect,
        PadMode::Edge,
        PadMode::Wrap,
    ] {
        for (dims, p) in pads {
            // Reflect needs pads smaller than the axis.
            if mode == PadMode::Reflect && dims == [1] {
                continue;
            }
            let desc = PadDesc {
                mode,
                pads: p.to_vec(),
                value: 0.75,
            };
            cases.push(case(Op::Pad(desc), vec![(t(&mut r, dims), false)]));
        }
    }
    expect_pass(&rt, cases);
}

#[test]
fn the_backend_test_kit_passes_on_gpu_acc() {
    let Some(rt) = runtime() else { return };
    let options = KitOptions {
        sweep_cases: 6,
        ..KitOptions::default()
    };
    let report = check(&rt, &gpu(), &options);
    let text = report.to_text();
    println!("{text}");
    assert!(report.ok(), "{text}");
    let (passed, _) = report.totals();
    assert!(passed > 50, "too little was checked: {text}");
}

/// Conv, Gemm and MatMul followed by an activation become one fused GpuAcc layer whose
/// results match CpuRef's two layers.
#[test]
fn fused_products_match_cpu_ref() {
    use backplane::compare::compare;
    use backplane_backend_tests::exec::{run_network, Run};
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(19);
    let conv = Op::Conv(ConvDesc {
        window: window(vec![3, 3], vec![], vec![1, 1, 1, 1], vec![]),
        group: 1,
    });
    let gemm = Op::Gemm(GemmDesc {
        trans_b: true,
        ..GemmDesc::default()
    });
    let cases: Vec<(Op, Vec<backplane::Tensor>, Op)> = vec![
        (
            conv,
            vec![
                t(&mut r, &[1, 3, 7, 5]),
                t(&mut r, &[4, 3, 3, 3]),
                t(&mut r, &[4]),
            ],
            Op::Unary(UnaryOp::Relu),
        ),
        (
            gemm,
            vec![t(&mut r, &[3, 17]), t(&mut r, &[5, 17]), t(&mut r, &[5])],
            Op::Unary(UnaryOp::Sigmoid),
        ),
        (
            Op::MatMul,
            vec![t(&mut r, &[2, 3, 7]), t(&mut r, &[7, 11])],
            Op::Unary(UnaryOp::Gelu {
                tanh_approximation: false,
            }),
        ),
    ];
    for (product, inputs, act) in cases {
        let refs: Vec<&backplane::Tensor> = inputs.iter().collect();
        let mid = backplane::cpu_ref::evaluate(&product, &refs).unwrap();
        let want = backplane::cpu_ref::evaluate(&act, &[&mid[0]]).unwrap();
        let mut net = backplane::Network::new();
        let x = net.add_input("x", inputs[0].info().clone()).unwrap();
        let mut ids = vec![x];
        for (k, w) in inputs.iter().enumerate().skip(1) {
            ids.push(net.add_constant(&format!("w{k}"), w.clone()).unwrap());
        }
        let m = net.add_layer("product", product.clone(), &ids).unwrap();
        let y = net.add_layer("act", act.clone(), &m).unwrap();
        net.mark_output(y[0]).unwrap();
        let feed = vec![("x".to_string(), inputs[0].clone())];
        match run_network(&rt, &net, &[gpu()], &feed) {
            Run::Ran { layers, outputs } => {
                assert_eq!(
                    layers, 1,
                    "{product:?} + {act:?} should run as one fused layer"
                );
                let got = outputs.unwrap();
                compare(&got[0].1, &want[0], 1e-4, 1e-5).unwrap();
            }
            Run::Refused(why) => panic!("{product:?} + {act:?} refused: {why}"),
        }
    }
}
