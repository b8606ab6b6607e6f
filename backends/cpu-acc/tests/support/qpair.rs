//! A channels-last int8 depthwise convolution and the pointwise convolution after it
//! (`QLinearConvPair`, one step by bands of pixel rows) against the same two layers apart
//! and against CpuRef: the cases that every int8 tier's test binary runs.

use super::{add_dq, add_q, konst, layer, q8, run_acc, run_reference, zp, Rng};
use backplane_core::ops::{AutoPad, ConvDesc, UnaryOp, Window};
use backplane_core::{DataType, Network, Op, Tensor, TensorId};
use std::collections::HashMap;

/// One pair: `n` images of `h × w` pixels and `c` channels, a `k × k` depthwise layer (stride, padding)
/// to the same channels, then a 1×1 layer to `m` channels.
#[derive(Clone, Copy, Debug)]
pub struct Pair {
    /// Images.
    pub n: usize,
    pub h: usize,
    pub w: usize,
    pub c: usize,
    pub m: usize,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
    /// The activations' type (input, intermediate and output).
    pub dt: DataType,
    /// u8 weights of zero point 3 on the 1×1 layer (its centered weights leave i8: the
    /// 16-bit pair GEMM), else i8 weights (the byte GEMM where the tier has one).
    pub pair_gemm: bool,
    /// Clip(0, 6) after each layer (a fused clamp).
    pub clamp: bool,
}

/// The clamp both layers take when `clamp` is set.
fn relu6() -> Op {
    Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 })
}

/// A QDQ convolution of 8-bit `x` (type `dt`, quantization `xq`): weights `[m, c/group, k,
/// k]` (i8 of zero point 0 with per-channel scales, or u8 of zero point 3 with one scale),
/// an int32 bias, the clamp, the output quantized on `yq`.
#[allow(clippy::too_many_arguments)]
fn qconv(
    net: &mut Network,
    r: &mut Rng,
    x: TensorId,
    (dt, xq): (DataType, (f32, i32)),
    (m, c, k, group): (usize, usize, usize, usize),
    (stride, pad): (usize, usize),
    (u8_weights, clamp): (bool, bool),
    yq: (f32, i32),
) -> TensorId {
    let cg = c / group;
    let xf = add_dq(net, x, dt, xq);
    let n = m * cg * k * k;
    let scales: Vec<f32> = (0..m).map(|i| 0.004 + 0.0009 * (i % 7) as f32).collect();
    let (wt, ws, wz) = if u8_weights {
        (
            q8(DataType::U8, &[m, cg, k, k], r.bytes(n)),
            Tensor::scalar(scales[0]),
            zp(DataType::U8, 3),
        )
    } else {
        (
            q8(DataType::I8, &[m, cg, k, k], r.bytes(n)),
            Tensor::from_vec(vec![m], scales.clone()).unwrap(),
            q8(DataType::I8, &[m], vec![0; m]),
        )
    };
    let dq0 = Op::DequantizeLinear {
        axis: 0,
        to: DataType::F32,
        block_size: 0,
    };
    let (wt, ws, wz) = (konst(net, wt), konst(net, ws), konst(net, wz));
    let wf = layer(net, dq0.clone(), &[wt, ws, wz]);
    let bias: Vec<i32> = (0..m).map(|_| (r.next() % 3001) as i32 - 1500).collect();
    let bs: Vec<f32> = (0..m)
        .map(|i| xq.0 * if u8_weights { scales[0] } else { scales[i] })
        .collect();
    let bc = konst(net, Tensor::from_vec(vec![m], bias).unwrap());
    let bs = konst(net, Tensor::from_vec(vec![m], bs).unwrap());
    let bf = layer(net, dq0, &[bc, bs]);
    let conv = Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![k, k],
            strides: vec![stride; 2],
            dilations: vec![1, 1],
            pads: vec![pad; 4],
            auto_pad: AutoPad::NotSet,
        },
        group,
    });
    let mut y = layer(net, conv, &[xf, wf, bf]);
    if clamp {
        y = layer(net, relu6(), &[y]);
    }
    add_q(net, y, dt, yq)
}

