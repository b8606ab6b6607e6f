//! CpuAcc's quantized layers against CpuRef: QuantizeLinear / DequantizeLinear value for
//! value, and the int8 convolution a DequantizeLinear → Conv → Relu/Clip → QuantizeLinear
//! chain folds into within one quantum of the chain run by CpuRef (the count of elements
//! off is printed), on odd shapes, u8 and i8, per-tensor and per-channel weights.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, LayerDesc, SubgraphView};
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{DataType, LayerId, Network, Op, Tensor};
use backplane_cpu_acc::CpuAccBackend;
use support::qconv::{run_case, Case};
use support::{acc, q8, reference, run_desc, zp, Rng};

#[test]
fn quantize_and_dequantize_match_cpu_ref_bit_for_bit() {
    let mut r = Rng(7);
    for dt in [DataType::I8, DataType::U8] {
        for dims in [
            vec![1usize],
            vec![3, 5, 7],
            vec![2, 13, 1, 17],
            vec![1, 64, 31, 31],
        ] {
            let n: usize = dims.iter().product();
            let x: Vec<f32> = (0..n)
                .map(|_| (r.next() % 2000) as f32 / 97.0 - 10.0)
                .collect();
            let mut x = Tensor::from_vec(dims.clone(), x).unwrap();
            // Ties and extremes.
            if let Ok(v) = x.as_mut_slice::<f32>() {
                v[0] = 0.5 * 0.078125;
                if v.len() > 2 {
                    v[1] = f32::INFINITY;
                    v[2] = f32::NAN;
                }
            }
            let c = dims.get(1).copied().unwrap_or(1);
            for per_axis in [false, true] {
                let (s, z) = if per_axis && dims.len() > 1 {
                    let s: Vec<f32> = (0..c).map(|i| 0.078125 * (1.0 + i as f32 * 0.37)).collect();
                    let z: Vec<u8> = (0..c).map(|i| (i * 7 % 50) as u8).collect();
                    (Tensor::from_vec(vec![c], s).unwrap(), q8(dt, &[c], z))
                } else {
                    (Tensor::scalar(0.078125f32), zp(dt, 3))
                };
                let op = Op::QuantizeLinear {
                    axis: 1,
                    to: dt,
                    block_size: 0,
                    saturate: true,
                    requant: backplane_core::quant::Requantization::F32,
                };
                let got = acc(&op, &[&x, &s, &z], &[false, true, true], 2);
                let want = reference(&op, &[&x, &s, &z]);
                assert_eq!(got[0].bytes(), want[0].bytes(), "quantize {dt} {dims:?}");
                let op = Op::DequantizeLinear {
                    axis: 1,
                    to: DataType::F32,
                    block_size: 0,
                };
                let got = acc(&op, &[&want[0], &s, &z], &[false, true, true], 1);
                let back = reference(&op, &[&want[0], &s, &z]);
                assert_eq!(got[0].bytes(), back[0].bytes(), "dequantize {dt} {dims:?}");
                // An int32 bias, dequantized.
                let b: Vec<i32> = (0..n).map(|i| (r.next() as i32) >> (i % 31)).collect();
                let b = Tensor::from_vec(dims.clone(), b).unwrap();
                let (bs, bz) = if per_axis && dims.len() > 1 {
                    (s.clone(), Tensor::from_vec(vec![c], vec![0i32; c]).unwrap())
                } else {
                    (Tensor::scalar(0.0003f32), Tensor::scalar(-7i32))
                };
                let got = acc(&op, &[&b, &bs, &bz], &[false, true, true], 1);
                let want = reference(&op, &[&b, &bs, &bz]);
                assert_eq!(got[0].bytes(), want[0].bytes(), "dequantize i32 {dims:?}");
            }
        }
    }
}

