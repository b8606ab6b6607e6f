//! The quantized chains CpuAcc folds besides the QDQ convolution, each folded into one int8
//! layer and run against the chain on CpuRef: ONNX's QLinearConv as the importer writes it
//! (`DequantizeLinear(·, 1, zero point) → Conv → Mul(multiplier) → QuantizeLinear`), bit for
//! bit; a QDQ MatMul of constant weights and a fully connected layer between Reshapes,
//! within one quantum. Odd shapes (1, primes, more rows than a block), i8 and u8, per-tensor
//! and per-channel weights, one and two threads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, SubgraphView};
use backplane_core::ops::{AutoPad, ConvDesc, GemmDesc, UnaryOp, Window};
use backplane_core::{DataType, LayerId, Network, Op, Tensor, TensorId};
use backplane_cpu_acc::{CpuAccBackend, CpuAccOptions};
use std::collections::HashMap;
use support::{dq_op, q8, q_op, run_desc, sole_replacement, zp, Rng};

fn k(net: &mut Network, name: &str, t: Tensor) -> TensorId {
    net.add_constant(name, t).unwrap()
}

/// The network's one output computed layer by layer by CpuRef, the oracle.
fn reference_net(net: &Network, feeds: &[(TensorId, &Tensor)]) -> Tensor {
    let mut values: HashMap<TensorId, Tensor> = HashMap::new();
    for layer in net.layers() {
        let inputs: Vec<Tensor> = layer
            .inputs
            .iter()
            .map(|t| match feeds.iter().find(|(id, _)| id == t) {
                Some((_, v)) => (*v).clone(),
                None => match values.get(t) {
                    Some(v) => v.clone(),
                    None => (**net.tensor(*t).constant().expect("a constant")).clone(),
                },
            })
            .collect();
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let outs = backplane_cpu_ref::evaluate(&layer.op, &refs).unwrap();
        for (t, v) in layer.outputs.iter().zip(outs) {
            values.insert(*t, v);
        }
    }
    values.remove(&net.outputs()[0]).unwrap()
}

/// Folds `net` (no channels-last region) into one layer of type `op_type`, runs it with one
/// and two threads and returns the outputs with CpuRef's.
fn fold_and_run(
    net: &Network,
    feeds: &[(TensorId, &Tensor)],
    op_type: &str,
) -> Vec<(Tensor, Tensor)> {
    let backend = CpuAccBackend::with_options(CpuAccOptions {
        nhwc: false,
        ..CpuAccOptions::default()
    });
    // Every layer replaced once (the runtime rejects an answer listing one twice).
    let all: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
    let views = backend.optimize_subgraph(&SubgraphView::new(net, all.clone()));
    let mut replaced: Vec<LayerId> = views
        .substitutions
        .iter()
        .flat_map(|s| s.replaced.iter().copied())
        .collect();
    replaced.sort();
    assert_eq!(replaced, all, "each layer replaced exactly once");
    let (desc, inputs) = sole_replacement(&backend, net, feeds);
    assert!(
        matches!(&desc.op, Op::Custom(c) if c.op_type == op_type),
        "folded into {op_type}, got {}",
        desc.op.name()
    );
    let want = reference_net(net, feeds);
    let refs: Vec<&Tensor> = inputs.iter().collect();
    [1, 2]
        .iter()
        .map(|&threads| (run_desc(&desc, &refs, threads).remove(0), want.clone()))
        .collect()
}

/// Elements more than `limit` quanta apart fail; returns the count one quantum off.
fn quanta_off(what: &str, got: &Tensor, want: &Tensor, limit: i32) -> usize {
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    assert_eq!(g.len(), w.len(), "{what}");
    let mut off = 0;
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let d = (a - b).abs() as i32;
        assert!(d <= limit, "{what}: element {i} is {a}, CpuRef {b}");
        off += usize::from(d > 0);
    }
    off
}

struct ConvCase {
    x: [usize; 4],
    m: usize,
    group: usize,
    k: usize,
    stride: usize,
    pad: usize,
    xt: DataType,
    wt: DataType,
    yt: DataType,
    per_channel: bool,
    bias: bool,
}

