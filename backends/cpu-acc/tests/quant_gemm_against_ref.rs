//! The int8 fully connected layer CpuAcc folds `DequantizeLinear(x) → Gemm(·,
//! DequantizeLinear(w const), DequantizeLinear(bias)) → (Relu | Clip) → QuantizeLinear`
//! into, against the chain on CpuRef: within one quantum (the count off printed), on odd
//! shapes (1 row, primes, more rows than a block), i8 and u8, per-tensor and per-channel
//! weights, `transB` on and off, one, two and three threads (equal bytes at each).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, LayerDesc, SubgraphView, ValueRef};
use backplane_core::ops::{GemmDesc, UnaryOp};
use backplane_core::{DataType, LayerId, Network, Op, Tensor};
use backplane_cpu_acc::CpuAccBackend;
use std::sync::Arc;
use support::{q8, reference, run_desc, zp, Rng};

#[derive(Clone, Copy)]
struct Case {
    m: usize,
    k: usize,
    n: usize,
    trans_b: bool,
    per_channel: bool,
    xt: DataType,
    wt: DataType,
    act: Option<UnaryOp>,
}

/// Fold the chain of `c`, run the folded layer on CpuAcc with `threads` threads and the
/// chain on CpuRef: (elements one quantum off, elements).
fn run_case(c: Case, seed: u64, threads: usize) -> (usize, usize, Vec<u8>) {
    let mut r = Rng(seed);
    let (m, k, n) = (c.m, c.k, c.n);
    let x = q8(c.xt, &[m, k], r.bytes(m * k));
    let w_dims = if c.trans_b { [n, k] } else { [k, n] };
    let wq = q8(c.wt, &w_dims, r.bytes(n * k));
    let sx = 0.02f32;
    let zx = if c.xt == DataType::U8 { 120 } else { -3 };
    let sws: Vec<f32> = (0..n).map(|i| 0.002 + 0.0003 * (i % 7) as f32).collect();
    let w_zero = if c.wt == DataType::U8 { 128 } else { 0 };
    let (sw, zw) = if c.per_channel {
        (
            Tensor::from_vec(vec![n], sws.clone()).unwrap(),
            q8(c.wt, &[n], vec![w_zero as u8; n]),
        )
    } else {
        (Tensor::scalar(sws[0]), zp(c.wt, w_zero))
    };
    let scale = |i: usize| sx * if c.per_channel { sws[i] } else { sws[0] };
    let bias: Vec<i32> = (0..n).map(|_| (r.next() % 4001) as i32 - 2000).collect();
    let b = Tensor::from_vec(vec![n], bias).unwrap();
    let sb = Tensor::from_vec(vec![n], (0..n).map(scale).collect::<Vec<f32>>()).unwrap();
    let (sy, zy) = (
        0.05f32 * (k as f32 / 64.0).sqrt(),
        if c.xt == DataType::U8 { 100 } else { 5 },
    );

    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let kc = |net: &mut Network, name: &str, t: &Tensor| net.add_constant(name, t.clone()).unwrap();
    let dq = |axis| Op::DequantizeLinear {
        axis,
        to: DataType::F32,
        block_size: 0,
    };
    let (sxi, zxi) = (
        kc(&mut net, "sx", &Tensor::scalar(sx)),
        kc(&mut net, "zx", &zp(c.xt, zx)),
    );
    let xf = net.add_layer("dq_x", dq(1), &[xi, sxi, zxi]).unwrap()[0];
    let w_axis = if c.trans_b { 0 } else { 1 };
    let (wi, swi, zwi) = (
        kc(&mut net, "w", &wq),
        kc(&mut net, "sw", &sw),
        kc(&mut net, "zw", &zw),
    );
    let wf = net.add_layer("dq_w", dq(w_axis), &[wi, swi, zwi]).unwrap()[0];
    let (bi, sbi) = (kc(&mut net, "b", &b), kc(&mut net, "sb", &sb));
    let bf = net.add_layer("dq_b", dq(0), &[bi, sbi]).unwrap()[0];
    let gemm = Op::Gemm(GemmDesc {
        trans_b: c.trans_b,
        ..GemmDesc::default()
    });
    let mut t = net.add_layer("gemm", gemm.clone(), &[xf, wf, bf]).unwrap()[0];
    if let Some(a) = c.act {
        t = net.add_layer("act", Op::Unary(a), &[t]).unwrap()[0];
    }
    let (syi, zyi) = (
        kc(&mut net, "sy", &Tensor::scalar(sy)),
        kc(&mut net, "zy", &zp(c.xt, zy)),
    );
    let quant = Op::QuantizeLinear {
        axis: 1,
        to: c.xt,
        block_size: 0,
        saturate: true,
        requant: backplane_core::quant::Requantization::F32,
    };
    let y = net.add_layer("q", quant.clone(), &[t, syi, zyi]).unwrap()[0];
    net.mark_output(y).unwrap();

    let layers: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
    let view = SubgraphView::new(&net, layers.clone());
    let views = CpuAccBackend::with_threads(threads).optimize_subgraph(&view);
    assert_eq!(
        views.substitutions.len(),
        1,
        "the chain folds into one layer"
    );
    let sub = &views.substitutions[0];
    assert_eq!(
        sub.replaced.len(),
        layers.len(),
        "every layer of the chain is replaced"
    );
    let rep = &sub.replacement[0];
    assert!(matches!(&rep.op, Op::Custom(op) if op.op_type == "QLinearGemm"));
    let ValueRef::NewConstant(bias_q) = &rep.inputs[2] else {
        panic!("the bias is a new constant");
    };
    let desc = LayerDesc {
        name: rep.name.clone(),
        op: rep.op.clone(),
        inputs: vec![x.info().clone(), wq.info().clone(), bias_q.info().clone()],
        outputs: vec![net.tensor(y).info.clone()],
        constants: vec![None, Some(Arc::new(wq.clone())), Some(bias_q.clone())],
    };
    let got = run_desc(&desc, &[&x, &wq, bias_q], threads);

    let one = |op: &Op, ins: &[&Tensor]| reference(op, ins).remove(0);
    let xf = one(&dq(1), &[&x, &Tensor::scalar(sx), &zp(c.xt, zx)]);
    let wf = one(&dq(w_axis), &[&wq, &sw, &zw]);
    let bf = one(&dq(0), &[&b, &sb]);
    let mut yf = one(&gemm, &[&xf, &wf, &bf]);
    if let Some(a) = c.act {
        yf = one(&Op::Unary(a), &[&yf]);
    }
    let want = one(&quant, &[&yf, &Tensor::scalar(sy), &zp(c.xt, zy)]);
    let v = |b: u8| {
        if c.xt == DataType::I8 {
            i32::from(b as i8)
        } else {
            i32::from(b)
        }
    };
    let mut off = 0;
    let mut distinct = std::collections::BTreeSet::new();
    for (i, (&g, &wv)) in got[0].bytes().iter().zip(want.bytes()).enumerate() {
        let d = (v(g) - v(wv)).abs();
        assert!(
            d <= 1,
            "element {i}: {} vs {} (more than one quantum off)",
            v(g),
            v(wv)
        );
        off += usize::from(d == 1);
        distinct.insert(g);
    }
    assert!(
        distinct.len() >= 5.min(m * n),
        "outputs spread over the range ({} distinct values)",
        distinct.len()
    );
    (off, want.bytes().len(), got[0].bytes().to_vec())
}

