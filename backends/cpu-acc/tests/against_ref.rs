//! Every CpuAcc kernel against CpuRef (the oracle) on random inputs: odd sizes (1, 3, 7, 17,
//! 63, 257), padding/stride/dilation/group variants, broadcasting shapes, constant and
//! run-time weights, 1 and 2 threads.
//!
//! Tolerances (|acc - ref| <= atol + rtol·|ref|): GEMM-based ops (MatMul, Gemm, Conv and the
//! fused layers) rtol 1e-4, atol 1e-4·sqrt(K) (f32 sums in a different order vs CpuRef's f64);
//! transcendental functions and normalizations rtol 1e-5, atol 1e-6 (as the op table);
//! exact ops (copies, max/min, Relu) must match exactly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use support::{check, close, reference, run_desc, Rng};

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

fn conv_op(
    k: &[usize],
    s: &[usize],
    d: &[usize],
    p: &[usize],
    group: usize,
    auto_pad: AutoPad,
) -> Op {
    Op::Conv(ConvDesc {
        window: Window {
            kernel: k.to_vec(),
            strides: s.to_vec(),
            dilations: d.to_vec(),
            pads: p.to_vec(),
            auto_pad,
        },
        group,
    })
}

#[test]
fn conv_geometries_groups_and_depthwise() {
    let mut r = Rng(3);
    let mut tested = 0;
    while tested < 60 {
        let n = r.pick(&[1, 2]);
        let c = r.pick(&[1, 3, 7, 17]);
        let group = r.pick(&[1, 1, c, if c == 3 { 3 } else { 1 }]);
        let mult = r.pick(&[1, 1, 2]);
        let m = if group == c {
            c * mult
        } else {
            r.pick(&[1, 3, 17, 63]) * group
        };
        let (h, w) = (r.pick(&[1, 3, 7, 17]), r.pick(&[1, 3, 7, 17, 63]));
        let (kh, kw) = (r.pick(&[1, 3, 5]), r.pick(&[1, 3]));
        let (sh, sw) = (r.pick(&[1, 2, 3]), r.pick(&[1, 2, 3]));
        let (dh, dw) = (r.pick(&[1, 1, 2]), r.pick(&[1, 2]));
        let pads = [
            r.pick(&[0, 1, 2]),
            r.pick(&[0, 1]),
            r.pick(&[0, 1, 2]),
            r.pick(&[0, 1]),
        ];
        let auto = r.pick(&[
            AutoPad::NotSet,
            AutoPad::NotSet,
            AutoPad::SameUpper,
            AutoPad::Valid,
        ]);
        let op = conv_op(&[kh, kw], &[sh, sw], &[dh, dw], &pads, group, auto);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c / group, kh, kw], 1.0);
        let b = r.tensor(&[m], 1.0);
        let infos = [x.info(), wt.info()];
        if op.infer(&infos).is_err() {
            continue;
        }
        tested += 1;
        let what = format!("conv x{:?} w{:?} {op:?}", x.shape(), wt.shape());
        let k = (c / group * kh * kw) as f64;
        check(
            &what,
            &op,
            &[&x, &wt, &b],
            &[&[false, true, true], &[false, false, false]],
            1e-4,
            1e-4 * k.sqrt(),
        );
        check(
            &what,
            &op,
            &[&x, &wt],
            &[&[false, true]],
            1e-4,
            1e-4 * k.sqrt(),
        );
    }
    // 1-D convolution and a larger image with 257 output columns.
    let op = conv_op(&[3], &[2], &[1], &[1, 1], 1, AutoPad::NotSet);
    let (x, w) = (r.tensor(&[2, 7, 63], 1.0), r.tensor(&[17, 7, 3], 1.0));
    check("conv1d", &op, &[&x, &w], &[&[false, true]], 1e-4, 1e-3);
    let op = conv_op(&[3, 3], &[1, 1], &[1, 1], &[1, 1, 1, 1], 1, AutoPad::NotSet);
    let (x, w) = (
        r.tensor(&[1, 17, 5, 257], 1.0),
        r.tensor(&[63, 17, 3, 3], 1.0),
    );
    check("conv 5x257", &op, &[&x, &w], &[&[false, true]], 1e-4, 2e-3);
    let op = conv_op(&[1, 1], &[1, 1], &[1, 1], &[0, 0, 0, 0], 1, AutoPad::NotSet);
    let (x, w) = (
        r.tensor(&[1, 257, 7, 9], 1.0),
        r.tensor(&[63, 257, 1, 1], 1.0),
    );
    check("pointwise", &op, &[&x, &w], &[&[false, true]], 1e-4, 2e-3);
}