/// The QLinearConv chain of `c`, as `backplane-onnx` imports QLinearConv.
fn qlinear_conv_chain(c: &ConvCase, seed: u64) -> (Network, TensorId, Tensor) {
    let mut r = Rng(seed);
    let [n, ci, h, w] = c.x;
    let cg = ci / c.group;
    let x = q8(c.xt, &c.x, r.bytes(n * ci * h * w));
    let wq = q8(c.wt, &[c.m, cg, c.k, c.k], r.bytes(c.m * cg * c.k * c.k));
    let (sx, sy) = (0.02f32, 0.05f32 * ((cg * c.k * c.k) as f32 / 16.0).sqrt());
    let zx = if c.xt == DataType::U8 { 120 } else { -3 };
    let zy = if c.yt == DataType::U8 { 100 } else { 5 };
    let zw = if c.wt == DataType::U8 { 128 } else { 0 };
    let sws: Vec<f32> = (0..c.m).map(|i| 0.004 + 0.0007 * (i % 11) as f32).collect();
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let (one, zxi) = (
        k(&mut net, "one", Tensor::scalar(1f32)),
        k(&mut net, "zx", zp(c.xt, zx)),
    );
    let xc = net
        .add_layer("x_centered", dq_op(1), &[xi, one, zxi])
        .unwrap()[0];
    let wi = k(&mut net, "w", wq);
    let (ws, wz) = if c.per_channel {
        let ones = Tensor::from_vec(vec![c.m], vec![1f32; c.m]).unwrap();
        (
            k(&mut net, "w_one", ones),
            k(&mut net, "zw", q8(c.wt, &[c.m], vec![zw as u8; c.m])),
        )
    } else {
        (one, k(&mut net, "zw", zp(c.wt, zw)))
    };
    let wc = net
        .add_layer("w_centered", dq_op(0), &[wi, ws, wz])
        .unwrap()[0];
    let mut inputs = vec![xc, wc];
    if c.bias {
        let b: Vec<f32> = (0..c.m)
            .map(|_| (r.next() % 4001) as f32 - 2000.0)
            .collect();
        inputs.push(k(&mut net, "b", Tensor::from_vec(vec![c.m], b).unwrap()));
    }
    let conv = Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![c.k, c.k],
            strides: vec![c.stride; 2],
            dilations: vec![1; 2],
            pads: vec![c.pad; 4],
            auto_pad: AutoPad::NotSet,
        },
        group: c.group,
    });
    let acc = net.add_layer("conv", conv, &inputs).unwrap()[0];
    // The multiplier as the importer computes it: (sx · sw) / sy in f32.
    let mult = if c.per_channel {
        let v: Vec<f32> = sws.iter().map(|&s| sx * s / sy).collect();
        Tensor::from_vec(vec![1, c.m, 1, 1], v).unwrap()
    } else {
        Tensor::scalar(sx * sws[0] / sy)
    };
    let mi = k(&mut net, "multiplier", mult);
    let scaled = net
        .add_layer(
            "scaled",
            Op::Binary(backplane_core::ops::BinaryOp::Mul),
            &[acc, mi],
        )
        .unwrap()[0];
    let zyi = k(&mut net, "zy", zp(c.yt, zy));
    let y = net.add_layer("q", q_op(c.yt), &[scaled, one, zyi]).unwrap()[0];
    net.mark_output(y).unwrap();
    (net, xi, x)
}

#[test]
fn qlinear_conv_chains_fold_and_match_cpu_ref_bit_for_bit() {
    use DataType::{I8, U8};
    let cases = [
        // (x, m, group, k, stride, pad, xt, wt, yt, per_channel, bias)
        ([1, 1, 1, 1], 1, 1, 1, 1, 0, U8, I8, U8, false, false),
        ([1, 3, 9, 9], 8, 1, 3, 2, 1, U8, I8, U8, true, true),
        ([1, 5, 7, 11], 13, 1, 3, 1, 1, I8, I8, I8, true, true),
        ([2, 16, 13, 5], 17, 1, 1, 1, 0, U8, U8, I8, true, false),
        ([1, 17, 12, 12], 17, 17, 3, 2, 1, I8, I8, I8, true, true),
        ([1, 8, 6, 6], 8, 8, 3, 1, 1, U8, U8, U8, false, true),
        ([1, 64, 20, 20], 96, 1, 1, 1, 0, U8, I8, U8, true, true),
        ([1, 3, 31, 29], 32, 1, 3, 2, 1, I8, U8, U8, false, true),
    ];
    for (i, &(x, m, group, kk, stride, pad, xt, wt, yt, per_channel, bias)) in
        cases.iter().enumerate()
    {
        let c = ConvCase {
            x,
            m,
            group,
            k: kk,
            stride,
            pad,
            xt,
            wt,
            yt,
            per_channel,
            bias,
        };
        let (net, xi, xv) = qlinear_conv_chain(&c, 7 + i as u64);
        for (got, want) in fold_and_run(&net, &[(xi, &xv)], "QLinearConv") {
            let what = format!("case {i}: x {x:?} m {m} group {group} {xt}/{wt}/{yt}");
            assert_eq!(quanta_off(&what, &got, &want, 0), 0, "{what}");
        }
    }
}

