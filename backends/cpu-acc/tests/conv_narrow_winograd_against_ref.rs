//! 3×3 stride-1 convolutions with few channels on one side and many on the other (DenseNet's
//! 128→32 bottleneck outputs, SqueezeNet's 32→128 expansions), which take the Winograd
//! F(4×4, 3×3) path on planes of 14 pixels a side and more, against CpuRef: odd channel
//! counts, planes that are no multiple of the 4×4 tiles, padding 0 and 1, batches, with and
//! without bias, constant weights (Winograd) and run-time weights (the im2col GEMM), one and
//! two threads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{AutoPad, ConvDesc, Window};
use backplane_core::Op;
use support::{check, Rng};

#[test]
fn narrow_winograd_convolutions_against_ref() {
    let mut r = Rng(4096);
    // (n, c, m, h, w, pad)
    for (n, c, m, h, w, p) in [
        (1, 128, 32, 28, 28, 1),
        (1, 32, 128, 27, 27, 1),
        (1, 33, 127, 25, 31, 1),
        (2, 131, 32, 24, 26, 0),
        (1, 64, 37, 29, 24, 1),
        (1, 32, 32, 28, 28, 1),
        (1, 128, 32, 23, 56, 1),
        // DenseNet's third block: 14×14, and the smallest side that takes the path.
        (1, 128, 32, 14, 14, 1),
        (1, 97, 41, 14, 15, 1),
        (1, 128, 32, 13, 13, 1),
    ] {
        let op = Op::Conv(ConvDesc {
            window: Window {
                kernel: vec![3, 3],
                strides: vec![1, 1],
                dilations: vec![1, 1],
                pads: vec![p, p, p, p],
                auto_pad: AutoPad::NotSet,
            },
            group: 1,
        });
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, 3, 3], 1.0);
        let b = r.tensor(&[m], 1.0);
        // The bound every convolution path is held to (as the backend test kit's sweeps).
        let atol = 1e-4 * ((c * 9) as f64).sqrt();
        let what = format!("conv n{n} c{c} m{m} {h}x{w} p{p}");
        check(
            &what,
            &op,
            &[&x, &wt, &b],
            &[&[false, true, true], &[false, false, false]],
            1e-4,
            atol,
        );
        check(
            &format!("{what} no bias"),
            &op,
            &[&x, &wt],
            &[&[false, true]],
            1e-4,
            atol,
        );
    }
}
