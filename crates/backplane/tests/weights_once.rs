//! Weights once in memory: a constant that every reading workload copied at load (CpuAcc's
//! packed GEMM and convolution weights) is released by the loaded network, so only the packed
//! copy stays; a constant some workload still reads at execution (a Gather's table, a layer on
//! CpuRef) is kept. Checked through the constants' reference counts (the test holds one
//! reference to each), and the results against CpuRef on the same inputs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane::core::ops::{AutoPad, BinaryOp, ConvDesc, Window};
use backplane::core::Op;
use backplane::{BackendId, DataType, Network, OptimizerOptions, Runtime, Tensor, TensorInfo};
use std::sync::Arc;

/// Deterministic values in [-1, 1).
fn random(dims: &[usize], seed: u64) -> Tensor {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(dims.to_vec(), v).unwrap()
}

fn options(backends: &[&str]) -> OptimizerOptions {
    OptimizerOptions::new(
        backends
            .iter()
            .map(|b| BackendId::new(*b).unwrap())
            .collect(),
    )
}

fn conv3x3() -> Op {
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![3, 3],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![1; 4],
            auto_pad: AutoPad::NotSet,
        },
        group: 1,
    })
}

/// The constants of the test network, each also held by the test.
struct Weights {
    /// MatMul's B: packed by CpuAcc, read by nothing else.
    matmul: Arc<Tensor>,
    /// Gemm's B: packed.
    gemm: Arc<Tensor>,
    /// The convolution's weights and bias: prepared at load.
    conv: Arc<Tensor>,
    conv_bias: Arc<Tensor>,
    /// A Gather's table: read at execution.
    table: Arc<Tensor>,
    /// Read by a packing MatMul and by an Add on CpuRef: kept for the Add.
    shared: Arc<Tensor>,
}

/// x [rows, k] -> MatMul(W [k, n]) -> y1; x -> Gemm(transB, G [n, k]) -> y2;
/// image [1, c, h, w] -> Conv 3x3 (bias) -> y3; ids -> Gather(table) -> y4;
/// x -> MatMul(S [k, k]) and S + S (on CpuRef) -> y5, y6.
fn network(rows: usize, k: usize, n: usize, c: usize) -> (Network, Weights) {
    let w = Weights {
        matmul: Arc::new(random(&[k, n], 1)),
        gemm: Arc::new(random(&[n, k], 2)),
        conv: Arc::new(random(&[5, c, 3, 3], 3)),
        conv_bias: Arc::new(random(&[5], 4)),
        table: Arc::new(random(&[11, 7], 5)),
        shared: Arc::new(random(&[k, k], 6)),
    };
    let mut net = Network::new();
    let x = net
        .add_input("x", TensorInfo::new(DataType::F32, vec![rows, k]))
        .unwrap();
    let image = net
        .add_input("image", TensorInfo::new(DataType::F32, vec![1, c, 6, 5]))
        .unwrap();
    let ids = Tensor::from_vec(vec![3], vec![4i64, 0, 10]).unwrap();
    let ids = net.add_constant("ids", ids).unwrap();
    let wm = net
        .add_shared_constant("w_matmul", w.matmul.clone())
        .unwrap();
    let wg = net.add_shared_constant("w_gemm", w.gemm.clone()).unwrap();
    let wc = net.add_shared_constant("w_conv", w.conv.clone()).unwrap();
    let bc = net
        .add_shared_constant("b_conv", w.conv_bias.clone())
        .unwrap();
    let table = net.add_shared_constant("table", w.table.clone()).unwrap();
    let shared = net.add_shared_constant("shared", w.shared.clone()).unwrap();
    let gemm = Op::Gemm(backplane::core::ops::GemmDesc {
        alpha: 1.0,
        beta: 1.0,
        trans_a: false,
        trans_b: true,
    });
    let outs = [
        net.add_layer("mm", Op::MatMul, &[x, wm]).unwrap()[0],
        net.add_layer("gemm", gemm, &[x, wg]).unwrap()[0],
        net.add_layer("conv", conv3x3(), &[image, wc, bc]).unwrap()[0],
        net.add_layer("gather", Op::Gather { axis: 0 }, &[table, ids])
            .unwrap()[0],
        net.add_layer("mm_shared", Op::MatMul, &[x, shared])
            .unwrap()[0],
        net.add_layer("add_shared", Op::Binary(BinaryOp::Add), &[shared, shared])
            .unwrap()[0],
    ];
    for o in outs {
        net.mark_output(o).unwrap();
    }
    (net, w)
}

