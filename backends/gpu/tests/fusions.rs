//! GpuAcc's fusions of what follows a product, against CpuRef running the unfused layers on
//! the same inputs: a BatchNormalization folded into the Conv before it, the exporters' SiLU
//! subgraph `Mul(t, Sigmoid(t))` and Clip (ReLU6) as epilogues, and a SiLU that must not fuse
//! because its input has another reader.
//!
//! Needs a Vulkan adapter (see tests/common/mod.rs).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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
