//! CpuAcc's quantized layers against CpuRef: QuantizeLinear / DequantizeLinear value for
//! value, and the int8 convolution a DequantizeLinear → Conv → Relu/Clip → QuantizeLinear
//! chain folds into within one quantum of the chain run by CpuRef (the count of elements
//! off is printed), on odd shapes, u8 and i8, per-tensor and per-channel weights.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, LayerDesc, SubgraphView, ValueRef};
use backplane_core::ops::{AutoPad, BinaryOp, ConvDesc, UnaryOp, Window};
use backplane_core::{DataType, LayerId, Network, Op, Tensor, TensorInfo};
use backplane_cpu_acc::CpuAccBackend;
use std::sync::Arc;
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

/// One folded convolution case.
#[derive(Clone, Copy)]
struct Case {
    x: [usize; 4],
    m: usize,
    k: [usize; 2],
    stride: usize,
    dilation: usize,
    pad: usize,
    group: usize,
    act: Option<UnaryOp>,
    per_channel: bool,
    xt: DataType,
    wt: DataType,
    /// The u8 weights' zero point (128 keeps the centered weights within i8, for the byte
    /// GEMM; others leave the layer on the 16-bit pair GEMM).
    u8_zero: u8,
    /// Threads the folded layer runs on.
    threads: usize,
}

/// Build the QDQ chain, fold it with CpuAcc's optimize_subgraph, run the folded layer and
/// the chain on CpuRef; returns (elements off by one, elements). Then the same chain behind a
/// `Transpose` from an NHWC input (as the TFLite importer writes it): where CpuAcc runs it
/// channels-last (depthwise or one group), its output must equal the NCHW layer's bytes.
fn run_case(c: &Case, seed: u64) -> (usize, usize) {
    let (got, off) = run_layout(c, seed, false);
    let (nhwc, _) = run_layout(c, seed, true);
    match nhwc {
        Some(y) => assert_eq!(
            y.bytes(),
            got.as_ref().map(|t| t.bytes()).unwrap_or_default(),
            "channels-last output differs from NCHW"
        ),
        None => assert!(
            !(c.group == 1 || (c.group == c.x[1] && c.m == c.x[1])),
            "a depthwise or one-group convolution runs channels-last"
        ),
    }
    off
}

