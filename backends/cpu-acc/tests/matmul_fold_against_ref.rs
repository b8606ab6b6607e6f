//! A MatMul against a shared (2-D, constant) B whose A is read through a Transpose, as
//! ViT's attention in-projection reads its `[1, S, D]` input as `[S, 1, D]`: fused into one
//! CpuAcc layer, it runs as one GEMM of S rows when A's batches step through storage as one
//! axis (and as one small product per batch when they do not, batch 2), with the bias and
//! activation in the epilogue. Against CpuRef running Transpose, MatMul and Add: odd and
//! large shapes, one and two threads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{Network, Op, Tensor};
use backplane_cpu_acc::CpuAccBackend;
use support::{close, reference, run_desc, sole_replacement, Rng};

/// `x [batch, s, d]` → Transpose(1, 0, 2) → MatMul(W [d, n]) → Add(bias) [→ Relu] through
/// CpuAcc's fused layer, and through CpuRef layer by layer.
fn check(r: &mut Rng, batch: usize, s: usize, d: usize, n: usize, relu: bool) {
    let x = r.tensor(&[batch, s, d], 1.0);
    let w = r.tensor(&[d, n], 0.5);
    let b = r.tensor(&[n], 1.0);
    let perm = Op::Transpose {
        perm: vec![1, 0, 2],
    };
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let wi = net.add_constant("w", w.clone()).unwrap();
    let bi = net.add_constant("b", b.clone()).unwrap();
    let t = net.add_layer("tr", perm.clone(), &[xi]).unwrap()[0];
    let p = net.add_layer("mm", Op::MatMul, &[t, wi]).unwrap()[0];
    let mut y = net
        .add_layer("add", Op::Binary(BinaryOp::Add), &[p, bi])
        .unwrap()[0];
    let mut want = reference(&perm, &[&x]).remove(0);
    want = reference(&Op::MatMul, &[&want, &w]).remove(0);
    want = reference(&Op::Binary(BinaryOp::Add), &[&want, &b]).remove(0);
    if relu {
        y = net
            .add_layer("relu", Op::Unary(UnaryOp::Relu), &[y])
            .unwrap()[0];
        want = reference(&Op::Unary(UnaryOp::Relu), &[&want]).remove(0);
    }
    net.mark_output(y).unwrap();

    let (desc, inputs) = sole_replacement(&CpuAccBackend::new(), &net, &[(xi, &x)]);
    let refs: Vec<&Tensor> = inputs.iter().collect();
    for threads in [1, 2] {
        let got = run_desc(&desc, &refs, threads).remove(0);
        let what = format!("{batch}x{s}x{d} -> {n}, relu={relu}, threads={threads}");
        close(&what, &got, &want, 1e-4, 1e-4);
    }
}

#[test]
fn a_transposed_input_against_shared_weights_matches_ref() {
    let mut r = Rng(27);
    for (batch, s, d, n, relu) in [
        (1, 1, 1, 1, false),
        (1, 2, 3, 5, true),
        (1, 7, 13, 17, false),
        (1, 13, 64, 97, true),
        (1, 31, 96, 50, false),
        (1, 197, 128, 131, false),
        // Batch 2: A's rows do not step through storage as one axis, so no fold.
        (2, 7, 13, 17, true),
        (2, 29, 40, 33, false),
    ] {
        check(&mut r, batch, s, d, n, relu);
    }
}

/// ViT-B/16's in-projection shape: 197 tokens, 768 channels, 2304 outputs.
#[test]
fn the_vit_in_projection_shape_matches_ref() {
    check(&mut Rng(16), 1, 197, 768, 2304, false);
}