/// 3×3 stride-1 convolutions large enough for CpuAcc's Winograd F(4×4, 3×3) path (at least
/// 128 channels each way, output at least 8×8): odd sizes (partial border tiles), batches of 1
/// and 2, symmetric and asymmetric pads, with and without bias, 1 and 2 threads. Weights must
/// be constant for the path (they are transformed at load); with run-time weights the same
/// convolutions take the im2col path. Tolerance: |acc − ref| <= 2e-3 + 1e-4·|ref| (outputs
/// reach ~±40 here; the Winograd path's measured error is below 1e-5 × (1 + max |ref|), see
/// `winograd.rs`).
#[test]
fn winograd_sized_convolutions_against_ref() {
    let mut r = Rng(29);
    for (n, c, m, h, w, pads, bias) in [
        (1, 128, 128, 17, 17, [1, 1, 1, 1], true),
        (2, 128, 136, 9, 11, [0, 1, 2, 1], false),
        (1, 130, 128, 10, 21, [0, 0, 0, 0], true),
        (1, 128, 128, 63, 8, [2, 0, 1, 2], true),
    ] {
        let op = conv_op(&[3, 3], &[1, 1], &[1, 1], &pads, 1, AutoPad::NotSet);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, 3, 3], 0.3);
        let b = r.tensor(&[m], 1.0);
        let what = format!("winograd-sized conv n{n} c{c} m{m} {h}x{w} pads {pads:?}");
        if bias {
            let consts: &[&[bool]] = &[&[false, true, true], &[false, false, false]];
            check(&what, &op, &[&x, &wt, &b], consts, 1e-4, 2e-3);
        } else {
            let consts: &[&[bool]] = &[&[false, true], &[false, false]];
            check(&what, &op, &[&x, &wt], consts, 1e-4, 2e-3);
        }
    }
}

/// Strided windows that read only some of their input's stride phases (a 1×1 stride-2
/// shortcut reads one of four; 3×1 stride 3 dilation 2 reads every row phase but one column
/// phase), some with the phases as wide as the output (the product written straight into
/// it), against CpuRef.
#[test]
fn strided_windows_reading_some_phases_against_ref() {
    let mut r = Rng(31);
    // (c, m, h, w, kernel, stride, dilation, pads)
    for (c, m, h, w, k, s, d, pads) in [
        (17, 63, 28, 28, [1, 1], [2, 2], [1, 1], [0, 0, 0, 0]),
        (7, 17, 15, 13, [1, 1], [2, 2], [1, 1], [0, 0, 0, 0]),
        (7, 17, 15, 13, [1, 1], [2, 2], [1, 1], [1, 0, 1, 0]),
        (3, 17, 17, 9, [1, 1], [3, 2], [1, 1], [0, 1, 0, 1]),
        (5, 7, 23, 17, [3, 1], [3, 2], [2, 1], [1, 0, 2, 0]),
        (5, 7, 11, 19, [1, 3], [2, 3], [1, 2], [0, 2, 0, 1]),
    ] {
        let op = conv_op(&k, &s, &d, &pads, 1, AutoPad::NotSet);
        let x = r.tensor(&[1, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, k[0], k[1]], 1.0);
        let b = r.tensor(&[m], 1.0);
        let atol = 1e-4 * ((c * k[0] * k[1]) as f64).sqrt();
        check(
            &format!("conv c{c} m{m} {h}x{w} k{k:?} s{s:?} d{d:?} pads {pads:?}"),
            &op,
            &[&x, &wt, &b],
            &[&[false, true, true]],
            1e-4,
            atol,
        );
    }
}

