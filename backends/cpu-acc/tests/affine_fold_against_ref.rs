//! TFLite's form of DenseNet's pre-activation, `Mul` and `Add` by per-channel constants
//! (`[1, C, 1, 1]` or `[C, 1, 1]`, either operand order) then an activation (or none), read
//! by a 1×1 convolution alone: one `FusedConv` with the map as its input normalization,
//! against CpuRef running the layers one by one, for odd shapes (C 1, 3, 17, 64; planes 1×1,
//! 7×5, 13×11, 56×56; M 1, 32) at one and two threads. Left alone when the operands do not
//! broadcast per channel (a `[C]` vector broadcasts along W), an operand is not a constant,
//! the scaled tensor has another reader, or the reader is not a 1×1 stride-1 convolution.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, SubgraphView};
use backplane_core::ops::{AutoPad, BinaryOp, ConvDesc, UnaryOp, Window};
use backplane_core::{LayerId, Network, Op, Tensor, TensorId};
use backplane_cpu_acc::fusion::Fused;
use backplane_cpu_acc::{CpuAccBackend, CpuAccOptions};
use support::{close, custom, konst, layer, pointwise, reference, run_desc, sole_replacement, Rng};

/// CpuAcc without channels-last regions, so that the fused chain stays one layer.
fn backend() -> CpuAccBackend {
    CpuAccBackend::with_options(CpuAccOptions {
        nhwc: false,
        ..CpuAccOptions::default()
    })
}

/// How the map is written.
#[derive(Clone, Copy, Debug)]
struct Form {
    /// The constants' shape: `[1, C, 1, 1]` when true, `[C, 1, 1]` otherwise.
    rank4: bool,
    /// The constant is the first operand of the Mul and of the Add.
    const_first: bool,
    /// The activation after the Add, if any.
    act: Option<UnaryOp>,
}

/// `x → Mul(scale) → Add(shift) [→ act] → conv(w, b)`: the network, its input and the
/// layers' values, each one as CpuRef runs it.
struct Case {
    net: Network,
    xi: TensorId,
    want: Tensor,
}

fn binary(net: &mut Network, op: BinaryOp, t: TensorId, k: TensorId, first: bool) -> TensorId {
    let ins = if first { [k, t] } else { [t, k] };
    layer(net, Op::Binary(op), &ins)
}

fn case(x: &Tensor, scale: &Tensor, shift: &Tensor, form: Form, conv: Op, w: &Tensor) -> Case {
    let b = Tensor::from_vec(
        vec![w.shape().dims()[0]],
        vec![0.25f32; w.shape().dims()[0]],
    )
    .unwrap();
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let (sk, hk) = (
        konst(&mut net, scale.clone()),
        konst(&mut net, shift.clone()),
    );
    let scaled = binary(&mut net, BinaryOp::Mul, xi, sk, form.const_first);
    let mut t = binary(&mut net, BinaryOp::Add, scaled, hk, form.const_first);
    if let Some(a) = form.act {
        t = layer(&mut net, Op::Unary(a), &[t]);
    }
    let (wk, bk) = (konst(&mut net, w.clone()), konst(&mut net, b.clone()));
    let y = layer(&mut net, conv.clone(), &[t, wk, bk]);
    net.mark_output(y).unwrap();
    let order = |k: &Tensor, v: Tensor| {
        if form.const_first {
            [k.clone(), v]
        } else {
            [v, k.clone()]
        }
    };
    let [a0, a1] = order(scale, x.clone());
    let m = reference(&Op::Binary(BinaryOp::Mul), &[&a0, &a1]).remove(0);
    let [b0, b1] = order(shift, m);
    let mut v = reference(&Op::Binary(BinaryOp::Add), &[&b0, &b1]).remove(0);
    if let Some(a) = form.act {
        v = reference(&Op::Unary(a), &[&v]).remove(0);
    }
    let want = reference(&conv, &[&v, w, &b]).remove(0);
    Case { net, xi, want }
}

/// Per-channel constants of `c` values: scales of both signs and some zero.
fn per_channel(r: &mut Rng, c: usize, rank4: bool) -> (Tensor, Tensor) {
    let scale: Vec<f32> = (0..c)
        .map(|i| match i % 5 {
            1 => 0.0,
            3 => -r.unit().abs() - 0.25,
            _ => r.unit() * 2.0,
        })
        .collect();
    let shift: Vec<f32> = (0..c).map(|_| r.unit()).collect();
    let dims = if rank4 {
        vec![1, c, 1, 1]
    } else {
        vec![c, 1, 1]
    };
    (
        Tensor::from_vec(dims.clone(), scale).unwrap(),
        Tensor::from_vec(dims, shift).unwrap(),
    )
}

