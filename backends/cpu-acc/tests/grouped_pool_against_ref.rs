//! Grouped convolutions (RegNet's and ResNeXt's: groups of 1 to 33 channels, output rows on
//! either side of the direct path's width threshold, strides, padding, dilation, batches,
//! constant and run-time weights, with and without bias) and max pooling of small planes
//! (SqueezeNet's 13×13 and 27×27 ones, ceil mode, fewer and more planes than a channels-last
//! block, NaN inputs) against CpuRef, one and two threads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{AutoPad, ConvDesc, PoolDesc, PoolKind, Window};
use backplane_core::{Op, Tensor};
use support::{check, check_conv, Rng};

fn window(k: usize, s: usize, d: usize, pad: usize) -> Window {
    Window {
        kernel: vec![k, k],
        strides: vec![s, s],
        dilations: vec![d, d],
        pads: vec![pad, pad, pad, pad],
        auto_pad: AutoPad::NotSet,
    }
}

#[test]
fn grouped_convolutions_against_ref() {
    let mut r = Rng(2027);
    // (n, groups, channels in and out per group, h, w, kernel, stride, dilation, pad)
    for (n, g, cg, mg, h, w, k, s, d, p) in [
        // RegNetY-400MF's shapes, smaller planes: groups of 8, 3×3, strides 1 and 2.
        (1, 6, 8, 8, 29, 31, 3, 2, 1, 1),
        (1, 13, 8, 8, 28, 28, 3, 1, 1, 1),
        (1, 26, 8, 8, 14, 14, 3, 1, 1, 1),
        (1, 5, 8, 8, 7, 7, 3, 1, 1, 1),
        (1, 3, 8, 8, 14, 14, 3, 2, 1, 1),
        // Odd group widths, more outputs than inputs per group, the width limits.
        (1, 2, 3, 5, 17, 23, 3, 1, 1, 1),
        (2, 3, 17, 13, 16, 19, 3, 1, 1, 0),
        (1, 2, 16, 32, 15, 33, 3, 1, 1, 1),
        (1, 2, 16, 33, 15, 15, 3, 1, 1, 1),
        (1, 4, 1, 7, 31, 14, 3, 1, 1, 1),
        (1, 2, 24, 24, 14, 14, 3, 1, 1, 1),
        // Other windows, dilation, one-pixel planes, a large plane.
        (1, 3, 4, 4, 21, 21, 5, 1, 1, 2),
        (1, 2, 5, 3, 19, 17, 3, 1, 2, 2),
        (1, 3, 2, 2, 1, 1, 3, 1, 1, 1),
        (1, 2, 6, 8, 1, 16, 1, 1, 1, 0),
        (1, 4, 8, 8, 57, 57, 3, 2, 1, 1),
    ] {
        let (c, m) = (g * cg, g * mg);
        let op = Op::Conv(ConvDesc {
            window: window(k, s, d, p),
            group: g,
        });
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, cg, k, k], 1.0);
        let b = r.tensor(&[m], 1.0);
        let atol = 1e-4 * ((cg * k * k) as f64).sqrt();
        let what = format!("conv n{n} g{g} cg{cg} mg{mg} {h}x{w} k{k} s{s} d{d} p{p}");
        check_conv(&what, &op, &x, &wt, &b, atol);
    }
}

#[test]
fn max_pooling_of_small_planes_against_ref() {
    let mut r = Rng(1311);
    // (n, planes, h, w, kernel, stride, pad, ceil mode)
    for (n, c, h, w, k, s, p, ceil) in [
        // SqueezeNet's (ceil mode): 256 planes 13×13 → 6×6, 128 planes 27×27 → 13×13.
        (1, 256, 13, 13, 3, 2, 0, true),
        (1, 128, 27, 27, 3, 2, 0, true),
        // Fewer planes than a block, a block and one, odd planes, padding, other windows.
        (1, 7, 13, 13, 3, 2, 0, true),
        (1, 17, 11, 9, 3, 2, 1, false),
        (2, 33, 15, 14, 3, 1, 1, false),
        (1, 16, 1, 1, 1, 1, 0, false),
        (1, 19, 8, 8, 2, 2, 0, false),
        (1, 16, 10, 10, 5, 3, 2, true),
        (1, 16, 7, 7, 7, 1, 0, false),
    ] {
        let op = Op::Pool(PoolDesc {
            kind: PoolKind::Max,
            window: window(k, s, 1, p),
            ceil_mode: ceil,
            count_include_pad: false,
        });
        let x = r.tensor(&[n, c, h, w], 2.0);
        let what = format!("maxpool n{n} c{c} {h}x{w} k{k} s{s} p{p} ceil={ceil}");
        check(&what, &op, &[&x], &[&[false]], 0.0, 0.0);
        // A NaN in one plane: it propagates there, the other planes pool as before.
        let mut values = x.to_f64_vec();
        values[h * w / 2] = f64::NAN;
        let xn =
            Tensor::from_vec(vec![n, c, h, w], values.iter().map(|&v| v as f32).collect()).unwrap();
        check(&format!("{what} NaN"), &op, &[&xn], &[&[false]], 0.0, 0.0);
    }
}