#[test]
fn folded_int8_convolutions_are_within_one_quantum_of_cpu_ref() {
    let relu = Some(UnaryOp::Relu);
    let relu6 = Some(UnaryOp::Clip { min: 0.0, max: 6.0 });
    let base = Case {
        x: [1, 3, 7, 7],
        m: 5,
        k: [3, 3],
        stride: 1,
        dilation: 1,
        pad: 1,
        group: 1,
        act: relu,
        per_channel: true,
        xt: DataType::U8,
        wt: DataType::I8,
        u8_zero: 128,
        threads: 2,
    };
    let cases = [
        Case { ..base },
        Case {
            x: [1, 1, 1, 1],
            m: 1,
            k: [1, 1],
            pad: 0,
            act: None,
            ..base
        },
        Case {
            x: [2, 17, 5, 5],
            m: 33,
            k: [1, 1],
            pad: 0,
            xt: DataType::I8,
            ..base
        },
        Case {
            x: [1, 13, 9, 9],
            m: 13,
            group: 13,
            stride: 2,
            act: relu6,
            xt: DataType::I8,
            ..base
        },
        Case {
            x: [1, 8, 11, 11],
            m: 12,
            group: 4,
            dilation: 2,
            pad: 2,
            per_channel: false,
            wt: DataType::U8,
            ..base
        },
        Case {
            x: [1, 6, 7, 5],
            m: 12,
            group: 6,
            k: [3, 1],
            act: None,
            ..base
        },
        Case {
            x: [1, 64, 28, 28],
            m: 96,
            k: [1, 1],
            pad: 0,
            xt: DataType::I8,
            ..base
        },
        Case {
            x: [1, 32, 23, 23],
            m: 37,
            k: [3, 3],
            stride: 2,
            act: relu6,
            ..base
        },
        // Depthwise, u8, prime channels, planes of one column, two images.
        Case {
            x: [2, 37, 6, 1],
            m: 37,
            group: 37,
            act: None,
            ..base
        },
        // Depthwise, dilated, per-tensor u8 weights.
        Case {
            x: [1, 19, 10, 9],
            m: 19,
            group: 19,
            dilation: 2,
            pad: 2,
            per_channel: false,
            wt: DataType::U8,
            ..base
        },
        // One group, 5×5 window, i8, a single output pixel.
        Case {
            x: [1, 3, 5, 5],
            m: 17,
            k: [5, 5],
            pad: 0,
            xt: DataType::I8,
            ..base
        },
        // Few pixels, many channels (the threads share the output channels): 1×1 over
        // 3×3 pixels, i8, and a strided 3×3 window to 3×3 pixels, u8.
        Case {
            x: [1, 40, 3, 3],
            m: 83,
            k: [1, 1],
            pad: 0,
            act: relu6,
            xt: DataType::I8,
            ..base
        },
        Case {
            x: [1, 7, 5, 5],
            m: 50,
            stride: 2,
            ..base
        },
        // 1×1 over u8 pixels, which the byte GEMM (where the tier has it) reads in place:
        // 24 channels (a multiple of 4), then 6 (the last rows copied), then few pixels of
        // many channels (the threads share the channels), per-tensor u8 weights.
        Case {
            x: [1, 24, 6, 7],
            m: 20,
            k: [1, 1],
            pad: 0,
            ..base
        },
        Case {
            x: [2, 6, 5, 3],
            m: 18,
            k: [1, 1],
            pad: 0,
            act: None,
            ..base
        },
        Case {
            x: [1, 12, 3, 3],
            m: 70,
            k: [1, 1],
            pad: 0,
            per_channel: false,
            wt: DataType::U8,
            ..base
        },
        // A strided 1×1 (windows from the padded copy) and a padded 2×2, i8.
        Case {
            x: [1, 9, 9, 8],
            m: 19,
            k: [1, 1],
            stride: 2,
            pad: 0,
            xt: DataType::I8,
            ..base
        },
        Case {
            x: [1, 5, 6, 6],
            m: 16,
            k: [2, 2],
            xt: DataType::I8,
            ..base
        },
        // Windows larger than the input: the taps no output reaches are dropped (a 3×3
        // over a 1×1 map becomes a 1×1 layer, 1×3 and 7×1 keep the reached columns or
        // rows, a dilated 3×3 its middle tap), i8 and u8, one and many output pixels.
        Case {
            x: [1, 48, 1, 1],
            m: 40,
            xt: DataType::I8,
            ..base
        },
        Case {
            x: [1, 20, 1, 1],
            m: 33,
            k: [1, 3],
            act: None,
            ..base
        },
        Case {
            x: [1, 17, 2, 1],
            m: 24,
            k: [7, 1],
            pad: 3,
            xt: DataType::I8,
            threads: 1,
            ..base
        },
        Case {
            x: [1, 16, 2, 2],
            m: 17,
            k: [3, 3],
            dilation: 2,
            pad: 2,
            per_channel: false,
            wt: DataType::U8,
            ..base
        },
        Case {
            x: [2, 9, 1, 1],
            m: 9,
            k: [3, 1],
            group: 9,
            ..base
        },
    ];
    let (mut off, mut total) = (0, 0);
    for (i, c) in cases.iter().enumerate() {
        let (o, t) = run_case(c, 100 + i as u64);
        println!("case {i}: {o} of {t} elements one quantum off");
        off += o;
        total += t;
    }
    println!("{off} of {total} elements one quantum off CpuRef's f32 chain");
}

