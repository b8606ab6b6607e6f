//! Sweep families for the convolutional networks' layers that the generic families rarely
//! reach: grouped convolutions with realistic group widths (RegNet, ResNeXt: 8 to 33
//! channels per group, outputs wide and narrow), max pooling of many small planes (ceil
//! mode, as SqueezeNet's), 3×3 convolutions of 32 to 131 channels on mid-sized planes,
//! grouped 3×3 convolutions of exactly eight outputs per group, and pointwise convolutions
//! on small planes.

use super::{Rng, SweepCase};
use backplane::core::ops::{AutoPad, ConvDesc, PoolDesc, PoolKind, Window};
use backplane::core::Op;
use backplane::DataType;

fn square(k: usize, s: usize, d: usize, pad: usize) -> Window {
    Window {
        kernel: vec![k, k],
        strides: vec![s, s],
        dilations: vec![d, d],
        pads: vec![pad, pad, pad, pad],
        auto_pad: AutoPad::NotSet,
    }
}

/// A grouped convolution: 2 to 13 groups of 1 to 33 channels, 3×3 (or 1×1, 5×5) windows,
/// strides 1 and 2, planes from 1×1 to 31×29.
pub(super) fn grouped_conv(r: &mut Rng) -> Result<SweepCase, String> {
    let group = r.pick(&[2, 3, 5, 13]);
    let cg = r.pick(&[1, 3, 8, 8, 16, 17]);
    let mg = r.pick(&[1, 5, 8, 8, 13, 32, 33]);
    let (h, w) = (r.pick(&[1, 7, 14, 17, 29]), r.pick(&[1, 7, 14, 16, 31]));
    let k = r.pick(&[3, 3, 3, 1, 5]);
    let s = r.pick(&[1, 1, 2]);
    let d = if k == 3 && r.below(4) == 0 { 2 } else { 1 };
    let pad = r.below(k / 2 * d + 1).min(k - 1);
    let win = square(k, s, d, pad);
    // A window larger than the padded plane has no output: use a 1×1 window there.
    let reach = (k - 1) * d + 1;
    let win = if reach > h + 2 * pad || reach > w + 2 * pad {
        square(1, s, 1, 0)
    } else {
        win
    };
    let kk = win.kernel[0] * win.kernel[1];
    let n = r.pick(&[1, 1, 2]);
    let x = r.tensor(DataType::F32, &[n, group * cg, h, w], -1.0, 1.0)?;
    let wt = r.tensor(
        DataType::F32,
        &[group * mg, cg, win.kernel[0], win.kernel[1]],
        -1.0,
        1.0,
    )?;
    let mut inputs = vec![(x, false), (wt, r.below(4) != 0)];
    if r.below(2) == 0 {
        inputs.push((r.tensor(DataType::F32, &[group * mg], -1.0, 1.0)?, true));
    }
    Ok(SweepCase {
        family: "GroupedConv",
        op: Op::Conv(ConvDesc { window: win, group }),
        inputs,
        rtol: 1e-4,
        atol: 1e-4 * ((cg * kk) as f64).sqrt(),
    })
}

/// Max pooling of 1 to 40 small planes (up to 27×27), 2×2 and 3×3 windows, strides 1 and
/// 2, ceil mode or not.
pub(super) fn small_max_pool(r: &mut Rng) -> Result<SweepCase, String> {
    let c = r.pick(&[1, 7, 16, 17, 40]);
    let (h, w) = (r.pick(&[3, 6, 13, 27]), r.pick(&[3, 7, 13, 27]));
    let k = r.pick(&[2, 3, 3]);
    let s = r.pick(&[1, 2, 2]);
    let pad = r.below(k.min(2));
    let n = r.pick(&[1, 2]);
    let x = r.tensor(DataType::F32, &[n, c, h, w], -2.0, 2.0)?;
    Ok(SweepCase {
        family: "SmallMaxPool",
        op: Op::Pool(PoolDesc {
            kind: PoolKind::Max,
            window: square(k, s, 1, pad),
            ceil_mode: r.below(2) == 0,
            count_include_pad: false,
        }),
        inputs: vec![(x, false)],
        rtol: 0.0,
        atol: 0.0,
    })
}