/// Windowed convolutions from at most 4 channels with an im2col depth of at most 160 (a
/// network's first layer), which with AVX-512 take the channel-lanes path (one thread,
/// constant weights, horizontal stride 1 or 2; blocks of 32 output channels, or 16 when there
/// are at most 16) or the direct path (tiles reading the input's phases in place: 2 threads,
/// other strides, and weights given at run time): 7×7, 5×5, 3×3 and strided 1×1 windows, strides,
/// dilation, asymmetric pads, output channels that are not a multiple of 12 or 16, batches,
/// with and without bias; and two just past the limits.
#[test]
fn first_layer_convolutions_against_ref() {
    let mut r = Rng(31);
    for (n, c, m, h, w, k, s, d, pads, bias) in [
        (1, 3, 64, 37, 41, 7, 2, 1, [3, 3, 3, 3], true),
        (1, 3, 33, 23, 47, 7, 3, 1, [3, 2, 1, 3], true),
        (1, 3, 12, 20, 50, 3, 2, 1, [1, 1, 1, 1], true),
        (2, 3, 32, 29, 30, 3, 2, 1, [1, 1, 1, 1], true),
        (1, 3, 20, 17, 63, 3, 1, 2, [2, 1, 0, 2], false),
        (1, 4, 24, 13, 11, 5, 1, 1, [2, 2, 2, 2], true),
        (1, 1, 80, 9, 5, 5, 3, 1, [0, 2, 1, 0], true),
        (1, 3, 17, 1, 1, 3, 1, 1, [1, 1, 1, 1], false),
        (1, 2, 40, 19, 19, 1, 2, 1, [0, 0, 0, 0], true),
        // Past the limits: 5 channels; 4 channels under a 7×7 window (K = 196).
        (1, 5, 16, 9, 9, 3, 1, 1, [1, 1, 1, 1], true),
        (1, 4, 16, 15, 15, 7, 2, 1, [3, 3, 3, 3], true),
    ] {
        let op = conv_op(&[k, k], &[s, s], &[d, d], &pads, 1, AutoPad::NotSet);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, k, k], 0.3);
        let b = r.tensor(&[m], 1.0);
        let what = format!("first-layer conv n{n} c{c} m{m} {h}x{w} k{k} s{s} d{d} pads {pads:?}");
        if bias {
            let consts: &[&[bool]] = &[&[false, true, true], &[false, false, false]];
            check(&what, &op, &[&x, &wt, &b], consts, 1e-4, 1e-4);
        } else {
            let consts: &[&[bool]] = &[&[false, true], &[false, false]];
            check(&what, &op, &[&x, &wt], consts, 1e-4, 1e-4);
        }
    }
}

/// Windowed stride-2 convolutions from more than 4 channels whose output rows fill 14-pixel
/// tiles, which take the channel-lanes path with AVX-512: windows deeper than one pass (the
/// passes add up), bands of output rows (56 rows), 3×3 and 5×5 windows, output channels
/// that are not a multiple of 32, with and without bias, on 1 and 2 threads (32 or 16
/// channels per block), constant weights (the lanes) and run-time ones (the GEMM).
#[test]
fn strided_convolutions_against_ref() {
    let mut r = Rng(43);
    // (c, m, input side, kernel, bias)
    for (c, m, hw, k, bias) in [
        (8, 40, 112, 3, true),
        (20, 33, 28, 3, false),
        (40, 64, 56, 3, true),
        (6, 48, 28, 5, true),
    ] {
        let p = k / 2;
        let op = conv_op(&[k, k], &[2, 2], &[1, 1], &[p, p, p, p], 1, AutoPad::NotSet);
        let x = r.tensor(&[1, c, hw, hw], 1.0);
        let wt = r.tensor(&[m, c, k, k], 0.3);
        let b = r.tensor(&[m], 1.0);
        let what = format!("strided conv c{c} m{m} {hw}x{hw} k{k}");
        let tol = 1e-4 * ((c * k * k) as f64).sqrt();
        if bias {
            let consts: &[&[bool]] = &[&[false, true, true], &[false, false, false]];
            check(&what, &op, &[&x, &wt, &b], consts, 1e-4, tol);
        } else {
            let consts: &[&[bool]] = &[&[false, true], &[false, false]];
            check(&what, &op, &[&x, &wt], consts, 1e-4, tol);
        }
    }
}

