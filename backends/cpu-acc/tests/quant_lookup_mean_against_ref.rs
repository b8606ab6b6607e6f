//! CpuAcc's byte-table layer (`DequantizeLinear → elementwise functions → QuantizeLinear`)
//! and quantized mean over the pixels (`DequantizeLinear → ReduceMean | GlobalAveragePool →
//! QuantizeLinear`) against the unfolded chain on CpuRef, bit for bit: int8 and uint8 both
//! sides, scales from 1e-6 to 50, zero points at the ends of the range, shapes with one
//! element, primes and a large plane, one and two threads. Then the means and the tables
//! inside a channels-last region, which must give the same bytes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, SubgraphView};
use backplane_core::ops::{
    AutoPad, BinaryOp, MathOp, PoolKind, ReduceDesc, ReduceKind, UnaryOp, Window,
};
use backplane_core::{DataType, LayerId, Network, Op, Tensor, TensorId};
use backplane_cpu_acc::CpuAccBackend;
use support::{
    add_dq, add_q, all_bytes, custom, konst, layer, nhwc_image, only_the_exit_transpose, q8,
    qdq_pointwise, same_output_bytes, Rng,
};

/// A layer of the chain after the dequantization.
#[derive(Clone, Debug)]
enum Step {
    /// A one-input op.
    Op(Op),
    /// A binary op with an f32 constant of one value (second operand, or first).
    WithF32(BinaryOp, f32, bool),
    /// A binary op with a dequantized int8 constant of one value, second operand.
    WithInt8(BinaryOp, i8, f32),
}

/// The chain `x → DequantizeLinear → steps → QuantizeLinear`.
fn lookup_chain(
    dims: &[usize],
    xt: DataType,
    xq: (f32, i32),
    steps: &[Step],
    yt: DataType,
    yq: (f32, i32),
) -> (Network, TensorId) {
    let mut net = Network::new();
    let x = net
        .add_input(
            "x",
            q8(xt, dims, vec![0; dims.iter().product()]).info().clone(),
        )
        .unwrap();
    let mut t = add_dq(&mut net, x, xt, xq);
    for s in steps {
        t = match s {
            Step::Op(op) => layer(&mut net, op.clone(), &[t]),
            Step::WithF32(op, c, first) => {
                let c = konst(&mut net, Tensor::scalar(*c));
                let ins = if *first { [c, t] } else { [t, c] };
                layer(&mut net, Op::Binary(*op), &ins)
            }
            Step::WithInt8(op, c, s) => {
                let c = konst(&mut net, Tensor::scalar(*c));
                let c = add_dq(&mut net, c, DataType::I8, (*s, 0));
                layer(&mut net, Op::Binary(*op), &[t, c])
            }
        };
    }
    let y = add_q(&mut net, t, yt, yq);
    net.mark_output(y).unwrap();
    (net, x)
}

