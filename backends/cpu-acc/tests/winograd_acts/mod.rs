//! 3×3 convolutions on the Winograd path fused with an activation its vector output
//! transform does not apply (SiLU as `Mul(t, Sigmoid(t))`, a sigmoid alone: stored without
//! it, then applied over the output) and with one it does (ReLU), against CpuRef's layers at
//! 1, 2 and 3 threads: EfficientNetV2's 32 → 128 and 32 → 16, the narrow and wide bounds,
//! odd sides, a batch of two, a dilation of 2. Each test binary that includes this module runs
//! it on one ISA tier.

use crate::support::{close, reference, run_desc, sole_replacement, Rng};
use backplane_core::ops::{AutoPad, BinaryOp, ConvDesc, UnaryOp, Window};
use backplane_core::{Network, Op, Tensor, TensorId};
use backplane_cpu_acc::{CpuAccBackend, CpuAccOptions};

/// A 3×3 convolution of stride 1 and dilation `d`, padded to keep the size.
fn conv3(d: usize) -> Op {
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![3, 3],
            strides: vec![1, 1],
            dilations: vec![d, d],
            pads: vec![d; 4],
            auto_pad: AutoPad::NotSet,
        },
        group: 1,
    })
}

/// The activation after the convolution.
#[derive(Debug, Clone, Copy)]
enum After {
    Silu,
    Sigmoid,
    Relu,
}

/// `act(t)` appended to `net`.
fn add_act(net: &mut Network, t: TensorId, act: After) -> TensorId {
    let unary = |net: &mut Network, op: UnaryOp, t: TensorId| {
        net.add_layer("act", Op::Unary(op), &[t]).unwrap()[0]
    };
    match act {
        After::Relu => unary(net, UnaryOp::Relu, t),
        After::Sigmoid => unary(net, UnaryOp::Sigmoid, t),
        After::Silu => {
            let s = unary(net, UnaryOp::Sigmoid, t);
            net.add_layer("mul", Op::Binary(BinaryOp::Mul), &[t, s])
                .unwrap()[0]
        }
    }
}

/// `act(t)` as CpuRef computes the layers.
fn act_ref(t: &Tensor, act: After) -> Tensor {
    let unary = |op: UnaryOp, t: &Tensor| reference(&Op::Unary(op), &[t]).remove(0);
    match act {
        After::Relu => unary(UnaryOp::Relu, t),
        After::Sigmoid => unary(UnaryOp::Sigmoid, t),
        After::Silu => {
            let s = unary(UnaryOp::Sigmoid, t);
            reference(&Op::Binary(BinaryOp::Mul), &[t, &s]).remove(0)
        }
    }
}

/// Every case and activation at 1, 2 and 3 threads.
pub fn check_all() {
    let mut r = Rng(5103);
    // (n, c, m, h, w, dilation)
    for (n, c, m, h, w, d) in [
        (1, 32, 128, 24, 24, 1),
        (2, 64, 64, 17, 19, 1),
        (1, 16, 64, 13, 13, 1),
        (1, 97, 70, 29, 14, 1),
        (1, 64, 64, 28, 28, 2),
        // Narrow pairs below 32 × 32 channels (Winograd since session 51): EfficientNetV2's
        // 32 → 16 on 48×48, 16 → 16, 16 → 24 on 13×13.
        (1, 32, 16, 48, 48, 1),
        (1, 16, 16, 28, 28, 1),
        (1, 16, 24, 13, 13, 1),
    ] {
        for act in [After::Silu, After::Sigmoid, After::Relu] {
            let op = conv3(d);
            let x = r.tensor(&[n, c, h, w], 1.0);
            let wt = r.tensor(&[m, c, 3, 3], 0.3);
            let b = r.tensor(&[m], 1.0);
            let mut net = Network::new();
            let xi = net.add_input("x", x.info().clone()).unwrap();
            let wi = net.add_constant("w", wt.clone()).unwrap();
            let bi = net.add_constant("b", b.clone()).unwrap();
            let t = net.add_layer("conv", op.clone(), &[xi, wi, bi]).unwrap()[0];
            let y = add_act(&mut net, t, act);
            net.mark_output(y).unwrap();
            let want = act_ref(&reference(&op, &[&x, &wt, &b]).remove(0), act);
            // No channels-last region: the chain stays one NCHW layer.
            let backend = CpuAccBackend::with_options(CpuAccOptions {
                nhwc: false,
                ..CpuAccOptions::default()
            });
            let (desc, inputs) = sole_replacement(&backend, &net, &[(xi, &x)]);
            let refs: Vec<&_> = inputs.iter().collect();
            for threads in [1, 2, 3] {
                let got = run_desc(&desc, &refs, threads).remove(0);
                let what = format!("n{n} c{c} m{m} {h}x{w} d{d} {act:?} threads {threads}");
                close(&what, &got, &want, 1e-4, 2e-4 * ((9 * c) as f64).sqrt());
            }
        }
    }
}
