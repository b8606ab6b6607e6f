//! Data-movement operators and the shape queries (Shape, Size) that fold to constants.

use super::{Dst, Lowering, NodeCx, Src, Step, Tx, TxError};
use crate::tensor::map_dtype;
use backplane_core::ops::{PadDesc, PadMode, SliceDesc};
use backplane_core::shape::normalize_axis;
use backplane_core::{Op, Tensor};

/// Largest absolute pad accepted.
const MAX_PAD: i64 = i32::MAX as i64;

/// Resolve an ONNX Reshape target (with 0 = copy and one -1 = infer) against the input dims.
pub(crate) fn resolve_reshape(
    input: &[usize],
    target: &[i64],
    allowzero: bool,
) -> Result<Vec<usize>, String> {
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, &t) in target.iter().enumerate() {
        let d = match t {
            -1 => {
                if infer_at.replace(i).is_some() {
                    return Err(format!("shape {target:?} has more than one -1"));
                }
                1
            }
            0 if !allowzero => *input.get(i).ok_or_else(|| {
                format!(
                    "shape {target:?} copies dim {i} (0) but the input has rank {}",
                    input.len()
                )
            })?,
            t if t < 0 => return Err(format!("shape {target:?} has the invalid value {t}")),
            t => usize::try_from(t).map_err(|_| format!("dim {t} is too large"))?,
        };
        out.push(d);
    }
    let total = backplane_core::shape::checked_product(input)
        .ok_or_else(|| format!("input shape {input:?} overflows"))?;
    if let Some(i) = infer_at {
        if allowzero && target.contains(&0) {
            return Err(format!(
                "shape {target:?} has both 0 and -1, which allowzero=1 forbids"
            ));
        }
        let known = backplane_core::shape::checked_product(&out)
            .ok_or_else(|| format!("shape {target:?} overflows"))?;
        if known == 0 || total % known != 0 {
            return Err(format!(
                "cannot infer the -1 of {target:?} for an input of shape {input:?}"
            ));
        }
        out[i] = total / known;
    }
    if backplane_core::shape::checked_product(&out) != Some(total) {
        return Err(format!(
            "cannot reshape {input:?} ({total} elements) to {target:?}"
        ));
    }
    Ok(out)
}

pub(super) fn reshape(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let allowzero = cx.opset >= 14 && cx.attr(cx.attrs.flag("allowzero", false))?;
    let target = if cx.opset < 5 {
        cx.attr(cx.attrs.ints("shape"))?
    } else {
        cx.const_ints(1, "shape")?
    }
    .ok_or_else(|| cx.invalid("the shape is missing"))?;
    let x = cx.info(0)?;
    let shape = resolve_reshape(x.shape.dims(), &target, allowzero).map_err(|m| cx.invalid(m))?;
    Ok(Lowering::single(Op::Reshape { shape }, vec![Src::Input(0)]))
}

pub(super) fn flatten(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let axis = cx.attr(cx.attrs.int_or("axis", 1))?;
    Ok(Lowering::single(Op::Flatten { axis }, vec![Src::Input(0)]))
}

pub(super) fn transpose(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let perm = match cx.attr(cx.attrs.ints("perm"))? {
        Some(p) => p
            .into_iter()
            .map(|v| usize::try_from(v).map_err(|_| cx.invalid(format!("perm has {v}"))))
            .collect::<Tx<Vec<usize>>>()?,
        None => (0..cx.info(0)?.shape.rank()).rev().collect(),
    };
    Ok(Lowering::single(
        Op::Transpose { perm },
        vec![Src::Input(0)],
    ))
}

fn axes_param(cx: &NodeCx<'_>, from_input_opset: i64, input: usize) -> Tx<Option<Vec<i64>>> {
    if cx.opset < from_input_opset {
        cx.attr(cx.attrs.ints("axes"))
    } else {
        cx.const_ints(input, "axes")
    }
}

pub(super) fn squeeze(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let axes = axes_param(cx, 13, 1)?.unwrap_or_default();
    Ok(Lowering::single(Op::Squeeze { axes }, vec![Src::Input(0)]))
}

pub(super) fn unsqueeze(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let axes = axes_param(cx, 13, 1)?.ok_or_else(|| cx.invalid("axes are required"))?;
    Ok(Lowering::single(
        Op::Unsqueeze { axes },
        vec![Src::Input(0)],
    ))
}

