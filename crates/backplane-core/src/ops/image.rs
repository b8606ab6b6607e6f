//! Image-geometry ops: Col2Im, AffineGrid, RoiAlign and DeformConv, plus the attribute
//! forms of these ops and of the signal ops (DFT, STFT).

use super::flat::{self, Reader};
use super::signal::{usize_attr, DftDesc, StftDesc};
use super::AttrValue;
use crate::{CoreError, DataType, Op, Result, TensorInfo};

/// The output length of a sliding window along one axis: `None` when the window does not fit.
pub fn sliding_output_len(
    input: usize,
    pad_begin: usize,
    pad_end: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
) -> Option<usize> {
    let span = dilation
        .checked_mul(kernel.checked_sub(1)?)?
        .checked_add(1)?;
    let padded = input.checked_add(pad_begin)?.checked_add(pad_end)?;
    if stride == 0 || padded < span {
        return None;
    }
    Some((padded - span) / stride + 1)
}

/// Col2Im: input [N, C * prod(block), L] → image [N, C, image...], summing the column
/// blocks back into the (padded) image. L must be the number of block positions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Col2ImDesc {
    /// The spatial shape of the image.
    pub image_shape: Vec<usize>,
    /// The spatial shape of one block.
    pub block_shape: Vec<usize>,
    /// Dilation per spatial axis.
    pub dilations: Vec<usize>,
    /// Begin pads then end pads.
    pub pads: Vec<usize>,
    /// Stride per spatial axis.
    pub strides: Vec<usize>,
}

impl Col2ImDesc {
    /// The number of block positions per spatial axis, or `None` when a block does not fit.
    pub fn positions(&self) -> Option<Vec<usize>> {
        let r = self.image_shape.len();
        if [
            self.block_shape.len(),
            self.dilations.len(),
            self.strides.len(),
        ]
        .iter()
        .any(|&l| l != r)
            || self.pads.len() != 2 * r
        {
            return None;
        }
        (0..r)
            .map(|i| {
                sliding_output_len(
                    self.image_shape[i],
                    self.pads[i],
                    self.pads[r + i],
                    self.block_shape[i],
                    self.strides[i],
                    self.dilations[i],
                )
            })
            .collect()
    }

    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        const OP: &str = "Col2Im";
        let x = inputs[0];
        require_float(OP, x)?;
        let positions = self.positions().ok_or_else(|| {
            CoreError::op(OP, format!("the blocks do not fit the image: {self:?}"))
        })?;
        let d = x.shape.dims();
        let block: Option<usize> = self
            .block_shape
            .iter()
            .try_fold(1usize, |a, &b| a.checked_mul(b));
        let count: Option<usize> = positions.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
        let (Some(block), Some(count)) = (block, count) else {
            return Err(CoreError::op(OP, "the block shape is too large"));
        };
        if d.len() != 3 || block == 0 || !d[1].is_multiple_of(block) || d[2] != count {
            return Err(CoreError::op(
                OP,
                format!(
                    "the input must be [N, C * {block}, {count}] for {self:?}, got {}",
                    x.shape
                ),
            ));
        }
        let mut out = vec![d[0], d[1] / block];
        out.extend(&self.image_shape);
        Ok(vec![TensorInfo::new(x.dtype, out)])
    }
}

/// AffineGrid: theta [N, r, r + 1] → grid [N, size..., r] of normalized sampling positions
/// (x first), for r = 2 or 3 spatial axes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct AffineGridDesc {
    /// The target size [N, C, spatial...].
    pub size: Vec<usize>,
    /// -1 and 1 are the centers of the corner elements (true) or their outer edges.
    pub align_corners: bool,
}

impl AffineGridDesc {
    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        const OP: &str = "AffineGrid";
        let theta = inputs[0];
        require_float(OP, theta)?;
        let r = self.size.len().saturating_sub(2);
        let d = theta.shape.dims();
        if !(r == 2 || r == 3) || d != [self.size[0], r, r + 1] {
            return Err(CoreError::op(
                OP,
                format!(
                    "theta must be [N, r, r + 1] for size {:?} (r = 2 or 3), got {}",
                    self.size, theta.shape
                ),
            ));
        }
        let mut out = vec![self.size[0]];
        out.extend(&self.size[2..]);
        out.push(r);
        Ok(vec![TensorInfo::new(theta.dtype, out)])
    }
}

/// RoiAlign: X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices `[R]` (int64) →
/// [R, C, output_height, output_width].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RoiAlignDesc {
    /// Output rows per region.
    pub output_height: usize,
    /// Output columns per region.
    pub output_width: usize,
    /// Samples per bin and axis (0: ceil(region size / output size)).
    pub sampling_ratio: usize,
    /// Scale from region coordinates to input coordinates.
    pub spatial_scale: f32,
    /// Max (true) or average of the samples of a bin.
    pub max: bool,
    /// Region coordinates are shifted by -0.5 (`half_pixel`) instead of not
    /// (`output_half_pixel`).
    pub half_pixel: bool,
}

