//! Sweep families for layers large enough that a multi-threaded backend shares them out, at
//! sizes that make the shares uneven: concatenations past 128 KiB of odd run lengths (a
//! growing tensor and 32 channels, as DenseNet's; several element sizes), and convolutions
//! with few outputs (16 to 64, as SqueezeNet's squeeze and DenseNet's growth layers) on
//! planes whose pixels make 1 to 95 column panels of 32 (13×13, 14×14, 28×28, 55×55, 7×9).
//! Run them with the backend's thread option at 2, 3, 5 and 16 to check its work split.

use super::{Rng, SweepCase};
use backplane::core::ops::{AutoPad, ConvDesc, Window};
use backplane::core::Op;
use backplane::DataType;

/// Concatenation along the channels of 2 to 5 `[n, c, h, w]` inputs (1 to 131 channels) on
/// planes of 13×13 to 56×56: outputs of 20 KB to a few MB.
pub(super) fn large_concat(r: &mut Rng) -> Result<SweepCase, String> {
    let (h, w) = r.pick(&[(13, 13), (28, 28), (55, 55), (56, 56), (17, 31)]);
    let n = r.pick(&[1, 1, 2]);
    let dtype = r.pick(&[DataType::F32, DataType::F32, DataType::U8, DataType::I64]);
    let count = 2 + r.below(4);
    let mut inputs = Vec::new();
    for _ in 0..count {
        let c = r.pick(&[1, 3, 32, 37, 64, 128, 131]);
        inputs.push((r.tensor(dtype, &[n, c, h, w], 0.0, 100.0)?, r.below(5) == 0));
    }
    Ok(SweepCase {
        family: "LargeConcat",
        op: Op::Concat { axis: 1 },
        inputs,
        rtol: 0.0,
        atol: 0.0,
    })
}

/// A convolution of 16 to 64 outputs, 1×1 or 3×3 (padded), over 16 to 131 input channels,
/// on planes of 7×9 to 55×55.
pub(super) fn few_output_conv(r: &mut Rng) -> Result<SweepCase, String> {
    let m = r.pick(&[16, 17, 32, 48, 64]);
    let c = r.pick(&[16, 64, 128, 131]);
    let (h, w) = r.pick(&[(13, 13), (14, 14), (28, 28), (55, 55), (7, 9)]);
    let k = r.pick(&[1, 3]);
    let window = Window {
        kernel: vec![k, k],
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pads: vec![k / 2; 4],
        auto_pad: AutoPad::NotSet,
    };
    let x = r.tensor(DataType::F32, &[1, c, h, w], -1.0, 1.0)?;
    let wt = r.tensor(DataType::F32, &[m, c, k, k], -1.0, 1.0)?;
    let mut inputs = vec![(x, false), (wt, true)];
    if r.below(2) == 0 {
        inputs.push((r.tensor(DataType::F32, &[m], -1.0, 1.0)?, true));
    }
    Ok(SweepCase {
        family: "FewOutputConv",
        op: Op::Conv(ConvDesc { window, group: 1 }),
        inputs,
        rtol: 1e-4,
        atol: 1e-4 * ((c * k * k) as f64).sqrt(),
    })
}