/// Channels-last one-group layers whose few output pixels the threads share by output
/// channels and others they share by blocks of pixels: equal bytes at one, two and three
/// threads on the default tier ([`support::qconv::splits_give_equal_bytes`]; the AVX2 and
/// portable tiers run them in their own test binaries).
#[test]
fn channels_last_gemm_splits_give_equal_bytes_at_any_thread_count() {
    support::qconv::splits_give_equal_bytes();
}

/// `DequantizeLinear(a), DequantizeLinear(b) → op → (act) → QuantizeLinear` folded by CpuAcc
/// into one layer, against the chain on CpuRef: equal bit for bit (the folded layer computes
/// the chain's f32 operations in its order).
fn run_binary(op: BinaryOp, dims: &[usize], ta: DataType, tb: DataType, act: Option<UnaryOp>) {
    run_broadcast(op, [dims, dims], ta, tb, act);
}

/// [`run_binary`] with inputs of dims `a` and `b` (broadcast to the output by numpy's rule),
/// the folded layer run at one, two and three threads (long rows are cut into pieces for
/// the threads: every count must give CpuRef's bytes).
fn run_broadcast(
    op: BinaryOp,
    [a_dims, b_dims]: [&[usize]; 2],
    ta: DataType,
    tb: DataType,
    act: Option<UnaryOp>,
) {
    let mut r = Rng(a_dims.iter().product::<usize>() as u64 + 11);
    let a = q8(ta, a_dims, r.bytes(a_dims.iter().product()));
    let b = q8(tb, b_dims, r.bytes(b_dims.iter().product()));
    let zero = |dt: DataType| if dt == DataType::U8 { 131 } else { -7 };
    let (sa, sb, sy) = (
        0.031f32,
        0.017f32,
        if op == BinaryOp::Mul { 0.07f32 } else { 0.029 },
    );
    let yt = ta;
    let mut net = Network::new();
    let k = |net: &mut Network, name: &str, t: Tensor| net.add_constant(name, t).unwrap();
    let dq = Op::DequantizeLinear {
        axis: 1,
        to: DataType::F32,
        block_size: 0,
    };
    let ai = net.add_input("a", a.info().clone()).unwrap();
    let bi = net.add_input("b", b.info().clone()).unwrap();
    let (s1, z1) = (
        k(&mut net, "sa", Tensor::scalar(sa)),
        k(&mut net, "za", zp(ta, zero(ta))),
    );
    let (s2, z2) = (
        k(&mut net, "sb", Tensor::scalar(sb)),
        k(&mut net, "zb", zp(tb, zero(tb))),
    );
    let af = net.add_layer("dq_a", dq.clone(), &[ai, s1, z1]).unwrap()[0];
    let bf = net.add_layer("dq_b", dq.clone(), &[bi, s2, z2]).unwrap()[0];
    let mut t = net.add_layer("op", Op::Binary(op), &[af, bf]).unwrap()[0];
    if let Some(u) = act {
        t = net.add_layer("act", Op::Unary(u), &[t]).unwrap()[0];
    }
    let (s3, z3) = (
        k(&mut net, "sy", Tensor::scalar(sy)),
        k(&mut net, "zy", zp(yt, zero(yt))),
    );
    let quant = Op::QuantizeLinear {
        axis: 1,
        to: yt,
        block_size: 0,
        saturate: true,
        requant: backplane_core::quant::Requantization::F32,
    };
    let y = net.add_layer("q", quant.clone(), &[t, s3, z3]).unwrap()[0];
    net.mark_output(y).unwrap();

    let layers: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
    let view = SubgraphView::new(&net, layers.clone());
    let views = CpuAccBackend::with_threads(2).optimize_subgraph(&view);
    assert_eq!(views.substitutions.len(), 1, "{op:?}: the chain folds");
    let sub = &views.substitutions[0];
    assert_eq!(sub.replaced.len(), layers.len(), "{op:?}: every layer goes");
    let rep = &sub.replacement[0];
    assert!(matches!(&rep.op, Op::Custom(c) if c.op_type == "QLinearBinary"));
    let desc = LayerDesc {
        name: rep.name.clone(),
        op: rep.op.clone(),
        inputs: vec![a.info().clone(), b.info().clone()],
        outputs: vec![net.tensor(y).info.clone()],
        constants: vec![None, None],
    };
    let one = |op: &Op, ins: &[&Tensor]| reference(op, ins).remove(0);
    let af = one(&dq, &[&a, &Tensor::scalar(sa), &zp(ta, zero(ta))]);
    let bf = one(&dq, &[&b, &Tensor::scalar(sb), &zp(tb, zero(tb))]);
    let mut yf = one(&Op::Binary(op), &[&af, &bf]);
    if let Some(u) = act {
        yf = one(&Op::Unary(u), &[&yf]);
    }
    let want = one(&quant, &[&yf, &Tensor::scalar(sy), &zp(yt, zero(yt))]);
    for threads in [1, 2, 3] {
        let got = run_desc(&desc, &[&a, &b], threads);
        let off = got[0]
            .bytes()
            .iter()
            .zip(want.bytes())
            .filter(|(g, w)| g != w)
            .count();
        assert_eq!(
            off, 0,
            "{op:?} {a_dims:?} {b_dims:?} {ta}/{tb}, {threads} threads: {off} elements differ"
        );
    }
}

