//! A sweep family for atrous convolutions: dilations as large as the plane (DeepLabV3's
//! ASPP: 3×3 at dilation 12 to 36 on 28×28), where most taps read padding for most outputs
//! (a backend may compute each tap over only the outputs where it reads the input, as
//! CpuAcc does).

use super::{Rng, SweepCase};
use backplane::core::ops::{AutoPad, ConvDesc, Window};
use backplane::core::Op;
use backplane::DataType;

/// A dilated convolution: 3×3 (sometimes 2×2 or 5×1) windows, dilations 2 to 40 (each axis
/// its own), padding 0 to the dilation (each side its own), strides 1 and 2, 1 to 67
/// outputs over 1 to 70 input channels, planes 1×1 to 33×29, batch 1 or 2.
pub(super) fn atrous_conv(r: &mut Rng) -> Result<SweepCase, String> {
    let c = r.pick(&[1, 3, 16, 33, 70]);
    let m = r.pick(&[1, 7, 16, 32, 67]);
    let (kh, kw) = r.pick(&[(3, 3), (3, 3), (3, 3), (2, 2), (5, 1)]);
    let dh = r.pick(&[2, 5, 12, 24, 36, 40]);
    let dw = if r.below(3) == 0 {
        r.pick(&[2, 7, 12, 24])
    } else {
        dh
    };
    let s = r.pick(&[1, 1, 1, 2]);
    let (h, w) = r.pick(&[(1, 1), (7, 5), (13, 13), (28, 28), (33, 29)]);
    let pads = [
        r.below(dh + 1),
        r.below(dw + 1),
        r.below(dh + 1),
        r.below(dw + 1),
    ];
    // The windows must fit the padded plane: shrink the dilations where they do not.
    let fit = |k: usize, d: usize, size: usize| {
        let mut d = d;
        while d > 1 && (k - 1) * d + 1 > size {
            d -= 1;
        }
        d
    };
    let (hp, wp) = (h + pads[0] + pads[2], w + pads[1] + pads[3]);
    let (dh, dw) = (fit(kh, dh, hp), fit(kw, dw, wp));
    // A window wider than the padded plane even undilated: a 1×1 window there.
    let (kh, kw, dh, dw) = if kh > hp || kw > wp {
        (1, 1, 1, 1)
    } else {
        (kh, kw, dh, dw)
    };
    let window = Window {
        kernel: vec![kh, kw],
        strides: vec![s, s],
        dilations: vec![dh, dw],
        pads: pads.to_vec(),
        auto_pad: AutoPad::NotSet,
    };
    let n = r.pick(&[1, 1, 2]);
    let x = r.tensor(DataType::F32, &[n, c, h, w], -1.0, 1.0)?;
    let wt = r.tensor(DataType::F32, &[m, c, kh, kw], -1.0, 1.0)?;
    let mut inputs = vec![(x, false), (wt, r.below(6) != 0)];
    if r.below(2) == 0 {
        inputs.push((r.tensor(DataType::F32, &[m], -1.0, 1.0)?, true));
    }
    Ok(SweepCase {
        family: "AtrousConv",
        op: Op::Conv(ConvDesc { window, group: 1 }),
        inputs,
        rtol: 1e-4,
        atol: 1e-4 * ((c * kh * kw) as f64).sqrt(),
    })
}
