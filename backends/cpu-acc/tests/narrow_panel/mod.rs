//! Pointwise convolutions whose planes end in a narrow GEMM panel (at most 16 of its 32
//! columns: 14×14 = 6 panels and 4 columns, 13×11 = 4 panels and 15), which the small-A
//! product shares between threads weighting that panel by its cost, against CpuRef at 1, 2
//! and 3 threads. Each test binary that includes this module runs it on one ISA tier.

use crate::support::{acc, close, reference, Rng};
use backplane_core::ops::{AutoPad, ConvDesc, Window};
use backplane_core::Op;

/// Every shape at 1, 2 and 3 threads, constant weights and bias.
pub fn check_all() {
    let mut r = Rng(1447);
    // (c, m, h, w)
    for (c, m, h, w) in [
        // DenseNet's third block: 640 → 128 on 14×14.
        (640, 128, 14, 14),
        (129, 32, 14, 14),
        (17, 129, 13, 11),
        (3, 17, 14, 14),
        (32, 3, 13, 11),
        (1, 1, 14, 14),
        (256, 128, 7, 7),
        (300, 17, 1, 1),
        (96, 64, 56, 56),
    ] {
        let op = Op::Conv(ConvDesc {
            window: Window {
                kernel: vec![1, 1],
                strides: vec![1, 1],
                dilations: vec![1, 1],
                pads: vec![0, 0, 0, 0],
                auto_pad: AutoPad::NotSet,
            },
            group: 1,
        });
        let x = r.tensor(&[1, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, 1, 1], 1.0);
        let b = r.tensor(&[m], 1.0);
        let inputs = [&x, &wt, &b];
        let want = reference(&op, &inputs);
        let atol = 1e-4 * (c as f64).sqrt();
        for threads in [1, 2, 3] {
            let got = acc(&op, &inputs, &[false, true, true], threads);
            for (g, wv) in got.iter().zip(&want) {
                let what = format!("1x1 c{c} m{m} {h}x{w} threads={threads}");
                close(&what, g, wv, 1e-4, atol);
            }
        }
    }
}