fn execute(rt: &Runtime, id: backplane::NetworkId, feeds: &[(&str, &Tensor)]) -> Vec<Tensor> {
    rt.execute(id, feeds)
        .unwrap()
        .into_iter()
        .map(|(_, t)| t)
        .collect()
}

#[test]
fn packed_weights_are_released_after_load_and_the_rest_kept() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    for (rows, k, n, c) in [(5, 37, 23, 3), (1, 1, 1, 1), (13, 64, 97, 8)] {
        let (net, w) = network(rows, k, n, c);
        let mut opt = options(&["CpuAcc", "CpuRef"]);
        opt.layer_backends
            .push(("add_shared".into(), BackendId::new("CpuRef").unwrap()));
        let optimized = rt.optimize(&net, &opt).unwrap();
        let on_cpuacc = optimized
            .network()
            .layers()
            .iter()
            .zip(optimized.assignment())
            .filter(|(_, b)| b.as_str() == "CpuAcc")
            .map(|(l, _)| l.name.as_str())
            .collect::<Vec<_>>();
        for layer in ["mm", "gemm", "conv", "gather", "mm_shared"] {
            assert!(
                on_cpuacc.iter().any(|l| l.contains(layer)),
                "{layer} runs on CpuAcc: {on_cpuacc:?}"
            );
        }
        drop(net);
        // Before the load the optimized network holds every weight (the test's reference is
        // the other), so a count of 1 after the load means the load let go of it.
        for (name, t) in [("matmul", &w.matmul), ("gemm", &w.gemm), ("conv", &w.conv)] {
            assert!(Arc::strong_count(t) >= 2, "{name} is held before the load");
        }
        let id = rt.load_network(optimized).unwrap();
        assert_eq!(
            Arc::strong_count(&w.matmul),
            1,
            "MatMul's packed B released"
        );
        assert_eq!(Arc::strong_count(&w.gemm), 1, "Gemm's packed B released");
        assert_eq!(Arc::strong_count(&w.conv), 1, "the conv weights released");
        assert_eq!(Arc::strong_count(&w.conv_bias), 1, "the conv bias released");
        assert!(
            Arc::strong_count(&w.table) >= 2,
            "the Gather table is read at execution"
        );
        assert!(
            Arc::strong_count(&w.shared) >= 2,
            "CpuRef's Add reads the shared weights"
        );

        // The released weights are not needed: results match CpuRef's, twice.
        let (reference, _) = network(rows, k, n, c);
        let rid = rt
            .load_network(rt.optimize(&reference, &options(&["CpuRef"])).unwrap())
            .unwrap();
        let x = random(&[rows, k], 7);
        let image = random(&[1, c, 6, 5], 8);
        let feeds = [("x", &x), ("image", &image)];
        let want = execute(&rt, rid, &feeds);
        for round in 0..2 {
            let got = execute(&rt, id, &feeds);
            assert_eq!(got.len(), want.len());
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.shape(), e.shape(), "output {i}");
                for (j, (a, b)) in g.to_f64_vec().iter().zip(e.to_f64_vec()).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-4 + 1e-4 * b.abs(),
                        "{rows}x{k}x{n}, round {round}, output {i}[{j}]: {a} vs {b}"
                    );
                }
            }
        }
        rt.unload_network(id).unwrap();
        assert_eq!(
            Arc::strong_count(&w.table),
            1,
            "unloading lets go of the rest"
        );
    }
}

/// A weight that is also a network output stays: the output is copied from it.
#[test]
fn a_packed_weight_that_is_an_output_is_kept() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let w = Arc::new(random(&[4, 3], 1));
    let mut net = Network::new();
    let x = net
        .add_input("x", TensorInfo::new(DataType::F32, vec![2, 4]))
        .unwrap();
    let wt = net.add_shared_constant("w", w.clone()).unwrap();
    let y = net.add_layer("mm", Op::MatMul, &[x, wt]).unwrap()[0];
    net.mark_output(y).unwrap();
    net.mark_output(wt).unwrap();
    let id = rt
        .load_network(rt.optimize(&net, &options(&["CpuAcc", "CpuRef"])).unwrap())
        .unwrap();
    drop(net);
    assert!(Arc::strong_count(&w) >= 2);
    let out = execute(&rt, id, &[("x", &random(&[2, 4], 2))]);
    assert_eq!(out[1].to_f64_vec(), w.to_f64_vec());
}
