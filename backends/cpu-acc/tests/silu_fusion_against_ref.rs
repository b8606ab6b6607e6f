//! SiLU (`Mul(t, Sigmoid(t))`, as exporters write EfficientNet's activation) fused into the
//! convolution, MatMul or Gemm computing `t`, against CpuRef running the three layers: odd
//! channel counts, depthwise 3×3/5×5/7×7, pointwise and grouped convolutions, either Mul
//! operand order, with a folded BatchNormalization, one and two threads; and left alone
//! when `t` or the Sigmoid's output has another reader.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, SubgraphView};
use backplane_core::ops::{AutoPad, BinaryOp, ConvDesc, CustomOp, GemmDesc, UnaryOp, Window};
use backplane_core::{LayerId, Network, Op, Tensor, TensorId};
use backplane_cpu_acc::act::Activation;
use backplane_cpu_acc::fusion::Fused;
use backplane_cpu_acc::{CpuAccBackend, CpuAccOptions};
use support::{close, reference, run_desc, sole_replacement, Rng};

/// The activation a CpuAcc fused layer applies (none for a normalization).
fn activation_of(c: &CustomOp) -> Activation {
    match Fused::decode(c) {
        Ok(Fused::Conv(spec)) => spec.act,
        Ok(Fused::ConvMaxPool { conv, .. }) => conv.act,
        Ok(Fused::ConvPair { second, .. }) => second.act,
        Ok(Fused::MatMul { act, .. } | Fused::Gemm { act, .. } | Fused::BatchNorm { act, .. }) => {
            act
        }
        Ok(Fused::AddLayerNorm { .. }) | Err(_) => Activation::None,
    }
}

/// CpuAcc without channels-last regions, so that each fused chain stays one layer.
fn backend() -> CpuAccBackend {
    CpuAccBackend::with_options(CpuAccOptions {
        nhwc: false,
        ..CpuAccOptions::default()
    })
}

fn all_layers(net: &Network) -> Vec<LayerId> {
    (0..net.layers().len()).map(LayerId).collect()
}

/// The one replacement layer CpuAcc makes of all of `net`, run on `feeds`: its name, its
/// activation attribute and its output.
fn run_fused(
    net: &Network,
    feeds: &[(TensorId, &Tensor)],
    threads: usize,
) -> (String, String, Tensor) {
    let (desc, inputs) = sole_replacement(&backend(), net, feeds);
    let Op::Custom(c) = &desc.op else {
        panic!("a fused custom layer");
    };
    let act = activation_of(c).name().to_string();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    (
        desc.name.clone(),
        act,
        run_desc(&desc, &refs, threads).remove(0),
    )
}

/// Append `Sigmoid(t)` and `Mul(t, s)` (or `Mul(s, t)`) to `net`; returns the product.
fn add_silu(net: &mut Network, t: TensorId, sigmoid_first: bool) -> TensorId {
    let s = net
        .add_layer("sig", Op::Unary(UnaryOp::Sigmoid), &[t])
        .unwrap()[0];
    let operands = if sigmoid_first { [s, t] } else { [t, s] };
    net.add_layer("mul", Op::Binary(BinaryOp::Mul), &operands)
        .unwrap()[0]
}

/// `t · sigmoid(t)` as CpuRef computes the two layers.
fn silu_ref(t: &Tensor) -> Tensor {
    let s = reference(&Op::Unary(UnaryOp::Sigmoid), &[t]).remove(0);
    reference(&Op::Binary(BinaryOp::Mul), &[t, &s]).remove(0)
}

fn conv(k: usize, s: usize, group: usize) -> Op {
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![k, k],
            strides: vec![s, s],
            dilations: vec![1, 1],
            pads: vec![k / 2; 4],
            auto_pad: AutoPad::NotSet,
        },
        group,
    })
}