#[test]
fn byte_tables_equal_the_chain_on_cpu_ref() {
    let steps: Vec<Vec<Step>> = vec![
        vec![Step::Op(Op::Unary(UnaryOp::Sigmoid))],
        vec![Step::Op(Op::Math(MathOp::HardSwish))],
        vec![Step::Op(Op::Unary(UnaryOp::Tanh))],
        vec![Step::Op(Op::Math(MathOp::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        }))],
        vec![
            Step::Op(Op::Unary(UnaryOp::Relu)),
            Step::Op(Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 })),
        ],
        vec![Step::WithF32(BinaryOp::Mul, 1.0 / 6.0, false)],
        vec![
            Step::WithF32(BinaryOp::Add, 3.0, true),
            Step::Op(Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 })),
            Step::WithF32(BinaryOp::Div, 6.0, false),
        ],
        vec![Step::WithF32(BinaryOp::Sub, 1.0, true)],
        vec![Step::WithInt8(BinaryOp::Mul, 43, 0.0039)],
        vec![Step::Op(Op::Unary(UnaryOp::Exp))],
        vec![Step::Op(Op::Unary(UnaryOp::Log))],
    ];
    let params = [
        (0.02f32, 3i32),
        (1e-6, 0),
        (50.0, 127),
        (0.1, -128),
        (0.0039, 255),
    ];
    let shapes: [&[usize]; 5] = [
        &[1],
        &[1, 1, 1, 1],
        &[2, 3, 5, 7],
        &[3, 257],
        &[1, 31, 67, 67],
    ];
    let mut r = Rng(11);
    let mut case = 0;
    for s in &steps {
        for xt in [DataType::I8, DataType::U8] {
            for yt in [DataType::I8, DataType::U8] {
                let fit = |(s, z): (f32, i32), dt: DataType| {
                    let z = if dt == DataType::I8 {
                        z.clamp(-128, 127)
                    } else {
                        z.clamp(0, 255)
                    };
                    (s, z)
                };
                let xq = fit(params[case % params.len()], xt);
                let yq = fit(params[(case / 2 + 1) % params.len()], yt);
                let dims = shapes[case % shapes.len()];
                case += 1;
                let what = format!("{s:?} {xt}{xq:?} → {yt}{yq:?} {dims:?}");
                let (net, x) = lookup_chain(dims, xt, xq, s, yt, yq);
                let input = all_bytes(&mut r, xt, dims);
                same_output_bytes(&what, &net, x, input, |ops| {
                    assert_eq!(ops.len(), 1, "{what}: one layer");
                    assert_eq!(custom(&ops[0]), "QLinearLookup", "{what}");
                });
            }
        }
    }
}

#[test]
fn silu_chains_become_one_table() {
    // x → DequantizeLinear → Sigmoid → QuantizeLinear = s; Mul(x, s) (either order, x's
    // dequantization shared with the sigmoid's or its own) → QuantizeLinear: one table.
    let mut r = Rng(23);
    let dims: [&[usize]; 3] = [&[1, 1, 1, 1], &[2, 7, 5, 3], &[1, 32, 48, 48]];
    for d in dims {
        for (xt, yt) in [(DataType::I8, DataType::I8), (DataType::U8, DataType::U8)] {
            for (s_first, shared) in [(false, true), (true, false)] {
                let mut net = Network::new();
                let n: usize = d.iter().product();
                let x = net
                    .add_input("x", q8(xt, d, vec![0; n]).info().clone())
                    .unwrap();
                let xq = if xt == DataType::I8 {
                    (0.07, -9)
                } else {
                    (0.07, 119)
                };
                let sq = if yt == DataType::I8 {
                    (1.0 / 256.0, -128)
                } else {
                    (1.0 / 256.0, 0)
                };
                let yq = if yt == DataType::I8 {
                    (0.035, -100)
                } else {
                    (0.035, 28)
                };
                let xf = add_dq(&mut net, x, xt, xq);
                let sig = layer(&mut net, Op::Unary(UnaryOp::Sigmoid), &[xf]);
                let sg = add_q(&mut net, sig, yt, sq);
                let x2 = if shared {
                    xf
                } else {
                    add_dq(&mut net, x, xt, xq)
                };
                let sf = add_dq(&mut net, sg, yt, sq);
                let ins = if s_first { [sf, x2] } else { [x2, sf] };
                let m = layer(&mut net, Op::Binary(BinaryOp::Mul), &ins);
                let y = add_q(&mut net, m, yt, yq);
                net.mark_output(y).unwrap();
                let what = format!("SiLU {d:?} {xt} → {yt}, s first {s_first}, shared {shared}");
                let input = all_bytes(&mut r, xt, d);
                same_output_bytes(&what, &net, x, input, |ops| {
                    assert_eq!(ops.len(), 1, "{what}: one layer: {ops:?}");
                    assert_eq!(custom(&ops[0]), "QLinearLookup", "{what}");
                });
            }
        }
    }
}

