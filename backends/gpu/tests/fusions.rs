//! GpuAcc's fusions of what follows a product, against CpuRef running the unfused layers on
//! the same inputs: a BatchNormalization folded into the Conv before it, the exporters' SiLU
//! subgraph `Mul(t, Sigmoid(t))`, the erf GELU and Clip (ReLU6) as epilogues, a SiLU that
//! must not fuse because its input has another reader, and GPT-2's tanh GELU as one layer.
//!
//! Needs a Vulkan adapter (see tests/common/mod.rs).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::type_complexity
)]

use backplane::core::ops::{BinaryOp, ConvDesc, GemmDesc, UnaryOp, Window};
use backplane::core::{Op, TensorId};
use backplane::{BackendId, Network, Tensor};
use backplane_backend_tests::exec::{run_network, Run};
use backplane_backend_tests::sweeps::Rng;

mod common;

use common::{gpu, runtime, t};

/// What follows the product.
#[derive(Debug, Clone, Copy, PartialEq)]
enum After {
    Nothing,
    Relu6,
    Silu,
    /// A SiLU whose input is also a network output: nothing may fuse into the product.
    SiluShared,
}

fn conv_op(kernel: usize, pad: usize, group: usize) -> Op {
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![kernel, kernel],
            pads: vec![pad; 4],
            ..Window::default()
        },
        group,
    })
}

/// x -> product(x, constants) [-> BatchNormalization] -> `after`, and the tensors it outputs.
fn network(
    r: &mut Rng,
    product: &Op,
    x: &Tensor,
    weights: &[Tensor],
    bn: bool,
    after: After,
) -> Network {
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let mut ids = vec![xi];
    for (k, w) in weights.iter().enumerate() {
        ids.push(net.add_constant(&format!("w{k}"), w.clone()).unwrap());
    }
    let mut y: TensorId = net.add_layer("product", product.clone(), &ids).unwrap()[0];
    if bn {
        let m = weights[0].shape().dims()[0];
        let scale = r
            .tensor(backplane::core::DataType::F32, &[m], 0.5, 2.0)
            .unwrap();
        let bias = t(r, &[m]);
        let mean = t(r, &[m]);
        let var = r
            .tensor(backplane::core::DataType::F32, &[m], 0.1, 3.0)
            .unwrap();
        let mut bn_in = vec![y];
        for (name, v) in [
            ("scale", scale),
            ("bias", bias),
            ("mean", mean),
            ("var", var),
        ] {
            bn_in.push(net.add_constant(name, v).unwrap());
        }
        y = net
            .add_layer("bn", Op::BatchNormalization { epsilon: 1e-5 }, &bn_in)
            .unwrap()[0];
    }
    match after {
        After::Nothing => {}
        After::Relu6 => {
            y = net
                .add_layer(
                    "relu6",
                    Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 }),
                    &[y],
                )
                .unwrap()[0];
        }
        After::Silu | After::SiluShared => {
            if after == After::SiluShared {
                net.mark_output(y).unwrap();
            }
            let s = net
                .add_layer("sigmoid", Op::Unary(UnaryOp::Sigmoid), &[y])
                .unwrap()[0];
            y = net
                .add_layer("mul", Op::Binary(BinaryOp::Mul), &[s, y])
                .unwrap()[0];
        }
    }
    net.mark_output(y).unwrap();
    net
}

