//! Pointwise convolutions on small planes, which CpuAcc computes as a GEMM with the pixels
//! as rows (`conv::pixel_rows`: 7×7 planes of ResNet's, RegNet's and DenseNet's last stages),
//! against CpuRef: planes of 1 to 256 pixels, prime channel counts, depths past one K block,
//! batches, with and without bias, constant weights (the pixel-rows path) and run-time
//! weights (the NCHW GEMM), one and two threads; and the fused Conv+Add+Relu of a residual
//! block. Also pointwise layers with 33 to 48 outputs on larger planes (the NCHW GEMM), and
//! strided 1×1 projections (the pixel-rows path on their subsampled input where the output
//! plane is small, the NCHW GEMM over the stride phase elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{AutoPad, BinaryOp, ConvDesc, UnaryOp, Window};
use backplane_core::{Network, Op};
use backplane_cpu_acc::{CpuAccBackend, CpuAccOptions};
use support::{check_conv, close, pointwise, reference, run_desc, sole_replacement, Rng};

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

/// A 1×1 convolution with strides `(sh, sw)`, no padding.
fn strided_pointwise(sh: usize, sw: usize) -> Op {
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![1, 1],
            strides: vec![sh, sw],
            dilations: vec![1, 1],
            pads: vec![0; 4],
            auto_pad: AutoPad::NotSet,
        },
        group: 1,
    })
}

#[test]
fn strided_pointwise_convolutions_against_ref() {
    let mut r = Rng(3804);
    // (n, c, m, h, w, sh, sw): outputs of 1 to 7×7 pixels (the pixel-rows path where the
    // outputs are many), 13×11 and odd sides (a last row or column read), 56×56 (a
    // 28×28 output, the NCHW GEMM), a stride of 3 and unequal strides.
    for (n, c, m, h, w, sh, sw) in [
        (1, 513, 1031, 14, 14, 2, 2),
        (1, 64, 440, 13, 11, 2, 2),
        (2, 17, 64, 13, 13, 2, 2),
        (1, 3, 513, 7, 7, 2, 2),
        (1, 1, 17, 1, 1, 2, 2),
        (1, 513, 64, 2, 2, 2, 2),
        (1, 64, 128, 56, 56, 2, 2),
        (1, 17, 97, 20, 21, 3, 3),
        (1, 64, 300, 14, 9, 2, 1),
        (1, 3, 1, 7, 7, 2, 2),
    ] {
        let op = strided_pointwise(sh, sw);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, 1, 1], 1.0);
        let b = r.tensor(&[m], 1.0);
        let atol = 1e-4 * (c as f64).sqrt();
        let what = format!("pointwise n{n} c{c} m{m} {h}x{w} stride {sh}x{sw}");
        check_conv(&what, &op, &x, &wt, &b, atol);
    }
}

#[test]
fn fused_residual_pointwise_on_small_planes_against_ref() {
    let mut r = Rng(3802);
    // (c, m, h, w, stride): the strided ones a projection with the block's sum and ReLU.
    for (c, m, h, w, s) in [
        (440, 440, 7, 7, 1),
        (29, 67, 7, 7, 1),
        (3, 5, 1, 1, 1),
        (53, 211, 4, 5, 1),
        (256, 1031, 14, 14, 2),
        (17, 64, 13, 11, 2),
    ] {
        let (oh, ow) = ((h - 1) / s + 1, (w - 1) / s + 1);
        let x = r.tensor(&[1, c, h, w], 1.0);
        let res = r.tensor(&[1, m, oh, ow], 1.0);
        let wt = r.tensor(&[m, c, 1, 1], 1.0);
        let b = r.tensor(&[m], 1.0);
        let mut net = Network::new();
        let xi = net.add_input("x", x.info().clone()).unwrap();
        let ri = net.add_input("r", res.info().clone()).unwrap();
        let wi = net.add_constant("w", wt.clone()).unwrap();
        let bi = net.add_constant("b", b.clone()).unwrap();
        let conv = strided_pointwise(s, s);
        let t = net.add_layer("conv", conv.clone(), &[xi, wi, bi]).unwrap()[0];
        let a = net
            .add_layer("add", Op::Binary(BinaryOp::Add), &[t, ri])
            .unwrap()[0];
        let y = net
            .add_layer("relu", Op::Unary(UnaryOp::Relu), &[a])
            .unwrap()[0];
        net.mark_output(y).unwrap();
        let want = reference(&conv, &[&x, &wt, &b]).remove(0);
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
            let what = format!("conv+add+relu c{c} m{m} {h}x{w} s{s} threads {threads}");
            close(&what, &got, &want, 1e-4, 1e-4 * (c as f64).sqrt());
        }
    }
}