/// `DequantizeLinear(x) → [Reshape] → MatMul | Gemm(transB) → [Relu] → [Reshape] →
/// QuantizeLinear`: (network, x's id, x).
#[allow(clippy::too_many_arguments)]
fn product_chain(
    x_dims: &[usize],
    kk: usize,
    n: usize,
    gemm: Option<Vec<usize>>,
    xt: DataType,
    wt: DataType,
    per_channel: bool,
    relu: bool,
    seed: u64,
) -> (Network, TensorId, Tensor) {
    let mut r = Rng(seed);
    let elements: usize = x_dims.iter().product();
    let x = q8(xt, x_dims, r.bytes(elements));
    let w_dims = if gemm.is_some() { [n, kk] } else { [kk, n] };
    let wq = q8(wt, &w_dims, r.bytes(n * kk));
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let zx = if xt == DataType::U8 { 131 } else { 2 };
    let (sx, zxi) = (
        k(&mut net, "sx", Tensor::scalar(0.02f32)),
        k(&mut net, "zx", zp(xt, zx)),
    );
    let mut xf = net.add_layer("dq_x", dq_op(1), &[xi, sx, zxi]).unwrap()[0];
    let zw = if wt == DataType::U8 { 127 } else { 0 };
    let axis = if gemm.is_some() { 0 } else { 1 };
    let (sw, zwi) = if per_channel {
        let s: Vec<f32> = (0..n).map(|i| 0.003 + 0.0005 * (i % 5) as f32).collect();
        (
            Tensor::from_vec(vec![n], s).unwrap(),
            q8(wt, &[n], vec![zw as u8; n]),
        )
    } else {
        (Tensor::scalar(0.004f32), zp(wt, zw))
    };
    let wi = k(&mut net, "w", wq);
    let (swi, zwi) = (k(&mut net, "sw", sw), k(&mut net, "zw", zwi));
    let wf = net.add_layer("dq_w", dq_op(axis), &[wi, swi, zwi]).unwrap()[0];
    let mut t = if let Some(out_shape) = &gemm {
        let rows = elements / kk;
        xf = net
            .add_layer(
                "flatten",
                Op::Reshape {
                    shape: vec![rows, kk],
                },
                &[xf],
            )
            .unwrap()[0];
        let op = Op::Gemm(GemmDesc {
            trans_b: true,
            ..GemmDesc::default()
        });
        let mut t = net.add_layer("gemm", op, &[xf, wf]).unwrap()[0];
        if relu {
            t = net
                .add_layer("relu", Op::Unary(UnaryOp::Relu), &[t])
                .unwrap()[0];
        }
        net.add_layer(
            "unflatten",
            Op::Reshape {
                shape: out_shape.clone(),
            },
            &[t],
        )
        .unwrap()[0]
    } else {
        let t = net.add_layer("matmul", Op::MatMul, &[xf, wf]).unwrap()[0];
        if relu {
            net.add_layer("relu", Op::Unary(UnaryOp::Relu), &[t])
                .unwrap()[0]
        } else {
            t
        }
    };
    let sy = 0.02 * 0.004 * 40.0 * 40.0 * (kk as f32).sqrt() / 60.0;
    let (syi, zyi) = (
        k(&mut net, "sy", Tensor::scalar(sy)),
        k(&mut net, "zy", zp(xt, 9)),
    );
    t = net.add_layer("q", q_op(xt), &[t, syi, zyi]).unwrap()[0];
    net.mark_output(t).unwrap();
    (net, xi, x)
}

/// x dims, K, N, the Gemm's output shape (None: a MatMul), x and w types, per channel, Relu.
type ProductCase = (
    &'static [usize],
    usize,
    usize,
    Option<Vec<usize>>,
    DataType,
    DataType,
    bool,
    bool,
);

