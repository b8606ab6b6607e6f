//! ONNX Runtime's dynamic quantization on CpuAcc against CpuRef: DynamicQuantizeLinear
//! (odd sizes, one sign only, all zeros, NaNs, past one parallel chunk), MatMulInteger as the
//! importer lowers it (`Cast → Sub → MatMul` on int32, then `Cast → Mul → Add` back to f32)
//! folded into one integer product, and plain int32 MatMuls (run-time operands,
//! broadcasting, wrap-around). Every result must equal CpuRef's bit for bit; one and two
//! threads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{BinaryOp, CustomOp};
use backplane_core::{DataType, Network, Op, Tensor, TensorId, TensorInfo};
use std::collections::HashMap;
use support::{acc, check, reference, run_acc, run_reference, Rng};

fn cast(to: DataType) -> Op {
    Op::Cast { to, saturate: true }
}

/// Equal tensors, bit for bit (NaNs included).
fn same(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.info(), want.info(), "{what}");
    assert_eq!(got.bytes(), want.bytes(), "{what}");
}

#[test]
fn dynamic_quantize_linear_equals_the_reference() {
    let mut r = Rng(4101);
    let op = Op::DynamicQuantizeLinear;
    let mut cases: Vec<(String, Tensor)> = Vec::new();
    for n in [1usize, 7, 16, 17, 100, 1000, 70_001] {
        cases.push((format!("uniform {n}"), r.tensor(&[n], 3.0)));
        let pos: Vec<f32> = (0..n).map(|_| r.unit().abs() * 0.01 + 0.5).collect();
        cases.push((
            format!("positive {n}"),
            Tensor::from_vec(vec![n], pos).unwrap(),
        ));
        let neg: Vec<f32> = (0..n).map(|_| -r.unit().abs() * 40.0 - 1.0).collect();
        cases.push((
            format!("negative {n}"),
            Tensor::from_vec(vec![n], neg).unwrap(),
        ));
    }
    cases.push((
        "zeros".into(),
        Tensor::from_vec(vec![5, 3], vec![0f32; 15]).unwrap(),
    ));
    let mut nan = r.tensor(&[4, 33], 2.0);
    nan.as_mut_slice::<f32>().unwrap()[40] = f32::NAN;
    cases.push(("a NaN".into(), nan));
    let mut inf = r.tensor(&[3, 29], 2.0);
    inf.as_mut_slice::<f32>().unwrap()[11] = f32::INFINITY;
    cases.push(("an infinity".into(), inf));
    // Values on the rounding boundaries: x / scale lands on k + 0.5.
    let ties: Vec<f32> = (0..=255).map(|i| i as f32 * 0.5 - 20.0).collect();
    cases.push(("ties".into(), Tensor::from_vec(vec![256], ties).unwrap()));
    for (what, x) in &cases {
        let want = reference(&op, &[x]);
        for threads in [1, 2] {
            let got = acc(&op, &[x], &[false], threads);
            for (slot, (g, w)) in got.iter().zip(&want).enumerate() {
                same(&format!("{what}, output {slot}, {threads} thread(s)"), g, w);
            }
        }
    }
}

/// The lowered MatMulInteger and its dequantization: `y = f32(MatMul(Cast(x) − Cast(zero),
/// w)) · scale (+ bias)`, with the variants the importer and ONNX Runtime write.
#[derive(Debug, Clone, Copy)]
struct Chain {
    m: usize,
    k: usize,
    n: usize,
    signed: bool,
    zero_point: bool,
    scale: bool,
    scale_first: bool,
    bias: bool,
    /// The weights as the import keeps large ones: an 8-bit constant (signed or not) cast to
    /// int32 in the network, less this zero point when not 0.
    bytes: Option<(bool, i32)>,
}