#[test]
fn chains_a_table_cannot_take_are_left_alone() {
    // Erf: CpuRef's own erf. A per-channel scale: not one table.
    let (net, _) = lookup_chain(
        &[1, 3, 2, 2],
        DataType::I8,
        (0.1, 0),
        &[Step::Op(Op::Unary(UnaryOp::Erf))],
        DataType::I8,
        (0.01, 0),
    );
    let all: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
    let views = CpuAccBackend::with_threads(1).optimize_subgraph(&SubgraphView::new(&net, all));
    for s in &views.substitutions {
        for l in &s.replacement {
            assert_ne!(custom(&l.op), "QLinearLookup", "Erf is not tabulated");
        }
    }
}

/// How a mean is written.
#[derive(Clone, Copy, Debug)]
enum Mean {
    Reduce { keepdims: bool },
    Global,
}

fn mean_op(m: Mean) -> Op {
    match m {
        Mean::Reduce { keepdims } => Op::Reduce(ReduceDesc {
            kind: ReduceKind::Mean,
            axes: vec![2, -1],
            keepdims,
            noop_with_empty_axes: false,
        }),
        Mean::Global => Op::GlobalPool(PoolKind::Average),
    }
}

#[test]
fn quantized_means_equal_the_chain_on_cpu_ref() {
    let shapes: [[usize; 4]; 6] = [
        [1, 1, 1, 1],
        [2, 3, 5, 7],
        [1, 37, 13, 11],
        [1, 96, 16, 16],
        [3, 1, 1, 2],
        [1, 5, 64, 64],
    ];
    let params = [
        (0.02f32, 3i32),
        (1e-6, 0),
        (50.0, 127),
        (0.1, -128),
        (0.0039, 255),
    ];
    let mut r = Rng(5);
    let mut case = 0;
    for dims in shapes {
        for m in [
            Mean::Reduce { keepdims: false },
            Mean::Reduce { keepdims: true },
            Mean::Global,
        ] {
            for (xt, yt) in [(DataType::I8, DataType::I8), (DataType::U8, DataType::I8)] {
                let fit = |(s, z): (f32, i32), dt: DataType| {
                    let z = if dt == DataType::I8 {
                        z.clamp(-128, 127)
                    } else {
                        z.clamp(0, 255)
                    };
                    (s, z)
                };
                let xq = fit(params[case % params.len()], xt);
                // The output scale near the input's, or far from it.
                let yq = fit(
                    if case % 3 == 0 {
                        params[(case + 2) % params.len()]
                    } else {
                        (xq.0 * 1.37, 2)
                    },
                    yt,
                );
                case += 1;
                let mut net = Network::new();
                let x = net
                    .add_input(
                        "x",
                        q8(xt, &dims, vec![0; dims.iter().product()]).info().clone(),
                    )
                    .unwrap();
                let t = add_dq(&mut net, x, xt, xq);
                let t = layer(&mut net, mean_op(m), &[t]);
                let y = add_q(&mut net, t, yt, yq);
                net.mark_output(y).unwrap();
                let what = format!("{m:?} {xt}{xq:?} → {yt}{yq:?} {dims:?}");
                let input = all_bytes(&mut r, xt, &dims);
                same_output_bytes(&what, &net, x, input, |ops| {
                    assert_eq!(ops.len(), 1, "{what}: one layer");
                    assert_eq!(custom(&ops[0]), "QLinearMean", "{what}");
                });
            }
        }
    }
}

/// A QDQ 1×1 convolution of `c` to `m` channels (per-channel int8 weights, int32 bias).
fn conv1x1(
    net: &mut Network,
    r: &mut Rng,
    x: TensorId,
    xq: (f32, i32),
    c: usize,
    m: usize,
) -> TensorId {
    let ws: Vec<f32> = (0..m).map(|i| 0.004 + 0.001 * (i % 7) as f32).collect();
    let w = r.bytes(m * c);
    let b: Vec<i32> = (0..m).map(|_| (r.next() % 2001) as i32 - 1000).collect();
    qdq_pointwise(net, x, xq, w, ws, b, (0.05, -2))
}