/// A 3×3 stride-1 convolution with 32 to 131 channels each way on planes of 13 to 31
/// pixels a side: the sizes where a backend may switch algorithms (CpuAcc: Winograd for
/// narrow layers with enough multiply-adds per tile).
pub(super) fn winograd_conv(r: &mut Rng) -> Result<SweepCase, String> {
    let c = r.pick(&[32, 33, 64, 128, 131]);
    let m = r.pick(&[32, 37, 128]);
    let (h, w) = (r.pick(&[13, 14, 23, 28, 31]), r.pick(&[14, 15, 27, 29]));
    let pad = r.below(2);
    let x = r.tensor(DataType::F32, &[1, c, h, w], -1.0, 1.0)?;
    let wt = r.tensor(DataType::F32, &[m, c, 3, 3], -1.0, 1.0)?;
    let mut inputs = vec![(x, false), (wt, r.below(4) != 0)];
    if r.below(2) == 0 {
        inputs.push((r.tensor(DataType::F32, &[m], -1.0, 1.0)?, true));
    }
    Ok(SweepCase {
        family: "WinogradConv",
        op: Op::Conv(ConvDesc {
            window: square(3, 1, 1, pad),
            group: 1,
        }),
        inputs,
        rtol: 1e-4,
        atol: 1e-4 * ((c * 9) as f64).sqrt(),
    })
}

/// A grouped 3×3 convolution with exactly eight outputs per group (RegNet's width), strides
/// 1 and 2, padding 0 to 2, 1 to 24 inputs per group, planes from 1×1 to 57×23: the shapes
/// a backend may give a kernel of its own (CpuAcc: each group's outputs in vector lanes).
pub(super) fn lane_grouped_conv(r: &mut Rng) -> Result<SweepCase, String> {
    let group = r.pick(&[2, 3, 6, 13]);
    let cg = r.pick(&[1, 5, 8, 8, 24]);
    let s = r.pick(&[1, 2, 2]);
    let pad = r.below(3);
    // Planes the 3×3 window fits once padded.
    let h = r.pick(&[1, 7, 14, 28, 57]).max(3 - 2 * pad.min(1));
    let w = r.pick(&[1, 7, 9, 16, 23]).max(3 - 2 * pad.min(1));
    let n = r.pick(&[1, 1, 2]);
    let x = r.tensor(DataType::F32, &[n, group * cg, h, w], -1.0, 1.0)?;
    let wt = r.tensor(DataType::F32, &[group * 8, cg, 3, 3], -1.0, 1.0)?;
    let mut inputs = vec![(x, false), (wt, r.below(4) != 0)];
    if r.below(2) == 0 {
        inputs.push((r.tensor(DataType::F32, &[group * 8], -1.0, 1.0)?, true));
    }
    Ok(SweepCase {
        family: "LaneGroupedConv",
        op: Op::Conv(ConvDesc {
            window: square(3, s, 1, pad),
            group,
        }),
        inputs,
        rtol: 1e-4,
        atol: 1e-4 * ((cg * 9) as f64).sqrt(),
    })
}

/// A pointwise (1×1) convolution on a small plane (1 to 256 pixels) with 1 to 440 channels
/// each way: where a backend may turn the product around (CpuAcc: the pixels as the GEMM's
/// rows on 7×7 planes).
pub(super) fn small_plane_pointwise(r: &mut Rng) -> Result<SweepCase, String> {
    let c = r.pick(&[1, 17, 64, 440]);
    let m = r.pick(&[5, 31, 128, 440]);
    let (h, w) = r.pick(&[(1, 1), (7, 7), (5, 9), (14, 14), (16, 16), (3, 2)]);
    let n = r.pick(&[1, 1, 2]);
    let x = r.tensor(DataType::F32, &[n, c, h, w], -1.0, 1.0)?;
    let wt = r.tensor(DataType::F32, &[m, c, 1, 1], -1.0, 1.0)?;
    let mut inputs = vec![(x, false), (wt, r.below(4) != 0)];
    if r.below(2) == 0 {
        inputs.push((r.tensor(DataType::F32, &[m], -1.0, 1.0)?, true));
    }
    Ok(SweepCase {
        family: "SmallPlanePointwise",
        op: Op::Conv(ConvDesc {
            window: square(1, 1, 1, 0),
            group: 1,
        }),
        inputs,
        rtol: 1e-4,
        atol: 1e-4 * (c as f64).sqrt(),
    })
}
