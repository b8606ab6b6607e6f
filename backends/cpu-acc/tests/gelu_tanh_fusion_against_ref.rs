//! GPT-2's tanh GELU as exporters write it, `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`
//! in eight elementwise layers, becomes one `Gelu(approximate = tanh)` layer on CpuAcc, whose
//! output matches CpuRef running the eight layers: odd and large shapes, either operand order
//! of the commutative layers, one and two threads. Left alone when an intermediate has
//! another reader, or when the exponent is not 3.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, SubgraphView};
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{LayerId, Network, Op, Tensor, TensorId};
use backplane_cpu_acc::CpuAccBackend;
use support::{acc, close, reference, Rng};

fn scalar(v: f32) -> Tensor {
    Tensor::from_vec(vec![], vec![v]).unwrap()
}

/// The subgraph on `x`; `swap` puts the scalars first; `exponent` is Pow's. Returns the
/// network (with the tanh's output also an output when `leak`) and the reference result.
fn gelu_net(x: &Tensor, swap: bool, exponent: f32, leak: bool) -> (Network, Tensor) {
    let mut net = Network::new();
    let layer = |net: &mut Network, name: &str, op: Op, a: TensorId, b: Option<TensorId>| {
        let ins: Vec<TensorId> = match (b, swap) {
            (None, _) => vec![a],
            (Some(b), false) => vec![a, b],
            (Some(b), true) => vec![b, a],
        };
        net.add_layer(name, op, &ins).unwrap()[0]
    };
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let k = |net: &mut Network, n: &str, v: f32| net.add_constant(n, scalar(v)).unwrap();
    let (c_half, c_3, c_cub, c_s, c_1) = (
        k(&mut net, "half", 0.5),
        k(&mut net, "three", exponent),
        k(&mut net, "cub", 0.044715),
        k(&mut net, "s", 0.797_884_6),
        k(&mut net, "one", 1.0),
    );
    let mul = Op::Binary(BinaryOp::Mul);
    let add = Op::Binary(BinaryOp::Add);
    let half = layer(&mut net, "mul", mul.clone(), xi, Some(c_half));
    let pow = net
        .add_layer("pow", Op::Binary(BinaryOp::Pow), &[xi, c_3])
        .unwrap()[0];
    let cub = layer(&mut net, "mul_1", mul.clone(), pow, Some(c_cub));
    let sum = layer(&mut net, "add", add.clone(), xi, Some(cub));
    let sc = layer(&mut net, "mul_2", mul.clone(), sum, Some(c_s));
    let th = layer(&mut net, "tanh", Op::Unary(UnaryOp::Tanh), sc, None);
    let plus = layer(&mut net, "add_1", add.clone(), th, Some(c_1));
    let y = layer(&mut net, "mul_3", mul.clone(), half, Some(plus));
    net.mark_output(y).unwrap();
    if leak {
        net.mark_output(th).unwrap();
    }
    // The reference: CpuRef layer by layer.
    let r = |op: &Op, a: &Tensor, b: Option<&Tensor>| match b {
        None => reference(op, &[a]).remove(0),
        Some(b) => reference(op, &[a, b]).remove(0),
    };
    let half = r(&mul, x, Some(&scalar(0.5)));
    let pow = r(&Op::Binary(BinaryOp::Pow), x, Some(&scalar(exponent)));
    let cub = r(&mul, &pow, Some(&scalar(0.044715)));
    let sum = r(&add, x, Some(&cub));
    let sc = r(&mul, &sum, Some(&scalar(0.797_884_6)));
    let th = r(&Op::Unary(UnaryOp::Tanh), &sc, None);
    let plus = r(&add, &th, Some(&scalar(1.0)));
    (net, r(&mul, &half, Some(&plus)))
}

fn substitutions(net: &Network) -> Vec<Op> {
    let all = (0..net.layers().len()).map(LayerId).collect();
    CpuAccBackend::new()
        .optimize_subgraph(&SubgraphView::new(net, all))
        .substitutions
        .iter()
        .flat_map(|s| s.replacement.iter().map(|r| r.op.clone()))
        .collect()
}

#[test]
fn the_tanh_gelu_subgraph_becomes_one_layer_matching_ref() {
    let mut r = Rng(2);
    for (i, dims) in [
        vec![1],
        vec![7],
        vec![2, 13, 97],
        vec![1, 64, 3072],
        vec![3, 1, 1, 257],
    ]
    .into_iter()
    .enumerate()
    {
        let x = r.tensor(&dims, 4.0);
        let swap = i % 2 == 1;
        let (net, want) = gelu_net(&x, swap, 3.0, false);
        let gelu = Op::Unary(UnaryOp::Gelu {
            tanh_approximation: true,
        });
        assert_eq!(
            substitutions(&net),
            std::slice::from_ref(&gelu),
            "{dims:?} swap={swap}"
        );
        for threads in [1, 2] {
            let got = acc(&gelu, &[&x], &[false], threads).remove(0);
            close(
                &format!("{dims:?} threads={threads}"),
                &got,
                &want,
                1e-5,
                1e-5,
            );
        }
    }
}

#[test]
fn a_read_intermediate_or_another_exponent_is_left_alone() {
    let x = Rng(3).tensor(&[5, 11], 2.0);
    let (leaky, _) = gelu_net(&x, false, 3.0, true);
    assert!(
        substitutions(&leaky).is_empty(),
        "the tanh output is read outside"
    );
    let (square, _) = gelu_net(&x, false, 2.0, false);
    assert!(substitutions(&square).is_empty(), "x² is not the tanh GELU");
}
