//! Dilated (atrous) convolutions against CpuRef: dilations 2 to 36 with "same" padding (the
//! padded rows then several times wider than the output: only the output's columns are
//! computed), planes smaller than the dilation (most taps read only padding), odd channel
//! counts, strides, groups, batches, constant and run-time weights, one and two threads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{AutoPad, ConvDesc, Window};
use backplane_core::Op;
use support::{check, Rng};

fn conv(k: usize, s: usize, d: usize, pad: usize, group: usize) -> Op {
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![k, k],
            strides: vec![s, s],
            dilations: vec![d, d],
            pads: vec![pad, pad, pad, pad],
            auto_pad: AutoPad::NotSet,
        },
        group,
    })
}

#[test]
fn dilated_convolutions_against_ref() {
    let mut r = Rng(77);
    // (n, c, m, h, w, kernel, stride, dilation, pad, group)
    for (n, c, m, h, w, k, s, d, p, g) in [
        (1, 5, 17, 13, 29, 3, 1, 2, 2, 1),
        (1, 16, 24, 17, 17, 3, 1, 6, 6, 1),
        (1, 7, 13, 19, 23, 3, 1, 12, 12, 1),
        (1, 9, 31, 11, 11, 3, 1, 24, 24, 1),
        (1, 8, 16, 9, 13, 3, 1, 36, 36, 1),
        (2, 6, 10, 15, 14, 3, 1, 4, 4, 2),
        (1, 5, 7, 23, 31, 3, 2, 3, 3, 1),
        (1, 4, 9, 21, 21, 5, 1, 3, 6, 1),
        (1, 3, 5, 31, 7, 3, 1, 5, 2, 1),
    ] {
        let op = conv(k, s, d, p, g);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c / g, k, k], 1.0);
        let b = r.tensor(&[m], 1.0);
        let atol = 1e-4 * ((c / g * k * k) as f64).sqrt();
        check(
            &format!("conv n{n} c{c} m{m} {h}x{w} k{k} s{s} d{d} p{p} g{g}"),
            &op,
            &[&x, &wt, &b],
            &[&[false, true, true], &[false, false, false]],
            1e-4,
            atol,
        );
    }
}

/// Dilated 3×3 stride-1 convolutions with enough channels for the Winograd path (run as the
/// batch of their phases) and ones whose single live tap makes them one product on the
/// input, against CpuRef: dilations 2 to 5 and 8, planes that are no multiple of the
/// dilation or smaller than it, pads 0, the dilation and asymmetric, batches, bias, one and
/// two threads, constant and run-time weights.
#[test]
fn dilated_winograd_and_single_tap_against_ref() {
    let mut r = Rng(4646);
    // (n, c, m, h, w, dilation, pads [top, left, bottom, right])
    for (n, c, m, h, w, d, pads) in [
        (1, 64, 64, 28, 28, 2, [2, 2, 2, 2]),
        (2, 64, 67, 13, 11, 2, [2, 2, 2, 2]),
        (1, 67, 64, 9, 9, 4, [4, 4, 4, 4]),
        (1, 64, 64, 17, 19, 3, [3, 3, 3, 3]),
        (1, 64, 65, 28, 28, 4, [4, 4, 4, 4]),
        (2, 64, 64, 14, 14, 4, [1, 4, 7, 3]),
        (1, 64, 64, 26, 23, 5, [5, 5, 5, 5]),
        (1, 64, 64, 29, 28, 8, [8, 8, 8, 8]),
        (1, 64, 64, 12, 16, 2, [0, 0, 0, 0]),
        // One live tap (the centre): the planes smaller than the dilation.
        (1, 96, 40, 28, 28, 36, [36, 36, 36, 36]),
        (2, 33, 17, 7, 5, 12, [12, 12, 12, 12]),
        (1, 20, 9, 1, 1, 2, [2, 2, 2, 2]),
    ] {
        let op = Op::Conv(ConvDesc {
            window: Window {
                kernel: vec![3, 3],
                strides: vec![1, 1],
                dilations: vec![d, d],
                pads: pads.to_vec(),
                auto_pad: AutoPad::NotSet,
            },
            group: 1,
        });
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, 3, 3], 1.0);
        let b = r.tensor(&[m], 1.0);
        let atol = 1e-4 * ((c * 9) as f64).sqrt();
        check(
            &format!("conv n{n} c{c} m{m} {h}x{w} d{d} pads {pads:?}"),
            &op,
            &[&x, &wt, &b],
            &[&[false, true, true], &[false, false, false]],
            1e-4,
            atol,
        );
    }
}
