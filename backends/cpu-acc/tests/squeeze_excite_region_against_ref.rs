//! Squeeze-excite blocks inside a channels-last region (`crate::layout`): an expansion, a
//! depthwise convolution, the pool, the two 1×1 convolutions and the gate's `Mul` (either
//! operand order), then a projection left alone by fusion, all one region with a transpose
//! only where the block enters and leaves. The region's layers, run one after the other on
//! CpuAcc, against CpuRef running the original layers: odd channel counts (1, primes),
//! planes from 1×2 to 112×112 (expansion pairs), one to three threads. Each block also in
//! the form the TFLite importer writes (MobileNetV3's): the pool a `ReduceMean` over both
//! spatial axes, the gate `Clip(0, 6)` then `Mul` by the scalar 1/6 (fused as a hard sigmoid).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{BinaryOp, PoolKind, ReduceDesc, ReduceKind, UnaryOp};
use backplane_core::{LayerId, Network, Op, Tensor, TensorId};
use std::collections::HashMap;
use support::{close, run_acc, run_reference, same_conv, Rng};

/// The block's shape: input channels, expansion, squeeze, output channels, plane.
#[derive(Debug, Clone, Copy)]
struct Block {
    c: usize,
    e: usize,
    s: usize,
    o: usize,
    h: usize,
    w: usize,
    gate_first: bool,
    /// TFLite's form: ReduceMean for the pool, `Clip(0, 6) → Mul(1/6)` for the gate.
    tflite: bool,
}

/// `x → 1×1 conv + ReLU → depthwise 3×3 + ReLU → [pool → 1×1 + ReLU → 1×1 + Sigmoid] → Mul →
/// 1×1 conv (nothing after it)`, returning the network, its input and the Mul layer.
fn block(b: Block, rng: &mut Rng) -> (Network, TensorId, LayerId) {
    let mut net = Network::new();
    let x = net
        .add_input("x", rng.tensor(&[1, b.c, b.h, b.w], 1.0).info().clone())
        .unwrap();
    let layer = |net: &mut Network, name: &str, op: Op, inputs: &[TensorId]| {
        net.add_layer(name, op, inputs).unwrap()[0]
    };
    let mut weights = |net: &mut Network, name: &str, dims: &[usize]| {
        let w = net.add_constant(name, rng.tensor(dims, 0.5)).unwrap();
        let bias = net.add_constant(&format!("{name}_b"), rng.tensor(&dims[..1], 0.5));
        (w, bias.unwrap())
    };
    let (w1, b1) = weights(&mut net, "w_expand", &[b.e, b.c, 1, 1]);
    let (w2, b2) = weights(&mut net, "w_dw", &[b.e, 1, 3, 3]);
    let (w3, b3) = weights(&mut net, "w_fc1", &[b.s, b.e, 1, 1]);
    let (w4, b4) = weights(&mut net, "w_fc2", &[b.e, b.s, 1, 1]);
    let (w5, b5) = weights(&mut net, "w_project", &[b.o, b.e, 1, 1]);
    let relu = Op::Unary(UnaryOp::Relu);
    let t = layer(&mut net, "expand", same_conv(1, 1), &[x, w1, b1]);
    let t = layer(&mut net, "expand_relu", relu.clone(), &[t]);
    let t = layer(&mut net, "dw", same_conv(3, b.e), &[t, w2, b2]);
    let d = layer(&mut net, "dw_relu", relu.clone(), &[t]);
    let pool = if b.tflite {
        Op::Reduce(ReduceDesc {
            kind: ReduceKind::Mean,
            axes: vec![2, 3],
            keepdims: true,
            noop_with_empty_axes: true,
        })
    } else {
        Op::GlobalPool(PoolKind::Average)
    };
    let p = layer(&mut net, "pool", pool, &[d]);
    let t = layer(&mut net, "fc1", same_conv(1, 1), &[p, w3, b3]);
    let t = layer(&mut net, "fc1_relu", relu, &[t]);
    let t = layer(&mut net, "fc2", same_conv(1, 1), &[t, w4, b4]);
    let g = if b.tflite {
        let clip = Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 });
        let t = layer(&mut net, "gate_clip", clip, &[t]);
        let sixth = Tensor::from_vec(vec![], vec![1.0f32 / 6.0]).unwrap();
        let sixth = net.add_constant("sixth", sixth).unwrap();
        layer(&mut net, "gate", Op::Binary(BinaryOp::Mul), &[t, sixth])
    } else {
        layer(&mut net, "gate", Op::Unary(UnaryOp::Sigmoid), &[t])
    };
    let mul_inputs = if b.gate_first { [g, d] } else { [d, g] };
    let m = layer(&mut net, "scale", Op::Binary(BinaryOp::Mul), &mul_inputs);
    let mul = LayerId(net.layers().len() - 1);
    let y = layer(&mut net, "project", same_conv(1, 1), &[m, w5, b5]);
    net.mark_output(y).unwrap();
    (net, x, mul)
}

fn check(b: Block, seed: u64) {
    let mut rng = Rng(seed);
    let (net, x, mul) = block(b, &mut rng);
    let feeds = HashMap::from([(x, rng.tensor(&[1, b.c, b.h, b.w], 1.0))]);
    let want = run_reference(&net, &feeds);
    let y = net.outputs()[0];
    for threads in [1, 2, 3] {
        let (got, ops) = run_acc(&net, &feeds, threads);
        let what = format!("{b:?}, {threads} thread(s)");
        // One transpose in, one out: the gate's Mul runs channels-last inside the region.
        let transposes = ops
            .iter()
            .filter(|op| matches!(op, Op::Transpose { .. }))
            .count();
        assert_eq!(transposes, 2, "{what}: {ops:?}");
        assert!(
            ops.contains(&net.layer(mul).op),
            "{what}: the Mul joins the region"
        );
        let atol = 1e-5 * (b.e as f64).sqrt() * (b.c as f64).sqrt();
        close(&what, &got[&y], &want[&y], 1e-4, atol);
    }
}

#[test]
fn squeeze_excite_blocks_run_channels_last_like_the_reference() {
    let shapes = [
        (1, 2, 1, 2, 1, 2),
        (5, 16, 4, 7, 7, 7),
        (16, 96, 4, 24, 14, 13),
        (24, 144, 6, 40, 29, 31),
        (13, 67, 17, 1, 5, 3),
        // The expansion and the depthwise convolution run as one pair layer.
        (16, 96, 4, 24, 112, 112),
        // The pool's mean by parts of the pixels (from 2^17 values): 552 K and 155 K floats,
        // odd planes.
        (16, 64, 4, 24, 97, 89),
        (8, 48, 4, 16, 61, 53),
    ];
    for (i, &(c, e, s, o, h, w)) in shapes.iter().enumerate() {
        for (gate_first, tflite) in [(true, false), (false, false), (true, true), (false, true)] {
            let b = Block {
                c,
                e,
                s,
                o,
                h,
                w,
                gate_first,
                tflite,
            };
            check(b, 17 + i as u64);
        }
    }
}