pub(super) fn concat(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let axis = cx
        .attr(cx.attrs.int("axis"))?
        .ok_or_else(|| cx.invalid("the axis attribute is required"))?;
    let n = cx.num_inputs();
    if n == 0 || (0..n).any(|i| cx.input_name(i).is_none()) {
        return Err(cx.invalid("needs at least one input and no empty input names"));
    }
    Ok(Lowering::single(
        Op::Concat { axis },
        (0..n).map(Src::Input).collect(),
    ))
}

pub(super) fn split(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let axis = cx.attr(cx.attrs.int_or("axis", 0))?;
    let split = if cx.opset < 13 {
        cx.attr(cx.attrs.ints("split"))?
    } else {
        cx.const_ints(1, "split")?
    };
    let num_outputs = if cx.opset >= 18 {
        cx.attr(cx.attrs.int("num_outputs"))?
    } else {
        None
    };
    let n = cx.node.output.len();
    if n == 0 {
        return Err(cx.invalid("has no outputs"));
    }
    let x = cx.info(0)?;
    let a = normalize_axis(axis, x.shape.rank()).map_err(|e| cx.invalid(e))?;
    let dim = x.shape.dims()[a];
    let splits: Vec<usize> = match (split, num_outputs) {
        (Some(_), Some(_)) => {
            return Err(cx.invalid("gives both the split input and num_outputs"));
        }
        (Some(s), None) => {
            if s.len() != n {
                return Err(cx.invalid(format!(
                    "split {s:?} has {} entries for {n} outputs",
                    s.len()
                )));
            }
            let s = s
                .into_iter()
                .map(|v| usize::try_from(v).map_err(|_| cx.invalid(format!("split has {v}"))))
                .collect::<Tx<Vec<usize>>>()?;
            let sum = s.iter().try_fold(0usize, |acc, &v| acc.checked_add(v));
            if sum != Some(dim) {
                return Err(cx.invalid(format!("split {s:?} does not sum to {dim}")));
            }
            s
        }
        (None, Some(k)) => {
            if usize::try_from(k).ok() != Some(n) {
                return Err(cx.invalid(format!("num_outputs is {k} but the node has {n} outputs")));
            }
            // Opset 18: chunks of ceil(dim / n), the last one smaller.
            let chunk = dim.div_ceil(n);
            let rest = chunk
                .checked_mul(n - 1)
                .and_then(|used| dim.checked_sub(used))
                .ok_or_else(|| {
                    cx.invalid(format!("cannot split {dim} into {n} chunks of {chunk}"))
                })?;
            let mut s = vec![chunk; n - 1];
            s.push(rest);
            s
        }
        (None, None) => {
            if cx.opset >= 18 {
                return Err(cx.invalid("needs the split input or the num_outputs attribute"));
            }
            if dim % n != 0 {
                return Err(cx.invalid(format!("cannot split {dim} evenly into {n} outputs")));
            }
            vec![dim / n; n]
        }
    };
    Ok(Lowering::Steps(vec![Step {
        op: Op::Split { axis, splits },
        inputs: vec![Src::Input(0)],
        outputs: (0..n).map(Dst::Output).collect(),
        suffix: None,
    }]))
}

pub(super) fn slice(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let desc = if cx.opset < 10 {
        SliceDesc {
            starts: cx
                .attr(cx.attrs.ints("starts"))?
                .ok_or_else(|| cx.invalid("starts are required"))?,
            ends: cx
                .attr(cx.attrs.ints("ends"))?
                .ok_or_else(|| cx.invalid("ends are required"))?,
            axes: cx.attr(cx.attrs.ints("axes"))?.unwrap_or_default(),
            steps: Vec::new(),
        }
    } else {
        SliceDesc {
            starts: cx
                .const_ints(1, "starts")?
                .ok_or_else(|| cx.invalid("starts are required"))?,
            ends: cx
                .const_ints(2, "ends")?
                .ok_or_else(|| cx.invalid("ends are required"))?,
            axes: cx.const_ints(3, "axes")?.unwrap_or_default(),
            steps: cx.const_ints(4, "steps")?.unwrap_or_default(),
        }
    };
    Ok(Lowering::single(Op::Slice(desc), vec![Src::Input(0)]))
}