#[test]
fn squeeze_excite_runs_in_one_int8_region() {
    // NHWC image → transpose → 1×1 conv → SiLU (table, Mul) → mean → 1×1 → table → 1×1 →
    // sigmoid table → gate Mul (broadcast) → 1×1 conv: one region, no DequantizeLinear, one
    // transpose out. The mean keeps its dims, or is Keras's (an [N, C] mean, an 8-bit
    // reshape to [N, 1, 1, C] and a transpose), or a GlobalAveragePool.
    for (i, &(c, e, s, h, w)) in [(3, 8, 2, 5, 7), (1, 1, 1, 1, 1), (5, 17, 3, 9, 2)]
        .iter()
        .enumerate()
    {
        for m in [
            Mean::Reduce { keepdims: true },
            Mean::Reduce { keepdims: false },
            Mean::Global,
        ] {
            let mut r = Rng(40 + i as u64);
            let mut net = Network::new();
            let (x, xt) = nhwc_image(&mut net, [h, w, c]);
            let q = (0.05, -2);
            let t = conv1x1(&mut net, &mut r, xt, (0.03, 1), c, e);
            let sig = |net: &mut Network, t| {
                let f = add_dq(net, t, DataType::I8, q);
                let f = layer(net, Op::Unary(UnaryOp::Sigmoid), &[f]);
                add_q(net, f, DataType::I8, (1.0 / 256.0, -128))
            };
            let g = sig(&mut net, t);
            let mul = |net: &mut Network, a, aq, b, bq| {
                let af = add_dq(net, a, DataType::I8, aq);
                let bf = add_dq(net, b, DataType::I8, bq);
                let p = layer(net, Op::Binary(BinaryOp::Mul), &[af, bf]);
                add_q(net, p, DataType::I8, (0.03, 3))
            };
            let d = mul(&mut net, t, q, g, (1.0 / 256.0, -128));
            let pf = add_dq(&mut net, d, DataType::I8, (0.03, 3));
            let p = layer(&mut net, mean_op(m), &[pf]);
            let mut p = add_q(&mut net, p, DataType::I8, (0.02, 0));
            if let Mean::Reduce { keepdims: false } = m {
                // Keras's squeeze-excite reshape as the TFLite importer writes it: the 8-bit
                // [N, C] to [N, 1, 1, C], then its transpose to NCHW.
                let r = Op::Reshape {
                    shape: vec![1, 1, 1, e],
                };
                p = layer(&mut net, r, &[p]);
                let perm = Op::Transpose {
                    perm: vec![0, 3, 1, 2],
                };
                p = layer(&mut net, perm, &[p]);
            }
            let f1 = conv1x1(&mut net, &mut r, p, (0.02, 0), e, s);
            let f1 = sig(&mut net, f1);
            let f2 = conv1x1(&mut net, &mut r, f1, (1.0 / 256.0, -128), s, e);
            let f2 = sig(&mut net, f2);
            let gated = mul(&mut net, d, (0.03, 3), f2, (1.0 / 256.0, -128));
            let y = conv1x1(&mut net, &mut r, gated, (0.03, 3), e, c);
            net.mark_output(y).unwrap();
            let input = all_bytes(&mut r, DataType::I8, &[1, h, w, c]);
            let what = format!("SE c {c} e {e} s {s} {h}×{w} {m:?}");
            same_output_bytes(&what, &net, x, input, |ops| {
                only_the_exit_transpose(&what, ops);
                assert!(
                    !ops.iter().any(|o| matches!(o, Op::DequantizeLinear { .. })),
                    "{what}: all int8: {ops:?}"
                );
                assert_eq!(ops.iter().filter(|o| custom(o) == "QLinearMean").count(), 1);
            });
        }
    }
}