#[test]
fn qdq_matmul_and_reshaped_fully_connected_fold_within_one_quantum() {
    use DataType::{I8, U8};
    let mut off = 0;
    let mut total = 0;
    let cases: [ProductCase; 8] = [
        (&[1, 1], 1, 1, None, U8, I8, false, false),
        (&[3, 7], 7, 5, None, I8, I8, true, true),
        (&[2, 37, 64], 64, 17, None, U8, I8, true, false),
        (&[2, 3, 5, 101], 101, 10, None, I8, U8, false, true),
        (&[1, 200, 33], 33, 96, None, U8, U8, true, false),
        (
            &[1, 64, 1, 1],
            64,
            10,
            Some(vec![1, 10]),
            U8,
            I8,
            true,
            false,
        ),
        (
            &[1, 5, 3, 3],
            45,
            7,
            Some(vec![1, 1, 7]),
            I8,
            I8,
            false,
            true,
        ),
        (&[4, 13], 13, 3, Some(vec![2, 2, 3]), U8, I8, true, true),
    ];
    for (i, (x, kk, n, gemm, xt, wt, pc, relu)) in cases.into_iter().enumerate() {
        let (net, xi, xv) = product_chain(x, kk, n, gemm.clone(), xt, wt, pc, relu, 11 + i as u64);
        for (got, want) in fold_and_run(&net, &[(xi, &xv)], "QLinearGemm") {
            let what = format!("case {i}: x {x:?} k {kk} n {n} gemm {gemm:?} {xt}/{wt}");
            off += quanta_off(&what, &got, &want, 1);
            total += got.shape().elements();
        }
    }
    println!("{off} of {total} elements one quantum off CpuRef's f32 chain");
}

/// `DequantizeLinear(s, z)` of each input → `op` → `QuantizeLinear(s_out, z)`.
fn movement_chain(
    op: Op,
    inputs: &[Tensor],
    s: f32,
    s_out: f32,
    z: i32,
) -> (Network, Vec<TensorId>) {
    let dt = inputs[0].dtype();
    let mut net = Network::new();
    let (si, zi) = (
        k(&mut net, "s", Tensor::scalar(s)),
        k(&mut net, "z", zp(dt, z)),
    );
    let mut ids = Vec::new();
    let mut deq = Vec::new();
    for (i, t) in inputs.iter().enumerate() {
        let xi = net.add_input(&format!("x{i}"), t.info().clone()).unwrap();
        ids.push(xi);
        deq.push(
            net.add_layer(&format!("dq{i}"), dq_op(1), &[xi, si, zi])
                .unwrap()[0],
        );
    }
    let t = net.add_layer("move", op, &deq).unwrap()[0];
    let so = k(&mut net, "s_out", Tensor::scalar(s_out));
    let y = net.add_layer("q", q_op(dt), &[t, so, zi]).unwrap()[0];
    net.mark_output(y).unwrap();
    (net, ids)
}

#[test]
fn int8_data_movement_between_equal_quantizations_folds_exactly() {
    let mut r = Rng(5);
    let backend = CpuAccBackend::with_options(CpuAccOptions {
        nhwc: false,
        ..CpuAccOptions::default()
    });
    for dt in [DataType::I8, DataType::U8] {
        let a = q8(dt, &[1, 3, 5, 7], r.bytes(105));
        let b = q8(dt, &[1, 2, 5, 7], r.bytes(70));
        let cases = [
            (Op::Concat { axis: 1 }, vec![a.clone(), b.clone()]),
            (
                Op::Transpose {
                    perm: vec![0, 2, 3, 1],
                },
                vec![a.clone()],
            ),
            (Op::Flatten { axis: 1 }, vec![b.clone()]),
        ];
        for (op, inputs) in cases {
            let (net, ids) = movement_chain(op.clone(), &inputs, 0.037, 0.037, 3);
            let feeds: Vec<(TensorId, &Tensor)> = ids.iter().copied().zip(inputs.iter()).collect();
            let (desc, ins) = sole_replacement(&backend, &net, &feeds);
            assert_eq!(
                desc.op.name(),
                op.name(),
                "{dt}: the layer itself, on 8-bit values"
            );
            assert_eq!(desc.inputs[0].dtype, dt);
            let refs: Vec<&Tensor> = ins.iter().collect();
            let got = run_desc(&desc, &refs, 1).remove(0);
            let want = reference_net(&net, &feeds);
            assert_eq!(got.bytes(), want.bytes(), "{dt} {}", op.name());
            // Another output scale is a requantization: no fold.
            let (net, _) = movement_chain(op.clone(), &inputs, 0.037, 0.05, 3);
            let all: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
            let views = backend.optimize_subgraph(&SubgraphView::new(&net, all));
            assert!(
                views
                    .substitutions
                    .iter()
                    .all(|s| !s.replacement.iter().any(|l| l.op.name() == op.name())),
                "{dt} {}: folded across a requantization",
                op.name()
            );
        }
    }
}