impl RoiAlignDesc {
    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        const OP: &str = "RoiAlign";
        let (x, rois, idx) = (inputs[0], inputs[1], inputs[2]);
        require_float(OP, x)?;
        let (xd, rd, id) = (x.shape.dims(), rois.shape.dims(), idx.shape.dims());
        if xd.len() != 4
            || rois.dtype != x.dtype
            || rd.len() != 2
            || rd[1] != 4
            || idx.dtype != DataType::I64
            || id != [rd[0]]
        {
            return Err(CoreError::op(
                OP,
                format!(
                    "expected X [N, C, H, W], rois [R, 4] of X's type and batch_indices [R] \
                     int64, got {} {}, {} {}, {} {}",
                    x.dtype, x.shape, rois.dtype, rois.shape, idx.dtype, idx.shape
                ),
            ));
        }
        if self.output_height == 0 || self.output_width == 0 {
            return Err(CoreError::op(OP, "the output size must be positive"));
        }
        Ok(vec![TensorInfo::new(
            x.dtype,
            vec![rd[0], xd[1], self.output_height, self.output_width],
        )])
    }
}

/// DeformConv: X [N, C, spatial...], W [M, C / group, kernel...], offset
/// [N, offset_group * r * prod(kernel), out...], optional B `[M]` and mask
/// [N, offset_group * prod(kernel), out...] → [N, M, out...].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct DeformConvDesc {
    /// Kernel size per spatial axis.
    pub kernel: Vec<usize>,
    /// Stride per spatial axis.
    pub strides: Vec<usize>,
    /// Dilation per spatial axis.
    pub dilations: Vec<usize>,
    /// Begin pads then end pads.
    pub pads: Vec<usize>,
    /// Channel groups.
    pub group: usize,
    /// Groups of input channels sharing one set of offsets.
    pub offset_group: usize,
}

impl DeformConvDesc {
    /// The output spatial shape for an input spatial shape.
    pub fn output_spatial(&self, spatial: &[usize]) -> Option<Vec<usize>> {
        let r = spatial.len();
        if self.kernel.len() != r
            || self.strides.len() != r
            || self.dilations.len() != r
            || self.pads.len() != 2 * r
        {
            return None;
        }
        (0..r)
            .map(|i| {
                sliding_output_len(
                    spatial[i],
                    self.pads[i],
                    self.pads[r + i],
                    self.kernel[i],
                    self.strides[i],
                    self.dilations[i],
                )
            })
            .collect()
    }

    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        const OP: &str = "DeformConv";
        let (x, w, off) = (inputs[0], inputs[1], inputs[2]);
        require_float(OP, x)?;
        let (xd, wd) = (x.shape.dims(), w.shape.dims());
        if xd.len() < 3 || wd.len() != xd.len() || inputs.iter().any(|t| t.dtype != x.dtype) {
            return Err(CoreError::op(
                OP,
                format!(
                    "X, W must be [N, C, spatial...], [M, C / group, kernel...] of one float \
                     type, got {} and {}",
                    x.shape, w.shape
                ),
            ));
        }
        let r = xd.len() - 2;
        let (n, c, m) = (xd[0], xd[1], wd[0]);
        let g = self.group;
        let og = self.offset_group;
        if g == 0
            || og == 0
            || !c.is_multiple_of(g)
            || !m.is_multiple_of(g)
            || !c.is_multiple_of(og)
            || wd[1] * g != c
            || wd[2..] != self.kernel[..]
        {
            return Err(CoreError::op(
                OP,
                format!(
                    "W {} does not fit X {} with group {g}, offset_group {og} and kernel {:?}",
                    w.shape, x.shape, self.kernel
                ),
            ));
        }
        let out = self
            .output_spatial(&xd[2..])
            .ok_or_else(|| CoreError::op(OP, format!("the kernel does not fit X {}", x.shape)))?;
        let taps: usize = self.kernel.iter().product();
        let expect = |per_tap: usize| -> Vec<usize> {
            let mut v = vec![n, og * per_tap * taps];
            v.extend(&out);
            v
        };
        if off.shape.dims() != expect(r).as_slice() {
            return Err(CoreError::op(
                OP,
                format!("offset must be {:?}, got {}", expect(r), off.shape),
            ));
        }
        if let Some(b) = inputs.get(3) {
            if b.shape.dims() != [m] {
                return Err(CoreError::op(
                    OP,
                    format!("B must be [{m}], got {}", b.shape),
                ));
            }
        }
        if let Some(mask) = inputs.get(4) {
            if mask.shape.dims() != expect(1).as_slice() {
                return Err(CoreError::op(
                    OP,
                    format!("mask must be {:?}, got {}", expect(1), mask.shape),
                ));
            }
        }
        let mut dims = vec![n, m];
        dims.extend(out);
        Ok(vec![TensorInfo::new(x.dtype, dims)])
    }
}