#[test]
fn folded_binary_chains_match_cpu_ref_bit_for_bit() {
    let relu6 = Some(UnaryOp::Clip { min: 0.0, max: 6.0 });
    let (i8t, u8t) = (DataType::I8, DataType::U8);
    run_binary(BinaryOp::Add, &[1], i8t, i8t, None);
    run_binary(BinaryOp::Add, &[1, 24, 17, 13], i8t, i8t, None);
    run_binary(BinaryOp::Add, &[2, 7, 31], u8t, i8t, Some(UnaryOp::Relu));
    run_binary(BinaryOp::Sub, &[3, 5, 7], u8t, u8t, relu6);
    run_binary(BinaryOp::Mul, &[1, 64, 65], i8t, u8t, None);
    run_binary(BinaryOp::Max, &[97], i8t, i8t, None);
    run_binary(BinaryOp::Min, &[4, 129, 130], u8t, u8t, Some(UnaryOp::Relu));
    // One long row (inputs of one shape, as MobileNetV2's residual sums) cut into pieces
    // that do not divide it, and long rows with one input repeating a value per row.
    run_binary(BinaryOp::Add, &[1, 56, 56, 24], i8t, i8t, None);
    run_binary(BinaryOp::Add, &[1, 7, 7, 157], u8t, u8t, relu6);
    run_broadcast(BinaryOp::Mul, [&[2, 3, 5003], &[2, 3, 1]], i8t, i8t, None);
    run_broadcast(BinaryOp::Sub, [&[3, 1], &[3, 9001]], u8t, i8t, None);
    // Channels-last squeeze-excite gates: short rows (the channels) repeated at every
    // pixel, run in blocks of whole rows; threads' chunks start inside a block.
    run_broadcast(
        BinaryOp::Mul,
        [&[1, 48, 48, 32], &[1, 1, 1, 32]],
        i8t,
        i8t,
        None,
    );
    run_broadcast(
        BinaryOp::Mul,
        [&[1, 1, 1, 13], &[2, 37, 11, 13]],
        u8t,
        i8t,
        None,
    );
    run_broadcast(
        BinaryOp::Add,
        [&[2, 5, 7, 3], &[2, 1, 1, 3]],
        i8t,
        u8t,
        relu6,
    );
    run_broadcast(
        BinaryOp::Max,
        [&[3, 1, 7, 5], &[1, 6, 1, 5]],
        i8t,
        i8t,
        None,
    );
    run_broadcast(BinaryOp::Min, [&[1, 97, 1], &[1, 97, 1]], u8t, u8t, None);
    run_broadcast(
        BinaryOp::Sub,
        [&[1, 9, 1, 1], &[1, 9, 1, 1]],
        i8t,
        i8t,
        None,
    );
}
