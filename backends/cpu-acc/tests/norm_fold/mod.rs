//! DenseNet's pre-activation folded into the next 1×1 convolution: `BatchNormalization →
//! activation → Conv(1×1, stride 1, one group, constant weights)` becomes one `FusedConv`
//! whose GEMM applies the normalization while it packs its B operand (or, on the paths that
//! read B otherwise, to a copy of the input). The fused layer gives the same bits as the
//! three layers run one by one on CpuAcc, and agrees with CpuRef, for odd shapes (K 1, 3,
//! 17, 64, 257; N 1, 7, 49, 3136; M 1, 32, 128), scales negative and zero, NaN and ±∞ in the
//! input, at 1, 2 and 3 threads, on whatever tier the test binary runs (each binary that
//! includes this module caps the tier first). Layers the fold does not fit stay as they were.

// The capped-tier binaries run only the kernel test.
#![allow(dead_code)]

use crate::support::{
    acc, custom, konst, layer, pointwise, reference, run_desc, sole_replacement, Rng,
};
use backplane_backend_api::{Backend, SubgraphView};
use backplane_core::ops::{AutoPad, ConvDesc, UnaryOp, Window};
use backplane_core::{LayerId, Network, Op, Tensor};
use backplane_cpu_acc::CpuAccBackend;

const EPSILON: f32 = 1e-5;

/// The normalization's parameters for `c` channels: scales of both signs and some zero,
/// positive variances.
fn params(r: &mut Rng, c: usize) -> [Tensor; 4] {
    let scale: Vec<f32> = (0..c)
        .map(|i| match i % 5 {
            1 => 0.0,
            3 => -r.unit().abs() - 0.25,
            _ => r.unit() * 2.0,
        })
        .collect();
    let var: Vec<f32> = (0..c).map(|_| r.unit().abs() + 0.1).collect();
    let t = |v: Vec<f32>| Tensor::from_vec(vec![c], v).unwrap();
    [t(scale), r.tensor(&[c], 1.0), r.tensor(&[c], 0.5), t(var)]
}

/// An input of `dims` with NaN, +∞ and −∞ among its values when `specials`.
fn input(r: &mut Rng, dims: &[usize], specials: bool) -> Tensor {
    let mut v = r.tensor(dims, 2.0).as_slice::<f32>().unwrap().to_vec();
    if specials {
        for (i, e) in v.iter_mut().enumerate() {
            match i % 89 {
                17 => *e = f32::NAN,
                41 => *e = f32::INFINITY,
                66 => *e = f32::NEG_INFINITY,
                _ => {}
            }
        }
    }
    Tensor::from_vec(dims.to_vec(), v).unwrap()
}

/// `x → BatchNormalization → act → conv(w, b)`: the network, its input, and the conv's output.
fn network(
    x: &Tensor,
    bn: &[Tensor; 4],
    act: UnaryOp,
    conv: Op,
    w: &Tensor,
    b: &Tensor,
) -> (Network, backplane_core::TensorId) {
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let ks: Vec<_> = bn.iter().map(|t| konst(&mut net, t.clone())).collect();
    let mut ins = vec![xi];
    ins.extend(ks);
    let normed = layer(&mut net, Op::BatchNormalization { epsilon: EPSILON }, &ins);
    let a = layer(&mut net, Op::Unary(act), &[normed]);
    let (wk, bk) = (konst(&mut net, w.clone()), konst(&mut net, b.clone()));
    let y = layer(&mut net, conv, &[a, wk, bk]);
    net.mark_output(y).unwrap();
    (net, xi)
}

/// The same bits, NaN where NaN.
fn same_bits(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    let (g, w) = (
        got.as_slice::<f32>().unwrap(),
        want.as_slice::<f32>().unwrap(),
    );
    for (i, (a, b)) in g.iter().zip(w).enumerate() {
        let ok = a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        assert!(ok, "{what}: element {i}: fused {a}, unfused {b}");
    }
}