#[test]
fn folded_batch_norms_and_silu_epilogues_match_cpu_ref() {
    let Some(rt) = runtime() else { return };
    let cpu_ref = BackendId::new("CpuRef").unwrap();
    let mut r = Rng::new(41);
    // (product, input dims, weight dims, GPU layers expected per `after`.)
    let products: Vec<(Op, Vec<usize>, Vec<Vec<usize>>)> = vec![
        // 3x3 with a bias, 1x1 without, depthwise 3x3 (a prime channel count), one pixel.
        (
            conv_op(3, 1, 1),
            vec![1, 3, 7, 5],
            vec![vec![4, 3, 3, 3], vec![4]],
        ),
        (conv_op(1, 0, 1), vec![1, 5, 4, 4], vec![vec![7, 5, 1, 1]]),
        (
            conv_op(3, 1, 13),
            vec![1, 13, 6, 9],
            vec![vec![13, 1, 3, 3]],
        ),
        (
            conv_op(1, 0, 1),
            vec![1, 17, 1, 1],
            vec![vec![2, 17, 1, 1], vec![2]],
        ),
        (Op::MatMul, vec![2, 3, 7], vec![vec![7, 11]]),
        (
            Op::Gemm(GemmDesc {
                trans_b: true,
                ..GemmDesc::default()
            }),
            vec![3, 17],
            vec![vec![5, 17], vec![5]],
        ),
    ];
    for (product, x_dims, w_dims) in products {
        let is_conv = matches!(product, Op::Conv(_));
        for bn in [false, true] {
            if bn && !is_conv {
                continue;
            }
            for after in [After::Nothing, After::Relu6, After::Silu, After::SiluShared] {
                let x = t(&mut r, &x_dims);
                let weights: Vec<Tensor> = w_dims.iter().map(|d| t(&mut r, d)).collect();
                let mut params = r.clone();
                let net = network(&mut params, &product, &x, &weights, bn, after);
                let feed = vec![("x".to_string(), x.clone())];
                let what = format!("{product:?} bn={bn} {after:?}");
                let want = match run_network(&rt, &net, std::slice::from_ref(&cpu_ref), &feed) {
                    Run::Ran { outputs, .. } => outputs.unwrap(),
                    Run::Refused(why) => panic!("CpuRef refused {what}: {why}"),
                };
                let (layers, got) = match run_network(&rt, &net, &[gpu()], &feed) {
                    Run::Ran { layers, outputs } => (layers, outputs.unwrap()),
                    Run::Refused(why) => panic!("GpuAcc refused {what}: {why}"),
                };
                // Everything fuses into one layer, but for a SiLU whose input is also an
                // output (product+bn, sigmoid, mul: nothing fuses after the product).
                let expected = match after {
                    After::SiluShared => 3,
                    _ => 1,
                };
                assert_eq!(layers, expected, "{what}: GPU layers");
                assert_eq!(got.len(), want.len(), "{what}");
                for ((name, g), (_, w)) in got.iter().zip(&want) {
                    backplane::compare::compare(g, w, 1e-4, 1e-5)
                        .unwrap_or_else(|m| panic!("{what}, output {name}: {}", m.message));
                }
            }
        }
    }
}

/// A scalar f32 constant.
fn scalar(net: &mut Network, name: &str, v: f32) -> TensorId {
    net.add_constant(
        name,
        Tensor::from_vec(Vec::<usize>::new(), vec![v]).unwrap(),
    )
    .unwrap()
}

/// `op(a, b)` added to `net`; answers its output.
fn bin(net: &mut Network, name: &str, op: BinaryOp, a: TensorId, b: TensorId) -> TensorId {
    net.add_layer(name, Op::Binary(op), &[a, b]).unwrap()[0]
}

/// x[2,3,7] -> MatMul(const [7,11]) -> the exporters' erf GELU, `0.5·h·(1 + erf(h/√2))` with
/// the 0.5 applied first or last.
fn erf_gelu_net(r: &mut Rng, half_first: bool) -> (Network, Tensor) {
    let x = t(r, &[2, 3, 7]);
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let w = net.add_constant("w", t(r, &[7, 11])).unwrap();
    let h = net.add_layer("matmul", Op::MatMul, &[xi, w]).unwrap()[0];
    let (sqrt2, one, half) = (
        scalar(&mut net, "sqrt2", std::f32::consts::SQRT_2),
        scalar(&mut net, "one", 1.0),
        scalar(&mut net, "half", 0.5),
    );
    let d = bin(&mut net, "div", BinaryOp::Div, h, sqrt2);
    let e = net.add_layer("erf", Op::Unary(UnaryOp::Erf), &[d]).unwrap()[0];
    let p = bin(&mut net, "add", BinaryOp::Add, e, one);
    let y = if half_first {
        let m = bin(&mut net, "mul_half", BinaryOp::Mul, h, half);
        bin(&mut net, "mul", BinaryOp::Mul, m, p)
    } else {
        let m = bin(&mut net, "mul", BinaryOp::Mul, h, p);
        bin(&mut net, "mul_half", BinaryOp::Mul, half, m)
    };
    net.mark_output(y).unwrap();
    (net, x)
}

/// x[3,5,64] -> Relu -> GPT-2's tanh GELU (eight layers).
fn tanh_gelu_net(r: &mut Rng) -> (Network, Tensor) {
    let x = t(r, &[3, 5, 64]);
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let v = net
        .add_layer("relu", Op::Unary(UnaryOp::Relu), &[xi])
        .unwrap()[0];
    let c = |net: &mut Network, name: &str, f: f32| scalar(net, name, f);
    let (half, three, k, s, one) = (
        c(&mut net, "half", 0.5),
        c(&mut net, "three", 3.0),
        c(&mut net, "k", 0.044715),
        c(&mut net, "s", 0.797_884_6),
        c(&mut net, "one", 1.0),
    );
    let m = bin(&mut net, "half_x", BinaryOp::Mul, v, half);
    let p = bin(&mut net, "pow", BinaryOp::Pow, v, three);
    let q = bin(&mut net, "cubic", BinaryOp::Mul, k, p);
    let a = bin(&mut net, "sum", BinaryOp::Add, v, q);
    let b = bin(&mut net, "scale", BinaryOp::Mul, a, s);
    let th = net
        .add_layer("tanh", Op::Unary(UnaryOp::Tanh), &[b])
        .unwrap()[0];
    let pl = bin(&mut net, "plus", BinaryOp::Add, one, th);
    let y = bin(&mut net, "last", BinaryOp::Mul, m, pl);
    net.mark_output(y).unwrap();
    (net, x)
}