/// Pointwise convolutions with at most 32 output channels and at most 256 input channels,
/// which take the direct path with AVX-512 (B read in place, threads splitting a weights
/// panel's rows): output channels around the panel height (1, 5, 12, 13, 16, 24, 32),
/// planes of 1 pixel to more than a tile, batches, with and without bias; and two just
/// past the limits (33 outputs, 257 inputs).
#[test]
fn pointwise_few_output_channels_against_ref() {
    let mut r = Rng(41);
    // (n, c, m, h, w, bias)
    for (n, c, m, h, w, bias) in [
        (1, 32, 16, 17, 19, true),
        (1, 144, 24, 9, 9, true),
        (2, 7, 13, 5, 11, false),
        (1, 256, 32, 3, 37, true),
        (1, 1, 1, 1, 1, true),
        (1, 3, 5, 1, 33, false),
        (1, 96, 12, 8, 8, true),
        // Past the limits.
        (1, 16, 33, 7, 7, true),
        (1, 257, 8, 5, 5, true),
    ] {
        let op = conv_op(&[1, 1], &[1, 1], &[1, 1], &[0, 0, 0, 0], 1, AutoPad::NotSet);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, 1, 1], 0.3);
        let b = r.tensor(&[m], 1.0);
        let what = format!("pointwise conv n{n} c{c} m{m} {h}x{w}");
        let atol = 1e-4 * (c as f64).sqrt();
        if bias {
            let consts: &[&[bool]] = &[&[false, true, true], &[false, false, false]];
            check(&what, &op, &[&x, &wt, &b], consts, 1e-4, atol);
        } else {
            let consts: &[&[bool]] = &[&[false, true], &[false, false]];
            check(&what, &op, &[&x, &wt], consts, 1e-4, atol);
        }
    }
}

