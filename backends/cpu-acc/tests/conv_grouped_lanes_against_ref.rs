//! Grouped 3×3 convolutions with groups of eight outputs (RegNet's), which CpuAcc runs with
//! each group's outputs in vector lanes (`conv::grouped`), against CpuRef: strides 1 and 2,
//! padding 0 to 2 (asymmetric too), planes of 1 pixel to 57 a side (odd, prime, rows no
//! multiple of the eight-pixel blocks), 1 to 24 inputs per group, one group of eight and
//! many, batches, with and without bias, constant weights (this path) and run-time weights
//! (the GEMM paths), one and two threads; and fused with Relu.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{AutoPad, ConvDesc, UnaryOp, Window};
use backplane_core::{Network, Op};
use backplane_cpu_acc::{CpuAccBackend, CpuAccOptions};
use support::{check_conv, close, reference, run_desc, sole_replacement, Rng};

fn grouped(s: usize, pads: [usize; 4], group: usize) -> Op {
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![3, 3],
            strides: vec![s, s],
            dilations: vec![1, 1],
            pads: pads.to_vec(),
            auto_pad: AutoPad::NotSet,
        },
        group,
    })
}

#[test]
fn grouped_convolutions_with_eight_outputs_per_group_against_ref() {
    let mut r = Rng(3803);
    // (n, groups, inputs per group, h, w, stride, pads)
    for (n, g, cg, h, w, s, pads) in [
        (1, 6, 8, 112, 112, 2, [1, 1, 1, 1]),
        (1, 13, 8, 28, 28, 1, [1, 1, 1, 1]),
        (1, 55, 8, 14, 14, 2, [1, 1, 1, 1]),
        (1, 55, 8, 7, 7, 1, [1, 1, 1, 1]),
        (2, 3, 5, 13, 17, 2, [1, 1, 1, 1]),
        (1, 2, 1, 1, 1, 1, [1, 1, 1, 1]),
        (1, 4, 24, 11, 9, 1, [0, 0, 0, 0]),
        (1, 7, 3, 23, 19, 2, [0, 2, 1, 0]),
        (1, 2, 16, 5, 57, 1, [2, 2, 2, 2]),
        (3, 2, 8, 3, 3, 2, [1, 1, 1, 1]),
    ] {
        let (c, m) = (g * cg, g * 8);
        let op = grouped(s, pads, g);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, cg, 3, 3], 1.0);
        let b = r.tensor(&[m], 1.0);
        let atol = 1e-4 * ((cg * 9) as f64).sqrt();
        let what = format!("grouped n{n} g{g} cg{cg} {h}x{w} s{s} pads {pads:?}");
        check_conv(&what, &op, &x, &wt, &b, atol);
    }
}

#[test]
fn fused_grouped_relu_against_ref() {
    let mut r = Rng(3804);
    for (g, cg, hw, s) in [(13, 8, 28, 2), (3, 7, 9, 1)] {
        let (c, m) = (g * cg, g * 8);
        let op = grouped(s, [1, 1, 1, 1], g);
        let x = r.tensor(&[1, c, hw, hw], 1.0);
        let wt = r.tensor(&[m, cg, 3, 3], 1.0);
        let b = r.tensor(&[m], 1.0);
        let mut net = Network::new();
        let xi = net.add_input("x", x.info().clone()).unwrap();
        let wi = net.add_constant("w", wt.clone()).unwrap();
        let bi = net.add_constant("b", b.clone()).unwrap();
        let t = net.add_layer("conv", op.clone(), &[xi, wi, bi]).unwrap()[0];
        let y = net
            .add_layer("relu", Op::Unary(UnaryOp::Relu), &[t])
            .unwrap()[0];
        net.mark_output(y).unwrap();
        let want = reference(&op, &[&x, &wt, &b]).remove(0);
        let want = reference(&Op::Unary(UnaryOp::Relu), &[&want]).remove(0);
        // No channels-last region, so the fused chain stays one NCHW layer.
        let backend = CpuAccBackend::with_options(CpuAccOptions {
            nhwc: false,
            ..CpuAccOptions::default()
        });
        let (desc, inputs) = sole_replacement(&backend, &net, &[(xi, &x)]);
        let refs: Vec<&_> = inputs.iter().collect();
        for threads in [1, 2] {
            let got = run_desc(&desc, &refs, threads).remove(0);
            let what = format!("grouped+relu g{g} cg{cg} {hw}x{hw} s{s} threads {threads}");
            close(&what, &got, &want, 1e-4, 1e-4 * ((cg * 9) as f64).sqrt());
        }
    }
}
