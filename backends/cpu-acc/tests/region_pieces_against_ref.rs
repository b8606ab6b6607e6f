//! A channels-last region that is not convex as a whole (`crate::layout`): a pointwise
//! convolution `A` whose output a 3×3 convolution left NCHW reads, and a pointwise
//! convolution `B` adding `A`'s output as its residual (EfficientNetV2's fused blocks),
//! then an expansion, a depthwise convolution and a projection. The region of all five
//! cannot form (a path leaves it at `A` and comes back at `B`); its convex piece from `B`
//! on, which holds the depthwise convolution, forms alone, and `A`, a piece without one,
//! stays NCHW. Run substitution by substitution on CpuAcc against CpuRef running the
//! original layers: odd planes (8×8, 11×9, 13×13: more pixels than a 3×3 convolution joins
//! a region with) and channel counts, one and two threads.
//! With a pointwise convolution where the depthwise one was, no region forms.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, SubgraphView, Substitution};
use backplane_core::ops::UnaryOp;
use backplane_core::{LayerId, Network, Op, Tensor, TensorId};
use backplane_cpu_acc::fusion::{ConvLayout, Fused};
use backplane_cpu_acc::CpuAccBackend;
use std::collections::HashMap;
use support::{close, run_reference, run_replacement, same_conv, Rng};

/// `x → A (1×1 + ReLU) → M (3×3 + ReLU) → B (1×1, + A) → E (1×1 + ReLU) → D (3×3
/// depthwise, or 1×1 when not `depthwise`, + ReLU) → P (1×1)`: the network and its input.
fn network(r: &mut Rng, (c, h, w): (usize, usize, usize), depthwise: bool) -> (Network, TensorId) {
    let mut net = Network::new();
    let x = net
        .add_input("x", r.tensor(&[1, c, h, w], 1.0).info().clone())
        .unwrap();
    let mut step = |net: &mut Network, name: &str, op: Op, t: TensorId, w_dims: &[usize]| {
        let wt = net.add_constant(name, r.tensor(w_dims, 0.4)).unwrap();
        let b = net
            .add_constant(&format!("{name}_b"), r.tensor(&w_dims[..1], 0.4))
            .unwrap();
        net.add_layer(name, op, &[t, wt, b]).unwrap()[0]
    };
    let relu = |net: &mut Network, name: &str, t: TensorId| {
        net.add_layer(name, Op::Unary(UnaryOp::Relu), &[t]).unwrap()[0]
    };
    let (m, e) = (c + 2, 2 * c + 1);
    let a = step(&mut net, "a", same_conv(1, 1), x, &[m, c, 1, 1]);
    let a = relu(&mut net, "a_relu", a);
    let t = step(&mut net, "m", same_conv(3, 1), a, &[m, m, 3, 3]);
    let t = relu(&mut net, "m_relu", t);
    let t = step(&mut net, "b", same_conv(1, 1), t, &[m, m, 1, 1]);
    let t = net
        .add_layer(
            "b_add",
            Op::Binary(backplane_core::ops::BinaryOp::Add),
            &[t, a],
        )
        .unwrap()[0];
    let t = step(&mut net, "e", same_conv(1, 1), t, &[e, m, 1, 1]);
    let t = relu(&mut net, "e_relu", t);
    let t = if depthwise {
        step(&mut net, "d", same_conv(3, e), t, &[e, 1, 3, 3])
    } else {
        step(&mut net, "d", same_conv(1, 1), t, &[e, e, 1, 1])
    };
    let t = relu(&mut net, "d_relu", t);
    let y = step(&mut net, "p", same_conv(1, 1), t, &[c, e, 1, 1]);
    net.mark_output(y).unwrap();
    (net, x)
}

/// One substitution's replacement layers run one after the other on CpuAcc; its outputs
/// go into `values`.
fn run_substitution(
    net: &Network,
    s: &Substitution,
    values: &mut HashMap<TensorId, Tensor>,
    threads: usize,
) {
    let out = run_replacement(net, values, &s.replacement, threads);
    values.extend(out);
}