#[test]
fn binaries_with_f32_constants_equal_the_chain_on_cpu_ref() {
    // DequantizeLinear(x) op c → (Relu) → QuantizeLinear, c an f32 constant broadcast to x
    // (a batch norm's per-channel scale or shift as the TFLite importer leaves it).
    let mut r = Rng(31);
    // The last case's constant has one value per element (no repeats). Channels-last
    // per-channel constants of up to 32 values become byte tables (an image of three
    // channels, large enough that two threads share it; 32 values, and 33, which do not).
    let cases: [(&[usize], &[usize]); 9] = [
        (&[1, 61, 67, 3], &[3]),
        (&[2, 9, 5, 32], &[1, 1, 1, 32]),
        (&[1, 5, 5, 33], &[33]),
        (&[1, 5, 3, 4], &[5, 1, 1]),
        (&[2, 7, 1, 1], &[1, 7, 1, 1]),
        (&[1, 1, 1, 1], &[1]),
        (&[1, 3, 9, 13], &[13]),
        (&[1, 64, 16, 16], &[1, 64, 1, 1]),
        (&[2, 3, 40, 40], &[3, 40, 40]),
    ];
    let ops = [
        BinaryOp::Mul,
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Max,
        BinaryOp::Min,
    ];
    let mut case = 0;
    for (dims, cdims) in cases {
        for op in ops {
            for (xt, yt) in [(DataType::I8, DataType::U8), (DataType::U8, DataType::I8)] {
                let c_first = case % 2 == 1;
                let relu = case % 3 == 0;
                case += 1;
                let mut net = Network::new();
                let n: usize = dims.iter().product();
                let x = net
                    .add_input("x", q8(xt, dims, vec![0; n]).info().clone())
                    .unwrap();
                let xq = if xt == DataType::I8 {
                    (0.05, 4)
                } else {
                    (0.05, 130)
                };
                let yq = if yt == DataType::I8 {
                    (0.07, -3)
                } else {
                    (0.07, 125)
                };
                let xf = add_dq(&mut net, x, xt, xq);
                let cn: usize = cdims.iter().product();
                let cv =
                    Tensor::from_vec(cdims.to_vec(), (0..cn).map(|_| r.unit() * 3.0).collect())
                        .unwrap();
                let c = konst(&mut net, cv);
                let ins = if c_first { [c, xf] } else { [xf, c] };
                let mut t = layer(&mut net, Op::Binary(op), &ins);
                if relu {
                    t = layer(&mut net, Op::Unary(UnaryOp::Relu), &[t]);
                }
                let y = add_q(&mut net, t, yt, yq);
                net.mark_output(y).unwrap();
                let what = format!("{op:?} {dims:?} by {cdims:?} {xt} → {yt}, c first {c_first}");
                let input = all_bytes(&mut r, xt, dims);
                // A constant of one value makes the chain a function of x: a table.
                let kind = if cn == 1 {
                    "QLinearLookup"
                } else {
                    "QLinearBinary"
                };
                same_output_bytes(&what, &net, x, input, |ops| {
                    assert_eq!(ops.len(), 1, "{what}: one layer: {ops:?}");
                    assert_eq!(custom(&ops[0]), kind, "{what}");
                });
            }
        }
    }
}

