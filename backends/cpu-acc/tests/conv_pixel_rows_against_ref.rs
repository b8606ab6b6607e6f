//! Pointwise convolutions on small planes, which CpuAcc computes as a GEMM with the pixels
//! as rows (`conv::pixel_rows`: 7×7 planes of ResNet's, RegNet's and DenseNet's last stages),
//! against CpuRef: planes of 1 to 256 pixels, prime channel counts, depths past one K block,
//! batches, with and without bias, constant weights (the pixel-rows path) and run-time
//! weights (the NCHW GEMM), one and two threads; and the fused Conv+Add+Relu of a residual
//! block. Also pointwise layers with 33 to 48 outputs on larger planes (the NCHW GEMM).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{AutoPad, BinaryOp, ConvDesc, UnaryOp, Window};
use backplane_core::{Network, Op};
use backplane_cpu_acc::{CpuAccBackend, CpuAccOptions};
use support::{check_conv, close, reference, run_desc, sole_replacement, Rng};

fn pointwise() -> Op {
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![1, 1],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![0; 4],
            auto_pad: AutoPad::NotSet,
        },
        group: 1,
    })
}

#[test]
fn pointwise_convolutions_on_small_planes_against_ref() {
    let mut r = Rng(3801);
    // (n, c, m, h, w)
    for (n, c, m, h, w) in [
        (1, 440, 440, 7, 7),
        (2, 37, 53, 7, 7),
        (1, 1, 17, 1, 1),
        (1, 131, 97, 5, 9),
        (1, 600, 67, 7, 7),
        (1, 16, 1000, 3, 3),
        (3, 8, 5, 2, 3),
        (1, 64, 97, 16, 16),
        (1, 128, 31, 7, 7),
        // 33 to 48 outputs on larger planes: the NCHW GEMM, next to the paths above.
        (1, 32, 48, 112, 112),
        (1, 384, 47, 13, 13),
        (2, 5, 41, 9, 11),
    ] {
        let op = pointwise();
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, 1, 1], 1.0);
        let b = r.tensor(&[m], 1.0);
        let atol = 1e-4 * (c as f64).sqrt();
        let what = format!("pointwise n{n} c{c} m{m} {h}x{w}");
        check_conv(&what, &op, &x, &wt, &b, atol);
    }
}

#[test]
fn fused_residual_pointwise_on_small_planes_against_ref() {
    let mut r = Rng(3802);
    // (c, m, h, w)
    for (c, m, h, w) in [
        (440, 440, 7, 7),
        (29, 67, 7, 7),
        (3, 5, 1, 1),
        (53, 211, 4, 5),
    ] {
        let x = r.tensor(&[1, c, h, w], 1.0);
        let res = r.tensor(&[1, m, h, w], 1.0);
        let wt = r.tensor(&[m, c, 1, 1], 1.0);
        let b = r.tensor(&[m], 1.0);
        let mut net = Network::new();
        let xi = net.add_input("x", x.info().clone()).unwrap();
        let ri = net.add_input("r", res.info().clone()).unwrap();
        let wi = net.add_constant("w", wt.clone()).unwrap();
        let bi = net.add_constant("b", b.clone()).unwrap();
        let t = net.add_layer("conv", pointwise(), &[xi, wi, bi]).unwrap()[0];
        let a = net
            .add_layer("add", Op::Binary(BinaryOp::Add), &[t, ri])
            .unwrap()[0];
        let y = net
            .add_layer("relu", Op::Unary(UnaryOp::Relu), &[a])
            .unwrap()[0];
        net.mark_output(y).unwrap();
        let want = reference(&pointwise(), &[&x, &wt, &b]).remove(0);
        let want = reference(&Op::Binary(BinaryOp::Add), &[&want, &res]).remove(0);
        let want = reference(&Op::Unary(UnaryOp::Relu), &[&want]).remove(0);
        // No channels-last region, so the fused chain stays one NCHW layer.
        let backend = CpuAccBackend::with_options(CpuAccOptions {
            nhwc: false,
            ..CpuAccOptions::default()
        });
        let (desc, inputs) = sole_replacement(&backend, &net, &[(xi, &x), (ri, &res)]);
        let refs: Vec<&_> = inputs.iter().collect();
        for threads in [1, 2] {
            let got = run_desc(&desc, &refs, threads).remove(0);
            let what = format!("conv+add+relu c{c} m{m} {h}x{w} threads {threads}");
            close(&what, &got, &want, 1e-4, 1e-4 * (c as f64).sqrt());
        }
    }
}
