//! N-dimensional transposed convolution (ONNX ConvTranspose), f32, accumulated in f64.
//!
//! `X [N, C, in...]`, `W [C, M/group, k...]`, optional `B [M]`. Written as the scatter it is:
//! every input element `X[n, c, i]` adds `X[n, c, i] * W[c, m, k]` to the *full* output at
//! position `i*stride + k*dilation`, for each output channel `m` of its group. The layer output
//! is the full output with `pads_begin` removed in front (or zeros added, when negative) and
//! cut to the output size
//! (`ConvTransposeDesc::geometry` resolves pads, output_padding, output_shape and auto_pad).

use super::indexing::{for_each_index, product};
use crate::Result;
use backplane_core::ops::ConvTransposeDesc;
use backplane_core::shape::strides_of;
use backplane_core::{TensorView, TensorViewMut};

/// The resolved per-axis parameters of a transposed convolution.
struct Scatter {
    strides: Vec<usize>,
    dilations: Vec<usize>,
    /// Removed from the front of the full output (negative: zeros added in front).
    pads_begin: Vec<i64>,
    output: Vec<usize>,
    output_strides: Vec<usize>,
}

impl Scatter {
    /// Offset in one output plane that input position `i` with kernel tap `k` adds to, or
    /// `None` when it falls into the removed padding or beyond the output.
    fn output_offset(&self, i: &[usize], k: &[usize]) -> Option<usize> {
        let mut offset = 0;
        for axis in 0..self.output.len() {
            let full = i[axis] * self.strides[axis] + k[axis] * self.dilations[axis];
            let pos = i64::try_from(full).ok()? - self.pads_begin[axis];
            let pos = usize::try_from(pos).ok()?;
            if pos >= self.output[axis] {
                return None;
            }
            offset += pos * self.output_strides[axis];
        }
        Some(offset)
    }
}