/// Depthwise convolutions (group = channels) over the plane sizes that take different paths:
/// one-run stride-1 planes (narrower than 64), row-by-row planes, 1-wide and 1-high planes,
/// every stride, dilation, kernel size and asymmetric padding.
#[test]
fn depthwise_geometries_against_ref() {
    let mut r = Rng(11);
    let mut tested = 0;
    while tested < 80 {
        let n = r.pick(&[1, 2]);
        let c = r.pick(&[2, 3, 17]);
        let h = r.pick(&[1, 2, 7, 14, 17]);
        let w = r.pick(&[1, 3, 7, 14, 63, 64, 65, 113]);
        let k = r.pick(&[1, 3, 3, 5, 7]);
        let kh = r.pick(&[k, 1, 3]);
        let (sh, sw) = (r.pick(&[1, 1, 2, 3]), r.pick(&[1, 1, 2, 3]));
        let (dh, dw) = (r.pick(&[1, 1, 2]), r.pick(&[1, 1, 2]));
        let pads = [
            r.pick(&[0, 1, 2, 3]),
            r.pick(&[0, 1, 3]),
            r.pick(&[0, 1, 2]),
            r.pick(&[0, 1, 2, 4]),
        ];
        let op = conv_op(&[kh, k], &[sh, sw], &[dh, dw], &pads, c, AutoPad::NotSet);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[c, 1, kh, k], 1.0);
        let b = r.tensor(&[c], 1.0);
        if op.infer(&[x.info(), wt.info()]).is_err() {
            continue;
        }
        tested += 1;
        let what = format!("depthwise x{:?} w{:?} {op:?}", x.shape(), wt.shape());
        let tol = 1e-4 * ((kh * k) as f64).sqrt();
        check(
            &what,
            &op,
            &[&x, &wt, &b],
            &[&[false, true, true], &[false, false, false]],
            1e-4,
            tol,
        );
        check(&what, &op, &[&x, &wt], &[&[false, true]], 1e-4, tol);
    }
    // MobileNetV2's shapes: stride 1 and 2 on 112-wide planes, 7×7 planes, many channels.
    for (c, hw, s) in [(32, 112, 1), (24, 112, 2), (96, 7, 1), (40, 14, 2)] {
        let op = conv_op(&[3, 3], &[s, s], &[1, 1], &[1, 1, 1, 1], c, AutoPad::NotSet);
        let x = r.tensor(&[1, c, hw, hw], 1.0);
        let wt = r.tensor(&[c, 1, 3, 3], 1.0);
        let b = r.tensor(&[c], 1.0);
        check(
            &format!("depthwise c{c} {hw}x{hw} s{s}"),
            &op,
            &[&x, &wt, &b],
            &[&[false, true, true]],
            1e-4,
            3e-4,
        );
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
            // rows path.
            for dims in [
                [1, 3, 17, 17],
                [2, 7, 7, 63],
                [1, 1, 3, 3],
                [1, 19, 17, 17],
                [2, 16, 30, 31],
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

/// Conv → BatchNormalization → Relu is fused into one CpuAcc layer whose output matches the
/// chain run by CpuRef; MatMul → Add → Gelu likewise.
#[test]
fn fused_chains_match_the_unfused_reference() {
    let mut r = Rng(8);
    let mut net = Network::new();
    // Three input channels: with AVX-512 the direct path, its activation in the tiles.
    let x = r.tensor(&[1, 3, 17, 17], 1.0);
    let w = r.tensor(&[17, 3, 3, 3], 0.5);
    let b = r.tensor(&[17], 0.5);
    let bn: Vec<Tensor> = (0..4)
        .map(|i| {
            let t = r.tensor(&[17], 1.0);
            if i == 3 {
                Tensor::from_vec(
                    vec![17],
                    t.as_slice::<f32>()
                        .unwrap()
                        .iter()
                        .map(|v| v.abs() + 0.5)
                        .collect(),
                )
                .unwrap()
            } else {
                t
            }
        })
        .collect();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let wi = net.add_constant("w", w.clone()).unwrap();
    let bi = net.add_constant("b", b.clone()).unwrap();
    let conv = conv_op(&[3, 3], &[2, 2], &[1, 1], &[1, 1, 1, 1], 1, AutoPad::NotSet);
    let c = net.add_layer("conv1", conv.clone(), &[xi, wi, bi]).unwrap()[0];
    let ps: Vec<_> = bn
        .iter()
        .enumerate()
        .map(|(i, t)| net.add_constant(&format!("bn{i}"), t.clone()).unwrap())
        .collect();
    let bn_op = Op::BatchNormalization { epsilon: 1e-5 };
    let n = net
        .add_layer("bn1", bn_op.clone(), &[c, ps[0], ps[1], ps[2], ps[3]])
        .unwrap()[0];
    let y = net
        .add_layer("relu1", Op::Unary(UnaryOp::Relu), &[n])
        .unwrap()[0];
    net.mark_output(y).unwrap();
    let layers: Vec<_> = (0..net.layers().len())
        .map(backplane_core::LayerId)
        .collect();
    let views = CpuAccBackend::new().optimize_subgraph(&SubgraphView::new(&net, layers));
    assert_eq!(views.substitutions.len(), 1);
    let rep = &views.substitutions[0].replacement[0];
    assert_eq!(rep.name, "conv1+bn1+relu1");
    // Run the replacement layer as the runtime would.
    let mut inputs: Vec<Tensor> = Vec::new();
    let mut constants = Vec::new();
    for v in &rep.inputs {
        match v {
            ValueRef::Existing(t) if *t == xi => {
                inputs.push(x.clone());
                constants.push(None);
            }
            ValueRef::Existing(t) => {
                let k = net.tensor(*t).constant().unwrap().clone();
                inputs.push((*k).clone());
                constants.push(Some(k));
            }
            ValueRef::NewConstant(k) => {
                inputs.push((**k).clone());
                constants.push(Some(k.clone()));
            }
            ValueRef::Produced { .. } => panic!("single-layer replacement"),
        }
    }
    let desc = LayerDesc {
        name: rep.name.clone(),
        op: rep.op.clone(),
        inputs: inputs.iter().map(|t| t.info().clone()).collect(),
        outputs: vec![net.tensor(y).info.clone()],
        constants,
    };
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let got = run_desc(&desc, &refs, 2);
    let t = reference(&conv, &[&x, &w, &b]).remove(0);
    let t = reference(&bn_op, &[&t, &bn[0], &bn[1], &bn[2], &bn[3]]).remove(0);
    let want = reference(&Op::Unary(UnaryOp::Relu), &[&t]).remove(0);
    close("conv+bn+relu", &got[0], &want, 1e-4, 1e-4);

    // MatMul + bias + Gelu.
    let mut net = Network::new();
    let a = r.tensor(&[1, 63, 17], 1.0);
    let wm = r.tensor(&[17, 257], 1.0);
    let bias = r.tensor(&[257], 1.0);
    let ai = net.add_input("a", a.info().clone()).unwrap();
    let wi = net.add_constant("w", wm.clone()).unwrap();
    let bi = net.add_constant("bias", bias.clone()).unwrap();
    let mm = net.add_layer("mm", Op::MatMul, &[ai, wi]).unwrap()[0];
    let ad = net
        .add_layer("add", Op::Binary(BinaryOp::Add), &[mm, bi])
        .unwrap()[0];
    let gelu = Op::Unary(UnaryOp::Gelu {
        tanh_approximation: false,
    });
    let y = net.add_layer("gelu", gelu.clone(), &[ad]).unwrap()[0];
    net.mark_output(y).unwrap();
    let layers: Vec<_> = (0..net.layers().len())
        .map(backplane_core::LayerId)
        .collect();
    let views = CpuAccBackend::new().optimize_subgraph(&SubgraphView::new(&net, layers));
    let rep = &views.substitutions[0].replacement[0];
    assert_eq!(rep.name, "mm+add+gelu");
    let ValueRef::NewConstant(bias_const) = &rep.inputs[2] else {
        panic!("bias")
    };
    let desc = LayerDesc {
        name: rep.name.clone(),
        op: rep.op.clone(),
        inputs: vec![
            a.info().clone(),
            wm.info().clone(),
            bias_const.info().clone(),
        ],
        outputs: vec![net.tensor(y).info.clone()],
        constants: vec![None, Some(Arc::new(wm.clone())), Some(bias_const.clone())],
    };
    let got = run_desc(&desc, &[&a, &wm, bias_const], 1);
    let t = reference(&Op::MatMul, &[&a, &wm]).remove(0);
    let t = reference(&Op::Binary(BinaryOp::Add), &[&t, &bias]).remove(0);
    let want = reference(&gelu, &[&t]).remove(0);
    close("matmul+add+gelu", &got[0], &want, 1e-4, 1e-4);
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

/// The exporters' GELU subgraph after MatMul+Add is folded into the fused layer.
#[test]
fn erf_gelu_subgraph_is_fused_into_the_matmul() {
    let mut r = Rng(9);
    let mut net = Network::new();
    let a = r.tensor(&[7, 17], 1.0);
    let ai = net.add_input("a", a.info().clone()).unwrap();
    let wi = net.add_constant("w", r.tensor(&[17, 63], 1.0)).unwrap();
    let bi = net.add_constant("b", r.tensor(&[63], 1.0)).unwrap();
    let k =
        |net: &mut Network, name: &str, v: f32| net.add_constant(name, Tensor::scalar(v)).unwrap();
    let (sqrt2, one, half) = (
        k(&mut net, "sqrt2", std::f32::consts::SQRT_2),
        k(&mut net, "one", 1.0),
        k(&mut net, "half", 0.5),
    );
    let mm = net.add_layer("mm", Op::MatMul, &[ai, wi]).unwrap()[0];
    let h = net
        .add_layer("bias", Op::Binary(BinaryOp::Add), &[mm, bi])
        .unwrap()[0];
    let d = net
        .add_layer("div", Op::Binary(BinaryOp::Div), &[h, sqrt2])
        .unwrap()[0];
    let e = net.add_layer("erf", Op::Unary(UnaryOp::Erf), &[d]).unwrap()[0];
    let p = net
        .add_layer("plus1", Op::Binary(BinaryOp::Add), &[e, one])
        .unwrap()[0];
    let m = net
        .add_layer("half", Op::Binary(BinaryOp::Mul), &[h, half])
        .unwrap()[0];
    let y = net
        .add_layer("gelu", Op::Binary(BinaryOp::Mul), &[m, p])
        .unwrap()[0];
    net.mark_output(y).unwrap();
    let layers: Vec<_> = (0..net.layers().len())
        .map(backplane_core::LayerId)
        .collect();
    let views = CpuAccBackend::new().optimize_subgraph(&SubgraphView::new(&net, layers));
    assert_eq!(views.substitutions.len(), 1);
    let s = &views.substitutions[0];
    assert_eq!(s.replaced.len(), 7);
    assert_eq!(s.replacement[0].name, "mm+bias+div+erf+plus1+half+gelu");
    let Op::Custom(c) = &s.replacement[0].op else {
        panic!("custom op expected")
    };
    assert!(c
        .attributes
        .iter()
        .any(|(n, v)| n == "activation"
            && *v == backplane_core::ops::AttrValue::String("gelu".into())));
    assert!(views.untouched.is_empty());
}

/// Run the only replacement layer of the only substitution CpuAcc makes in `net` (all of it),
/// as the runtime would: `feeds` give the network inputs, constants come from the network
/// or the substitution. Returns the replacement's name and output.
fn run_fused(
    net: &Network,
    feeds: &[(backplane_core::TensorId, &Tensor)],
    threads: usize,
) -> (String, Tensor) {
    let layers: Vec<_> = (0..net.layers().len())
        .map(backplane_core::LayerId)
        .collect();
    let views = CpuAccBackend::new().optimize_subgraph(&SubgraphView::new(net, layers));
    assert_eq!(views.substitutions.len(), 1, "one substitution");
    let rep = &views.substitutions[0].replacement[0];
    let mut inputs: Vec<Tensor> = Vec::new();
    let mut constants = Vec::new();
    for v in &rep.inputs {
        match v {
            ValueRef::Existing(t) => match feeds.iter().find(|(id, _)| id == t) {
                Some((_, x)) => {
                    inputs.push((*x).clone());
                    constants.push(None);
                }
                None => {
                    let k = net.tensor(*t).constant().unwrap().clone();
                    inputs.push((*k).clone());
                    constants.push(Some(k));
                }
            },
            ValueRef::NewConstant(k) => {
                inputs.push((**k).clone());
                constants.push(Some(k.clone()));
            }
            ValueRef::Produced { .. } => panic!("single-layer replacement"),
        }
    }
    let out = rep.outputs[0].unwrap();
    let desc = LayerDesc {
        name: rep.name.clone(),
        op: rep.op.clone(),
        inputs: inputs.iter().map(|t| t.info().clone()).collect(),
        outputs: vec![net.tensor(out).info.clone()],
        constants,
    };
    let refs: Vec<&Tensor> = inputs.iter().collect();
    (rep.name.clone(), run_desc(&desc, &refs, threads).remove(0))
}

/// A residual block's `Conv [→ BatchNormalization] → Add(shortcut) → Relu` becomes one
/// FusedConv whose output matches CpuRef running the chain, on every convolution path
/// (im2col, 1×1, Winograd-sized, depthwise), with the shortcut on either side of the Add,
/// with and without a bias, on 1 and 2 threads.
#[test]
fn residual_blocks_fuse_into_the_convolution() {
    let mut r = Rng(21);
    // (channels, size, kernel, group, bias, batch norm, shortcut first)
    for (c, hw, k, group, with_bias, with_bn, shortcut_first) in [
        (7, 17, 3, 1, true, true, false),
        (5, 9, 1, 1, false, false, true),
        (128, 16, 3, 1, false, true, false),
        (16, 13, 3, 16, true, false, true),
        // Three channels: the direct path, with the residual added after it.
        (3, 11, 3, 1, true, true, false),
    ] {
        let mut net = Network::new();
        let x = r.tensor(&[1, c, hw, hw], 1.0);
        let w = r.tensor(&[c, c / group, k, k], 0.3);
        let b = r.tensor(&[c], 0.5);
        let bn: Vec<Tensor> = (0..4)
            .map(|i| {
                let t = r.tensor(&[c], 1.0);
                let v: Vec<f32> = t.as_slice::<f32>().unwrap().to_vec();
                let v = if i == 3 {
                    v.iter().map(|v| v.abs() + 0.5).collect()
                } else {
                    v
                };
                Tensor::from_vec(vec![c], v).unwrap()
            })
            .collect();
        let xi = net.add_input("x", x.info().clone()).unwrap();
        let wi = net.add_constant("w", w.clone()).unwrap();
        let p = k / 2;
        let conv = conv_op(
            &[k, k],
            &[1, 1],
            &[1, 1],
            &[p, p, p, p],
            group,
            AutoPad::NotSet,
        );
        let conv_in = if with_bias {
            vec![xi, wi, net.add_constant("b", b.clone()).unwrap()]
        } else {
            vec![xi, wi]
        };
        let mut t = net.add_layer("conv", conv.clone(), &conv_in).unwrap()[0];
        let bn_op = Op::BatchNormalization { epsilon: 1e-5 };
        if with_bn {
            let ps: Vec<_> = bn
                .iter()
                .enumerate()
                .map(|(i, p)| net.add_constant(&format!("bn{i}"), p.clone()).unwrap())
                .collect();
            t = net
                .add_layer("bn", bn_op.clone(), &[t, ps[0], ps[1], ps[2], ps[3]])
                .unwrap()[0];
        }
        let add_in = if shortcut_first { [xi, t] } else { [t, xi] };
        let s = net
            .add_layer("add", Op::Binary(BinaryOp::Add), &add_in)
            .unwrap()[0];
        let y = net
            .add_layer("relu", Op::Unary(UnaryOp::Relu), &[s])
            .unwrap()[0];
        net.mark_output(y).unwrap();

        let mut want = if with_bias {
            reference(&conv, &[&x, &w, &b]).remove(0)
        } else {
            reference(&conv, &[&x, &w]).remove(0)
        };
        if with_bn {
            want = reference(&bn_op, &[&want, &bn[0], &bn[1], &bn[2], &bn[3]]).remove(0);
        }
        let sum_in = if shortcut_first {
            [&x, &want]
        } else {
            [&want, &x]
        };
        let want = reference(&Op::Binary(BinaryOp::Add), &sum_in).remove(0);
        let want = reference(&Op::Unary(UnaryOp::Relu), &[&want]).remove(0);
        for threads in [1, 2] {
            let (name, got) = run_fused(&net, &[(xi, &x)], threads);
            let expect_name = if with_bn {
                "conv+bn+add+relu"
            } else {
                "conv+add+relu"
            };
            assert_eq!(name, expect_name);
            let atol = 1e-4 * ((c / group * k * k) as f64).sqrt();
            close(
                &format!("residual c{c} {hw}x{hw} k{k} g{group} threads {threads}"),
                &got,
                &want,
                1e-4,
                atol,
            );
        }
    }
}

/// A depthwise convolution followed by Relu, Clip (Relu6) or LeakyRelu becomes one FusedConv
/// whose output matches CpuRef running the pair, on planes wide enough for the in-place rows
/// path (activation applied in its kernel) and narrow ones, stride 1 and 2, with and without
/// a bias, on 1 and 2 threads.
#[test]
fn depthwise_with_activation_fuses() {
    let mut r = Rng(23);
    // The activations applied in the kernel's registers, and (MobileNetV3's, YOLOv4's)
    // ones applied after it.
    let acts = [
        Op::Unary(UnaryOp::Relu),
        Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 }),
        Op::Unary(UnaryOp::LeakyRelu { alpha: 0.2 }),
        Op::Math(MathOp::HardSwish),
        Op::Math(MathOp::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        }),
        Op::Math(MathOp::Mish),
    ];
    for (i, (c, hw, s)) in [
        (16, 29, 1),
        (16, 29, 2),
        (5, 31, 2),
        (17, 9, 1),
        (3, 64, 1),
        (40, 14, 1),
    ]
    .into_iter()
    .enumerate()
    {
        let act = acts[i % acts.len()].clone();
        let with_bias = i % 2 == 0;
        let mut net = Network::new();
        let x = r.tensor(&[1, c, hw, hw], 4.0);
        let w = r.tensor(&[c, 1, 3, 3], 1.0);
        let b = r.tensor(&[c], 1.0);
        let xi = net.add_input("x", x.info().clone()).unwrap();
        let wi = net.add_constant("w", w.clone()).unwrap();
        let conv = conv_op(&[3, 3], &[s, s], &[1, 1], &[1, 1, 1, 1], c, AutoPad::NotSet);
        let conv_in = if with_bias {
            vec![xi, wi, net.add_constant("b", b.clone()).unwrap()]
        } else {
            vec![xi, wi]
        };
        let t = net.add_layer("conv", conv.clone(), &conv_in).unwrap()[0];
        let y = net.add_layer("act", act.clone(), &[t]).unwrap()[0];
        net.mark_output(y).unwrap();
        let want = if with_bias {
            reference(&conv, &[&x, &w, &b]).remove(0)
        } else {
            reference(&conv, &[&x, &w]).remove(0)
        };
        let want = reference(&act, &[&want]).remove(0);
        for threads in [1, 2] {
            let (name, got) = run_fused(&net, &[(xi, &x)], threads);
            assert_eq!(name, "conv+act");
            close(
                &format!("depthwise c{c} {hw}x{hw} s{s} {act:?} threads {threads}"),
                &got,
                &want,
                1e-4,
                1e-4,
            );
        }
    }
}