/// The pair's network: an NHWC input transposed to NCHW (as the TFLite importer writes
/// it), the depthwise layer, the 1×1 layer; the intermediate also a network output when
/// `mid_out` (then no pair may form). Returns the network, its input, the intermediate and
/// the output, and the input's value.
fn network(p: &Pair, seed: u64, mid_out: bool) -> (Network, TensorId, TensorId, TensorId, Tensor) {
    let mut r = Rng(seed);
    let mut net = Network::new();
    let image = q8(p.dt, &[p.n, p.h, p.w, p.c], r.bytes(p.n * p.h * p.w * p.c));
    let x = net.add_input("x", image.info().clone()).unwrap();
    let to_nchw = Op::Transpose {
        perm: vec![0, 3, 1, 2],
    };
    let t = layer(&mut net, to_nchw, &[x]);
    let z = |u: i32, s: i32| if p.dt == DataType::U8 { u } else { s };
    let xq = (0.02, z(120, -3));
    let mq = (0.05, z(100, 5));
    let yq = (0.08, z(130, -7));
    let mid = qconv(
        &mut net,
        &mut r,
        t,
        (p.dt, xq),
        (p.c, p.c, p.k, p.c),
        (p.stride, p.pad),
        (false, p.clamp),
        mq,
    );
    let y = qconv(
        &mut net,
        &mut r,
        mid,
        (p.dt, mq),
        (p.m, p.c, 1, 1),
        (1, 0),
        (p.pair_gemm, p.clamp),
        yq,
    );
    net.mark_output(y).unwrap();
    if mid_out {
        net.mark_output(mid).unwrap();
    }
    (net, x, mid, y, image)
}

/// Assert `got` is within one quantum of `want` (8-bit tensors of type `dt`).
fn within_a_quantum(what: &str, dt: DataType, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    let v = |b: u8| {
        if dt == DataType::I8 {
            i32::from(b as i8)
        } else {
            i32::from(b)
        }
    };
    for (i, (&g, &w)) in got.bytes().iter().zip(want.bytes()).enumerate() {
        assert!(
            (v(g) - v(w)).abs() <= 1,
            "{what}: element {i}: {} vs {}",
            v(g),
            v(w)
        );
    }
}

/// How many bytes of `a` and `b` differ (all of them when the lengths do).
fn differing(a: &Tensor, b: &Tensor) -> usize {
    if a.bytes().len() != b.bytes().len() {
        return a.bytes().len().max(b.bytes().len()).max(1);
    }
    a.bytes()
        .iter()
        .zip(b.bytes())
        .filter(|(x, y)| x != y)
        .count()
}

/// How many `QLinearConvPair` layers `ops` holds.
fn pairs_in(ops: &[Op]) -> usize {
    ops.iter()
        .filter(|o| matches!(o, Op::Custom(c) if c.op_type == "QLinearConvPair"))
        .count()
}

/// Run `p` at one, two and three threads: the pair forms (one `QLinearConvPair`, unless
/// `forms` is false), its output bytes equal the two layers' apart (the intermediate a
/// network output too, so no pair forms) at every thread count, and are within one quantum
/// of CpuRef's 1×1 layer over that intermediate, itself within one quantum of CpuRef's
/// depthwise layer.
pub fn check_pair(p: &Pair, seed: u64, forms: bool) {
    let (net, x, _, y, image) = network(p, seed, false);
    let (apart_net, ax, mid, ay, _) = network(p, seed, true);
    let feeds = HashMap::from([(x, image.clone())]);
    let apart_feeds = HashMap::from([(ax, image.clone())]);
    let mut first: Option<Tensor> = None;
    for threads in [1, 2, 3] {
        let (got, ops) = run_acc(&net, &feeds, threads);
        assert_eq!(pairs_in(&ops), usize::from(forms), "{p:?}: {ops:?}");
        let (apart, apart_ops) = run_acc(&apart_net, &apart_feeds, threads);
        assert_eq!(
            pairs_in(&apart_ops),
            0,
            "{p:?}: the intermediate is read outside"
        );
        assert_eq!(
            differing(&got[&y], &apart[&ay]),
            0,
            "{p:?}, {threads} threads: elements of the pair's output unlike the two layers'"
        );
        match &first {
            None => {
                // CpuRef: its depthwise layer against CpuAcc's intermediate, then its 1×1
                // layer over CpuAcc's intermediate against the pair's output.
                let want = run_reference(&apart_net, &apart_feeds);
                within_a_quantum(&format!("{p:?} depthwise"), p.dt, &apart[&mid], &want[&mid]);
                let from_mid = HashMap::from([(ax, image.clone()), (mid, apart[&mid].clone())]);
                let want = run_reference(&apart_net, &from_mid);
                within_a_quantum(&format!("{p:?} pointwise"), p.dt, &got[&y], &want[&ay]);
                first = Some(got[&y].clone());
            }
            Some(one) => assert_eq!(
                differing(&got[&y], one),
                0,
                "{p:?}: elements at {threads} threads unlike one thread's"
            ),
        }
    }
}