/// One shape: the fused layer against the three layers on CpuAcc (bits) and CpuRef.
fn one(r: &mut Rng, (c, h, w, m): (usize, usize, usize, usize), act: UnaryOp, specials: bool) {
    let x = input(r, &[1, c, h, w], specials);
    let bn = params(r, c);
    let wt = r.tensor(&[m, c, 1, 1], 1.0);
    let b = r.tensor(&[m], 1.0);
    let (net, xi) = network(&x, &bn, act, pointwise(), &wt, &b);
    let backend = CpuAccBackend::with_threads(1);
    let (desc, inputs) = sole_replacement(&backend, &net, &[(xi, &x)]);
    assert_eq!(custom(&desc.op), "FusedConv", "one fused convolution");
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let bn_op = Op::BatchNormalization { epsilon: EPSILON };
    let mut bn_in = vec![&x];
    bn_in.extend(bn.iter());
    let want_ref = {
        let n = reference(&bn_op, &bn_in).remove(0);
        let a = reference(&Op::Unary(act), &[&n]).remove(0);
        reference(&pointwise(), &[&a, &wt, &b]).remove(0)
    };
    for threads in [1, 2, 3] {
        let what = format!("c{c} {h}x{w} m{m} {act:?} specials {specials}, {threads} thread(s)");
        let got = run_desc(&desc, &refs, threads).remove(0);
        let n = acc(&bn_op, &bn_in, &[false, true, true, true, true], threads).remove(0);
        let a = acc(&Op::Unary(act), &[&n], &[false], threads).remove(0);
        let unfused = acc(&pointwise(), &[&a, &wt, &b], &[false, true, true], threads).remove(0);
        same_bits(&what, &got, &unfused);
        crate::support::close(&what, &got, &want_ref, 1e-4, 1e-4 * (c as f64).sqrt());
    }
}

/// The fold against the unfused layers and CpuRef over the shapes above.
pub fn folded_normalization_matches_the_unfused_layers() {
    let mut r = Rng(4801);
    for c in [1, 3, 17, 64, 257] {
        for (h, w) in [(1, 1), (7, 1), (7, 7)] {
            for m in [1, 32, 128] {
                one(&mut r, (c, h, w, m), UnaryOp::Relu, (c + m) % 2 == 0);
            }
        }
    }
    // A 56×56 plane (DenseNet's first block): the GEMM's panels, several column blocks.
    for (c, m) in [(3, 1), (64, 128), (257, 32)] {
        one(&mut r, (c, 56, 56, m), UnaryOp::Relu, true);
    }
    // Activations other than ReLU take the packing's second pass.
    for (c, h, w, m) in [(17, 7, 7, 32), (64, 13, 11, 128)] {
        one(&mut r, (c, h, w, m), UnaryOp::Sigmoid, true);
        one(&mut r, (c, h, w, m), UnaryOp::Relu, false);
    }
}

/// The custom op types of CpuAcc's replacement of all of `net`, in order.
fn fused_ops(net: &Network) -> Vec<String> {
    let all = (0..net.layers().len()).map(LayerId).collect();
    let views = CpuAccBackend::with_threads(1).optimize_subgraph(&SubgraphView::new(net, all));
    views
        .substitutions
        .iter()
        .flat_map(|s| s.replacement.iter().map(|l| custom(&l.op).to_string()))
        .collect()
}

/// A 3×3 convolution, a strided 1×1 one, and a ReLU read by a second layer too, keep the
/// normalization as its own layer.
pub fn layers_the_fold_does_not_fit_stay_apart() {
    let mut r = Rng(4802);
    let (c, m) = (8, 16);
    let x = input(&mut r, &[1, c, 9, 9], false);
    let bn = params(&mut r, c);
    let b = r.tensor(&[m], 1.0);
    let conv = |k: usize, s: usize| {
        Op::Conv(ConvDesc {
            window: Window {
                kernel: vec![k, k],
                strides: vec![s, s],
                dilations: vec![1, 1],
                pads: vec![0; 4],
                auto_pad: AutoPad::NotSet,
            },
            group: 1,
        })
    };
    for (k, s) in [(3, 1), (1, 2)] {
        let wt = r.tensor(&[m, c, k, k], 1.0);
        let (net, _) = network(&x, &bn, UnaryOp::Relu, conv(k, s), &wt, &b);
        let ops = fused_ops(&net);
        assert!(
            ops.contains(&"FusedBatchNorm".to_string()),
            "{k}x{k}/{s}: {ops:?}"
        );
    }
    // The activation also read by a second convolution: no fold into either.
    let wt = r.tensor(&[m, c, 1, 1], 1.0);
    let (mut net, _) = network(&x, &bn, UnaryOp::Relu, pointwise(), &wt, &b);
    let relu = net.layers()[1].outputs[0];
    let (wk, bk) = (konst(&mut net, wt.clone()), konst(&mut net, b.clone()));
    let y2 = layer(&mut net, pointwise(), &[relu, wk, bk]);
    net.mark_output(y2).unwrap();
    let ops = fused_ops(&net);
    assert!(
        ops.contains(&"FusedBatchNorm".to_string()),
        "two readers: {ops:?}"
    );
}
