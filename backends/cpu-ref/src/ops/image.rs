//! Col2Im, AffineGrid, RoiAlign and DeformConv (any float type, computed in f64).
//!
//! Every index computed from input values (region boxes, batch indices, offsets) is checked:
//! a batch index outside the input is an error, a sample outside the image reads zero.

use super::cast::{write_scalars, Scalar};
use super::indexing::{for_each_index, product};
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::{AffineGridDesc, Col2ImDesc, DeformConvDesc, RoiAlignDesc};
use backplane_core::shape::strides_of;
use backplane_core::{TensorView, TensorViewMut};

/// The most samples per bin axis RoiAlign takes (adaptive sampling of a huge box).
const MAX_SAMPLES_PER_AXIS: f64 = 4096.0;

/// The most spatial axes DeformConv interpolates over (2^r corners per sample).
const MAX_DEFORM_RANK: usize = 8;

fn floats(values: Vec<f64>) -> Vec<Scalar> {
    values.into_iter().map(Scalar::Float).collect()
}

/// Col2Im: sum every column value into the image element its block tap covers.
pub(crate) fn col2im(
    desc: &Col2ImDesc,
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let positions = desc
        .positions()
        .ok_or_else(|| BackendError::Execution("Col2Im: the blocks do not fit".into()))?;
    let dims = x.dims();
    let (batch, rows, count) = (dims[0], dims[1], dims[2]);
    let block = product(&desc.block_shape);
    let channels = rows / block.max(1);
    let image = product(&desc.image_shape);
    let r = desc.image_shape.len();
    let image_strides = strides_of(&desc.image_shape);
    let xs = x.to_f64_vec();
    let mut out = vec![0.0; batch * channels * image];
    // For each (block tap, position): the image offset it covers, or None in the padding.
    let mut targets: Vec<Option<usize>> = Vec::with_capacity(block * count);
    for_each_index(&desc.block_shape, |tap| {
        for_each_index(&positions, |pos| {
            let mut at = Some(0usize);
            for i in 0..r {
                let c = (pos[i] * desc.strides[i] + tap[i] * desc.dilations[i])
                    .checked_sub(desc.pads[i])
                    .filter(|&c| c < desc.image_shape[i]);
                at = at.zip(c).map(|(a, c)| a + c * image_strides[i]);
            }
            targets.push(at);
        });
    });
    for n in 0..batch {
        for ch in 0..channels {
            let plane = &mut out[(n * channels + ch) * image..(n * channels + ch + 1) * image];
            let cols = &xs[(n * rows + ch * block) * count..(n * rows + (ch + 1) * block) * count];
            for (&v, target) in cols.iter().zip(&targets) {
                if let Some(t) = *target {
                    plane[t] += v;
                }
            }
        }
    }
    write_scalars(y, &floats(out))
}

/// The normalized base coordinates along an axis of `len` elements.
fn base_coords(len: usize, align_corners: bool) -> Vec<f64> {
    let l = len as f64;
    (0..len)
        .map(|i| {
            let i = i as f64;
            if align_corners {
                if len > 1 {
                    -1.0 + 2.0 * i / (l - 1.0)
                } else {
                    -1.0
                }
            } else {
                (2.0 * i + 1.0) / l - 1.0
            }
        })
        .collect()
}

/// AffineGrid: theta times the homogeneous base coordinates (x, y[, z], 1) of every element.
pub(crate) fn affine_grid(
    desc: &AffineGridDesc,
    theta: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let spatial = &desc.size[2..];
    let r = spatial.len();
    let batch = desc.size[0];
    let coords: Vec<Vec<f64>> = spatial
        .iter()
        .map(|&len| base_coords(len, desc.align_corners))
        .collect();
    let ts = theta.to_f64_vec();
    let points = product(spatial);
    let mut out = Vec::with_capacity(batch * points * r);
    for n in 0..batch {
        let t = &ts[n * r * (r + 1)..(n + 1) * r * (r + 1)];
        for_each_index(spatial, |idx| {
            // Homogeneous point, innermost axis first (x, y[, z]), then 1.
            let mut p: Vec<f64> = (0..r).map(|a| coords[r - 1 - a][idx[r - 1 - a]]).collect();
            p.push(1.0);
            for row in 0..r {
                let v: f64 = (0..=r).map(|c| t[row * (r + 1) + c] * p[c]).sum();
                out.push(Scalar::Float(v));
            }
        });
    }
    write_scalars(y, &out)
}

