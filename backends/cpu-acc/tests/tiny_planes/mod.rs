//! Convolutions with a window on tiny output planes (at most 16 pixels: CpuAcc's
//! `conv::tiny_planes`, the pixels as the rows of the product, with constant weights; the
//! NCHW GEMM over the stride phases, its B panels packed from row segments of two or four
//! values, with run-time weights) against CpuRef at 1, 2 and 3 threads, with and without
//! bias, and fused with an activation. Each test binary that includes this module runs it
//! on one ISA tier.

use crate::support::{acc, close, reference, run_desc, sole_replacement, Rng};
use backplane_core::ops::{AutoPad, ConvDesc, UnaryOp, Window};
use backplane_core::{Network, Op};
use backplane_cpu_acc::{CpuAccBackend, CpuAccOptions};

/// A 2-D convolution: kernel `(kh, kw)`, strides `s`, dilations `d`, pads `[top, left,
/// bottom, right]`.
fn conv(k: (usize, usize), s: (usize, usize), d: (usize, usize), pads: [usize; 4]) -> Op {
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![k.0, k.1],
            strides: vec![s.0, s.1],
            dilations: vec![d.0, d.1],
            pads: pads.to_vec(),
            auto_pad: AutoPad::NotSet,
        },
        group: 1,
    })
}

/// (n, c, m, h, w, kernel, strides, dilations, pads): DenseNet's last blocks (128 → 32 on
/// 4×4 and 2×2), a 1×1 plane, 3×3 and 9 or 16 pixels, a stride of 2 onto 2×2, a dilation,
/// a 5×5 and a 2×3 window, unequal pads, a padded 1×1 window, prime channel counts, depths
/// past one K block (1152, 4617), more than 32 outputs, a batch of two.
type Case = (
    usize,
    usize,
    usize,
    usize,
    usize,
    (usize, usize),
    (usize, usize),
    (usize, usize),
    [usize; 4],
);

const CASES: [Case; 14] = [
    (1, 128, 32, 4, 4, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    (1, 128, 32, 2, 2, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    (1, 17, 5, 1, 1, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    (2, 3, 1, 3, 3, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    (1, 513, 67, 3, 3, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    (1, 31, 97, 8, 8, (3, 3), (2, 2), (1, 1), [1, 1, 1, 1]),
    (1, 29, 33, 4, 4, (3, 3), (1, 1), (2, 2), [2, 2, 2, 2]),
    (1, 13, 40, 4, 4, (5, 5), (1, 1), (1, 1), [2, 2, 2, 2]),
    (1, 7, 19, 3, 5, (2, 3), (1, 1), (1, 1), [0, 1, 1, 0]),
    (1, 11, 23, 2, 2, (1, 1), (1, 1), (1, 1), [1, 1, 1, 1]),
    (1, 2, 3, 4, 4, (3, 3), (1, 1), (1, 1), [0, 0, 0, 0]),
    (1, 101, 129, 4, 3, (3, 3), (1, 1), (1, 1), [1, 0, 1, 2]),
    (1, 64, 32, 2, 2, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    (1, 1, 1, 1, 1, (1, 1), (1, 1), (1, 1), [0, 0, 0, 0]),
];

/// Every case at 1, 2 and 3 threads: constant weights and bias, constant weights without
/// bias, and run-time weights (the NCHW GEMM).
pub fn check_all() {
    let mut r = Rng(5101);
    for (n, c, m, h, w, k, s, d, pads) in CASES {
        let op = conv(k, s, d, pads);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, k.0, k.1], 1.0);
        let b = r.tensor(&[m], 1.0);
        let atol = 1e-4 * ((c * k.0 * k.1) as f64).sqrt();
        let what = format!("n{n} c{c} m{m} {h}x{w} k{k:?} s{s:?} d{d:?} pads {pads:?}");
        let with_bias = [&x, &wt, &b];
        let want = reference(&op, &with_bias);
        let without = [&x, &wt];
        let want_nb = reference(&op, &without);
        for threads in [1, 2, 3] {
            for (inputs, constant, want, how) in [
                (&with_bias[..], &[false, true, true][..], &want, "const"),
                (
                    &with_bias[..],
                    &[false, false, false][..],
                    &want,
                    "run-time",
                ),
                (&without[..], &[false, true][..], &want_nb, "const, no bias"),
            ] {
                let got = acc(&op, inputs, constant, threads);
                for (g, wv) in got.iter().zip(want) {
                    close(
                        &format!("{what} {how} threads={threads}"),
                        g,
                        wv,
                        1e-4,
                        atol,
                    );
                }
            }
        }
    }
}

/// The convolution fused with a ReLU or a sigmoid (applied in the tiles'
/// epilogue, or after the product), as one NCHW layer, at 1 and 3 threads.
pub fn check_fused() {
    let mut r = Rng(5102);
    for (c, m, h, w) in [(128, 32, 2, 2), (37, 70, 4, 4), (5, 3, 1, 1)] {
        for act in [UnaryOp::Relu, UnaryOp::Sigmoid] {
            let op = conv((3, 3), (1, 1), (1, 1), [1, 1, 1, 1]);
            let x = r.tensor(&[1, c, h, w], 1.0);
            let wt = r.tensor(&[m, c, 3, 3], 0.2);
            let b = r.tensor(&[m], 1.0);
            let mut net = Network::new();
            let xi = net.add_input("x", x.info().clone()).unwrap();
            let wi = net.add_constant("w", wt.clone()).unwrap();
            let bi = net.add_constant("b", b.clone()).unwrap();
            let t = net.add_layer("conv", op.clone(), &[xi, wi, bi]).unwrap()[0];
            let y = net.add_layer("act", Op::Unary(act), &[t]).unwrap()[0];
            net.mark_output(y).unwrap();
            let want = reference(&op, &[&x, &wt, &b]).remove(0);
            let want = reference(&Op::Unary(act), &[&want]).remove(0);
            let backend = CpuAccBackend::with_options(CpuAccOptions {
                nhwc: false,
                ..CpuAccOptions::default()
            });
            let (desc, inputs) = sole_replacement(&backend, &net, &[(xi, &x)]);
            let refs: Vec<&_> = inputs.iter().collect();
            for threads in [1, 3] {
                let got = run_desc(&desc, &refs, threads).remove(0);
                let what = format!("conv+{act:?} c{c} m{m} {h}x{w} threads {threads}");
                close(&what, &got, &want, 1e-4, 1e-4 * ((9 * c) as f64).sqrt());
            }
        }
    }
}
