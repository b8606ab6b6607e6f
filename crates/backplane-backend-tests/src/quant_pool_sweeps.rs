//! Quantized pool sweeps: `DequantizeLinear → AveragePool | MaxPool → (Relu | Clip) →
//! QuantizeLinear` on int8 and uint8 tensors, as TFLite's importer writes a quantized
//! AVERAGE_POOL_2D / MAX_POOL_2D (SAME padding, not counted) and ONNX QDQ models do
//! (explicit, asymmetric pads, `count_include_pad`, `ceil_mode`): windows of one to three
//! taps a side, strides one to three, odd shapes and channel counts, zero points at the ends
//! of the range, the same or other parameters on both sides.

use crate::quant_sweeps::{bytes, dequantize, err, pick_zero, quantize_out, QuantCase};
use crate::sweeps::Rng;
use backplane::core::ops::{AutoPad, PoolDesc, PoolKind, Window};
use backplane::core::Op;
use backplane::{DataType, Network};

/// A zero point: near the middle of the type's range, or at one of its ends.
fn zero(r: &mut Rng, dt: DataType) -> i32 {
    let (lo, hi) = if dt == DataType::I8 {
        (-128, 127)
    } else {
        (0, 255)
    };
    match r.below(4) {
        0 => lo,
        1 => hi,
        _ => pick_zero(r, dt),
    }
}

/// One 2-D pool chain.
pub(crate) fn pool(r: &mut Rng) -> Result<QuantCase, String> {
    let max = r.below(2) == 0;
    let n = 1 + r.below(2);
    let c = r.pick(&[1, 2, 3, 16, 17, 32, 64, 257]);
    let hw = [
        r.pick(&[1, 2, 3, 5, 7, 8, 13, 17]),
        r.pick(&[1, 2, 3, 5, 7, 8, 13, 17]),
    ];
    let same = r.below(3) == 0;
    let mut kernel = [0; 2];
    let mut strides = [0; 2];
    let mut pads = [0; 4];
    for a in 0..2 {
        let k = 1 + r.below(3.min(hw[a] + 2));
        kernel[a] = k;
        strides[a] = 1 + r.below(3);
        if !same {
            let (pb, mut pe) = (r.below(k), r.below(k));
            if hw[a] + pb + pe < k {
                pe = k - hw[a] - pb;
            }
            pads[a] = pb;
            pads[2 + a] = pe;
        }
    }
    let ceil_mode = !same && r.below(4) == 0;
    let count_include_pad = !max && r.below(2) == 0;
    let desc = PoolDesc {
        kind: if max {
            PoolKind::Max
        } else {
            PoolKind::Average
        },
        window: Window {
            kernel: kernel.to_vec(),
            strides: strides.to_vec(),
            dilations: vec![1, 1],
            pads: if same { Vec::new() } else { pads.to_vec() },
            auto_pad: if same {
                AutoPad::SameUpper
            } else {
                AutoPad::NotSet
            },
        },
        ceil_mode,
        count_include_pad,
    };
    let dt = r.pick(&[DataType::I8, DataType::U8]);
    let dims = [n, c, hw[0], hw[1]];
    let x = bytes(r, dt, &dims)?;
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).map_err(err)?;
    let s = 0.005 + 0.05 * (r.unit() as f32 + 1.0);
    let z = zero(r, dt);
    let t = dequantize(&mut net, "dq_x", xi, dt, &[s], &[z], 1)?;
    let y = net.add_layer("pool", Op::Pool(desc), &[t]).map_err(err)?;
    let y = *y.first().ok_or("no output")?;
    let yt = r.pick(&[dt, dt, DataType::I8, DataType::U8]);
    let (sy, zy) = if yt == dt && r.below(3) == 0 {
        (s, z)
    } else {
        (s * (0.5 + r.unit() as f32 * 0.4 + 0.4), zero(r, yt))
    };
    let act = quantize_out(r, &mut net, y, yt, sy, zy)?;
    Ok(QuantCase {
        family: "QPool",
        about: format!(
            "{} {kernel:?}/{strides:?} pads {} include {count_include_pad} ceil {ceil_mode} \
             of {dt} {dims:?}{act}, y {yt}",
            if max { "MaxPool" } else { "AveragePool" },
            if same {
                "SAME".to_string()
            } else {
                format!("{pads:?}")
            },
        ),
        network: net,
        feed: vec![("x".into(), x)],
    })
}
