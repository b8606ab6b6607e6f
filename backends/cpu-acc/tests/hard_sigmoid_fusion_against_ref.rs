//! TFLite's hard sigmoid, `Clip(0, 6)` then `Mul` by the scalar 1/6 (MobileNetV3's gates, as
//! the TFLite importer writes a RELU6-fused convolution and the MUL after it), fused into
//! the convolution as `HardSigmoid(alpha = 1/6, beta = 0)`, against CpuRef running the three
//! layers: pointwise, depthwise and grouped convolutions, a 1×1 plane (a squeeze-excite
//! gate), odd channel counts, either Mul operand order, one and two threads. Left alone
//! when the pair is not a hard sigmoid (a clip floor other than 0, a scale whose product
//! with the ceiling is not 1, a negative or tensor scale, a one-element scale that broadcasts
//! to more axes) or the clip has another reader.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, SubgraphView};
use backplane_core::ops::{AutoPad, BinaryOp, ConvDesc, UnaryOp, Window};
use backplane_core::{LayerId, Network, Op, Tensor, TensorId};
use backplane_cpu_acc::act::Activation;
use backplane_cpu_acc::fusion::Fused;
use backplane_cpu_acc::{CpuAccBackend, CpuAccOptions};
use support::{close, reference, run_desc, sole_replacement, Rng};

/// CpuAcc without channels-last regions, so that each fused chain stays one layer.
fn backend() -> CpuAccBackend {
    CpuAccBackend::with_options(CpuAccOptions {
        nhwc: false,
        ..CpuAccOptions::default()
    })
}

fn conv(k: usize, group: usize) -> Op {
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![k, k],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![k / 2; 4],
            auto_pad: AutoPad::NotSet,
        },
        group,
    })
}

fn scalar(v: f32) -> Tensor {
    Tensor::from_vec(vec![], vec![v]).unwrap()
}

/// `conv → Clip(lo, hi) → Mul(scale)` (the scale first with `scale_first`); returns the
/// network, its input, the clip's output and the product.
fn chain(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    op: &Op,
    (lo, hi): (f32, f32),
    scale: Tensor,
    scale_first: bool,
) -> (Network, TensorId, TensorId, TensorId) {
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let wi = net.add_constant("w", w.clone()).unwrap();
    let bi = net.add_constant("b", b.clone()).unwrap();
    let si = net.add_constant("scale", scale).unwrap();
    let t = net.add_layer("conv", op.clone(), &[xi, wi, bi]).unwrap()[0];
    let clip = Op::Unary(UnaryOp::Clip { min: lo, max: hi });
    let c = net.add_layer("clip", clip, &[t]).unwrap()[0];
    let operands = if scale_first { [si, c] } else { [c, si] };
    let y = net
        .add_layer("mul", Op::Binary(BinaryOp::Mul), &operands)
        .unwrap()[0];
    net.mark_output(y).unwrap();
    (net, xi, c, y)
}

