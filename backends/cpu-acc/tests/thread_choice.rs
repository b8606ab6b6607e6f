//! The per-layer thread choice: a layer loaded with several threads runs its steps shared
//! with the helpers or on the calling thread alone, as its timings say, and computes the same
//! bytes either way, execution after execution, as with one thread.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::Backend;
use backplane_core::{Op, Tensor};
use backplane_cpu_acc::{CpuAccBackend, CpuAccOptions};
use support::{layer_desc, same_conv, Rng};

/// `op` on `inputs` (those marked constant given at load) executed `runs` times by one
/// workload of `backend`: the outputs of every execution.
fn executions(
    backend: &CpuAccBackend,
    op: &Op,
    inputs: &[&Tensor],
    constant: &[bool],
    runs: usize,
) -> Vec<Vec<Tensor>> {
    let desc = layer_desc(op, inputs, constant);
    let factory = backend.create_workload_factory(None).unwrap();
    let workload = factory.create_workload(&desc).unwrap();
    let views: Vec<_> = inputs.iter().map(|t| t.view()).collect();
    (0..runs)
        .map(|_| {
            let mut outs: Vec<Tensor> = desc
                .outputs
                .iter()
                .map(|i| {
                    let mut t = Tensor::zeros(i.clone()).unwrap();
                    t.bytes_mut().fill(0xff);
                    t
                })
                .collect();
            let mut out_views: Vec<_> = outs.iter_mut().map(Tensor::view_mut).collect();
            workload.execute(&views, &mut out_views).unwrap();
            outs
        })
        .collect()
}

/// Over 600 executions (the first probes, which run alone and shared, and the later ones),
/// a convolution and a matrix product at two and three threads give the bytes they give at
/// one thread and with the choice off, every time.
#[test]
fn every_execution_gives_the_bytes_of_one_thread() {
    let mut r = Rng(51);
    let x = r.tensor(&[1, 16, 37, 41], 1.0);
    let w = r.tensor(&[32, 16, 3, 3], 0.3);
    let b = r.tensor(&[32], 0.1);
    let a = r.tensor(&[97, 131], 1.0);
    let bm = r.tensor(&[131, 67], 0.2);
    let matmul = Op::MatMul;
    let cases: [(&str, Op, Vec<&Tensor>, Vec<bool>); 2] = [
        (
            "conv",
            same_conv(3, 1),
            vec![&x, &w, &b],
            vec![false, true, true],
        ),
        ("matmul", matmul, vec![&a, &bm], vec![false, true]),
    ];
    for (what, op, inputs, constant) in &cases {
        let one = executions(&CpuAccBackend::with_threads(1), op, inputs, constant, 1);
        for threads in [2, 3] {
            let options = |thread_choice| CpuAccOptions {
                threads: Some(threads),
                thread_choice,
                ..CpuAccOptions::default()
            };
            let fixed = executions(
                &CpuAccBackend::with_options(options(false)),
                op,
                inputs,
                constant,
                3,
            );
            let chosen = executions(
                &CpuAccBackend::with_options(options(true)),
                op,
                inputs,
                constant,
                600,
            );
            for (run, outs) in fixed.iter().chain(&chosen).enumerate() {
                assert_eq!(outs.len(), one[0].len());
                for (got, want) in outs.iter().zip(&one[0]) {
                    assert_eq!(
                        got.bytes(),
                        want.bytes(),
                        "{what}, {threads} threads, run {run}"
                    );
                }
            }
        }
    }
}