/// [`run_case`] for one layout: the folded layer's NCHW output (`None` for an NHWC input
/// whose convolution stayed NCHW) and the elements off.
fn run_layout(c: &Case, seed: u64, nhwc_in: bool) -> (Option<Tensor>, (usize, usize)) {
    let mut r = Rng(seed);
    let [n, ci, h, w] = c.x;
    let cg = ci / c.group;
    let (kh, kw) = (c.k[0], c.k[1]);
    let mut net = Network::new();
    let x = q8(c.xt, &c.x, r.bytes(n * ci * h * w));
    let wq = q8(c.wt, &[c.m, cg, kh, kw], r.bytes(c.m * cg * kh * kw));
    let sx = 0.02f32;
    let zx = if c.xt == DataType::U8 { 120 } else { -3 };
    let sws: Vec<f32> = (0..c.m).map(|i| 0.004 + 0.0007 * (i % 11) as f32).collect();
    let (sw, zw) = if c.per_channel {
        let z = if c.wt == DataType::U8 {
            vec![c.u8_zero; c.m]
        } else {
            vec![0u8; c.m]
        };
        (
            Tensor::from_vec(vec![c.m], sws.clone()).unwrap(),
            q8(c.wt, &[c.m], z),
        )
    } else {
        (
            Tensor::scalar(sws[0]),
            zp(
                c.wt,
                if c.wt == DataType::U8 {
                    c.u8_zero.into()
                } else {
                    0
                },
            ),
        )
    };
    let bias: Vec<i32> = (0..c.m)
        .map(|i| (r.next() % 4001) as i32 - 2000 + i as i32)
        .collect();
    let bias_scales: Vec<f32> = (0..c.m)
        .map(|i| sx * if c.per_channel { sws[i] } else { sws[0] })
        .collect();
    let b = Tensor::from_vec(vec![c.m], bias).unwrap();
    let sb = Tensor::from_vec(vec![c.m], bias_scales).unwrap();
    let (sy, zy) = (0.05f32, if c.xt == DataType::U8 { 100 } else { 5 });

    let to_nhwc = Op::Transpose {
        perm: vec![0, 2, 3, 1],
    };
    let x_nhwc = reference(&to_nhwc, &[&x]).remove(0);
    let xi = if nhwc_in {
        let xi = net.add_input("x", x_nhwc.info().clone()).unwrap();
        let to_nchw = Op::Transpose {
            perm: vec![0, 3, 1, 2],
        };
        net.add_layer("to_nchw", to_nchw, &[xi]).unwrap()[0]
    } else {
        net.add_input("x", x.info().clone()).unwrap()
    };
    let k = |net: &mut Network, name: &str, t: &Tensor| net.add_constant(name, t.clone()).unwrap();
    let (sxi, zxi) = (
        k(&mut net, "sx", &Tensor::scalar(sx)),
        k(&mut net, "zx", &zp(c.xt, zx)),
    );
    let dq = |axis| Op::DequantizeLinear {
        axis,
        to: DataType::F32,
        block_size: 0,
    };
    let xf = net.add_layer("dq_x", dq(1), &[xi, sxi, zxi]).unwrap()[0];
    let (wi, swi, zwi) = (
        k(&mut net, "w", &wq),
        k(&mut net, "sw", &sw),
        k(&mut net, "zw", &zw),
    );
    let wf = net.add_layer("dq_w", dq(0), &[wi, swi, zwi]).unwrap()[0];
    let (bi, sbi) = (k(&mut net, "b", &b), k(&mut net, "sb", &sb));
    let bf = net.add_layer("dq_b", dq(0), &[bi, sbi]).unwrap()[0];
    let conv = Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![kh, kw],
            strides: vec![c.stride; 2],
            dilations: vec![c.dilation; 2],
            pads: vec![c.pad; 4],
            auto_pad: AutoPad::NotSet,
        },
        group: c.group,
    });
    let mut t = net.add_layer("conv", conv.clone(), &[xf, wf, bf]).unwrap()[0];
    if let Some(a) = c.act {
        t = net.add_layer("act", Op::Unary(a), &[t]).unwrap()[0];
    }
    let (syi, zyi) = (
        k(&mut net, "sy", &Tensor::scalar(sy)),
        k(&mut net, "zy", &zp(c.xt, zy)),
    );
    let quant = Op::QuantizeLinear {
        axis: 1,
        to: c.xt,
        block_size: 0,
        saturate: true,
        requant: backplane_core::quant::Requantization::F32,
    };
    let y = net.add_layer("q", quant.clone(), &[t, syi, zyi]).unwrap()[0];
    net.mark_output(y).unwrap();

    // Fold.
    let layers: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
    let view = SubgraphView::new(&net, layers.clone());
    let views = CpuAccBackend::with_threads(2).optimize_subgraph(&view);
    assert_eq!(
        views.substitutions.len(),
        1,
        "the chain folds into one layer"
    );
    let sub = &views.substitutions[0];
    let rep = &sub.replacement[0];
    assert!(matches!(&rep.op, Op::Custom(op) if op.op_type == "QLinearConv"));
    let ValueRef::NewConstant(bias_q) = &rep.inputs[2] else {
        panic!("the bias is a new constant");
    };
    let y_info = net.tensor(y).info.clone();
    let channels_last = sub.replacement.len() == 2;
    let (xin, yinfo) = if channels_last {
        // The NHWC layer reads the model's input as it is, then one transpose back.
        assert!(nhwc_in, "an NCHW input stays NCHW");
        assert_eq!(
            sub.replaced.len(),
            layers.len(),
            "the input transpose goes too"
        );
        assert!(matches!(&sub.replacement[1].op, Op::Transpose { .. }));
        let [yn, ym, yh, yw] = <[usize; 4]>::try_from(y_info.shape.dims()).unwrap();
        (&x_nhwc, TensorInfo::new(y_info.dtype, vec![yn, yh, yw, ym]))
    } else {
        let transposed = usize::from(nhwc_in);
        assert_eq!(
            sub.replaced.len() + transposed,
            layers.len(),
            "every layer of the chain is replaced"
        );
        if nhwc_in {
            return (None, (0, 0));
        }
        (&x, y_info)
    };
    let desc = LayerDesc {
        name: rep.name.clone(),
        op: rep.op.clone(),
        inputs: vec![xin.info().clone(), wq.info().clone(), bias_q.info().clone()],
        outputs: vec![yinfo],
        constants: vec![None, Some(Arc::new(wq.clone())), Some(bias_q.clone())],
    };
    let mut got = run_desc(&desc, &[xin, &wq, bias_q], c.threads);
    if channels_last {
        let back = Op::Transpose {
            perm: vec![0, 3, 1, 2],
        };
        got = reference(&back, &[&got[0]]);
    }

    // The chain on CpuRef.
    let one = |op: &Op, ins: &[&Tensor]| reference(op, ins).remove(0);
    let xf = one(&dq(1), &[&x, &Tensor::scalar(sx), &zp(c.xt, zx)]);
    let wf = one(&dq(0), &[&wq, &sw, &zw]);
    let bf = one(&dq(0), &[&b, &sb]);
    let mut yf = one(&conv, &[&xf, &wf, &bf]);
    if let Some(a) = c.act {
        yf = one(&Op::Unary(a), &[&yf]);
    }
    let want = one(&quant, &[&yf, &Tensor::scalar(sy), &zp(c.xt, zy)]);
    let signed = c.xt == DataType::I8;
    let v = |b: u8| {
        if signed {
            i32::from(b as i8)
        } else {
            i32::from(b)
        }
    };
    let mut off = 0;
    for (i, (&g, &wv)) in got[0].bytes().iter().zip(want.bytes()).enumerate() {
        let d = (v(g) - v(wv)).abs();
        assert!(
            d <= 1,
            "element {i}: {} vs {} (more than one quantum off)",
            v(g),
            v(wv)
        );
        off += usize::from(d == 1);
    }
    (Some(got.remove(0)), (off, want.bytes().len()))
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
/// channels (7×7 and smaller planes, as a classifier's last layers) and others they share by
/// blocks of pixels: the same bytes at one, two and three threads, on the byte GEMM (i8
/// weights, u8 ones centered by 128) and the pair GEMM (u8 weights whose centered values
/// leave i8), each within one quantum of CpuRef and equal to the NCHW layer.
#[test]
fn channels_last_gemm_splits_give_equal_bytes_at_any_thread_count() {
    let base = Case {
        x: [1, 256, 7, 7],
        m: 160,
        k: [1, 1],
        stride: 1,
        dilation: 1,
        pad: 0,
        group: 1,
        act: Some(UnaryOp::Clip { min: 0.0, max: 6.0 }),
        per_channel: true,
        xt: DataType::I8,
        wt: DataType::I8,
        u8_zero: 128,
        threads: 1,
    };
    // Each layer has at least twice CpuAcc's fewest multiply-adds per thread (2^19), so
    // that two and three threads share it.
    let cases = [
        // 49 pixels of 160 and of 37 (a prime: the last panel short) channels, i8 and u8.
        Case { ..base },
        Case {
            x: [1, 601, 7, 7],
            m: 37,
            xt: DataType::U8,
            ..base
        },
        // Pair GEMM (u8 weights of zero point 3), 5×3 pixels, 3×3 windows.
        Case {
            x: [1, 190, 5, 3],
            m: 53,
            k: [3, 3],
            pad: 1,
            per_channel: false,
            wt: DataType::U8,
            u8_zero: 3,
            ..base
        },
        Case {
            x: [1, 320, 7, 7],
            m: 70,
            per_channel: false,
            wt: DataType::U8,
            u8_zero: 3,
            xt: DataType::U8,
            ..base
        },
        // Two images of 5×5 pixels (50 rows), a strided 3×3 to 7×7, and 14×14 (shared by
        // blocks of pixels).
        Case {
            x: [2, 448, 5, 5],
            m: 48,
            ..base
        },
        Case {
            x: [1, 80, 13, 13],
            m: 40,
            k: [3, 3],
            stride: 2,
            pad: 1,
            ..base
        },
        Case {
            x: [1, 96, 14, 14],
            m: 64,
            ..base
        },
        // 12×12 and 11×13 pixels (143, a prime's neighbour: the last tile one row short)
        // shared by rows in whole tiles or half tiles of the kernel, not in blocks of A
        // rows: shares end inside a block. i8 pixels (a block copy per share), u8 ones read
        // in place, and the pair GEMM (3×3 windows); 6×6 pixels cut in shares of 18 and 6
        // rows (half tiles) at two and three threads.
        Case {
            x: [1, 256, 6, 6],
            m: 256,
            ..base
        },
        Case {
            x: [1, 200, 6, 6],
            m: 83,
            xt: DataType::U8,
            ..base
        },
        Case {
            x: [1, 128, 12, 12],
            m: 128,
            ..base
        },
        Case {
            x: [1, 61, 11, 13],
            m: 67,
            xt: DataType::U8,
            ..base
        },
        Case {
            x: [1, 29, 13, 11],
            m: 41,
            k: [3, 3],
            pad: 1,
            per_channel: false,
            wt: DataType::U8,
            u8_zero: 3,
            ..base
        },
        // A first layer (3 channels, 3×3 stride 2): its padded input copy, large enough to be
        // shared by the threads, on the byte and the pair GEMM.
        Case {
            x: [1, 3, 151, 149],
            m: 8,
            k: [3, 3],
            stride: 2,
            pad: 1,
            ..base
        },
        Case {
            x: [1, 3, 149, 151],
            m: 11,
            k: [3, 3],
            stride: 2,
            pad: 1,
            per_channel: false,
            wt: DataType::U8,
            u8_zero: 3,
            ..base
        },
    ];
    for (i, c) in cases.iter().enumerate() {
        let outs: Vec<Tensor> = [1, 2, 3]
            .into_iter()
            .map(|threads| {
                let c = Case { threads, ..*c };
                run_case(&c, 300 + i as u64);
                run_layout(&c, 300 + i as u64, true).0.unwrap()
            })
            .collect();
        for (t, y) in outs.iter().enumerate().skip(1) {
            assert_eq!(
                y.bytes(),
                outs[0].bytes(),
                "case {i}: {} threads differ from one",
                t + 1
            );
        }
    }
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
