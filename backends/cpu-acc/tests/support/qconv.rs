//! The folded int8 convolution's test harness (a `DequantizeLinear → Conv → act →
//! QuantizeLinear` chain folded by CpuAcc, run NCHW and channels-last, against the chain on
//! CpuRef) and the thread-split cases that every int8 tier's test binary runs.

use super::{q8, reference, run_desc, zp, Rng};
use backplane_backend_api::{Backend, LayerDesc, SubgraphView, ValueRef};
use backplane_core::ops::{AutoPad, ConvDesc, UnaryOp, Window};
use backplane_core::{DataType, LayerId, Network, Op, Tensor, TensorInfo};
use backplane_cpu_acc::CpuAccBackend;
use std::sync::Arc;

/// One folded convolution case.
#[derive(Clone, Copy)]
pub struct Case {
    pub x: [usize; 4],
    pub m: usize,
    pub k: [usize; 2],
    pub stride: usize,
    pub dilation: usize,
    pub pad: usize,
    pub group: usize,
    pub act: Option<UnaryOp>,
    pub per_channel: bool,
    pub xt: DataType,
    pub wt: DataType,
    /// The u8 weights' zero point (128 keeps the centered weights within i8, for the byte
    /// GEMM; others leave the layer on the 16-bit pair GEMM).
    pub u8_zero: u8,
    /// Threads the folded layer runs on.
    pub threads: usize,
}

/// Build the QDQ chain, fold it with CpuAcc's optimize_subgraph, run the folded layer and
/// the chain on CpuRef; returns (elements off by one, elements). Then the same chain behind a
/// `Transpose` from an NHWC input (as the TFLite importer writes it): where CpuAcc runs it
/// channels-last (depthwise or one group), its output must equal the NCHW layer's bytes.
pub fn run_case(c: &Case, seed: u64) -> (usize, usize) {
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
pub fn run_layout(c: &Case, seed: u64, nhwc_in: bool) -> (Option<Tensor>, (usize, usize)) {
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
    // The weights the layer reads: the model's, or those of the taps some output reaches
    // (a window larger than the input, trimmed by the fold).
    let w_used = match &rep.inputs[1] {
        ValueRef::NewConstant(t) => {
            let d = t.shape().dims();
            assert!(
                d[..2] == [c.m, cg] && d[2] <= kh && d[3] <= kw && d[2] * d[3] < kh * kw,
                "trimmed weights {d:?} of a {kh}×{kw} kernel"
            );
            t.as_ref().clone()
        }
        _ => wq.clone(),
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
        inputs: vec![
            xin.info().clone(),
            w_used.info().clone(),
            bias_q.info().clone(),
        ],
        outputs: vec![yinfo],
        constants: vec![None, Some(Arc::new(w_used.clone())), Some(bias_q.clone())],
    };
    let mut got = run_desc(&desc, &[xin, &w_used, bias_q], c.threads);
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

/// Channels-last one-group layers whose few output pixels the threads share by output
/// channels (7×7 and smaller planes, as a classifier's last layers) and others they share by
/// blocks of pixels: the same bytes at one, two and three threads, on the byte GEMM (i8
/// weights, u8 ones centered by 128) and the pair GEMM (u8 weights whose centered values
/// leave i8), each within one quantum of CpuRef and equal to the NCHW layer.
pub fn splits_give_equal_bytes() {
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
        // More first layers (few channels, window runs of at most 32 bytes, the padding's
        // taps at the zero point): u8 pixels of 4 channels shared by rows, two images of 3
        // channels, runs of 24 bytes (two vector moves), dilated taps of 2 channels, one
        // pixel under a 3×3 window, and a 2×2 image at stride 2 (fewer rows than threads).
        Case {
            x: [1, 4, 97, 89],
            m: 16,
            k: [3, 3],
            stride: 2,
            pad: 1,
            xt: DataType::U8,
            ..base
        },
        Case {
            x: [2, 3, 17, 19],
            m: 5,
            k: [3, 3],
            pad: 1,
            ..base
        },
        Case {
            x: [1, 8, 13, 11],
            m: 7,
            k: [3, 3],
            stride: 2,
            pad: 1,
            ..base
        },
        Case {
            x: [1, 2, 9, 7],
            m: 3,
            k: [5, 5],
            dilation: 2,
            pad: 3,
            xt: DataType::U8,
            ..base
        },
        Case {
            x: [1, 3, 1, 1],
            m: 2,
            k: [3, 3],
            pad: 1,
            ..base
        },
        Case {
            x: [1, 3, 2, 2],
            m: 13,
            k: [3, 3],
            stride: 2,
            pad: 1,
            xt: DataType::U8,
            ..base
        },
        // Shared by channels, each share writing its columns of the output in place: one
        // pixel (997 channels, a prime: the last panel short), 3×3 pixels read in place (u8)
        // and their 3×3 windows (i8, from the padded copy), and the pair GEMM's 3×3 plane.
        // (The first case, 49 pixels, is shared by channels on the pair GEMM of the AVX2 and
        // portable tiers: a share's tile of 48 rows, then one of a row.)
        Case {
            x: [1, 601, 1, 1],
            m: 997,
            ..base
        },
        Case {
            x: [1, 512, 3, 3],
            m: 509,
            xt: DataType::U8,
            ..base
        },
        Case {
            x: [1, 67, 3, 3],
            m: 131,
            k: [3, 3],
            pad: 1,
            ..base
        },
        Case {
            x: [1, 509, 3, 3],
            m: 131,
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
