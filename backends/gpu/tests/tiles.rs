//! Every layout of GpuAcc's products and convolutions against CpuRef: the backend option
//! `tiles=direct|16|64|splitk` forces one, so each path (16×16 tiles, 64×64 register-blocked
//! tiles, split-K's partial sums and reduction, the direct convolution) runs the same odd
//! shapes (size 1, primes, one past a tile, K not a multiple of a slice), with weights as
//! constants and as run-time inputs; then fused epilogues through split-K's reduction, and
//! the dispatch count showing which path ran.
//!
//! Needs a Vulkan adapter (a software one is accepted); without one the tests print why and
//! pass, unless `BACKPLANE_REQUIRE_GPU_ADAPTER=1` (CI) makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane::backend_api::CapabilityValue;
use backplane::core::ops::{BinaryOp, ConvDesc, GemmDesc, UnaryOp, Window};
use backplane::core::{DataType, Op};
use backplane::{BackendId, Network, OptimizerOptions, Runtime, Tensor};
use backplane_backend_tests::sweeps::{Rng, SweepCase};

mod common;

use common::{case, expect_pass, gpu, runtime_with, t};

/// The forced layouts, and the automatic choice (which splits K in three for the MatMul
/// with K = 1000 and in two for the convolution with K = 576 below).
const LAYOUTS: [&str; 5] = ["direct", "16", "64", "splitk", "auto"];

fn conv_case(r: &mut Rng, x: &[usize], w: &[usize], group: usize, pads: Vec<usize>) -> SweepCase {
    let desc = ConvDesc {
        window: Window {
            kernel: w[2..].to_vec(),
            strides: vec![],
            dilations: vec![],
            pads,
            ..Window::default()
        },
        group,
    };
    let inputs = vec![(t(r, x), false), (t(r, w), true), (t(r, &[w[0]]), true)];
    case(Op::Conv(desc), inputs)
}

/// The products and convolutions every layout runs.
fn cases(r: &mut Rng) -> Vec<SweepCase> {
    let mut out = Vec::new();
    let matmuls: [(&[usize], &[usize]); 7] = [
        (&[1, 1], &[1, 1]),
        // Sequence-first, one row per batch: the batches become the rows of one product.
        (&[13, 1, 24], &[24, 19]),
        (&[5, 1000], &[1000, 7]),
        (&[3, 37], &[37, 5]),
        (&[2, 1, 5, 7], &[3, 7, 2]),
        (&[65, 41], &[41, 67]),
        (&[7], &[7, 3]),
    ];
    for (k, (a, b)) in matmuls.iter().enumerate() {
        out.push(case(
            Op::MatMul,
            vec![(t(r, a), false), (t(r, b), k % 2 == 0)],
        ));
    }
    for (ta, tb, m, k, n, c) in [
        (false, true, 3, 17, 5, Some(vec![5])),
        (true, false, 17, 53, 19, Some(vec![17, 19])),
        (false, false, 1, 1, 1, None),
    ] {
        let a = if ta { vec![k, m] } else { vec![m, k] };
        let b = if tb { vec![n, k] } else { vec![k, n] };
        let mut inputs = vec![(t(r, &a), false), (t(r, &b), true)];
        if let Some(c) = c {
            inputs.push((t(r, &c), true));
        }
        let desc = GemmDesc {
            alpha: 0.5,
            beta: 2.0,
            trans_a: ta,
            trans_b: tb,
        };
        out.push(case(Op::Gemm(desc), inputs));
    }
    out.push(conv_case(r, &[1, 1, 1, 1], &[1, 1, 1, 1], 1, vec![]));
    out.push(conv_case(
        r,
        &[2, 3, 7, 5],
        &[11, 3, 3, 3],
        1,
        vec![1, 1, 1, 1],
    ));
    out.push(conv_case(
        r,
        &[1, 4, 5, 6],
        &[6, 2, 3, 1],
        2,
        vec![1, 0, 0, 0],
    ));
    out.push(conv_case(
        r,
        &[1, 5, 4, 4],
        &[5, 1, 3, 3],
        5,
        vec![1, 1, 1, 1],
    ));
    out.push(conv_case(r, &[1, 3, 13], &[67, 3, 2], 1, vec![]));
    out.push(conv_case(
        r,
        &[1, 64, 3, 4],
        &[8, 64, 3, 3],
        1,
        vec![1, 1, 1, 1],
    ));
    out
}