fn chain(c: Chain, r: &mut Rng) -> (Network, HashMap<TensorId, Tensor>, TensorId) {
    let dt = if c.signed { DataType::I8 } else { DataType::U8 };
    let mut net = Network::new();
    let mut feeds = HashMap::new();
    let x8 = Tensor::from_bytes(
        TensorInfo::new(dt, vec![2, c.m, c.k]),
        &r.bytes(2 * c.m * c.k),
    )
    .unwrap();
    let x = net.add_input("x", x8.info().clone()).unwrap();
    feeds.insert(x, x8);
    let layer = |net: &mut Network, name: &str, op: Op, inputs: &[TensorId]| {
        net.add_layer(name, op, inputs).unwrap()[0]
    };
    let wide = layer(&mut net, "widen0", cast(DataType::I32), &[x]);
    let centered = if c.zero_point {
        let z8 = Tensor::from_bytes(TensorInfo::new(dt, vec![]), &r.bytes(1)).unwrap();
        let z = net.add_input("zero", z8.info().clone()).unwrap();
        feeds.insert(z, z8);
        let zw = layer(&mut net, "zero_point0", cast(DataType::I32), &[z]);
        layer(
            &mut net,
            "centered0",
            Op::Binary(BinaryOp::Sub),
            &[wide, zw],
        )
    } else {
        wide
    };
    // Centered 8-bit weights, the extremes included.
    let wv: Vec<i32> = (0..c.k * c.n)
        .map(|i| match i % 11 {
            0 => 255,
            1 => -255,
            _ => (r.next() % 511) as i32 - 255,
        })
        .collect();
    let w = match c.bytes {
        None => net
            .add_constant("w", Tensor::from_vec(vec![c.k, c.n], wv).unwrap())
            .unwrap(),
        Some((signed, zero)) => {
            let wdt = if signed { DataType::I8 } else { DataType::U8 };
            let info = TensorInfo::new(wdt, vec![c.k, c.n]);
            let w8 = Tensor::from_bytes(info, &r.bytes(c.k * c.n)).unwrap();
            let w8 = net.add_constant("w8", w8).unwrap();
            let wide = layer(&mut net, "widen1", cast(DataType::I32), &[w8]);
            if zero == 0 {
                layer(&mut net, "centered1", Op::Identity, &[wide])
            } else {
                let z = net.add_constant("w_zero", Tensor::scalar(zero)).unwrap();
                layer(&mut net, "centered1", Op::Binary(BinaryOp::Sub), &[wide, z])
            }
        }
    };
    let mut y = layer(&mut net, "matmul", Op::MatMul, &[centered, w]);
    if c.scale {
        let f = layer(&mut net, "cast", cast(DataType::F32), &[y]);
        let s = net
            .add_input("scale", TensorInfo::new(DataType::F32, vec![]))
            .unwrap();
        feeds.insert(s, Tensor::scalar(0.37f32 / 255.0));
        let inputs = if c.scale_first { [s, f] } else { [f, s] };
        y = layer(&mut net, "scale_mul", Op::Binary(BinaryOp::Mul), &inputs);
        if c.bias {
            let b = net.add_constant("bias", r.tensor(&[c.n], 2.0)).unwrap();
            y = layer(&mut net, "bias_add", Op::Binary(BinaryOp::Add), &[b, y]);
        }
    }
    net.mark_output(y).unwrap();
    (net, feeds, y)
}

#[test]
fn lowered_matmul_integer_folds_into_one_integer_product() {
    let mut r = Rng(4102);
    let mut tested = 0;
    for (m, k, n) in [
        (1, 1, 1),
        (7, 5, 3),
        (33, 64, 17),
        (128, 257, 100),
        (4, 1152, 40),
    ] {
        for (i, &(signed, zero_point, scale, scale_first, bias, bytes)) in [
            (false, true, true, false, true, None),
            (false, true, true, true, false, Some((true, 0))),
            (true, true, false, false, false, None),
            (false, false, true, false, true, Some((false, 128))),
            (true, false, false, false, false, Some((true, -3))),
        ]
        .iter()
        .enumerate()
        {
            let c = Chain {
                m,
                k,
                n,
                signed,
                zero_point,
                scale,
                scale_first,
                bias,
                bytes,
            };
            let (net, feeds, y) = chain(c, &mut r);
            let want = run_reference(&net, &feeds);
            for threads in [1, 2] {
                let (got, ops) = run_acc(&net, &feeds, threads);
                let what = format!("{c:?} (variant {i}), {threads} thread(s)");
                let folded = matches!(ops.as_slice(), [Op::Custom(CustomOp { op_type, .. })]
                    if op_type == "MatMulInteger");
                assert!(folded, "{what}: {ops:?}");
                same(&what, &got[&y], &want[&y]);
            }
            tested += 1;
        }
    }
    assert_eq!(tested, 25);
}

#[test]
fn int32_matmuls_wrap_like_the_reference() {
    let mut r = Rng(4103);
    let ints = |r: &mut Rng, dims: &[usize], span: u64| {
        let n: usize = dims.iter().product();
        let v: Vec<i32> = (0..n)
            .map(|_| (r.next() % (2 * span + 1)) as i32 - span as i32)
            .collect();
        Tensor::from_vec(dims.to_vec(), v).unwrap()
    };
    for (a, b) in [
        (vec![3, 5], vec![5, 7]),
        (vec![2, 1, 4, 6], vec![3, 6, 2]),
        (vec![9], vec![9, 4]),
        (vec![2, 7, 3], vec![3]),
        (vec![1, 17], vec![17, 33]),
    ] {
        // Small values, then values whose products and sums wrap around.
        for span in [300u64, 2_000_000_000] {
            let (x, w) = (ints(&mut r, &a, span), ints(&mut r, &b, span));
            let what = format!("{a:?} x {b:?}, values to {span}");
            check(
                &what,
                &Op::MatMul,
                &[&x, &w],
                &[&[false, false], &[false, true]],
                0.0,
                0.0,
            );
        }
    }
}
