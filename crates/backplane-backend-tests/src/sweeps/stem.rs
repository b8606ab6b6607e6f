//! Sweep families for a network's first layer and its strided projections: convolutions
//! from 1 to 4 input channels (an image) under 1×1 to 7×7 windows, strides 1 to 3, pads,
//! dilations, 1 to 67 outputs (around blocks of 16 and 32 output channels), on planes from
//! 1×1 up to 113×97 (the sizes a backend may give a kernel of its own: CpuAcc puts the output
//! channels in vector lanes on one thread), and pointwise convolutions with a stride of 2 or
//! 3 (a ResNet's or RegNet's downsampling shortcut).

use super::{Rng, SweepCase};
use backplane::core::ops::{AutoPad, ConvDesc, Window};
use backplane::core::Op;
use backplane::DataType;

/// A convolution of an image-like input: 1 to 4 channels, windows 1×1 to 7×7 (3×3 most
/// often), strides 1 to 3, padding 0 to k/2, dilation 1 or 2, 1 to 67 outputs, planes 1×1
/// to 113×97, batch 1 or 2, constant weights (mostly) and an optional bias.
pub(super) fn first_layer_conv(r: &mut Rng) -> Result<SweepCase, String> {
    let c = r.pick(&[1, 2, 3, 3, 4]);
    let m = r.pick(&[1, 5, 16, 17, 24, 32, 33, 64, 67]);
    let k = r.pick(&[1, 3, 3, 3, 5, 7]);
    let s = r.pick(&[1, 2, 2, 3]);
    let d = if k > 1 && r.below(5) == 0 { 2 } else { 1 };
    let (h, w) = (
        r.pick(&[1, 2, 7, 23, 56, 113]),
        r.pick(&[1, 3, 14, 29, 61, 97]),
    );
    let pad = r.below(k / 2 + 1);
    let reach = (k - 1) * d + 1;
    // A window larger than the padded plane has no output: drop to 1×1 there.
    let (k, d, pad) = if reach > h + 2 * pad || reach > w + 2 * pad {
        (1, 1, 0)
    } else {
        (k, d, pad)
    };
    let window = Window {
        kernel: vec![k, k],
        strides: vec![s, s],
        dilations: vec![d, d],
        pads: vec![pad; 4],
        auto_pad: AutoPad::NotSet,
    };
    let n = r.pick(&[1, 1, 1, 2]);
    let x = r.tensor(DataType::F32, &[n, c, h, w], -1.0, 1.0)?;
    let wt = r.tensor(DataType::F32, &[m, c, k, k], -1.0, 1.0)?;
    let mut inputs = vec![(x, false), (wt, r.below(6) != 0)];
    if r.below(3) != 0 {
        inputs.push((r.tensor(DataType::F32, &[m], -1.0, 1.0)?, true));
    }
    Ok(SweepCase {
        family: "FirstLayerConv",
        op: Op::Conv(ConvDesc { window, group: 1 }),
        inputs,
        rtol: 1e-4,
        atol: 1e-4 * ((c * k * k) as f64).sqrt(),
    })
}

/// A pointwise (1×1) convolution with a stride of 2 (or 3), no padding: 1 to 131 input and
/// 1 to 67 output channels, planes 1×1 to 112×112 (odd sides included), batch 1 or 2.
pub(super) fn strided_pointwise(r: &mut Rng) -> Result<SweepCase, String> {
    let c = r.pick(&[1, 3, 16, 32, 48, 131]);
    let m = r.pick(&[1, 7, 32, 48, 67]);
    let s = r.pick(&[2, 2, 2, 3]);
    let (h, w) = r.pick(&[
        (1, 1),
        (2, 3),
        (7, 7),
        (13, 14),
        (28, 28),
        (55, 57),
        (112, 112),
    ]);
    let window = Window {
        kernel: vec![1, 1],
        strides: vec![s, s],
        dilations: vec![1, 1],
        pads: vec![0; 4],
        auto_pad: AutoPad::NotSet,
    };
    let n = r.pick(&[1, 1, 2]);
    let x = r.tensor(DataType::F32, &[n, c, h, w], -1.0, 1.0)?;
    let wt = r.tensor(DataType::F32, &[m, c, 1, 1], -1.0, 1.0)?;
    let mut inputs = vec![(x, false), (wt, r.below(6) != 0)];
    if r.below(2) == 0 {
        inputs.push((r.tensor(DataType::F32, &[m], -1.0, 1.0)?, true));
    }
    Ok(SweepCase {
        family: "StridedPointwise",
        op: Op::Conv(ConvDesc { window, group: 1 }),
        inputs,
        rtol: 1e-4,
        atol: 1e-4 * (c as f64).sqrt(),
    })
}