/// A residual block of a network's last stage, channels-last inside a region (`x → 3×3 conv,
/// ReLU → 3×3 conv, add x, ReLU → 1×1 conv`), on planes of 7×7 and fewer pixels with weights
/// of megabytes (on two threads the product of such a plane is split by output columns, each
/// thread streaming its share of the weights), against CpuRef's layers, one and two threads.
#[test]
fn residual_blocks_on_small_planes_run_channels_last_like_the_reference() {
    use std::collections::HashMap;
    use support::{run_acc, run_reference};
    let conv = |k: usize| {
        Op::Conv(ConvDesc {
            window: Window {
                kernel: vec![k, k],
                strides: vec![1, 1],
                dilations: vec![1, 1],
                pads: vec![k / 2; 4],
                auto_pad: AutoPad::NotSet,
            },
            group: 1,
        })
    };
    let mut r = Rng(3803);
    // (channels, 1×1 outputs, h, w)
    for (c, o, h, w) in [(256, 1024, 7, 7), (263, 521, 5, 3), (240, 2053, 1, 1)] {
        let mut net = Network::new();
        let x = net
            .add_input("x", r.tensor(&[1, c, h, w], 1.0).info().clone())
            .unwrap();
        let mut weights = |net: &mut Network, name: &str, dims: &[usize]| {
            let scale = 1.0 / (dims[1] * dims[2] * dims[3]) as f32;
            let wt = net
                .add_constant(name, r.tensor(dims, scale.sqrt()))
                .unwrap();
            let b = net.add_constant(&format!("{name}_b"), r.tensor(&dims[..1], 0.5));
            (wt, b.unwrap())
        };
        let (w1, b1) = weights(&mut net, "w1", &[c, c, 3, 3]);
        let (w2, b2) = weights(&mut net, "w2", &[c, c, 3, 3]);
        let (w3, b3) = weights(&mut net, "w3", &[o, c, 1, 1]);
        let mut layer =
            |name: &str, op: Op, inputs: &[_]| net.add_layer(name, op, inputs).unwrap()[0];
        let t = layer("conv1", conv(3), &[x, w1, b1]);
        let t = layer("relu1", Op::Unary(UnaryOp::Relu), &[t]);
        let t = layer("conv2", conv(3), &[t, w2, b2]);
        let t = layer("add", Op::Binary(BinaryOp::Add), &[t, x]);
        let t = layer("relu2", Op::Unary(UnaryOp::Relu), &[t]);
        let y = layer("conv3", conv(1), &[t, w3, b3]);
        net.mark_output(y).unwrap();
        let feeds = HashMap::from([(x, r.tensor(&[1, c, h, w], 1.0))]);
        let want = run_reference(&net, &feeds);
        for threads in [1, 2] {
            let (got, ops) = run_acc(&net, &feeds, threads);
            let what = format!("c{c} o{o} {h}x{w}, {threads} thread(s)");
            let transposes = ops
                .iter()
                .filter(|op| matches!(op, Op::Transpose { .. }))
                .count();
            assert_eq!(transposes, 2, "{what}: one region: {ops:?}");
            close(
                &what,
                &got[&y],
                &want[&y],
                1e-4,
                1e-4 * (9.0 * c as f64).sqrt(),
            );
        }
    }
}
