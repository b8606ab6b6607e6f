//! Quantized sweep family "QPadSlice": 8-bit data movement between int8 convolutions as
//! the TFLite importer writes it: an NHWC image through a `Transpose`, a 1×1 convolution,
//! a `DequantizeLinear → Pad → QuantizeLinear` on one quantization (a zero fill, or the edge
//! or the reflection copied: Keras's `ZeroPadding2D`, an explicit pad before a strided
//! convolution), then a `Slice` (a `Cropping2D`: the STRIDED_SLICE between transposes to
//! channels-last and back, as NASNet's importer leaves it, or on the channels-first
//! tensor), and a 1×1 projection. A backend that runs quantized chains channels-last
//! (CpuAcc) runs them inside its region.

use crate::quant_blocks::{Block, Q};
use crate::sweeps::Rng;
use backplane::core::ops::{PadDesc, PadMode, SliceDesc};
use backplane::core::Op;
use backplane::{DataType, Tensor, TensorInfo};

use super::quant_sweeps::{bytes, err, QuantCase};

/// `QuantizeLinear` of `t` with exactly `like`'s scale and zero point (so the pad moves the
/// 8-bit values as they are).
fn requantize(
    b: &mut Block<'_>,
    name: &str,
    t: backplane::core::TensorId,
    like: Q,
) -> Result<Q, String> {
    let s = b.constant(&format!("{name}_scale"), Tensor::scalar(like.scale))?;
    let z = Tensor::from_f64_values(TensorInfo::new(b.dt, vec![]), &[f64::from(like.zero)])
        .map_err(err)?;
    let z = b.constant(&format!("{name}_zero"), z)?;
    let op = Op::QuantizeLinear {
        axis: 1,
        to: b.dt,
        block_size: 0,
        saturate: true,
        requant: backplane::core::quant::Requantization::F32,
    };
    let t = b.one(name, op, &[t, s, z])?;
    Ok(Q { t, ..like })
}

/// A random pad-and-slice chain (see the module's description).
pub(crate) fn pad_slice(r: &mut Rng) -> Result<QuantCase, String> {
    let dt = r.pick(&[DataType::I8, DataType::U8]);
    let (n, h, w) = (
        r.pick(&[1, 1, 2]),
        r.pick(&[1, 3, 7, 12]),
        r.pick(&[1, 2, 5, 13]),
    );
    let c = r.pick(&[1, 3, 8, 17]);
    let m = r.pick(&[1, 4, 11, 24]);
    let cout = r.pick(&[1, 5, 16]);
    let mode = r.pick(&[
        PadMode::Constant,
        PadMode::Constant,
        PadMode::Edge,
        PadMode::Reflect,
    ]);
    // Reflection repeats no edge: at most one less than the axis.
    let most = |d: usize| {
        if mode == PadMode::Reflect {
            (d - 1).min(2)
        } else {
            2
        }
    };
    let (top, bottom) = (r.below(most(h) + 1), r.below(most(h) + 1));
    let (left, right) = (r.below(most(w) + 1), r.below(most(w) + 1));
    let slice = r.pick(&[0usize, 1, 2]);
    let x = bytes(r, dt, &[n, h, w, c])?;
    let (mut b, xt) = Block::nhwc_image(r, dt, &x)?;
    let zx = if dt == DataType::I8 { -7 } else { 131 };
    let x0 = Q {
        t: xt,
        scale: 0.05,
        zero: zx,
        channels: c,
    };
    let e = b.conv("expand", x0, m, 1, 1, false)?;
    let f = b.dequantize("pad_dq", e)?;
    let pads = [0, 0, top, left, 0, 0, bottom, right]
        .map(|p| p as i64)
        .to_vec();
    let p = b.one(
        "pad",
        Op::Pad(PadDesc {
            mode,
            pads,
            value: 0.0,
        }),
        &[f],
    )?;
    let p = requantize(&mut b, "pad_q", p, e)?;
    let (ph, pw) = (h + top + bottom, w + left + right);
    // Crop a row and a column off the padded image where it has them, and (channels-first)
    // keep the first channels.
    let (h0, w0) = (usize::from(ph > 1), usize::from(pw > 1));
    let kept = m.div_ceil(2);
    let (t, what) = match slice {
        0 => (p, "no slice"),
        1 => {
            let to_nhwc = Op::Transpose {
                perm: vec![0, 2, 3, 1],
            };
            let t = b.one("crop_to_nhwc", to_nhwc, &[p.t])?;
            let s = Op::Slice(SliceDesc {
                starts: vec![h0 as i64, 0],
                ends: vec![ph as i64, (pw - w0) as i64],
                axes: vec![1, 2],
                steps: Vec::new(),
            });
            let t = b.one("crop", s, &[t])?;
            let to_nchw = Op::Transpose {
                perm: vec![0, 3, 1, 2],
            };
            let t = b.one("crop_to_nchw", to_nchw, &[t])?;
            (Q { t, ..p }, "a channels-last crop between transposes")
        }
        _ => {
            let s = Op::Slice(SliceDesc {
                starts: vec![0, h0 as i64, w0 as i64],
                ends: vec![kept as i64, i64::MAX, i64::MAX],
                axes: vec![1, 2, -1],
                steps: Vec::new(),
            });
            let t = b.one("crop", s, &[p.t])?;
            (
                Q {
                    t,
                    channels: kept,
                    ..p
                },
                "a channels-first slice",
            )
        }
    };
    let out = b.conv("project", t, cout, 1, 1, false)?;
    b.net.mark_output(out.t).map_err(err)?;
    Ok(QuantCase {
        family: "QPadSlice",
        about: format!(
            "{dt} NHWC [{n},{h},{w},{c}], 1×1 to {m}, {mode:?} pad [{top},{left},{bottom},{right}], \
             {what}, 1×1 to {cout}"
        ),
        network: b.net,
        feed: vec![("x".into(), x)],
    })
}