/// The layouts of the fused convolutions in each substitution.
fn layouts(s: &Substitution) -> Vec<ConvLayout> {
    s.replacement
        .iter()
        .filter_map(|l| match &l.op {
            Op::Custom(c) => match Fused::decode(c).ok()? {
                Fused::Conv(spec) => Some(spec.layout),
                Fused::ConvPair { first, .. } => Some(first.layout),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn check(shape: (usize, usize, usize), threads: usize, seed: u64) {
    let mut r = Rng(seed);
    let (net, x) = network(&mut r, shape, true);
    let what = format!("{shape:?}, {threads} thread(s)");
    let feeds = HashMap::from([(x, r.tensor(&[1, shape.0, shape.1, shape.2], 1.0))]);
    let want = run_reference(&net, &feeds);
    let all: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
    let views =
        CpuAccBackend::with_threads(threads).optimize_subgraph(&SubgraphView::new(&net, all));
    assert!(views.untouched.iter().all(Vec::is_empty), "{what}");
    // A and M (each fused with its ReLU) stay NCHW; B to P are one channels-last region.
    let regions: Vec<&Substitution> = views
        .substitutions
        .iter()
        .filter(|s| {
            s.replacement
                .iter()
                .any(|l| matches!(l.op, Op::Transpose { .. }))
        })
        .collect();
    assert_eq!(regions.len(), 1, "{what}: {:?}", views.substitutions);
    assert!(
        layouts(regions[0]).contains(&ConvLayout::Nhwc),
        "{what}: {:?}",
        regions[0]
    );
    let nchw: Vec<ConvLayout> = views
        .substitutions
        .iter()
        .filter(|s| !std::ptr::eq(*s, regions[0]))
        .flat_map(layouts)
        .collect();
    assert_eq!(
        nchw,
        [ConvLayout::Nchw, ConvLayout::Nchw],
        "{what}: A and M"
    );
    // Run the substitutions in an order their inputs allow.
    let mut values = feeds.clone();
    let mut pending: Vec<&Substitution> = views.substitutions.iter().collect();
    while !pending.is_empty() {
        let before = pending.len();
        pending.retain(|s| {
            let ready = s
                .replacement
                .iter()
                .flat_map(|l| &l.inputs)
                .all(|v| match v {
                    backplane_backend_api::ValueRef::Existing(t) => {
                        values.contains_key(t) || net.tensor(*t).constant().is_some()
                    }
                    _ => true,
                });
            if ready {
                run_substitution(&net, s, &mut values, threads);
            }
            !ready
        });
        assert!(
            pending.len() < before,
            "{what}: substitutions wait on each other"
        );
    }
    let y = net.outputs()[0];
    close(&what, &values[&y], &want[&y], 1e-4, 1e-4);
}

#[test]
fn the_convex_piece_with_the_depthwise_convolution_runs_channels_last() {
    let mut seed = 7000;
    for shape in [(16, 13, 13), (17, 11, 9), (3, 8, 8), (32, 13, 13)] {
        for threads in [1, 2] {
            seed += 1;
            check(shape, threads, seed);
        }
    }
}

#[test]
fn without_a_depthwise_convolution_no_piece_forms() {
    let mut r = Rng(7100);
    let (net, _) = network(&mut r, (16, 13, 13), false);
    let all: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
    let views = CpuAccBackend::with_threads(1).optimize_subgraph(&SubgraphView::new(&net, all));
    for s in &views.substitutions {
        assert!(
            s.replacement
                .iter()
                .all(|l| !matches!(l.op, Op::Transpose { .. })),
            "{s:?}"
        );
        assert!(layouts(s).iter().all(|&l| l == ConvLayout::Nchw), "{s:?}");
    }
}