fn require_float(op: &'static str, x: &TensorInfo) -> Result<()> {
    if x.dtype.is_float() {
        Ok(())
    } else {
        Err(CoreError::op(
            op,
            format!("the input must be a float tensor, got {}", x.dtype),
        ))
    }
}

/// The attribute form of the signal and image-geometry ops; `None` for other ops.
pub(crate) fn to_attributes(op: &Op) -> Option<(String, Vec<(String, AttrValue)>)> {
    let int = |v: usize| AttrValue::Int(v as i64);
    Some(match op {
        Op::Dft(d) => ("DFT".into(), d.to_attrs()),
        Op::Stft(d) => ("STFT".into(), d.to_attrs()),
        Op::Col2Im(d) => (
            "Col2Im".into(),
            vec![
                ("image_shape".into(), flat::usizes(&d.image_shape)),
                ("block_shape".into(), flat::usizes(&d.block_shape)),
                ("dilations".into(), flat::usizes(&d.dilations)),
                ("pads".into(), flat::usizes(&d.pads)),
                ("strides".into(), flat::usizes(&d.strides)),
            ],
        ),
        Op::AffineGrid(d) => (
            "AffineGrid".into(),
            vec![
                ("size".into(), flat::usizes(&d.size)),
                ("align_corners".into(), int(usize::from(d.align_corners))),
            ],
        ),
        Op::RoiAlign(d) => (
            "RoiAlign".into(),
            vec![
                ("output_height".into(), int(d.output_height)),
                ("output_width".into(), int(d.output_width)),
                ("sampling_ratio".into(), int(d.sampling_ratio)),
                ("spatial_scale".into(), AttrValue::Float(d.spatial_scale)),
                (
                    "mode".into(),
                    AttrValue::String(if d.max { "max" } else { "avg" }.into()),
                ),
                (
                    "coordinate_transformation_mode".into(),
                    AttrValue::String(
                        if d.half_pixel {
                            "half_pixel"
                        } else {
                            "output_half_pixel"
                        }
                        .into(),
                    ),
                ),
            ],
        ),
        Op::DeformConv(d) => (
            "DeformConv".into(),
            vec![
                ("kernel_shape".into(), flat::usizes(&d.kernel)),
                ("strides".into(), flat::usizes(&d.strides)),
                ("dilations".into(), flat::usizes(&d.dilations)),
                ("pads".into(), flat::usizes(&d.pads)),
                ("group".into(), int(d.group)),
                ("offset_group".into(), int(d.offset_group)),
            ],
        ),
        _ => return None,
    })
}

/// The inverse of [`to_attributes`]; `None` for op types it does not know.
pub(crate) fn from_attributes(op_type: &str, attrs: &[(String, AttrValue)]) -> Result<Option<Op>> {
    let r = Reader { op_type, attrs };
    Ok(Some(match op_type {
        "DFT" => Op::Dft(DftDesc::from_attrs(&r)?),
        "STFT" => Op::Stft(StftDesc::from_attrs(&r)?),
        "Col2Im" => Op::Col2Im(Col2ImDesc {
            image_shape: r.usizes("image_shape")?,
            block_shape: r.usizes("block_shape")?,
            dilations: r.usizes("dilations")?,
            pads: r.usizes("pads")?,
            strides: r.usizes("strides")?,
        }),
        "AffineGrid" => Op::AffineGrid(AffineGridDesc {
            size: r.usizes("size")?,
            align_corners: r.flag("align_corners")?,
        }),
        "RoiAlign" => Op::RoiAlign(RoiAlignDesc {
            output_height: usize_attr(&r, "output_height")?,
            output_width: usize_attr(&r, "output_width")?,
            sampling_ratio: usize_attr(&r, "sampling_ratio")?,
            spatial_scale: r.float("spatial_scale")?,
            max: match r.string("mode")? {
                "max" => true,
                "avg" => false,
                other => return Err(r.bad("mode", other)),
            },
            half_pixel: match r.string("coordinate_transformation_mode")? {
                "half_pixel" => true,
                "output_half_pixel" => false,
                other => return Err(r.bad("coordinate_transformation_mode", other)),
            },
        }),
        "DeformConv" => Op::DeformConv(DeformConvDesc {
            kernel: r.usizes("kernel_shape")?,
            strides: r.usizes("strides")?,
            dilations: r.usizes("dilations")?,
            pads: r.usizes("pads")?,
            group: usize_attr(&r, "group")?,
            offset_group: usize_attr(&r, "offset_group")?,
        }),
        _ => return Ok(None),
    }))
}