/// The pair cases every tier runs: a 1×1 image, two images, fewer rows than threads, primes, stride 1
/// and 2, 3×3 and 5×5 windows, channels from 2 to 512, u8 and i8, with and without the
/// clamps, the byte GEMM and the pair GEMM on the 1×1 layer; planes large enough for the
/// threads to share bands of rows (and a one-thread band to be cut in pieces), planes of
/// few pixels (3×3, 2×2, one pixel) that two and three threads share by the 1×1 layer's
/// output channels, and small pairs that run the two layers one after the other. One
/// channel makes the depthwise layer a one-group one: no pair forms.
pub fn pairs_give_the_two_layers_bytes() {
    let base = Pair {
        n: 1,
        h: 1,
        w: 1,
        c: 8,
        m: 16,
        k: 3,
        stride: 1,
        pad: 1,
        dt: DataType::I8,
        pair_gemm: false,
        clamp: true,
    };
    let cases = [
        base,
        Pair {
            h: 2,
            w: 3,
            c: 17,
            m: 5,
            dt: DataType::U8,
            clamp: false,
            ..base
        },
        Pair {
            h: 23,
            w: 19,
            c: 37,
            m: 29,
            ..base
        },
        Pair {
            h: 29,
            w: 31,
            c: 64,
            m: 96,
            stride: 2,
            dt: DataType::U8,
            ..base
        },
        Pair {
            h: 17,
            w: 13,
            c: 96,
            m: 24,
            k: 5,
            pad: 2,
            clamp: false,
            ..base
        },
        Pair {
            h: 25,
            w: 25,
            c: 19,
            m: 131,
            k: 5,
            stride: 2,
            pad: 2,
            dt: DataType::U8,
            ..base
        },
        Pair {
            h: 6,
            w: 6,
            c: 256,
            m: 256,
            ..base
        },
        Pair {
            h: 12,
            w: 12,
            c: 128,
            m: 127,
            dt: DataType::U8,
            ..base
        },
        Pair {
            h: 3,
            w: 3,
            c: 512,
            m: 509,
            ..base
        },
        // Planes of few pixels whose 1×1 layer the threads share by output channels: u8
        // pixels read in place, the pair GEMM, one pixel of 601 channels to 997.
        Pair {
            h: 3,
            w: 3,
            c: 509,
            m: 131,
            dt: DataType::U8,
            ..base
        },
        Pair {
            h: 3,
            w: 3,
            c: 512,
            m: 512,
            stride: 2,
            pair_gemm: true,
            ..base
        },
        Pair {
            c: 601,
            m: 997,
            ..base
        },
        Pair {
            h: 13,
            w: 11,
            c: 40,
            m: 23,
            pair_gemm: true,
            ..base
        },
        Pair {
            h: 9,
            w: 7,
            c: 2,
            m: 3,
            pair_gemm: true,
            dt: DataType::U8,
            ..base
        },
        // Two images: bands and pieces across the images' rows.
        Pair {
            n: 2,
            h: 21,
            w: 9,
            c: 24,
            m: 40,
            stride: 2,
            dt: DataType::U8,
            ..base
        },
        Pair {
            h: 48,
            w: 48,
            c: 32,
            m: 64,
            ..base
        },
        Pair {
            h: 97,
            w: 95,
            c: 16,
            m: 24,
            stride: 2,
            dt: DataType::U8,
            ..base
        },
    ];
    for (i, p) in cases.iter().enumerate() {
        check_pair(p, 700 + i as u64, true);
    }
    let one = Pair {
        h: 11,
        w: 7,
        c: 1,
        m: 9,
        ..base
    };
    check_pair(&one, 699, false);
}