/// Dropout at inference (or in training with a ratio of 0) passes the input through; its
/// mask output is then all true.
pub(super) fn dropout(cx: &NodeCx<'_>) -> Tx<Lowering> {
    if cx.opset >= 12 {
        if let Some(t) = cx.const_scalar(2, "training_mode")? {
            // Training drops nothing when the ratio is 0.
            if t != 0.0 && cx.const_scalar(1, "ratio")? != Some(0.0) {
                return Err(TxError::Unsupported(
                    "training_mode=true is not supported (inference only)".into(),
                ));
            }
        }
    } else if cx.opset < 7 && cx.attr(cx.attrs.int_or("is_test", 0))? == 0 {
        return Err(TxError::Unsupported(
            "is_test=0 (training) is not supported".into(),
        ));
    }
    let mut steps = vec![Step {
        op: Op::Identity,
        inputs: vec![Src::Input(0)],
        outputs: vec![Dst::Output(0)],
        suffix: None,
    }];
    if cx.output_used(1) {
        if cx.opset < 10 {
            return Err(TxError::Unsupported(
                "the mask output of Dropout before opset 10 is not supported".into(),
            ));
        }
        let dims = cx.info(0)?.shape.dims().to_vec();
        crate::tensor::check_size(cx.name, &dims, 1, cx.imp.max_tensor_bytes())?;
        let n = backplane_core::shape::checked_product(&dims).unwrap_or(0);
        let mask = Tensor::from_bools(dims, &vec![true; n]).map_err(|e| cx.invalid(e))?;
        steps.push(Step {
            op: Op::Identity,
            inputs: vec![Src::Const(std::sync::Arc::new(mask))],
            outputs: vec![Dst::Output(1)],
            suffix: Some("mask".into()),
        });
    }
    Ok(Lowering::Steps(steps))
}

pub(super) fn cast(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let to = cx
        .attr(cx.attrs.int("to"))?
        .ok_or_else(|| cx.invalid("the 'to' attribute is required"))?;
    let code = i32::try_from(to).map_err(|_| cx.invalid(format!("bad type code {to}")))?;
    let to = map_dtype(code).ok_or_else(|| {
        TxError::Unsupported(format!(
            "Cast to {} is not supported",
            crate::tensor::dtype_name(code)
        ))
    })?;
    // Opset 19's `saturate` (float8 targets only; default 1).
    let saturate = cx.attr(cx.attrs.flag("saturate", true))?;
    Ok(Lowering::single(
        Op::Cast { to, saturate },
        vec![Src::Input(0)],
    ))
}

fn pad_mode(cx: &NodeCx<'_>) -> Tx<PadMode> {
    Ok(
        match cx.attr(cx.attrs.string_or("mode", "constant"))?.as_str() {
            "constant" => PadMode::Constant,
            "reflect" => PadMode::Reflect,
            "edge" => PadMode::Edge,
            "wrap" => PadMode::Wrap,
            other => return Err(cx.invalid(format!("unknown pad mode '{other}'"))),
        },
    )
}

pub(super) fn pad(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let mode = pad_mode(cx)?;
    let x = cx.info(0)?;
    let rank = x.shape.rank();
    let (pads, value, axes) = if cx.opset < 11 {
        let key = if cx.opset < 2 { "paddings" } else { "pads" };
        (
            cx.attr(cx.attrs.ints(key))?,
            f64::from(cx.attr(cx.attrs.float_or("value", 0.0))?),
            None,
        )
    } else {
        (
            cx.const_ints(1, "pads")?,
            cx.const_scalar(2, "constant_value")?.unwrap_or(0.0),
            if cx.opset >= 18 {
                cx.const_ints(3, "axes")?
            } else {
                None
            },
        )
    };
    let pads = pads.ok_or_else(|| cx.invalid("pads are required"))?;
    if let Some(&p) = pads
        .iter()
        .find(|p| p.checked_abs().is_none_or(|a| a > MAX_PAD))
    {
        return Err(cx.invalid(format!("pad {p} is too large")));
    }
    let pads = match axes {
        None => pads,
        Some(axes) => {
            if pads.len() != 2 * axes.len() {
                return Err(cx.invalid(format!(
                    "pads has {} values for {} axes",
                    pads.len(),
                    axes.len()
                )));
            }
            let mut full = vec![0i64; 2 * rank];
            for (k, &ax) in axes.iter().enumerate() {
                let a = normalize_axis(ax, rank).map_err(|e| cx.invalid(e))?;
                full[a] = pads[k];
                full[rank + a] = pads[axes.len() + k];
            }
            full
        }
    };
    if pads.len() != 2 * rank {
        return Err(cx.invalid(format!(
            "pads has {} values for an input of rank {rank}",
            pads.len()
        )));
    }
    Ok(Lowering::single(
        Op::Pad(PadDesc { mode, pads, value }),
        vec![Src::Input(0)],
    ))
}