/// One example of each op [`to_attributes`] handles (for the round-trip test).
#[cfg(test)]
pub(crate) fn examples() -> Vec<Op> {
    vec![
        Op::Dft(DftDesc {
            axis: 1,
            length: 12,
            inverse: true,
            onesided: false,
        }),
        Op::Stft(StftDesc {
            frame_step: 3,
            frame_length: 8,
            onesided: true,
        }),
        Op::Col2Im(Col2ImDesc {
            image_shape: vec![5, 6],
            block_shape: vec![2, 3],
            dilations: vec![1, 2],
            pads: vec![0, 1, 1, 0],
            strides: vec![2, 1],
        }),
        Op::AffineGrid(AffineGridDesc {
            size: vec![2, 3, 4, 5],
            align_corners: true,
        }),
        Op::RoiAlign(RoiAlignDesc {
            output_height: 2,
            output_width: 3,
            sampling_ratio: 0,
            spatial_scale: 0.5,
            max: true,
            half_pixel: false,
        }),
        Op::DeformConv(DeformConvDesc {
            kernel: vec![2, 2],
            strides: vec![1, 2],
            dilations: vec![2, 1],
            pads: vec![1, 0, 1, 0],
            group: 2,
            offset_group: 1,
        }),
    ]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn f32_info(dims: &[usize]) -> TensorInfo {
        TensorInfo::new(DataType::F32, dims.to_vec())
    }

    #[test]
    fn col2im_shapes() {
        let desc = Col2ImDesc {
            image_shape: vec![5, 5],
            block_shape: vec![3, 3],
            dilations: vec![1, 1],
            pads: vec![0, 0, 0, 0],
            strides: vec![2, 2],
        };
        assert_eq!(desc.positions().unwrap(), vec![2, 2]);
        let op = Op::Col2Im(desc);
        let x = f32_info(&[1, 9, 4]);
        assert_eq!(op.infer(&[&x]).unwrap()[0].shape.dims(), &[1, 1, 5, 5]);
        assert!(op.infer(&[&f32_info(&[1, 9, 5])]).is_err());
        assert!(op.infer(&[&f32_info(&[1, 8, 4])]).is_err());
    }

    #[test]
    fn affine_grid_shapes() {
        let op = Op::AffineGrid(AffineGridDesc {
            size: vec![2, 3, 5, 6],
            align_corners: false,
        });
        let theta = f32_info(&[2, 2, 3]);
        assert_eq!(op.infer(&[&theta]).unwrap()[0].shape.dims(), &[2, 5, 6, 2]);
        assert!(op.infer(&[&f32_info(&[2, 3, 4])]).is_err());
        let op3 = Op::AffineGrid(AffineGridDesc {
            size: vec![1, 1, 2, 3, 4],
            align_corners: true,
        });
        assert_eq!(
            op3.infer(&[&f32_info(&[1, 3, 4])]).unwrap()[0].shape.dims(),
            &[1, 2, 3, 4, 3]
        );
    }

    #[test]
    fn roi_align_shapes() {
        let op = Op::RoiAlign(RoiAlignDesc {
            output_height: 5,
            output_width: 4,
            sampling_ratio: 2,
            spatial_scale: 1.0,
            max: false,
            half_pixel: true,
        });
        let x = f32_info(&[1, 3, 10, 10]);
        let rois = f32_info(&[7, 4]);
        let idx = TensorInfo::new(DataType::I64, vec![7]);
        assert_eq!(
            op.infer(&[&x, &rois, &idx]).unwrap()[0].shape.dims(),
            &[7, 3, 5, 4]
        );
        let idx_bad = TensorInfo::new(DataType::I64, vec![6]);
        assert!(op.infer(&[&x, &rois, &idx_bad]).is_err());
    }

    #[test]
    fn deform_conv_shapes() {
        let op = Op::DeformConv(DeformConvDesc {
            kernel: vec![2, 2],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![1, 1, 1, 1],
            group: 1,
            offset_group: 1,
        });
        let x = f32_info(&[1, 1, 3, 3]);
        let w = f32_info(&[1, 1, 2, 2]);
        let off = f32_info(&[1, 8, 4, 4]);
        assert_eq!(
            op.infer(&[&x, &w, &off]).unwrap()[0].shape.dims(),
            &[1, 1, 4, 4]
        );
        let b = f32_info(&[1]);
        let mask = f32_info(&[1, 4, 4, 4]);
        assert!(op.infer(&[&x, &w, &off, &b, &mask]).is_ok());
        assert!(op.infer(&[&x, &w, &f32_info(&[1, 8, 3, 3])]).is_err());
    }
}