#[test]
fn clip_then_sixth_fuses_as_hard_sigmoid_and_matches_ref() {
    let mut r = Rng(41);
    // (channels in, channels out, plane, kernel, group)
    for (i, (c, m, hw, k, g)) in [
        (96, 24, 1, 1, 1),
        (17, 240, 1, 1, 1),
        (1, 1, 1, 1, 1),
        (16, 16, 29, 5, 16),
        (13, 13, 6, 3, 13),
        (7, 31, 11, 1, 1),
        (12, 18, 9, 3, 3),
    ]
    .into_iter()
    .enumerate()
    {
        // Large enough sums that many outputs fall beyond both ends of the clip.
        let x = r.tensor(&[1, c, hw, hw], 8.0);
        let w = r.tensor(&[m, c / g, k, k], 1.0);
        let b = r.tensor(&[m], 3.0);
        let op = conv(k, g);
        let (net, xi, _, _) = chain(&x, &w, &b, &op, (0.0, 6.0), scalar(1.0 / 6.0), i % 2 == 1);
        let t = reference(&op, &[&x, &w, &b]).remove(0);
        let clip = Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 });
        let clipped = reference(&clip, &[&t]).remove(0);
        let want = reference(&Op::Binary(BinaryOp::Mul), &[&clipped, &scalar(1.0 / 6.0)]).remove(0);
        let (desc, inputs) = sole_replacement(&backend(), &net, &[(xi, &x)]);
        assert_eq!(desc.name, "conv+clip+mul");
        let Op::Custom(custom) = &desc.op else {
            panic!("a fused custom layer");
        };
        let Ok(Fused::Conv(spec)) = Fused::decode(custom) else {
            panic!("a fused convolution");
        };
        assert_eq!(
            spec.act,
            Activation::HardSigmoid {
                alpha: 1.0 / 6.0,
                beta: 0.0
            }
        );
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let (mut low, mut high) = (0, 0);
        for v in want.as_slice::<f32>().unwrap() {
            low += usize::from(*v == 0.0);
            high += usize::from(*v == 1.0);
        }
        assert!(
            low > 0 || high > 0 || m * hw * hw < 8,
            "case {i}: no output reaches the clip's ends"
        );
        for threads in [1, 2] {
            let got = run_desc(&desc, &refs, threads).remove(0);
            let what = format!("c{c} m{m} {hw}x{hw} k{k} g{g} threads {threads}");
            close(
                &what,
                &got,
                &want,
                1e-5,
                1e-5 * ((c / g * k * k) as f64).sqrt(),
            );
        }
    }
}

/// The activation of each CpuAcc fused convolution made of `net`.
fn fused_acts(net: &Network) -> Vec<(String, Activation)> {
    let layers: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
    let views = backend().optimize_subgraph(&SubgraphView::new(net, layers));
    let mut out = Vec::new();
    for s in &views.substitutions {
        for rep in &s.replacement {
            if let Op::Custom(c) = &rep.op {
                if let Ok(Fused::Conv(spec)) = Fused::decode(c) {
                    out.push((rep.name.clone(), spec.act));
                }
            }
        }
    }
    out
}

#[test]
fn clip_and_mul_that_are_no_hard_sigmoid_stay_apart() {
    let mut r = Rng(42);
    let x = r.tensor(&[1, 4, 3, 3], 1.0);
    let w = r.tensor(&[4, 4, 1, 1], 1.0);
    let b = r.tensor(&[4], 1.0);
    let op = conv(1, 1);
    let cases: Vec<(&str, (f32, f32), Tensor)> = vec![
        ("floor not 0", (-1.0, 6.0), scalar(1.0 / 6.0)),
        ("6 x 0.2 is not 1", (0.0, 6.0), scalar(0.2)),
        ("negative scale", (0.0, 6.0), scalar(-1.0 / 6.0)),
        (
            "a tensor of scales",
            (0.0, 6.0),
            r.tensor(&[1, 4, 1, 1], 1.0),
        ),
        (
            "a one-element scale of higher rank",
            (0.0, 6.0),
            Tensor::from_vec(vec![1, 1, 1, 1, 1], vec![1.0f32 / 6.0]).unwrap(),
        ),
    ];
    for (what, bounds, scale) in cases {
        let (net, _, _, _) = chain(&x, &w, &b, &op, bounds, scale, false);
        let acts = fused_acts(&net);
        assert_eq!(acts.len(), 1, "{what}: {acts:?}");
        assert_eq!(acts[0].0, "conv+clip", "{what}: {acts:?}");
        assert!(
            matches!(acts[0].1, Activation::Clip { .. }),
            "{what}: {acts:?}"
        );
    }
    // The clip's output read by another layer too: it must still exist.
    let (mut net, _, c, _) = chain(&x, &w, &b, &op, (0.0, 6.0), scalar(1.0 / 6.0), false);
    let z = net.add_layer("neg", Op::Unary(UnaryOp::Neg), &[c]).unwrap()[0];
    net.mark_output(z).unwrap();
    let acts = fused_acts(&net);
    assert!(
        acts.iter()
            .all(|(_, a)| !matches!(a, Activation::HardSigmoid { .. })),
        "{acts:?}"
    );
}
