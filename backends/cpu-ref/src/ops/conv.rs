//! N-dimensional convolution (ONNX Conv), f32, accumulated in f64.
//!
//! `X [N, C, in...]`, `W [M, C/group, k...]`, optional `B [M]`. Output channel `m` belongs to
//! group `g = m / (M/group)` and sees input channels `g*C/group .. (g+1)*C/group`:
//!
//! `Y[n, m, o] = B[m] + sum_{c, k} X[n, g*C/group + c, o*stride + k*dilation - pad_begin] * W[m, c, k]`
//!
//! where taps that land in the padding contribute nothing.

use super::indexing::{for_each_index, product, window_input_offset};
use crate::Result;
use backplane_core::ops::ConvDesc;
use backplane_core::shape::strides_of;
use backplane_core::{TensorView, TensorViewMut};

/// Conv.
pub(crate) fn conv(
    desc: &ConvDesc,
    x: &TensorView<'_>,
    w: &TensorView<'_>,
    b: Option<&TensorView<'_>>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let (x_dims, w_dims) = (x.dims(), w.dims());
    let geo = desc.geometry(x_dims)?;
    let (xs, ws) = (x.as_slice::<f32>()?, w.as_slice::<f32>()?);
    let bias = b.map(|b| b.as_slice::<f32>()).transpose()?;

    let (batches, channels, out_channels) = (x_dims[0], x_dims[1], w_dims[0]);
    let groups = desc.group.max(1);
    let channels_per_group = w_dims[1];
    let out_per_group = out_channels / groups;
    let (in_spatial, kernel) = (&x_dims[2..], &w_dims[2..]);
    let in_strides = strides_of(in_spatial);
    let (in_plane, kernel_plane, out_plane) =
        (product(in_spatial), product(kernel), product(&geo.output));

    // Every kernel tap (multi-index into the kernel window), in W's row-major order.
    let mut taps = Vec::with_capacity(kernel_plane);
    for_each_index(kernel, |k| taps.push(k.to_vec()));

    let ys = y.as_mut_slice::<f32>()?;
    for n in 0..batches {
        for m in 0..out_channels {
            let group = m / out_per_group;
            let x_group = (n * channels + group * channels_per_group) * in_plane;
            let w_filter = m * channels_per_group * kernel_plane;
            let out_base = (n * out_channels + m) * out_plane;
            let mut out_pos = 0;
            for_each_index(&geo.output, |o| {
                let mut acc = bias.map_or(0.0, |b| f64::from(b[m]));
                for (tap, k) in taps.iter().enumerate() {
                    // Taps in the padding read zeros: skip them.
                    let Some(at) = window_input_offset(&geo, o, k, in_spatial, &in_strides) else {
                        continue;
                    };
                    for c in 0..channels_per_group {
                        let xv = xs[x_group + c * in_plane + at];
                        let wv = ws[w_filter + c * kernel_plane + tap];
                        acc += f64::from(xv) * f64::from(wv);
                    }
                }
                ys[out_base + out_pos] = acc as f32;
                out_pos += 1;
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::evaluate;
    use crate::test_util::{eval1, eval_f32, f32s};
    use backplane_core::ops::{AutoPad, ConvDesc, Window};
    use backplane_core::{DataType, Op, Tensor};

    fn conv_op(
        kernel: &[usize],
        strides: &[usize],
        dilations: &[usize],
        pads: &[usize],
    ) -> ConvDesc {
        ConvDesc {
            window: Window {
                kernel: kernel.to_vec(),
                strides: strides.to_vec(),
                dilations: dilations.to_vec(),
                pads: pads.to_vec(),
                auto_pad: AutoPad::NotSet,
            },
            group: 1,
        }
    }

    fn iota_f32(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        f32s(shape, &(0..n).map(|i| i as f32).collect::<Vec<_>>())
    }

    #[test]
    fn conv_1d_with_stride_dilation_pads_and_bias() {
        // x = [0,1,2,3,4,5,6], w = [1,10,100], dilation 2, stride 2, pads 2/2, bias 0.5.
        // Padded x = [_,_,0,1,2,3,4,5,6,_,_] (11); the window spans 5, so (11-5)/2+1 = 4
        // outputs, with taps at p, p+2, p+4 for p = 0, 2, 4, 6 (padded positions).
        //   p=0: _*1 + 0*10 + 2*100 = 200;   p=2: 0 + 2*10 + 4*100 = 420
        //   p=4: 2 + 40 + 600 = 642;         p=6: 4 + 60 + _ = 64
        let x = iota_f32(&[1, 1, 7]);
        let w = f32s(&[1, 1, 3], &[1.0, 10.0, 100.0]);
        let b = f32s(&[1], &[0.5]);
        let op = Op::Conv(conv_op(&[3], &[2], &[2], &[2, 2]));
        let y = eval1(&op, &[&x, &w, &b]);
        assert_eq!(y.shape().dims(), &[1, 1, 4]);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[200.5, 420.5, 642.5, 64.5]);
    }

    #[test]
    fn conv_2d_same_padding_multiple_channels() {
        // x: 2 channels of 3x3, channel 0 = 0..8, channel 1 = all 1. w: one 3x3 all-ones filter
        // per channel, with channel 1 weighted 10. SAME_UPPER with stride 1 → 3x3 output.
        // Output = (3x3 box sum of channel 0) + 10 * (number of in-bounds taps).
        // Box sums of [[0,1,2],[3,4,5],[6,7,8]] with zero padding:
        //   corners: 0+1+3+4=8, 1+2+4+5=12, 3+4+6+7=20, 4+5+7+8=24;
        //   edges: 0+1+2+3+4+5=15, 0+1+3+4+6+7=21, 1+2+4+5+7+8=27, 3+4+5+6+7+8=33; centre 36.
        // In-bounds taps: corners 4, edges 6, centre 9.
        let mut xv: Vec<f32> = (0..9).map(|i| i as f32).collect();
        xv.extend([1.0; 9]);
        let x = f32s(&[1, 2, 3, 3], &xv);
        let mut wv = vec![1.0f32; 9];
        wv.extend([10.0; 9]);
        let w = f32s(&[1, 2, 3, 3], &wv);
        let mut desc = conv_op(&[3, 3], &[], &[], &[]);
        desc.window.auto_pad = AutoPad::SameUpper;
        let y = eval_f32(&Op::Conv(desc), &[&x, &w]);
        assert_eq!(
            y,
            vec![48.0, 75.0, 52.0, 81.0, 126.0, 87.0, 60.0, 93.0, 64.0]
        );
    }

    #[test]
    fn conv_2d_valid_stride_and_odd_sizes() {
        // x 5x5 = 0..24, 2x2 kernel [[1,0],[0,-1]] (x[i][j] - x[i+1][j+1] = -6 everywhere),
        // stride 3 → output 2x2 (positions 0 and 3).
        let x = iota_f32(&[1, 1, 5, 5]);
        let w = f32s(&[1, 1, 2, 2], &[1.0, 0.0, 0.0, -1.0]);
        let y = eval1(&Op::Conv(conv_op(&[2, 2], &[3, 3], &[], &[])), &[&x, &w]);
        assert_eq!(y.shape().dims(), &[1, 1, 2, 2]);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[-6.0; 4]);
    }

    #[test]
    fn grouped_and_depthwise() {
        // 4 input channels of length 3: channel c = [c, c, c]. Kernel size 1.
        let x = f32s(
            &[1, 4, 3],
            &[0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0],
        );
        // group 2: 2 output channels, each sees 2 inputs with weights [1, 10].
        // out0 = ch0 + 10 ch1 = 10; out1 = ch2 + 10 ch3 = 32.
        let w = f32s(&[2, 2, 1], &[1.0, 10.0, 1.0, 10.0]);
        let mut desc = conv_op(&[1], &[], &[], &[]);
        desc.group = 2;
        let y = eval_f32(&Op::Conv(desc.clone()), &[&x, &w]);
        assert_eq!(y, vec![10.0, 10.0, 10.0, 32.0, 32.0, 32.0]);
        // depthwise with multiplier 2: group 4, 8 outputs, weights m+1: out m = (m/2)*(m+1).
        let w = f32s(&[8, 1, 1], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        desc.group = 4;
        let y = eval_f32(&Op::Conv(desc), &[&x, &w]);
        let expected: Vec<f32> = (0..8)
            .flat_map(|m| [((m / 2) * (m + 1)) as f32; 3])
            .collect();
        assert_eq!(y, expected);
    }

    #[test]
    fn conv_3d_and_batches() {
        // x [2,1,2,2,2]: batch 0 = 0..7, batch 1 = 8..15. Kernel 2x2x2 of ones sums the cube:
        // 28 and 28 + 8*8 = 92.
        let x = iota_f32(&[2, 1, 2, 2, 2]);
        let w = f32s(&[1, 1, 2, 2, 2], &[1.0; 8]);
        let y = eval1(&Op::Conv(conv_op(&[2, 2, 2], &[], &[], &[])), &[&x, &w]);
        assert_eq!(y.shape().dims(), &[2, 1, 1, 1, 1]);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[28.0, 92.0]);
    }

    #[test]
    fn invalid_convolutions_are_rejected() {
        let x = iota_f32(&[1, 3, 5]);
        let w = f32s(&[2, 2, 1], &[1.0; 4]);
        // 3 channels do not fit 2 per group.
        assert!(evaluate(&Op::Conv(conv_op(&[1], &[], &[], &[])), &[&x, &w]).is_err());
        // Integer inputs are not supported.
        let xi = crate::test_util::tensor(DataType::I32, &[1, 1, 3], &[1.0, 2.0, 3.0]);
        let wi = crate::test_util::tensor(DataType::I32, &[1, 1, 1], &[1.0]);
        assert!(evaluate(&Op::Conv(conv_op(&[1], &[], &[], &[])), &[&xi, &wi]).is_err());
    }
}