/// Bilinear interpolation of an [h, w] plane at (yy, xx), RoiAlign's rule: positions more
/// than one element outside read 0, others are clamped into the plane.
fn roi_bilinear(plane: &[f64], h: usize, w: usize, yy: f64, xx: f64) -> f64 {
    let (hf, wf) = (h as f64, w as f64);
    if h == 0 || w == 0 || !(-1.0..=hf).contains(&yy) || !(-1.0..=wf).contains(&xx) {
        return 0.0;
    }
    let (mut y, mut x) = (yy.max(0.0), xx.max(0.0));
    // In range: `as` cannot overflow; the clamps keep the last row/column in.
    let mut y_low = y as usize;
    let mut x_low = x as usize;
    let y_high;
    let x_high;
    if y_low + 1 >= h {
        y_low = h - 1;
        y_high = y_low;
        y = y_low as f64;
    } else {
        y_high = y_low + 1;
    }
    if x_low + 1 >= w {
        x_low = w - 1;
        x_high = x_low;
        x = x_low as f64;
    } else {
        x_high = x_low + 1;
    }
    let (ly, lx) = (y - y_low as f64, x - x_low as f64);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    hy * hx * plane[y_low * w + x_low]
        + hy * lx * plane[y_low * w + x_high]
        + ly * hx * plane[y_high * w + x_low]
        + ly * lx * plane[y_high * w + x_high]
}

/// RoiAlign: each output bin pools (average or max) bilinear samples on a regular grid
/// inside its part of the region.
pub(crate) fn roi_align(
    desc: &RoiAlignDesc,
    x: &TensorView<'_>,
    rois: &TensorView<'_>,
    batch_indices: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let d = x.dims();
    let (batch, channels, h, w) = (d[0], d[1], d[2], d[3]);
    let (oh, ow) = (desc.output_height, desc.output_width);
    let xs = x.to_f64_vec();
    let boxes = rois.to_f64_vec();
    let indices = batch_indices.as_slice::<i64>()?;
    let plane = h * w;
    let mut out = Vec::with_capacity(indices.len() * channels * oh * ow);
    let scale = f64::from(desc.spatial_scale);
    let shift = if desc.half_pixel { 0.5 } else { 0.0 };
    for (roi, &b) in indices.iter().enumerate() {
        let n = usize::try_from(b)
            .ok()
            .filter(|&n| n < batch)
            .ok_or_else(|| {
                BackendError::Execution(format!(
                    "RoiAlign: batch index {b} of region {roi} is outside 0..{batch}"
                ))
            })?;
        let bx = &boxes[roi * 4..roi * 4 + 4];
        let (x1, y1) = (bx[0] * scale - shift, bx[1] * scale - shift);
        let (x2, y2) = (bx[2] * scale - shift, bx[3] * scale - shift);
        let (mut rw, mut rh) = (x2 - x1, y2 - y1);
        if !desc.half_pixel {
            rw = rw.max(1.0);
            rh = rh.max(1.0);
        }
        let (bin_h, bin_w) = (rh / oh as f64, rw / ow as f64);
        let grid = |size: f64| -> Result<usize> {
            let g = if desc.sampling_ratio > 0 {
                desc.sampling_ratio as f64
            } else {
                size.ceil()
            };
            if g > MAX_SAMPLES_PER_AXIS {
                return Err(BackendError::Execution(format!(
                    "RoiAlign: region {roi} needs {g} samples per bin axis"
                )));
            }
            // NaN and negative sizes give no samples (the bin then reads 0).
            Ok(if g >= 1.0 { g as usize } else { 0 })
        };
        let (gh, gw) = (grid(bin_h)?, grid(bin_w)?);
        let count = (gh * gw).max(1) as f64;
        for ch in 0..channels {
            let p = &xs[(n * channels + ch) * plane..(n * channels + ch + 1) * plane];
            for ph in 0..oh {
                for pw in 0..ow {
                    let mut acc: Option<f64> = None;
                    for iy in 0..gh {
                        let yy = y1 + ph as f64 * bin_h + (iy as f64 + 0.5) * bin_h / gh as f64;
                        for ix in 0..gw {
                            let xx = x1 + pw as f64 * bin_w + (ix as f64 + 0.5) * bin_w / gw as f64;
                            let v = roi_bilinear(p, h, w, yy, xx);
                            acc = Some(match acc {
                                None => v,
                                Some(a) if desc.max => a.max(v),
                                Some(a) => a + v,
                            });
                        }
                    }
                    let v = acc.unwrap_or(0.0);
                    out.push(Scalar::Float(if desc.max { v } else { v / count }));
                }
            }
        }
    }
    write_scalars(y, &out)
}