#[test]
fn batch_norm_constants_join_the_int8_region() {
    // NHWC image → transpose → Mul(scale [C, 1, 1]) → Add(shift [1, C, 1, 1]) → Relu → 1×1
    // conv, as DenseNet's int8 blocks import: one region, the constants channels-last.
    // With the shift's dims those of the scale, the two layers compose into one (computing
    // both per row); with other dims (broadcasting alike) they stay two.
    for (c, h, w, same_dims) in [
        (3, 5, 7, false),
        // One channel: constants of one value, two byte tables (not composed).
        (1, 1, 1, false),
        (7, 1, 1, true),
        (16, 8, 9, true),
        (5, 3, 2, false),
    ] {
        let mut r = Rng(60 + c as u64);
        let mut net = Network::new();
        let (x, xt) = nhwc_image(&mut net, [h, w, c]);
        let xf = add_dq(&mut net, xt, DataType::I8, (0.04, 2));
        let sc = konst(&mut net, r.tensor(&[c, 1, 1], 2.0));
        let m = layer(&mut net, Op::Binary(BinaryOp::Mul), &[xf, sc]);
        let m = add_q(&mut net, m, DataType::I8, (0.05, -1));
        let mf = add_dq(&mut net, m, DataType::I8, (0.05, -1));
        let sh_dims: &[usize] = if same_dims { &[c, 1, 1] } else { &[1, c, 1, 1] };
        let sh = konst(&mut net, r.tensor(sh_dims, 1.0));
        let a = layer(&mut net, Op::Binary(BinaryOp::Add), &[sh, mf]);
        let a = layer(&mut net, Op::Unary(UnaryOp::Relu), &[a]);
        let a = add_q(&mut net, a, DataType::I8, (0.03, -128));
        let y = conv1x1(&mut net, &mut r, a, (0.03, -128), c, c + 2);
        net.mark_output(y).unwrap();
        let input = all_bytes(&mut r, DataType::I8, &[1, h, w, c]);
        let what = format!("BN c {c} {h}×{w}, same dims {same_dims}");
        same_output_bytes(&what, &net, x, input, |ops| {
            only_the_exit_transpose(&what, ops);
            let binaries = if same_dims { 1 } else { 2 };
            assert_eq!(
                ops.len(),
                binaries + 2,
                "{what}: Mul, Add, conv, exit: {ops:?}"
            );
        });
    }
}

#[test]
fn channel_concats_join_the_int8_region() {
    // DenseNet's feature reuse: conv a, conv b of a, Concat(a, b) along the channels (QDQ of
    // one quantization, folded to an 8-bit Concat), conv of the concatenation: one region.
    for (c, h, w) in [(3, 5, 7), (1, 1, 1), (8, 4, 9)] {
        let mut r = Rng(70 + c as u64);
        let mut net = Network::new();
        let (x, xt) = nhwc_image(&mut net, [h, w, c]);
        let q = (0.05, -2);
        let a = conv1x1(&mut net, &mut r, xt, (0.04, 2), c, c + 1);
        let b = conv1x1(&mut net, &mut r, a, q, c + 1, 2);
        let af = add_dq(&mut net, a, DataType::I8, q);
        let bf = add_dq(&mut net, b, DataType::I8, q);
        let cat = layer(&mut net, Op::Concat { axis: 1 }, &[af, bf]);
        let cat = add_q(&mut net, cat, DataType::I8, q);
        let y = conv1x1(&mut net, &mut r, cat, q, c + 3, 5);
        net.mark_output(y).unwrap();
        let input = all_bytes(&mut r, DataType::I8, &[1, h, w, c]);
        let what = format!("Concat c {c} {h}×{w}");
        same_output_bytes(&what, &net, x, input, |ops| {
            only_the_exit_transpose(&what, ops);
            assert!(ops.contains(&Op::Concat { axis: 3 }), "{what}: {ops:?}");
        });
    }
}

fn avg_pool(k: [usize; 2], s: [usize; 2]) -> Op {
    Op::Pool(backplane_core::ops::PoolDesc {
        kind: PoolKind::Average,
        window: Window {
            kernel: k.to_vec(),
            strides: s.to_vec(),
            dilations: vec![1, 1],
            pads: vec![0; 4],
            auto_pad: AutoPad::NotSet,
        },
        ceil_mode: false,
        count_include_pad: false,
    })
}

