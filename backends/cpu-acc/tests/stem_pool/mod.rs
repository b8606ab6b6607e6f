//! The cases shared by the fused first-layer-and-max-pooling tests (`FusedConvMaxPool`, see
//! `backplane_cpu_acc::conv::stem_pool`), run on the default tier by
//! `stem_pool_against_ref.rs` and on the AVX2 tier by `stem_pool_avx2_against_ref.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use crate::support::{close, reference, run_desc, sole_replacement, Rng};
use backplane_core::ops::{AutoPad, ConvDesc, PoolDesc, PoolKind, UnaryOp, Window};
use backplane_core::{Network, Op, Tensor};
use backplane_cpu_acc::{CpuAccBackend, CpuAccOptions};

/// One case: the convolution's input `[n, c, h, w]`, `m` filters of `k × k` at stride `s`
/// with padding `pad`, a ReLU or not, then a max pooling `pk × pk` at stride `ps`, padding
/// `pp`, `ceil` mode or not.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub n: usize,
    pub c: usize,
    pub m: usize,
    pub h: usize,
    pub w: usize,
    pub k: usize,
    pub s: usize,
    pub pad: usize,
    pub relu: bool,
    pub pk: usize,
    pub ps: usize,
    pub pp: usize,
    pub ceil: bool,
}

fn window(k: usize, s: usize, pad: usize) -> Window {
    Window {
        kernel: vec![k, k],
        strides: vec![s, s],
        dilations: vec![1, 1],
        pads: vec![pad; 4],
        auto_pad: AutoPad::NotSet,
    }
}

/// The first layers of the stems the fusion is for, and odd shapes around them: channels
/// in 1, 3 and 4, out 1, 17 and 64; planes from 1×1 up to 224²; 3×3 and 7×7 windows at
/// stride 1 and 2 with pads 0, 1 and 3; pools 3×3 and 2×2, stride 1 and 2, padded or in
/// ceil mode.
pub fn cases() -> Vec<Case> {
    let c = |n, c, m, h, w, k, s, pad, relu, pk, ps, pp, ceil| Case {
        n,
        c,
        m,
        h,
        w,
        k,
        s,
        pad,
        relu,
        pk,
        ps,
        pp,
        ceil,
    };
    vec![
        // SqueezeNet 1.1's stem, ResNet's / DenseNet's.
        c(1, 3, 64, 224, 224, 3, 2, 0, true, 3, 2, 0, true),
        c(1, 3, 64, 224, 224, 7, 2, 3, true, 3, 2, 1, false),
        // ShuffleNet's channel count; two images.
        c(2, 3, 24, 29, 31, 3, 2, 1, true, 3, 2, 1, false),
        c(1, 1, 1, 1, 1, 3, 1, 1, false, 3, 2, 1, false),
        c(1, 3, 17, 2, 2, 3, 1, 1, true, 3, 2, 1, true),
        c(1, 4, 17, 7, 5, 3, 2, 1, false, 3, 2, 0, true),
        c(1, 3, 64, 13, 11, 7, 2, 3, true, 3, 2, 1, false),
        c(1, 1, 17, 13, 11, 3, 1, 0, true, 2, 2, 0, false),
        c(1, 4, 1, 13, 11, 5, 1, 2, false, 3, 1, 1, false),
        c(1, 3, 64, 37, 41, 3, 2, 0, true, 3, 2, 0, true),
        c(3, 3, 33, 23, 19, 3, 1, 1, false, 2, 2, 0, true),
    ]
}

/// CpuAcc without channels-last regions (the fused layer is NCHW either way).
pub fn backend() -> CpuAccBackend {
    CpuAccBackend::with_options(CpuAccOptions {
        nhwc: false,
        ..CpuAccOptions::default()
    })
}

/// Build the case's network (`nan`: one input value NaN; `bias`: the convolution has one),
/// optimize it on CpuAcc and run
/// the one layer it becomes on 1, 2 and 3 threads against CpuRef's three (or two) layers.
/// Returns the replacement's op type.
pub fn check(r: &mut Rng, t: Case, nan: bool, bias: bool) -> String {
    let mut x = r.tensor(&[t.n, t.c, t.h, t.w], 2.0);
    if nan {
        let v = x.as_mut_slice::<f32>().unwrap();
        let at = v.len() / 2;
        v[at] = f32::NAN;
    }
    let wt = r.tensor(&[t.m, t.c, t.k, t.k], 0.5);
    let b = r.tensor(&[t.m], 0.5);
    let conv = Op::Conv(ConvDesc {
        window: window(t.k, t.s, t.pad),
        group: 1,
    });
    let pool = Op::Pool(PoolDesc {
        kind: PoolKind::Max,
        window: window(t.pk, t.ps, t.pp),
        ceil_mode: t.ceil,
        count_include_pad: false,
    });
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let wi = net.add_constant("w", wt.clone()).unwrap();
    let (mut y, mut want) = if bias {
        let bi = net.add_constant("b", b.clone()).unwrap();
        let y = net.add_layer("conv", conv.clone(), &[xi, wi, bi]).unwrap()[0];
        (y, reference(&conv, &[&x, &wt, &b]).remove(0))
    } else {
        let y = net.add_layer("conv", conv.clone(), &[xi, wi]).unwrap()[0];
        (y, reference(&conv, &[&x, &wt]).remove(0))
    };
    if t.relu {
        let relu = Op::Unary(UnaryOp::Relu);
        y = net.add_layer("relu", relu.clone(), &[y]).unwrap()[0];
        want = reference(&relu, &[&want]).remove(0);
    }
    let y = net.add_layer("pool", pool.clone(), &[y]).unwrap()[0];
    net.mark_output(y).unwrap();
    let want = reference(&pool, &[&want]).remove(0);
    let (desc, inputs) = sole_replacement(&backend(), &net, &[(xi, &x)]);
    let Op::Custom(custom) = &desc.op else {
        panic!("{t:?}: a fused custom layer");
    };
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let atol = 1e-4 * ((t.c * t.k * t.k) as f64).sqrt();
    for threads in [1, 2, 3] {
        let got = run_desc(&desc, &refs, threads).remove(0);
        close(
            &format!("{t:?} nan {nan} threads {threads}"),
            &got,
            &want,
            1e-4,
            atol,
        );
    }
    custom.op_type.clone()
}