pub(super) fn shape(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let x = cx.info(0)?;
    let dims = x.shape.dims();
    let rank = dims.len() as i64;
    let clamp = |v: i64| {
        let v = if v < 0 { v.saturating_add(rank) } else { v };
        v.clamp(0, rank) as usize
    };
    let (start, end) = if cx.opset >= 15 {
        (
            clamp(cx.attr(cx.attrs.int_or("start", 0))?),
            clamp(cx.attr(cx.attrs.int_or("end", rank))?),
        )
    } else {
        (0, dims.len())
    };
    let values: Vec<i64> = dims
        .get(start..end.max(start))
        .unwrap_or(&[])
        .iter()
        .map(|&d| d as i64)
        .collect();
    let n = values.len();
    let t = Tensor::from_vec(vec![n], values).map_err(|e| cx.invalid(e))?;
    Ok(Lowering::Constants(vec![t]))
}

pub(super) fn size(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let x = cx.info(0)?;
    Ok(Lowering::Constants(vec![Tensor::scalar(
        x.shape.elements() as i64,
    )]))
}

/// CenterCropPad: crop (a centered Slice) or zero-pad (a centered Pad) the listed axes to
/// the target shape; an odd difference leaves the extra element at the end.
pub(super) fn center_crop_pad(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(18)?;
    let dims = cx.info(0)?.shape.dims().to_vec();
    let rank = dims.len();
    let target = cx
        .const_ints(1, "shape")?
        .ok_or_else(|| cx.invalid("the shape input is required"))?;
    let axes = match cx.attr(cx.attrs.ints("axes"))? {
        Some(axes) => axes
            .iter()
            .map(|&a| normalize_axis(a, rank).map_err(|e| cx.invalid(e)))
            .collect::<Tx<Vec<usize>>>()?,
        None => (0..rank).collect(),
    };
    if axes.len() != target.len() {
        return Err(cx.invalid(format!(
            "shape has {} values for {} axes",
            target.len(),
            axes.len()
        )));
    }
    let mut out_dims = dims.clone();
    for (&a, &want) in axes.iter().zip(&target) {
        out_dims[a] = usize::try_from(want)
            .map_err(|_| cx.invalid(format!("shape has a negative size {want}")))?;
    }
    crate::tensor::check_size(
        cx.name,
        &out_dims,
        cx.info(0)?.dtype.size(),
        cx.imp.max_tensor_bytes(),
    )?;
    let mut starts: Vec<i64> = vec![0; rank];
    let mut ends: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    let mut pads = vec![0i64; 2 * rank];
    for (&a, &want) in axes.iter().zip(&target) {
        if want < 0 {
            return Err(cx.invalid(format!("shape has a negative size {want}")));
        }
        let have = dims[a] as i64;
        let diff = (have - want).abs();
        if want < have {
            starts[a] = diff / 2;
            ends[a] = diff / 2 + want;
        } else {
            pads[a] = diff / 2;
            pads[rank + a] = diff - diff / 2;
        }
    }
    Ok(Lowering::Steps(vec![
        Step {
            op: Op::Slice(SliceDesc {
                starts,
                ends,
                axes: (0..rank as i64).collect(),
                steps: vec![1; rank],
            }),
            inputs: vec![Src::Input(0)],
            outputs: vec![Dst::Temp(0)],
            suffix: Some("crop".into()),
        },
        Step {
            op: Op::Pad(PadDesc {
                mode: PadMode::Constant,
                pads,
                value: 0.0,
            }),
            inputs: vec![Src::Temp(0)],
            outputs: vec![Dst::Output(0)],
            suffix: None,
        },
    ]))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::resolve_reshape;

    #[test]
    fn reshape_resolution() {
        assert_eq!(
            resolve_reshape(&[2, 3, 4], &[0, -1], false).unwrap(),
            vec![2, 12]
        );
        assert_eq!(
            resolve_reshape(&[2, 3, 4], &[-1, 0, 2], false).unwrap(),
            vec![4, 3, 2]
        );
        assert_eq!(resolve_reshape(&[2, 3], &[6], false).unwrap(), vec![6]);
        assert_eq!(resolve_reshape(&[0, 3], &[0, 3], true).unwrap(), vec![0, 3]);
        assert!(resolve_reshape(&[2, 3], &[3, 0], false).is_err());
        assert!(resolve_reshape(&[2, 3], &[-1, -1], false).is_err());
        assert!(resolve_reshape(&[2, 3], &[4, -1], false).is_err());
        assert!(resolve_reshape(&[2, 3], &[5], false).is_err());
        assert!(resolve_reshape(&[2, 3], &[-2, 3], false).is_err());
        assert!(resolve_reshape(&[2, 3], &[0, 0, 0], false).is_err());
        assert!(resolve_reshape(&[0, 3], &[0, -1], true).is_err());
        assert!(resolve_reshape(&[2, 3], &[i64::MAX, 2], false).is_err());
    }
}