#[test]
fn folded_int8_fully_connected_is_within_one_quantum_of_cpu_ref() {
    let relu6 = Some(UnaryOp::Clip { min: 0.0, max: 6.0 });
    let base = Case {
        m: 1,
        k: 64,
        n: 10,
        trans_b: true,
        per_channel: true,
        xt: DataType::I8,
        wt: DataType::I8,
        act: None,
    };
    let cases = [
        base,
        Case {
            m: 1,
            k: 1,
            n: 1,
            ..base
        },
        Case {
            m: 1,
            k: 1280,
            n: 97,
            ..base
        },
        Case {
            m: 5,
            k: 31,
            n: 17,
            trans_b: false,
            xt: DataType::U8,
            ..base
        },
        Case {
            m: 37,
            k: 13,
            n: 33,
            act: Some(UnaryOp::Relu),
            ..base
        },
        Case {
            m: 3,
            k: 200,
            n: 64,
            per_channel: false,
            wt: DataType::U8,
            act: relu6,
            ..base
        },
        Case {
            m: 70,
            k: 7,
            n: 5,
            trans_b: false,
            xt: DataType::U8,
            wt: DataType::U8,
            ..base
        },
        // u8 rows the byte GEMM (where the tier has it) reads in place: K a multiple of 4,
        // one row and many; then K = 30 (the last row copied).
        Case {
            m: 1,
            k: 128,
            n: 70,
            xt: DataType::U8,
            ..base
        },
        Case {
            m: 41,
            k: 96,
            n: 33,
            xt: DataType::U8,
            act: relu6,
            ..base
        },
        Case {
            m: 13,
            k: 30,
            n: 16,
            xt: DataType::U8,
            ..base
        },
    ];
    let (mut off, mut total) = (0, 0);
    for (i, c) in cases.iter().enumerate() {
        // Three threads too: the rows or the output channels shared unevenly.
        let mut first: Option<Vec<u8>> = None;
        for threads in [1, 2, 3] {
            let (o, t, bytes) = run_case(*c, 300 + i as u64, threads);
            println!("case {i}, {threads} threads: {o} of {t} elements one quantum off");
            off += o;
            total += t;
            match &first {
                None => first = Some(bytes),
                Some(one) => assert_eq!(&bytes, one, "case {i}: {threads} threads differ from one"),
            }
        }
    }
    println!("{off} of {total} elements one quantum off CpuRef's f32 chain");
}