#[test]
fn convolution_silu_fuses_and_matches_ref() {
    let mut r = Rng(35);
    // (channels in, channels out, size, kernel, stride, group, with batch norm)
    for (i, (c, m, hw, k, s, g, bn)) in [
        (16, 16, 29, 5, 1, 16, false),
        (13, 13, 17, 5, 2, 13, true),
        (24, 24, 14, 7, 1, 24, false),
        (1, 1, 1, 3, 1, 1, false),
        (7, 31, 11, 1, 1, 1, true),
        (3, 17, 23, 3, 2, 1, false),
        (12, 18, 9, 3, 1, 3, true),
        (96, 96, 56, 3, 1, 96, false),
    ]
    .into_iter()
    .enumerate()
    {
        let mut net = Network::new();
        let x = r.tensor(&[1, c, hw, hw], 3.0);
        let w = r.tensor(&[m, c / g, k, k], 0.5);
        let b = r.tensor(&[m], 1.0);
        let xi = net.add_input("x", x.info().clone()).unwrap();
        let wi = net.add_constant("w", w.clone()).unwrap();
        let bi = net.add_constant("b", b.clone()).unwrap();
        let op = conv(k, s, g);
        let mut t = net.add_layer("conv", op.clone(), &[xi, wi, bi]).unwrap()[0];
        let mut want = reference(&op, &[&x, &w, &b]).remove(0);
        let mut name = "conv".to_string();
        if bn {
            let p: Vec<Tensor> = (0..4)
                .map(|j| {
                    let v = r.tensor(&[m], 1.0);
                    let v: Vec<f32> = v.as_slice::<f32>().unwrap().to_vec();
                    let v = if j == 3 {
                        v.iter().map(|v| v.abs() + 0.5).collect()
                    } else {
                        v
                    };
                    Tensor::from_vec(vec![m], v).unwrap()
                })
                .collect();
            let ids: Vec<TensorId> = p
                .iter()
                .enumerate()
                .map(|(j, t)| net.add_constant(&format!("bn{j}"), t.clone()).unwrap())
                .collect();
            let bn_op = Op::BatchNormalization { epsilon: 1e-5 };
            t = net
                .add_layer("bn", bn_op.clone(), &[t, ids[0], ids[1], ids[2], ids[3]])
                .unwrap()[0];
            want = reference(&bn_op, &[&want, &p[0], &p[1], &p[2], &p[3]]).remove(0);
            name.push_str("+bn");
        }
        let y = add_silu(&mut net, t, i % 2 == 1);
        net.mark_output(y).unwrap();
        let want = silu_ref(&want);
        for threads in [1, 2] {
            let (got_name, act, got) = run_fused(&net, &[(xi, &x)], threads);
            assert_eq!(got_name, format!("{name}+sig+mul"));
            assert_eq!(act, "silu");
            let what = format!("conv c{c} m{m} {hw}x{hw} k{k} s{s} g{g} bn{bn} threads {threads}");
            close(
                &what,
                &got,
                &want,
                1e-4,
                1e-4 * ((c / g * k * k) as f64).sqrt(),
            );
        }
    }
}

#[test]
fn matmul_and_gemm_silu_fuse_and_match_ref() {
    let mut r = Rng(36);
    for (m, k, n) in [(1, 17, 257), (63, 31, 5), (2, 1, 1)] {
        let a = r.tensor(&[m, k], 1.0);
        let b = r.tensor(&[k, n], 1.0);
        for gemm in [false, true] {
            let mut net = Network::new();
            let ai = net.add_input("a", a.info().clone()).unwrap();
            let bi = net.add_constant("b", b.clone()).unwrap();
            let op = if gemm {
                Op::Gemm(GemmDesc {
                    alpha: 1.0,
                    beta: 1.0,
                    trans_a: false,
                    trans_b: false,
                })
            } else {
                Op::MatMul
            };
            let t = net.add_layer("mm", op.clone(), &[ai, bi]).unwrap()[0];
            let y = add_silu(&mut net, t, gemm);
            net.mark_output(y).unwrap();
            let want = silu_ref(&reference(&op, &[&a, &b]).remove(0));
            for threads in [1, 2] {
                let (name, act, got) = run_fused(&net, &[(ai, &a)], threads);
                assert_eq!((name.as_str(), act.as_str()), ("mm+sig+mul", "silu"));
                let what = format!("gemm {gemm} {m}x{k}x{n} threads {threads}");
                close(&what, &got, &want, 1e-4, 1e-4 * (k as f64).sqrt());
            }
        }
    }
}

/// With the convolution's output, or the Sigmoid's, read by another layer too, no SiLU is
/// fused: the value that other layer needs must still exist.
#[test]
fn silu_with_another_reader_is_not_fused() {
    let mut r = Rng(37);
    for shared_sigmoid in [false, true] {
        let mut net = Network::new();
        let x = r.tensor(&[1, 4, 5, 5], 1.0);
        let xi = net.add_input("x", x.info().clone()).unwrap();
        let wi = net.add_constant("w", r.tensor(&[4, 4, 1, 1], 1.0)).unwrap();
        let t = net.add_layer("conv", conv(1, 1, 1), &[xi, wi]).unwrap()[0];
        let s = net
            .add_layer("sig", Op::Unary(UnaryOp::Sigmoid), &[t])
            .unwrap()[0];
        let y = net
            .add_layer("mul", Op::Binary(BinaryOp::Mul), &[t, s])
            .unwrap()[0];
        let other = if shared_sigmoid { s } else { t };
        let z = net
            .add_layer("neg", Op::Unary(UnaryOp::Neg), &[other])
            .unwrap()[0];
        net.mark_output(y).unwrap();
        net.mark_output(z).unwrap();
        let views = backend().optimize_subgraph(&SubgraphView::new(&net, all_layers(&net)));
        for s in &views.substitutions {
            for rep in &s.replacement {
                if let Op::Custom(c) = &rep.op {
                    assert!(
                        activation_of(c) != Activation::Silu,
                        "{} fused a SiLU whose parts have other readers",
                        rep.name
                    );
                }
            }
        }
    }
}