/// N-linear interpolation of a plane of `dims` at `pos`, reading zero outside.
fn zero_padded_linear(plane: &[f64], dims: &[usize], strides: &[usize], pos: &[f64]) -> f64 {
    let r = dims.len();
    let mut total = 0.0;
    for corner in 0..(1usize << r) {
        let mut weight = 1.0;
        let mut at = Some(0usize);
        for a in 0..r {
            let base = pos[a].floor();
            let t = pos[a] - base;
            let high = corner >> a & 1 == 1;
            weight *= if high { t } else { 1.0 - t };
            let i = base + f64::from(u8::from(high));
            at = if i >= 0.0 && i < dims[a] as f64 {
                // In range, so the cast is exact.
                at.map(|o| o + i as usize * strides[a])
            } else {
                None
            };
        }
        if let Some(o) = at {
            if weight != 0.0 {
                total += weight * plane[o];
            }
        }
    }
    total
}

/// DeformConv: a convolution whose every tap reads the input at its regular position plus
/// a learned offset (bilinear, zero outside), scaled by the optional mask, plus the bias.
pub(crate) fn deform_conv(
    desc: &DeformConvDesc,
    inputs: &[TensorView<'_>],
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let (x, wt, off) = (&inputs[0], &inputs[1], &inputs[2]);
    let xd = x.dims();
    let (batch, channels) = (xd[0], xd[1]);
    let spatial = &xd[2..];
    let r = spatial.len();
    if r > MAX_DEFORM_RANK {
        return Err(BackendError::Execution(format!(
            "DeformConv: {r} spatial axes need too many interpolation corners"
        )));
    }
    let m_total = wt.dims()[0];
    let out_sp = y.dims()[2..].to_vec();
    let (g, og) = (desc.group, desc.offset_group);
    let (c_per_g, m_per_g, c_per_og) = (channels / g, m_total / g, channels / og);
    let taps = product(&desc.kernel);
    let outs = product(&out_sp);
    let plane = product(spatial);
    let strides = strides_of(spatial);
    let (xs, ws, os) = (x.to_f64_vec(), wt.to_f64_vec(), off.to_f64_vec());
    let bias = inputs.get(3).map(TensorView::to_f64_vec);
    let mask = inputs.get(4).map(TensorView::to_f64_vec);
    // The kernel tap multi-indices and output multi-indices, in order.
    let mut tap_idx = Vec::with_capacity(taps);
    for_each_index(&desc.kernel, |t| tap_idx.push(t.to_vec()));
    let mut out_idx = Vec::with_capacity(outs);
    for_each_index(&out_sp, |o| out_idx.push(o.to_vec()));
    // Sampled input values: [N, C, taps, outs].
    let mut cols = vec![0.0; batch * channels * taps * outs];
    let mut pos = vec![0.0; r];
    for n in 0..batch {
        for c in 0..channels {
            let grp = c / c_per_og;
            let xp = &xs[(n * channels + c) * plane..(n * channels + c + 1) * plane];
            for (t, tap) in tap_idx.iter().enumerate() {
                for (o, oi) in out_idx.iter().enumerate() {
                    for a in 0..r {
                        let ch = (grp * taps + t) * r + a;
                        let delta = os[(n * og * taps * r + ch) * outs + o];
                        pos[a] = (oi[a] * desc.strides[a] + tap[a] * desc.dilations[a]) as f64
                            - desc.pads[a] as f64
                            + delta;
                    }
                    let mut v = zero_padded_linear(xp, spatial, &strides, &pos);
                    if let Some(mk) = &mask {
                        v *= mk[(n * og * taps + grp * taps + t) * outs + o];
                    }
                    cols[((n * channels + c) * taps + t) * outs + o] = v;
                }
            }
        }
    }
    let mut out = vec![0.0; batch * m_total * outs];
    for n in 0..batch {
        for m in 0..m_total {
            let gi = m / m_per_g;
            let dst = &mut out[(n * m_total + m) * outs..(n * m_total + m + 1) * outs];
            if let Some(b) = &bias {
                dst.iter_mut().for_each(|v| *v = b[m]);
            }
            for cl in 0..c_per_g {
                let c = gi * c_per_g + cl;
                for t in 0..taps {
                    let wv = ws[(m * c_per_g + cl) * taps + t];
                    let src = &cols[((n * channels + c) * taps + t) * outs..][..outs];
                    for (d, s) in dst.iter_mut().zip(src) {
                        *d += wv * s;
                    }
                }
            }
        }
    }
    write_scalars(y, &floats(out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::test_util::{assert_close, eval_f32, f32s};
    use backplane_core::ops::{AffineGridDesc, Col2ImDesc, DeformConvDesc, RoiAlignDesc};
    use backplane_core::{DataType, Op, Tensor};

    #[test]
    fn col2im_sums_overlapping_blocks() {
        // Image [1, 3], blocks [1, 2], stride 1: positions 0 and 1 overlap at column 1.
        let op = Op::Col2Im(Col2ImDesc {
            image_shape: vec![1, 3],
            block_shape: vec![1, 2],
            dilations: vec![1, 1],
            pads: vec![0, 0, 0, 0],
            strides: vec![1, 1],
        });
        // Rows are block taps, columns positions: tap0 = [1, 2], tap1 = [10, 20].
        let x = f32s(&[1, 2, 2], &[1.0, 2.0, 10.0, 20.0]);
        assert_close(&eval_f32(&op, &[&x]), &[1.0, 12.0, 20.0], 0.0);
        // With one column of padding each side: 4 positions, the outer taps fall away.
        let op = Op::Col2Im(Col2ImDesc {
            image_shape: vec![1, 2],
            block_shape: vec![1, 2],
            dilations: vec![1, 1],
            pads: vec![0, 1, 0, 1],
            strides: vec![1, 1],
        });
        let x = f32s(&[1, 2, 3], &[1.0, 2.0, 3.0, 10.0, 20.0, 30.0]);
        // Column 0: tap1@pos0 (10) + tap0@pos1 (2); column 1: tap1@pos1 (20) + tap0@pos2 (3).
        assert_close(&eval_f32(&op, &[&x]), &[12.0, 23.0], 0.0);
    }

    #[test]
    fn affine_grid_identity_and_shift() {
        let theta = f32s(&[1, 2, 3], &[1.0, 0.0, 0.5, 0.0, 1.0, 0.0]);
        let op = |align_corners| {
            Op::AffineGrid(AffineGridDesc {
                size: vec![1, 1, 1, 2],
                align_corners,
            })
        };
        // W = 2: x = -0.5, 0.5 (edges) or -1, 1 (corners), shifted by 0.5; H = 1: y = 0 or -1.
        assert_close(
            &eval_f32(&op(false), &[&theta]),
            &[0.0, 0.0, 1.0, 0.0],
            1e-6,
        );
        assert_close(
            &eval_f32(&op(true), &[&theta]),
            &[-0.5, -1.0, 1.5, -1.0],
            1e-6,
        );
    }

    fn roi(max: bool, half_pixel: bool) -> Op {
        Op::RoiAlign(RoiAlignDesc {
            output_height: 1,
            output_width: 1,
            sampling_ratio: 2,
            spatial_scale: 1.0,
            max,
            half_pixel,
        })
    }

    #[test]
    fn roi_align_average_and_max() {
        // 2x2 plane [[0, 1], [2, 3]]: the box (0, 0)-(1, 1) samples at 0.25 and 0.75.
        let x = f32s(&[1, 1, 2, 2], &[0.0, 1.0, 2.0, 3.0]);
        let rois = f32s(&[1, 4], &[0.0, 0.0, 1.0, 1.0]);
        let idx = Tensor::from_vec(vec![1], vec![0i64]).unwrap();
        // Values 2y + x at (0.25|0.75, 0.25|0.75): 0.75, 1.25, 1.75, 2.25; average 1.5.
        assert_close(
            &eval_f32(&roi(false, false), &[&x, &rois, &idx]),
            &[1.5],
            1e-6,
        );
        assert_close(
            &eval_f32(&roi(true, false), &[&x, &rois, &idx]),
            &[2.25],
            1e-6,
        );
        // half_pixel shifts the box by -0.5: samples at -0.25 (clamped to 0) and 0.25.
        // Values: (0,0) 0, (0,.25) .25, (.25,0) .5, (.25,.25) .75: average 0.375.
        assert_close(
            &eval_f32(&roi(false, true), &[&x, &rois, &idx]),
            &[0.375],
            1e-6,
        );
    }

    #[test]
    fn roi_align_rejects_a_batch_index_outside_the_input() {
        let x = f32s(&[1, 1, 2, 2], &[0.0; 4]);
        let rois = f32s(&[1, 4], &[0.0, 0.0, 1.0, 1.0]);
        let idx = Tensor::from_vec(vec![1], vec![3i64]).unwrap();
        let result = crate::evaluate(&roi(false, false), &[&x, &rois, &idx]);
        assert!(result.is_err());
    }

    #[test]
    fn deform_conv_with_zero_and_half_offsets() {
        let op = Op::DeformConv(DeformConvDesc {
            kernel: vec![1, 1],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![0, 0, 0, 0],
            group: 1,
            offset_group: 1,
        });
        let x = f32s(&[1, 1, 1, 2], &[1.0, 3.0]);
        let w = f32s(&[1, 1, 1, 1], &[2.0]);
        // Offsets (dy, dx) per output: (0, 0.5) reads 2; (0, 0.5) past the end reads 3 / 2.
        let off = f32s(&[1, 2, 1, 2], &[0.0, 0.0, 0.5, 0.5]);
        assert_close(&eval_f32(&op, &[&x, &w, &off]), &[4.0, 3.0], 1e-6);
        let b = f32s(&[1], &[1.0]);
        let mask = f32s(&[1, 1, 1, 2], &[0.5, 1.0]);
        assert_close(
            &eval_f32(&op, &[&x, &w, &off, &b, &mask]),
            &[3.0, 4.0],
            1e-6,
        );
    }

    #[test]
    fn wild_offsets_and_boxes_read_zero_instead_of_panicking() {
        let op = Op::DeformConv(DeformConvDesc {
            kernel: vec![1, 1],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![0, 0, 0, 0],
            group: 1,
            offset_group: 1,
        });
        let x = f32s(&[1, 1, 1, 2], &[1.0, 3.0]);
        let w = f32s(&[1, 1, 1, 1], &[1.0]);
        let off = f32s(&[1, 2, 1, 2], &[f32::NAN, 1e30, -1e30, f32::INFINITY]);
        assert_close(&eval_f32(&op, &[&x, &w, &off]), &[0.0, 0.0], 0.0);
        let rois = f32s(
            &[2, 4],
            &[f32::NAN, 0.0, 1.0, 1.0, -1e30, -1e30, 1e30, 1e30],
        );
        let idx = Tensor::from_vec(vec![2], vec![0i64, 0]).unwrap();
        let x = f32s(&[1, 1, 2, 2], &[1.0; 4]);
        let out = eval_f32(&roi(false, false), &[&x, &rois, &idx]);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn col2im_with_dilation_and_f64() {
        // Image [1, 4], block [1, 2] dilated by 3: taps 0 and 3, one position.
        let op = Op::Col2Im(Col2ImDesc {
            image_shape: vec![1, 4],
            block_shape: vec![1, 2],
            dilations: vec![1, 3],
            pads: vec![0, 0, 0, 0],
            strides: vec![1, 1],
        });
        let x = crate::test_util::tensor(DataType::F64, &[1, 2, 1], &[5.0, 7.0]);
        let y = crate::test_util::eval1(&op, &[&x]);
        assert_eq!(y.as_slice::<f64>().unwrap(), &[5.0, 0.0, 0.0, 7.0]);
    }
}