#[test]
fn quantized_average_pools_equal_the_chain_on_cpu_ref() {
    let cases: [([usize; 4], [usize; 2], [usize; 2]); 5] = [
        ([1, 1, 1, 1], [1, 1], [1, 1]),
        ([1, 3, 8, 8], [2, 2], [2, 2]),
        ([2, 5, 7, 9], [3, 2], [2, 3]),
        ([1, 128, 16, 16], [2, 2], [2, 2]),
        ([1, 2, 13, 11], [13, 11], [1, 1]),
    ];
    let mut r = Rng(77);
    for (i, (dims, k, s)) in cases.into_iter().enumerate() {
        for (xt, yt) in [(DataType::I8, DataType::I8), (DataType::U8, DataType::U8)] {
            let xq = if xt == DataType::I8 {
                (0.03, -7)
            } else {
                (0.03, 140)
            };
            let yq = if i % 2 == 0 {
                (0.03 * 1.3, 1)
            } else {
                (0.5, 9)
            };
            let mut net = Network::new();
            let n: usize = dims.iter().product();
            let x = net
                .add_input("x", q8(xt, &dims, vec![0; n]).info().clone())
                .unwrap();
            let t = add_dq(&mut net, x, xt, xq);
            let t = layer(&mut net, avg_pool(k, s), &[t]);
            let y = add_q(&mut net, t, yt, yq);
            net.mark_output(y).unwrap();
            let what = format!("AveragePool {k:?}/{s:?} {dims:?} {xt}");
            let input = all_bytes(&mut r, xt, &dims);
            same_output_bytes(&what, &net, x, input, |ops| {
                assert_eq!(ops.len(), 1, "{what}: one layer");
                assert_eq!(custom(&ops[0]), "QLinearPool", "{what}");
            });
        }
    }
}

#[test]
fn average_pools_join_the_int8_region() {
    // DenseNet's transition: 1×1 conv → 2×2 average pool → 1×1 conv, channels-last.
    for (c, h, w) in [(3, 4, 6), (2, 2, 2), (16, 9, 7)] {
        let mut r = Rng(90 + c as u64);
        let mut net = Network::new();
        let (x, xt) = nhwc_image(&mut net, [h, w, c]);
        let a = conv1x1(&mut net, &mut r, xt, (0.04, 2), c, c + 1);
        let af = add_dq(&mut net, a, DataType::I8, (0.05, -2));
        let p = layer(&mut net, avg_pool([2, 2], [2, 2]), &[af]);
        let p = add_q(&mut net, p, DataType::I8, (0.05, -2));
        let y = conv1x1(&mut net, &mut r, p, (0.05, -2), c + 1, 3);
        net.mark_output(y).unwrap();
        let input = all_bytes(&mut r, DataType::I8, &[1, h, w, c]);
        let what = format!("transition c {c} {h}×{w}");
        same_output_bytes(&what, &net, x, input, |ops| {
            only_the_exit_transpose(&what, ops);
            assert_eq!(ops.len(), 4, "{what}: conv, pool, conv, exit: {ops:?}");
        });
    }
}

