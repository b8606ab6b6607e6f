//! Weights once in memory: a fused MatMul + bias (+ activation) layer packs its weight and
//! copies its bias at load, so it says it does not read them at execution
//! (`Workload::reads_constant_input`), and the runtime releases them. Checked by running the
//! workload with those inputs passed as the runtime passes released constants (no bytes),
//! against CpuRef running the unfused layers: odd shapes, one and two threads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::Backend;
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{Network, Op, Tensor, TensorView};
use backplane_cpu_acc::CpuAccBackend;
use support::{close, reference, sole_replacement, Rng};

#[test]
fn a_fused_matmul_reads_neither_weight_nor_bias_at_execution() {
    let mut r = Rng(27);
    // (batch, rows, depth, columns, relu)
    for (batch, m, k, n, relu) in [
        (1, 1, 1, 1, false),
        (1, 5, 37, 23, true),
        (2, 13, 64, 97, false),
        (1, 64, 131, 67, true),
        (1, 1, 768, 211, false),
    ] {
        let x = r.tensor(&[batch, m, k], 1.0);
        let w = r.tensor(&[k, n], 0.5);
        let b = r.tensor(&[n], 1.0);
        let mut net = Network::new();
        let xi = net.add_input("x", x.info().clone()).unwrap();
        let wi = net.add_constant("w", w.clone()).unwrap();
        let bi = net.add_constant("b", b.clone()).unwrap();
        let p = net.add_layer("mm", Op::MatMul, &[xi, wi]).unwrap()[0];
        let mut y = net
            .add_layer("add", Op::Binary(BinaryOp::Add), &[p, bi])
            .unwrap()[0];
        let mut want = reference(&Op::MatMul, &[&x, &w]).remove(0);
        want = reference(&Op::Binary(BinaryOp::Add), &[&want, &b]).remove(0);
        if relu {
            y = net
                .add_layer("relu", Op::Unary(UnaryOp::Relu), &[y])
                .unwrap()[0];
            want = reference(&Op::Unary(UnaryOp::Relu), &[&want]).remove(0);
        }
        net.mark_output(y).unwrap();

        let (desc, inputs) = sole_replacement(&CpuAccBackend::new(), &net, &[(xi, &x)]);
        assert_eq!(desc.inputs.len(), 3, "x, the weight and the bias");
        for threads in [1, 2] {
            let what = format!("{batch}x{m}x{k}x{n} relu={relu} threads={threads}");
            let factory = CpuAccBackend::with_threads(threads)
                .create_workload_factory(None)
                .unwrap();
            let workload = factory.create_workload(&desc).unwrap();
            assert!(workload.reads_constant_input(0), "{what}: x is read");
            assert!(
                !workload.reads_constant_input(1),
                "{what}: the weight is packed"
            );
            assert!(
                !workload.reads_constant_input(2),
                "{what}: the bias is copied"
            );
            // The weight and the bias as the runtime passes released constants: no bytes.
            let views: Vec<TensorView<'_>> = inputs
                .iter()
                .enumerate()
                .map(|(i, t)| match i {
                    0 => t.view(),
                    _ => TensorView {
                        info: t.info(),
                        data: &[],
                    },
                })
                .collect();
            let mut out = Tensor::zeros(want.info().clone()).unwrap();
            out.bytes_mut().fill(0xff);
            workload
                .execute(&views, &mut [out.view_mut()])
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            close(&what, &out, &want, 1e-4, 1e-4);
        }
    }
}