#[test]
fn gelu_subgraphs_fuse_and_match_cpu_ref() {
    let Some(rt) = runtime() else { return };
    let cpu_ref = BackendId::new("CpuRef").unwrap();
    let mut r = Rng::new(43);
    // (network, GPU layers expected): the erf GELU in the MatMul's epilogue (one layer), the
    // tanh GELU as one Gelu layer after the Relu (two).
    let cases = vec![
        ("erf, half first", erf_gelu_net(&mut r, true), 1),
        ("erf, half last", erf_gelu_net(&mut r, false), 1),
        ("tanh", tanh_gelu_net(&mut r), 2),
    ];
    for (what, (net, x), expected) in cases {
        let feed = vec![("x".to_string(), x)];
        let want = match run_network(&rt, &net, std::slice::from_ref(&cpu_ref), &feed) {
            Run::Ran { outputs, .. } => outputs.unwrap(),
            Run::Refused(why) => panic!("CpuRef refused {what}: {why}"),
        };
        let (layers, got) = match run_network(&rt, &net, &[gpu()], &feed) {
            Run::Ran { layers, outputs } => (layers, outputs.unwrap()),
            Run::Refused(why) => panic!("GpuAcc refused {what}: {why}"),
        };
        assert_eq!(layers, expected, "{what}: GPU layers");
        // The fused GELU is the same function computed in fewer roundings.
        backplane::compare::compare(&got[0].1, &want[0].1, 1e-4, 1e-5)
            .unwrap_or_else(|m| panic!("{what}: {}", m.message));
    }
}

/// An elementwise binary op followed by an activation (a residual Add and its Relu) runs as
/// one layer, broadcasting included; not when the binary's result is also read elsewhere.
#[test]
fn binary_ops_with_an_activation_fuse_and_match_cpu_ref() {
    let Some(rt) = runtime() else { return };
    let cpu_ref = BackendId::new("CpuRef").unwrap();
    let mut r = Rng::new(47);
    let cases: Vec<(BinaryOp, Vec<usize>, Vec<usize>, Op, bool)> = vec![
        (
            BinaryOp::Add,
            vec![2, 3, 5, 7],
            vec![2, 3, 5, 7],
            Op::Unary(UnaryOp::Relu),
            false,
        ),
        (
            BinaryOp::Add,
            vec![1, 13, 3, 3],
            vec![1, 13, 1, 1],
            Op::Unary(UnaryOp::Relu),
            false,
        ),
        (
            BinaryOp::Mul,
            vec![4, 1],
            vec![1, 17],
            Op::Unary(UnaryOp::Sigmoid),
            false,
        ),
        (
            BinaryOp::Sub,
            vec![1],
            vec![1],
            Op::Unary(UnaryOp::Tanh),
            false,
        ),
        (
            BinaryOp::Add,
            vec![3, 5],
            vec![3, 5],
            Op::Unary(UnaryOp::Relu),
            true,
        ),
    ];
    for (op, a_dims, b_dims, act, shared) in cases {
        let (a, b) = (t(&mut r, &a_dims), t(&mut r, &b_dims));
        let mut net = Network::new();
        let ai = net.add_input("a", a.info().clone()).unwrap();
        let bi = net.add_input("b", b.info().clone()).unwrap();
        let s = bin(&mut net, "binary", op, ai, bi);
        let y = net.add_layer("act", act.clone(), &[s]).unwrap()[0];
        if shared {
            net.mark_output(s).unwrap();
        }
        net.mark_output(y).unwrap();
        let feed = vec![("a".to_string(), a), ("b".to_string(), b)];
        let what = format!("{op:?} {a_dims:?} {b_dims:?} {act:?} shared={shared}");
        let want = match run_network(&rt, &net, std::slice::from_ref(&cpu_ref), &feed) {
            Run::Ran { outputs, .. } => outputs.unwrap(),
            Run::Refused(why) => panic!("CpuRef refused {what}: {why}"),
        };
        let (layers, got) = match run_network(&rt, &net, &[gpu()], &feed) {
            Run::Ran { layers, outputs } => (layers, outputs.unwrap()),
            Run::Refused(why) => panic!("GpuAcc refused {what}: {why}"),
        };
        assert_eq!(layers, if shared { 2 } else { 1 }, "{what}: GPU layers");
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            backplane::compare::compare(g, w, 1e-4, 1e-5)
                .unwrap_or_else(|m| panic!("{what}, output {name}: {}", m.message));
        }
    }
}