#[test]
fn every_layout_matches_cpu_ref() {
    for tiles in LAYOUTS {
        let Some(rt) = runtime_with(&[("tiles", tiles)]) else {
            return;
        };
        println!("tiles={tiles}");
        let mut r = Rng::new(41);
        expect_pass(&rt, cases(&mut r));
    }
}

fn counter(rt: &Runtime, name: &str) -> i64 {
    let caps = rt.backend(&gpu()).unwrap().capabilities();
    match caps.get(name) {
        Some(CapabilityValue::Int(n)) => *n,
        other => panic!("GpuAcc has no counter {name}: {other:?}"),
    }
}

/// x[5,37] -> MatMul(const [37,11]) -> Add(const bias [11]) -> Relu, and
/// y[1,3,6,7] -> Conv(const [9,3,3,3], bias, pads 1) -> Relu: both fuse into one GPU layer
/// each, whose epilogue (bias, activation) split-K applies in its reduction.
fn fused_net() -> (Network, Vec<(String, Tensor)>) {
    let mut r = Rng::new(43);
    let x = r.tensor(DataType::F32, &[5, 37], -2.0, 2.0).unwrap();
    let y = r.tensor(DataType::F32, &[1, 3, 6, 7], -2.0, 2.0).unwrap();
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let yi = net.add_input("y", y.info().clone()).unwrap();
    let w = net
        .add_constant("w", r.tensor(DataType::F32, &[37, 11], -1.0, 1.0).unwrap())
        .unwrap();
    let bias = net
        .add_constant("b", r.tensor(DataType::F32, &[11], -1.0, 1.0).unwrap())
        .unwrap();
    let cw = net
        .add_constant(
            "cw",
            r.tensor(DataType::F32, &[9, 3, 3, 3], -1.0, 1.0).unwrap(),
        )
        .unwrap();
    let cb = net
        .add_constant("cb", r.tensor(DataType::F32, &[9], -1.0, 1.0).unwrap())
        .unwrap();
    let m = net.add_layer("matmul", Op::MatMul, &[xi, w]).unwrap()[0];
    let a = net
        .add_layer("add", Op::Binary(BinaryOp::Add), &[m, bias])
        .unwrap()[0];
    let relu = net
        .add_layer("relu", Op::Unary(UnaryOp::Relu), &[a])
        .unwrap()[0];
    let conv = Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![3, 3],
            pads: vec![1, 1, 1, 1],
            ..Window::default()
        },
        group: 1,
    });
    let c = net.add_layer("conv", conv, &[yi, cw, cb]).unwrap()[0];
    let crelu = net
        .add_layer("crelu", Op::Unary(UnaryOp::Relu), &[c])
        .unwrap()[0];
    net.mark_output(relu).unwrap();
    net.mark_output(crelu).unwrap();
    (net, vec![("x".into(), x), ("y".into(), y)])
}

/// Run `net` on `backend`; the outputs and the GpuAcc dispatches of one execution.
fn run(
    rt: &Runtime,
    backend: &str,
    net: &Network,
    feeds: &[(String, Tensor)],
) -> (Vec<Tensor>, i64) {
    let pref = vec![BackendId::new(backend).unwrap()];
    let optimized = rt.optimize(net, &OptimizerOptions::new(pref)).unwrap();
    let id = rt.load_network(optimized).unwrap();
    let inputs: Vec<(&str, &Tensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let before = counter(rt, "Dispatches");
    let out = rt.execute(id, &inputs).unwrap();
    let dispatches = counter(rt, "Dispatches") - before;
    rt.unload_network(id).unwrap();
    (out.into_iter().map(|(_, t)| t).collect(), dispatches)
}

#[test]
fn split_k_applies_fused_epilogues_in_its_reduction() {
    let (net, feeds) = fused_net();
    let mut dispatches = Vec::new();
    for tiles in ["16", "splitk"] {
        let Some(rt) = runtime_with(&[("tiles", tiles)]) else {
            return;
        };
        let (want, _) = run(&rt, "CpuRef", &net, &feeds);
        let (got, n) = run(&rt, "GpuAcc", &net, &feeds);
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            backplane::compare::compare(g, w, 1e-4, 1e-5)
                .unwrap_or_else(|m| panic!("tiles={tiles}: {}", m.message));
        }
        dispatches.push(n);
    }
    // Two fused layers: one dispatch each in 16x16 tiles, two each (partials, reduction)
    // when K is split.
    assert_eq!(dispatches, vec![2, 4]);
}
