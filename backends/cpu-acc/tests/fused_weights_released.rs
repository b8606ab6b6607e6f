//! Weights once in memory: a fused MatMul + bias (+ activation) layer packs its weight and
//! copies its bias at load, so it says it does not read them at execution
//! (`Workload::reads_constant_input`), and the runtime releases them. Checked by running the
//! workload with those inputs passed as the runtime passes released constants (no bytes),
//! against CpuRef running the unfused layers: odd shapes, one and two threads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, LayerDesc, SubgraphView, ValueRef};
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{LayerId, Network, Op, Tensor, TensorView};
use backplane_cpu_acc::CpuAccBackend;
use support::{close, reference, Rng};

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

        let all = (0..net.layers().len()).map(LayerId).collect();
        let backend = CpuAccBackend::new();
        let views = backend.optimize_subgraph(&SubgraphView::new(&net, all));
        assert_eq!(views.substitutions.len(), 1, "one substitution");
        let rep = &views.substitutions[0].replacement[0];
        assert_eq!(rep.inputs.len(), 3, "x, the weight and the bias");
        let mut inputs = Vec::new();
        let mut constants = Vec::new();
        for v in &rep.inputs {
            let k = match v {
                ValueRef::Existing(t) => net.tensor(*t).constant().cloned(),
                ValueRef::NewConstant(k) => Some(k.clone()),
                ValueRef::Produced { .. } => panic!("a single-layer replacement"),
            };
            inputs.push(k.as_ref().map_or_else(|| x.clone(), |k| (**k).clone()));
            constants.push(k);
        }
        let desc = LayerDesc {
            name: rep.name.clone(),
            op: rep.op.clone(),
            inputs: inputs.iter().map(|t| t.info().clone()).collect(),
            outputs: vec![want.info().clone()],
            constants,
        };
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