#[test]
fn per_channel_mul_add_folds_into_the_pointwise_convolution() {
    let mut r = Rng(5011);
    let forms = [
        Form {
            rank4: true,
            const_first: false,
            act: Some(UnaryOp::Relu),
        },
        Form {
            rank4: false,
            const_first: true,
            act: Some(UnaryOp::Relu),
        },
        Form {
            rank4: true,
            const_first: true,
            act: None,
        },
        Form {
            rank4: false,
            const_first: false,
            act: Some(UnaryOp::Sigmoid),
        },
    ];
    let mut k = 0;
    for c in [1, 3, 17, 64] {
        for (h, w) in [(1, 1), (7, 5), (13, 11)] {
            for m in [1, 32] {
                let form = forms[k % forms.len()];
                k += 1;
                one(&mut r, (c, h, w, m), form);
            }
        }
    }
    // DenseNet's first block's plane: several column blocks of the GEMM.
    one(&mut r, (64, 56, 56, 32), forms[0]);
}

fn one(r: &mut Rng, (c, h, w, m): (usize, usize, usize, usize), form: Form) {
    let x = r.tensor(&[1, c, h, w], 2.0);
    let (scale, shift) = per_channel(r, c, form.rank4);
    let wt = r.tensor(&[m, c, 1, 1], 1.0);
    let Case { net, xi, want } = case(&x, &scale, &shift, form, pointwise(), &wt);
    let (desc, inputs) = sole_replacement(&backend(), &net, &[(xi, &x)]);
    let what = format!("c{c} {h}x{w} m{m} {form:?}");
    let Op::Custom(op) = &desc.op else {
        panic!("{what}: {:?}", desc.op)
    };
    match Fused::decode(op).unwrap() {
        Fused::Conv(spec) => assert!(
            spec.pre.is_some(),
            "{what}: the map is the conv's input normalization"
        ),
        other => panic!("{what}: {other:?}"),
    }
    let refs: Vec<&Tensor> = inputs.iter().collect();
    for threads in [1, 2] {
        let got = run_desc(&desc, &refs, threads).remove(0);
        close(
            &format!("{what}, {threads} thread(s)"),
            &got,
            &want,
            1e-4,
            1e-4 * (c as f64).sqrt(),
        );
    }
}

/// The custom op types of CpuAcc's replacement of all of `net`.
fn fused_ops(net: &Network) -> Vec<String> {
    let all = (0..net.layers().len()).map(LayerId).collect();
    let views = backend().optimize_subgraph(&SubgraphView::new(net, all));
    views
        .substitutions
        .iter()
        .flat_map(|s| s.replacement.iter().map(|l| custom(&l.op).to_string()))
        .collect()
}

#[test]
fn maps_the_fold_does_not_fit_stay_apart() {
    let mut r = Rng(5012);
    let (c, m) = (5, 8);
    let x = r.tensor(&[1, c, 5, 5], 1.0);
    let relu = Form {
        rank4: true,
        const_first: false,
        act: Some(UnaryOp::Relu),
    };
    let wt = r.tensor(&[m, c, 1, 1], 1.0);
    // Vectors of C values broadcast along W (here W = C): not per channel.
    let flat =
        |t: &Tensor| Tensor::from_vec(vec![c], t.as_slice::<f32>().unwrap().to_vec()).unwrap();
    let (scale, shift) = per_channel(&mut r, c, true);
    let case_ops = |scale: &Tensor, shift: &Tensor, conv: Op, w: &Tensor| {
        fused_ops(&case(&x, scale, shift, relu, conv, w).net)
    };
    assert!(
        case_ops(&flat(&scale), &shift, pointwise(), &wt).is_empty(),
        "a [C] scale"
    );
    assert!(
        case_ops(&scale, &flat(&shift), pointwise(), &wt).is_empty(),
        "a [C] shift"
    );
    // A 3×3 convolution reads it.
    let conv3 = Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![3, 3],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![1; 4],
            auto_pad: AutoPad::NotSet,
        },
        group: 1,
    });
    let w3 = r.tensor(&[m, c, 3, 3], 1.0);
    assert!(
        case_ops(&scale, &shift, conv3, &w3).is_empty(),
        "a 3x3 reader"
    );
    // The scaled tensor has a second reader.
    let mut net = case(&x, &scale, &shift, relu, pointwise(), &wt).net;
    let scaled = net.layers()[0].outputs[0];
    let extra = layer(&mut net, Op::Unary(UnaryOp::Neg), &[scaled]);
    net.mark_output(extra).unwrap();
    assert!(fused_ops(&net).is_empty(), "two readers");
    // The scale is computed, not a constant.
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let si = net.add_input("s", scale.info().clone()).unwrap();
    let hk = konst(&mut net, shift.clone());
    let t = layer(&mut net, Op::Binary(BinaryOp::Mul), &[xi, si]);
    let t = layer(&mut net, Op::Binary(BinaryOp::Add), &[t, hk]);
    let (wk, bk) = (
        konst(&mut net, wt.clone()),
        konst(&mut net, r.tensor(&[m], 1.0)),
    );
    let y = layer(&mut net, pointwise(), &[t, wk, bk]);
    net.mark_output(y).unwrap();
    assert!(fused_ops(&net).is_empty(), "a tensor scale");
}