#[test]
fn chained_constant_binaries_compose_into_one_layer() {
    // x → DequantizeLinear → Mul(scale) → QuantizeLinear → DequantizeLinear → Add(shift)
    // → Relu → QuantizeLinear, NCHW (no region): one layer, the chain's bytes.
    let mut r = Rng(81);
    for (dims, cdims) in [
        (&[1usize, 6, 5, 4][..], &[6usize, 1, 1][..]),
        (&[2, 3, 7, 7], &[1, 3, 1, 1]),
        (&[1, 4, 2, 9], &[9]),
    ] {
        for (xt, yt) in [(DataType::I8, DataType::I8), (DataType::U8, DataType::I8)] {
            let mut net = Network::new();
            let n: usize = dims.iter().product();
            let x = net
                .add_input("x", q8(xt, dims, vec![0; n]).info().clone())
                .unwrap();
            let xq = if xt == DataType::I8 {
                (0.05, 1)
            } else {
                (0.05, 127)
            };
            let xf = add_dq(&mut net, x, xt, xq);
            let sc = konst(&mut net, r.tensor(cdims, 2.0));
            let m = layer(&mut net, Op::Binary(BinaryOp::Mul), &[xf, sc]);
            let m = add_q(&mut net, m, DataType::I8, (0.06, 2));
            let mf = add_dq(&mut net, m, DataType::I8, (0.06, 2));
            let sh = konst(&mut net, r.tensor(cdims, 1.0));
            let a = layer(&mut net, Op::Binary(BinaryOp::Add), &[mf, sh]);
            let a = layer(&mut net, Op::Unary(UnaryOp::Relu), &[a]);
            let y = add_q(&mut net, a, yt, (0.04, -100));
            net.mark_output(y).unwrap();
            let what = format!("scale, shift {dims:?} by {cdims:?} {xt} → {yt}");
            let input = all_bytes(&mut r, xt, dims);
            same_output_bytes(&what, &net, x, input, |ops| {
                assert_eq!(ops.len(), 1, "{what}: one layer: {ops:?}");
                assert_eq!(custom(&ops[0]), "QLinearBinary", "{what}");
            });
        }
    }
}

#[test]
fn three_constant_binaries_compose_with_other_types_between() {
    // x → Mul(scale) → uint8 → shift + x (the constant first) → int8 → x - c → Relu →
    // uint8: one layer (composed twice), whose rows compute the three layers in turn.
    let mut r = Rng(83);
    for (dims, cdims) in [
        (&[1usize, 5, 3, 7][..], &[5usize, 1, 1][..]),
        (&[1, 2, 1, 17], &[17]),
        (&[2, 2, 1, 1], &[2, 1, 1]),
    ] {
        for xt in [DataType::I8, DataType::U8] {
            let mut net = Network::new();
            let n: usize = dims.iter().product();
            let x = net
                .add_input("x", q8(xt, dims, vec![0; n]).info().clone())
                .unwrap();
            let xq = if xt == DataType::I8 {
                (0.05, -128)
            } else {
                (0.05, 255)
            };
            let xf = add_dq(&mut net, x, xt, xq);
            let sc = konst(&mut net, r.tensor(cdims, 2.0));
            let m = layer(&mut net, Op::Binary(BinaryOp::Mul), &[xf, sc]);
            let m = add_q(&mut net, m, DataType::U8, (0.07, 130));
            let mf = add_dq(&mut net, m, DataType::U8, (0.07, 130));
            let sh = konst(&mut net, r.tensor(cdims, 1.0));
            let a = layer(&mut net, Op::Binary(BinaryOp::Add), &[sh, mf]);
            let a = add_q(&mut net, a, DataType::I8, (0.04, 3));
            let af = add_dq(&mut net, a, DataType::I8, (0.04, 3));
            let c3 = konst(&mut net, r.tensor(cdims, 1.5));
            let s = layer(&mut net, Op::Binary(BinaryOp::Sub), &[af, c3]);
            let s = layer(&mut net, Op::Unary(UnaryOp::Relu), &[s]);
            let y = add_q(&mut net, s, DataType::U8, (0.03, 7));
            net.mark_output(y).unwrap();
            let what = format!("three layers {dims:?} by {cdims:?} {xt}");
            let input = all_bytes(&mut r, xt, dims);
            same_output_bytes(&what, &net, x, input, |ops| {
                assert_eq!(ops.len(), 1, "{what}: one layer: {ops:?}");
                assert_eq!(custom(&ops[0]), "QLinearBinary", "{what}");
            });
        }
    }
}

#[test]
fn wide_batch_norms_equal_the_chain() {
    support::bn::batch_norms_equal_the_chain();
}