/// ConvTranspose.
pub(crate) fn conv_transpose(
    desc: &ConvTransposeDesc,
    x: &TensorView<'_>,
    w: &TensorView<'_>,
    b: Option<&TensorView<'_>>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let (x_dims, w_dims) = (x.dims(), w.dims());
    let (output, pads_begin, _) = desc.geometry(x_dims)?;
    let spatial_rank = x_dims.len() - 2;
    let per_axis = |v: &[usize]| -> Vec<usize> {
        (0..spatial_rank)
            .map(|i| v.get(i).copied().unwrap_or(1))
            .collect()
    };
    let scatter = Scatter {
        strides: per_axis(&desc.window.strides),
        dilations: per_axis(&desc.window.dilations),
        pads_begin,
        output_strides: strides_of(&output),
        output,
    };
    let (xs, ws) = (x.as_slice::<f32>()?, w.as_slice::<f32>()?);
    let bias = b.map(|b| b.as_slice::<f32>()).transpose()?;

    let (batches, channels) = (x_dims[0], x_dims[1]);
    let groups = desc.group.max(1);
    let channels_per_group = channels / groups;
    let out_per_group = w_dims[1];
    let out_channels = out_per_group * groups;
    let (in_spatial, kernel) = (&x_dims[2..], &w_dims[2..]);
    let (in_plane, kernel_plane, out_plane) = (
        product(in_spatial),
        product(kernel),
        product(&scatter.output),
    );

    // Start every output channel at its bias, then scatter-add.
    let mut acc = vec![0f64; batches * out_channels * out_plane];
    if let Some(bias) = bias {
        for (i, slot) in acc.iter_mut().enumerate() {
            *slot = f64::from(bias[(i / out_plane) % out_channels]);
        }
    }
    for n in 0..batches {
        for c in 0..channels {
            let group = c / channels_per_group;
            let mut in_pos = 0;
            for_each_index(in_spatial, |i| {
                let xv = f64::from(xs[(n * channels + c) * in_plane + in_pos]);
                for mo in 0..out_per_group {
                    let m = group * out_per_group + mo;
                    let w_base = (c * out_per_group + mo) * kernel_plane;
                    let out_base = (n * out_channels + m) * out_plane;
                    let mut tap = 0;
                    for_each_index(kernel, |k| {
                        if let Some(at) = scatter.output_offset(i, k) {
                            acc[out_base + at] += xv * f64::from(ws[w_base + tap]);
                        }
                        tap += 1;
                    });
                }
                in_pos += 1;
            });
        }
    }
    for (slot, v) in y.as_mut_slice::<f32>()?.iter_mut().zip(acc) {
        *slot = v as f32;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::evaluate;
    use crate::test_util::{eval1, eval_f32, f32s};
    use backplane_core::ops::{AutoPad, ConvTransposeDesc, Window};
    use backplane_core::Op;

    fn desc(
        kernel: &[usize],
        strides: &[usize],
        dilations: &[usize],
        pads: &[usize],
    ) -> ConvTransposeDesc {
        ConvTransposeDesc {
            window: Window {
                kernel: kernel.to_vec(),
                strides: strides.to_vec(),
                dilations: dilations.to_vec(),
                pads: pads.to_vec(),
                auto_pad: AutoPad::NotSet,
            },
            group: 1,
            output_padding: vec![],
            output_shape: vec![],
        }
    }

    #[test]
    fn one_dimensional_strides_pads_dilations_and_output_padding() {
        // x = [1,2,3], w = [1,10]. Each x[i] writes [x, 10x] at positions i*stride + {0, d}.
        let x = f32s(&[1, 1, 3], &[1.0, 2.0, 3.0]);
        let w = f32s(&[1, 1, 2], &[1.0, 10.0]);
        let run = |d: ConvTransposeDesc| eval_f32(&Op::ConvTranspose(d), &[&x, &w]);
        // Stride 1: [1, 10+2, 20+3, 30].
        assert_eq!(run(desc(&[2], &[], &[], &[])), vec![1.0, 12.0, 23.0, 30.0]);
        // Stride 2: no overlap.
        assert_eq!(
            run(desc(&[2], &[2], &[], &[])),
            vec![1.0, 10.0, 2.0, 20.0, 3.0, 30.0]
        );
        // Pads remove one element at each end of the stride-1 result.
        assert_eq!(run(desc(&[2], &[], &[], &[1, 1])), vec![12.0, 23.0]);
        // Dilation 2: taps at i and i+2 → [1, 2, 10+3, 20, 30].
        assert_eq!(
            run(desc(&[2], &[], &[2], &[])),
            vec![1.0, 2.0, 13.0, 20.0, 30.0]
        );
        // output_padding adds one (zero) element at the end.
        let mut d = desc(&[2], &[2], &[], &[]);
        d.output_padding = vec![1];
        assert_eq!(run(d), vec![1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 0.0]);
        // With a bias everything shifts.
        let b = f32s(&[1], &[0.5]);
        let y = eval_f32(&Op::ConvTranspose(desc(&[2], &[], &[], &[])), &[&x, &w, &b]);
        assert_eq!(y, vec![1.5, 12.5, 23.5, 30.5]);
    }

    #[test]
    fn output_shape_and_auto_pad_choose_the_cropped_side() {
        let x = f32s(&[1, 1, 3], &[1.0, 2.0, 3.0]);
        let w = f32s(&[1, 1, 2], &[1.0, 10.0]);
        // Full output (stride 2) has 6 elements; asking for 5 removes 1. Without auto_pad the
        // odd element is removed at the beginning, with SAME_UPPER at the end.
        let mut d = desc(&[2], &[2], &[], &[]);
        d.output_shape = vec![5];
        assert_eq!(
            eval_f32(&Op::ConvTranspose(d.clone()), &[&x, &w]),
            vec![10.0, 2.0, 20.0, 3.0, 30.0]
        );
        d.window.auto_pad = AutoPad::SameUpper;
        assert_eq!(
            eval_f32(&Op::ConvTranspose(d), &[&x, &w]),
            vec![1.0, 10.0, 2.0, 20.0, 3.0]
        );
        // SAME_UPPER without output_shape: output = input * stride = 6, nothing removed.
        let mut d = desc(&[2], &[2], &[], &[]);
        d.window.auto_pad = AutoPad::SameUpper;
        assert_eq!(eval_f32(&Op::ConvTranspose(d), &[&x, &w]).len(), 6);
    }

    #[test]
    fn output_shape_beyond_the_full_output_pads_with_zeros() {
        let x = f32s(&[1, 1, 3], &[1.0, 2.0, 3.0]);
        let w = f32s(&[1, 1, 2], &[1.0, 10.0]);
        let b = f32s(&[1], &[0.5]);
        // Full output 6; asking for 7 is a total padding of -1: floor(-1/2) = -1 at the end,
        // 0 at the beginning, so one zero (plus the bias) is appended.
        let mut d = desc(&[2], &[2], &[], &[]);
        d.output_shape = vec![7];
        assert_eq!(
            eval_f32(&Op::ConvTranspose(d.clone()), &[&x, &w, &b]),
            vec![1.5, 10.5, 2.5, 20.5, 3.5, 30.5, 0.5]
        );
        // 8: total -2, one zero on each side; SAME_UPPER splits -3 as -2 in front, -1 behind.
        d.output_shape = vec![8];
        assert_eq!(
            eval_f32(&Op::ConvTranspose(d.clone()), &[&x, &w]),
            vec![0.0, 1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 0.0]
        );
        d.output_shape = vec![9];
        d.window.auto_pad = AutoPad::SameUpper;
        assert_eq!(
            eval_f32(&Op::ConvTranspose(d), &[&x, &w]),
            vec![0.0, 0.0, 1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 0.0]
        );
    }

    #[test]
    fn channels_mix_and_groups_separate() {
        // groups 1: 2 input channels, 2 output channels, kernel 1. W[c][m]: [[1,2],[10,20]].
        // out0 = 1*ch0 + 10*ch1 = [31, 42]; out1 = 2*ch0 + 20*ch1 = [62, 84].
        let x = f32s(&[1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let w = f32s(&[2, 2, 1], &[1.0, 2.0, 10.0, 20.0]);
        let y = eval1(&Op::ConvTranspose(desc(&[1], &[], &[], &[])), &[&x, &w]);
        assert_eq!(y.shape().dims(), &[1, 2, 2]);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[31.0, 42.0, 62.0, 84.0]);

        // groups 2, 2-D, stride 2: channel 0 [[1,2],[3,4]] with kernel [[1,0],[0,0]] lands on
        // the even positions; channel 1 (all ones) with an all-ones kernel fills everything.
        let x = f32s(&[1, 2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 1.0, 1.0, 1.0, 1.0]);
        let w = f32s(&[2, 1, 2, 2], &[1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
        let mut d = desc(&[2, 2], &[2, 2], &[], &[]);
        d.group = 2;
        let y = eval1(&Op::ConvTranspose(d), &[&x, &w]);
        assert_eq!(y.shape().dims(), &[1, 2, 4, 4]);
        let mut expected = vec![
            1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        ];
        expected.extend([1.0; 16]);
        assert_eq!(y.as_slice::<f32>().unwrap(), &expected[..]);
    }

    #[test]
    fn three_dimensional() {
        // One input voxel of value 2 scatters the 2x2x2 kernel 1..8, doubled.
        let x = f32s(&[1, 1, 1, 1, 1], &[2.0]);
        let w = f32s(&[1, 1, 2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let y = eval1(
            &Op::ConvTranspose(desc(&[2, 2, 2], &[], &[], &[])),
            &[&x, &w],
        );
        assert_eq!(y.shape().dims(), &[1, 1, 2, 2, 2]);
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0]
        );
    }

    #[test]
    fn malformed_attributes_are_errors_not_panics() {
        let x = f32s(&[1, 1, 3], &[1.0, 2.0, 3.0]);
        let w = f32s(&[1, 1, 2], &[1.0, 10.0]);
        // pads with the wrong count, kernel_shape disagreeing with W, a wrong bias.
        for d in [
            desc(&[2], &[], &[], &[1]),
            desc(&[2], &[1, 1], &[], &[]),
            desc(&[3], &[], &[], &[]),
            desc(&[2], &[0], &[], &[]),
        ] {
            assert!(evaluate(&Op::ConvTranspose(d), &[&x, &w]).is_err());
        }
        let bad_bias = f32s(&[2], &[0.0, 0.0]);
        assert!(evaluate(
            &Op::ConvTranspose(desc(&[2], &[], &[], &[])),
            &[&x, &w, &bad_bias]
        )
        .is_err());
    }
}
