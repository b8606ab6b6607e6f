//! A first convolution, its ReLU (or none) and the max pooling after it, fused into one
//! `FusedConvMaxPool` on the default tier (AVX-512 where the CPU has it), against CpuRef
//! running the layers one by one: the stems of SqueezeNet, ResNet and ShuffleNet and odd
//! shapes around them, a NaN in the input, one to three threads; and the layers left apart
//! when the convolution's output has another reader or the window is too deep for a first
//! layer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod stem_pool;
mod support;

use backplane_backend_api::{Backend, SubgraphView};
use backplane_core::ops::{AutoPad, ConvDesc, PoolDesc, PoolKind, Window};
use backplane_core::{LayerId, Network, Op};
use backplane_cpu_kernels::isa::avx2_in_use;
use support::Rng;

#[test]
fn first_layer_and_max_pool_fuse_and_match_ref() {
    if !avx2_in_use() {
        // Without AVX2 there are no channel-lanes kernels: nothing fuses (see below).
        return;
    }
    let mut r = Rng(4701);
    for (i, case) in stem_pool::cases().into_iter().enumerate() {
        let op = stem_pool::check(&mut r, case, i % 3 == 1, i % 4 != 3);
        assert_eq!(op, "FusedConvMaxPool", "{case:?}");
    }
}

fn window(k: usize, s: usize) -> Window {
    Window {
        kernel: vec![k, k],
        strides: vec![s, s],
        dilations: vec![1, 1],
        pads: vec![0; 4],
        auto_pad: AutoPad::NotSet,
    }
}

/// The op types CpuAcc makes of `net`.
fn optimized(net: &Network) -> Vec<String> {
    let all = (0..net.layers().len()).map(LayerId).collect();
    let views = stem_pool::backend().optimize_subgraph(&SubgraphView::new(net, all));
    views
        .substitutions
        .iter()
        .flat_map(|s| s.replacement.iter().map(|l| l.op.name().to_string()))
        .collect()
}

/// No fusion where the convolution's output is also read elsewhere (it must exist), nor for
/// a convolution over many channels (not a first layer), nor for an average or a dilated
/// max pooling.
#[test]
fn conv_and_pool_stay_apart_where_they_must() {
    let mut r = Rng(4702);
    let pool = |kind, dilation| {
        let mut window = window(3, 2);
        window.dilations = vec![dilation; 2];
        Op::Pool(PoolDesc {
            kind,
            window,
            ceil_mode: false,
            count_include_pad: false,
        })
    };
    for (c, kind, dilation, second_reader) in [
        (3, PoolKind::Max, 1, true),
        (32, PoolKind::Max, 1, false),
        (3, PoolKind::Average, 1, false),
        (3, PoolKind::Max, 2, false),
    ] {
        let mut net = Network::new();
        let x = r.tensor(&[1, c, 17, 17], 1.0);
        let xi = net.add_input("x", x.info().clone()).unwrap();
        let wi = net
            .add_constant("w", r.tensor(&[16, c, 3, 3], 1.0))
            .unwrap();
        let conv = Op::Conv(ConvDesc {
            window: window(3, 1),
            group: 1,
        });
        let t = net.add_layer("conv", conv, &[xi, wi]).unwrap()[0];
        let relu = Op::Unary(backplane_core::ops::UnaryOp::Relu);
        let t = net.add_layer("relu", relu, &[t]).unwrap()[0];
        let y = net.add_layer("pool", pool(kind, dilation), &[t]).unwrap()[0];
        net.mark_output(y).unwrap();
        if second_reader {
            net.mark_output(t).unwrap();
        }
        let ops = optimized(&net);
        assert!(
            !ops.iter().any(|o| o.contains("FusedConvMaxPool")),
            "c {c} {kind:?} dilation {dilation} second reader {second_reader}: {ops:?}"
        );
    }
}
