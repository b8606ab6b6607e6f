//! Pointwise convolutions, stride 1 and 2, on the AVX2 tier (this test binary caps the
//! process's kernels at AVX2 before any runs): the pixel-rows path and its strided form with
//! the 6×16 tiles, next to the NCHW GEMM, against CpuRef, one and two threads. The default
//! tier runs the same shapes in `conv_pixel_rows_against_ref.rs`; a machine without AVX2
//! runs the portable kernels here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{AutoPad, ConvDesc, Window};
use backplane_core::Op;
use backplane_cpu_kernels::isa::{isa_in_use, limit_isa, Isa};
use support::{check_conv, Rng};

#[test]
fn pointwise_convolutions_on_the_avx2_tier_against_ref() {
    let capped = limit_isa(Isa::Avx2);
    assert!(
        capped,
        "the tier was chosen before this test: {:?}",
        isa_in_use()
    );
    assert_ne!(isa_in_use(), Isa::Avx512);
    let mut r = Rng(3805);
    // (c, m, h, w, stride)
    for (c, m, h, w, s) in [
        (513, 1031, 14, 14, 2),
        (64, 440, 13, 11, 2),
        (17, 64, 13, 13, 2),
        (3, 513, 7, 7, 2),
        (1, 17, 1, 1, 2),
        (64, 128, 56, 56, 2),
        (440, 440, 7, 7, 1),
        (513, 64, 7, 7, 1),
        (17, 97, 13, 11, 1),
        (1, 3, 1, 1, 1),
    ] {
        let op = Op::Conv(ConvDesc {
            window: Window {
                kernel: vec![1, 1],
                strides: vec![s, s],
                dilations: vec![1, 1],
                pads: vec![0; 4],
                auto_pad: AutoPad::NotSet,
            },
            group: 1,
        });
        let x = r.tensor(&[1, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, 1, 1], 1.0);
        let b = r.tensor(&[m], 1.0);
        let atol = 1e-4 * (c as f64).sqrt();
        let what = format!("avx2 pointwise c{c} m{m} {h}x{w} stride {s}");
        check_conv(&what, &op, &x, &wt, &b, atol);
    }
}
