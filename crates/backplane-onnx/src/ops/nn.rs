//! Convolution, pooling, matrix products, normalization and softmax.

use super::{to_usize, Dst, Lowering, NodeCx, Src, Step, Tx, TxError, MAX_WINDOW_PARAM};
use backplane_core::ops::{
    AutoPad, ConvDesc, ConvTransposeDesc, GemmDesc, PoolDesc, PoolKind, Window,
};
use backplane_core::Op;

fn usize_list(cx: &NodeCx<'_>, name: &str, min: i64) -> Tx<Vec<usize>> {
    cx.attr(cx.attrs.ints(name))?
        .unwrap_or_default()
        .into_iter()
        .map(|v| {
            if v < min {
                Err(cx.invalid(format!("{name} must be >= {min}, got {v}")))
            } else {
                to_usize(cx, name, v, MAX_WINDOW_PARAM)
            }
        })
        .collect()
}

pub(super) fn auto_pad(cx: &NodeCx<'_>) -> Tx<AutoPad> {
    Ok(
        match cx.attr(cx.attrs.string_or("auto_pad", "NOTSET"))?.as_str() {
            "NOTSET" | "" => AutoPad::NotSet,
            "SAME_UPPER" => AutoPad::SameUpper,
            "SAME_LOWER" => AutoPad::SameLower,
            "VALID" => AutoPad::Valid,
            other => return Err(cx.invalid(format!("unknown auto_pad '{other}'"))),
        },
    )
}

/// The window attributes; `kernel` is the fallback kernel (from the weights) when the
/// attribute is absent.
fn window(cx: &NodeCx<'_>, kernel: Option<Vec<usize>>) -> Tx<Window> {
    let kernel = match cx.attr(cx.attrs.ints("kernel_shape"))? {
        Some(_) => usize_list(cx, "kernel_shape", 1)?,
        None => kernel.ok_or_else(|| cx.invalid("the kernel_shape attribute is required"))?,
    };
    let pads = usize_list(cx, "pads", 0).map_err(|e| match e {
        TxError::Fatal(_) if has_negative(cx, "pads") => {
            TxError::Unsupported("negative pads are not supported".into())
        }
        e => e,
    })?;
    Ok(Window {
        kernel,
        strides: usize_list(cx, "strides", 1)?,
        dilations: usize_list(cx, "dilations", 1)?,
        pads,
        auto_pad: auto_pad(cx)?,
    })
}

fn has_negative(cx: &NodeCx<'_>, name: &str) -> bool {
    matches!(cx.attrs.ints(name), Ok(Some(v)) if v.iter().any(|&x| x < 0))
}

fn group(cx: &NodeCx<'_>) -> Tx<usize> {
    let g = cx.attr(cx.attrs.int_or("group", 1))?;
    if g < 1 {
        return Err(cx.invalid(format!("group must be >= 1, got {g}")));
    }
    to_usize(cx, "group", g, i64::from(u32::MAX))
}

/// The spatial dims of the weights (`W` is `[M, C/group, k...]`).
fn weight_kernel(cx: &NodeCx<'_>) -> Tx<Vec<usize>> {
    let w = cx.info(1)?;
    let d = w.shape.dims();
    if d.len() < 3 {
        return Err(cx.invalid(format!("weight shape {} has rank < 3", w.shape)));
    }
    Ok(d[2..].to_vec())
}

/// The Conv descriptor of a node whose weights are input `w` (QLinearConv: 3).
pub(super) fn conv_desc_with_weights(cx: &NodeCx<'_>, w: usize) -> Tx<ConvDesc> {
    let wi = cx.info(w)?;
    let d = wi.shape.dims();
    if d.len() < 3 {
        return Err(cx.invalid(format!("weight shape {} has rank < 3", wi.shape)));
    }
    Ok(ConvDesc {
        window: window(cx, Some(d[2..].to_vec()))?,
        group: group(cx)?,
    })
}

pub(super) fn conv(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.info(0)?;
    let window = window(cx, Some(weight_kernel(cx)?))?;
    let desc = ConvDesc {
        window,
        group: group(cx)?,
    };
    Ok(Lowering::single(Op::Conv(desc), cx.data_inputs(2, 1)?))
}

pub(super) fn conv_transpose(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let x = cx.info(0)?;
    let wk = weight_kernel(cx)?;
    let window = window(cx, Some(wk.clone()))?;
    if window.kernel != wk {
        return Err(cx.invalid(format!(
            "kernel_shape {:?} differs from the weights' {wk:?}",
            window.kernel
        )));
    }
    let n = x.shape.rank().saturating_sub(2);
    let output_padding = usize_list(cx, "output_padding", 0)?;
    let mut output_shape = usize_list(cx, "output_shape", 0)?;
    if output_shape.len() == n + 2 {
        output_shape.drain(..2);
    }
    if !output_shape.is_empty() && output_shape.len() != n {
        return Err(cx.invalid(format!(
            "output_shape {output_shape:?} does not have {n} spatial dims"
        )));
    }
    if !output_padding.is_empty() && output_padding.len() != n {
        return Err(cx.invalid(format!(
            "output_padding {output_padding:?} does not have {n} spatial dims"
        )));
    }
    let desc = ConvTransposeDesc {
        window,
        group: group(cx)?,
        output_padding,
        output_shape,
    };
    Ok(Lowering::single(
        Op::ConvTranspose(desc),
        cx.data_inputs(2, 1)?,
    ))
}

pub(super) fn batch_norm(cx: &NodeCx<'_>) -> Tx<Lowering> {
    if cx.opset >= 14 && cx.attr(cx.attrs.flag("training_mode", false))? {
        return super::training::batch_norm_training(cx);
    }
    if (1..cx.node.output.len()).any(|i| cx.output_named(i)) {
        return Err(TxError::Unsupported(
            "the mean/variance outputs of training mode are not supported (inference only)".into(),
        ));
    }
    if cx.opset < 9 && !cx.attr(cx.attrs.flag("spatial", true))? {
        return Err(TxError::Unsupported(
            "spatial=0 (per-activation statistics) is not supported".into(),
        ));
    }
    let epsilon = cx.attr(cx.attrs.float_or("epsilon", 1e-5))?;
    Ok(Lowering::single(
        Op::BatchNormalization { epsilon },
        cx.data_inputs(5, 0)?,
    ))
}

pub(super) fn gemm(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let desc = GemmDesc {
        alpha: cx.attr(cx.attrs.float_or("alpha", 1.0))?,
        beta: cx.attr(cx.attrs.float_or("beta", 1.0))?,
        trans_a: cx.attr(cx.attrs.flag("transA", false))?,
        trans_b: cx.attr(cx.attrs.flag("transB", false))?,
    };
    Ok(Lowering::single(Op::Gemm(desc), cx.data_inputs(2, 1)?))
}

pub(super) fn pool(cx: &NodeCx<'_>, kind: PoolKind) -> Tx<Lowering> {
    let window = window(cx, None)?;
    if kind == PoolKind::Average {
        // A window wholly in the padding averages nothing (NaN): ONNX Runtime refuses it.
        let n = window.kernel.len();
        for (i, &p) in window.pads.iter().enumerate() {
            let k = window.kernel.get(i % n.max(1)).copied().unwrap_or(0);
            if p >= k {
                return Err(cx.invalid(format!(
                    "pads {:?} must each be smaller than the kernel {:?}",
                    window.pads, window.kernel
                )));
            }
        }
    }
    let desc = PoolDesc {
        kind,
        window,
        ceil_mode: cx.attr(cx.attrs.flag("ceil_mode", false))?,
        count_include_pad: kind == PoolKind::Average
            && cx.attr(cx.attrs.flag("count_include_pad", false))?,
    };
    if kind == PoolKind::Max && cx.output_used(1) {
        // MaxPool with Indices (opset 8 on); storage_order 1 numbers them column-major.
        let column_major = match cx.attr(cx.attrs.int_or("storage_order", 0))? {
            0 => false,
            1 => true,
            other => return Err(cx.invalid(format!("storage_order must be 0 or 1, got {other}"))),
        };
        if cx.opset < 8 {
            return Err(cx.invalid("MaxPool has an Indices output from opset 8 on"));
        }
        return Ok(Lowering::Steps(vec![Step {
            op: Op::MaxPoolWithIndices(backplane_core::ops::MaxPoolIndicesDesc {
                pool: desc,
                column_major,
            }),
            inputs: vec![Src::Input(0)],
            outputs: vec![Dst::Output(0), Dst::Output(1)],
            suffix: None,
        }]));
    }
    Ok(Lowering::single(Op::Pool(desc), vec![Src::Input(0)]))
}

/// MaxUnpool (opset 9 on): X, I and an optional output_shape (a constant, or the default
/// from the window: (in - 1) * stride + kernel - pads).
pub(super) fn max_unpool(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(9)?;
    let x = cx.info(0)?;
    let xd = x.shape.dims();
    if xd.len() < 3 {
        return Err(cx.invalid(format!("X must have rank 3 or more, got {}", x.shape)));
    }
    let n = xd.len() - 2;
    let w = window(cx, None)?;
    if w.kernel.len() != n {
        return Err(cx.invalid(format!(
            "kernel_shape {:?} does not have {n} spatial dims",
            w.kernel
        )));
    }
    let strides = if w.strides.is_empty() {
        vec![1; n]
    } else {
        w.strides.clone()
    };
    let pads = if w.pads.is_empty() {
        vec![0; 2 * n]
    } else {
        w.pads.clone()
    };
    if strides.len() != n || pads.len() != 2 * n {
        return Err(cx.invalid("strides or pads do not match the kernel"));
    }
    let mut unpooled = xd[..2].to_vec();
    for i in 0..n {
        let full = (xd[2 + i].saturating_sub(1))
            .checked_mul(strides[i])
            .and_then(|v| v.checked_add(w.kernel[i]))
            .ok_or_else(|| cx.invalid("the output shape overflows"))?;
        let d = full
            .checked_sub(pads[i] + pads[n + i])
            .ok_or_else(|| cx.invalid("the pads are larger than the output"))?;
        unpooled.push(d);
    }
    let output = match cx.const_ints(2, "output_shape")? {
        Some(v) => {
            let dims: Vec<usize> = v
                .iter()
                .map(|&d| to_usize(cx, "output_shape", d, 1 << 40))
                .collect::<Tx<_>>()?;
            if dims.len() != xd.len() {
                return Err(cx.invalid(format!(
                    "output_shape {v:?} does not have rank {}",
                    xd.len()
                )));
            }
            dims
        }
        None => unpooled.clone(),
    };
    // The index space and the output are allocated at execution: bound them now.
    for dims in [&unpooled, &output] {
        crate::tensor::check_size(cx.name, dims, x.dtype.size(), cx.imp.max_tensor_bytes())?;
    }
    Ok(Lowering::single(
        Op::MaxUnpool(backplane_core::ops::MaxUnpoolDesc { unpooled, output }),
        vec![Src::Input(0), Src::Input(1)],
    ))
}

/// Softmax, LogSoftmax and Hardmax (`make` builds the op for an axis).
pub(super) fn softmax(cx: &NodeCx<'_>, make: fn(i64) -> Op) -> Tx<Lowering> {
    if cx.opset >= 13 {
        let axis = cx.attr(cx.attrs.int_or("axis", -1))?;
        return Ok(Lowering::single(make(axis), vec![Src::Input(0)]));
    }
    // Before opset 13 the input is coerced to 2-D around `axis` and the softmax runs over
    // the flattened trailing part.
    let x = cx.info(0)?;
    let axis = cx.attr(cx.attrs.int_or("axis", 1))?;
    let rank = x.shape.rank();
    let a = backplane_core::shape::normalize_axis(axis, rank).map_err(|e| cx.invalid(e))?;
    if a + 1 == rank {
        return Ok(Lowering::single(make(a as i64), vec![Src::Input(0)]));
    }
    Ok(Lowering::Steps(vec![
        Step {
            op: Op::Flatten { axis: a as i64 },
            inputs: vec![Src::Input(0)],
            outputs: vec![Dst::Temp(0)],
            suffix: Some("flatten".into()),
        },
        Step {
            op: make(1),
            inputs: vec![Src::Temp(0)],
            outputs: vec![Dst::Temp(1)],
            suffix: Some("softmax".into()),
        },
        Step {
            op: Op::Reshape {
                shape: x.shape.dims().to_vec(),
            },
            inputs: vec![Src::Temp(1)],
            outputs: vec![Dst::Output(0)],
            suffix: None,
        },
    ]))
}

pub(super) fn layer_norm(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(17)?;
    let axis = cx.attr(cx.attrs.int_or("axis", -1))?;
    let epsilon = cx.attr(cx.attrs.float_or("epsilon", 1e-5))?;
    if cx.output_used(1) || cx.output_used(2) {
        return layer_norm_with_statistics(cx, axis, epsilon);
    }
    Ok(Lowering::single(
        Op::LayerNormalization { axis, epsilon },
        cx.data_inputs(2, 1)?,
    ))
}

/// LayerNormalization with its Mean and InvStdDev outputs: lowered to reductions and
/// elementwise ops, which expose the statistics.
fn layer_norm_with_statistics(cx: &NodeCx<'_>, axis: i64, epsilon: f32) -> Tx<Lowering> {
    use backplane_core::ops::{BinaryOp, MathOp, ReduceDesc, ReduceKind, UnaryOp};
    let x = cx.info(0)?;
    let rank = x.shape.rank();
    let a = backplane_core::shape::normalize_axis(axis, rank).map_err(|e| cx.invalid(e))?;
    let eps = super::elementwise::float_scalar(x.dtype, epsilon).ok_or_else(|| {
        TxError::Unsupported(format!(
            "LayerNormalization of {} is not supported",
            x.dtype
        ))
    })?;
    let mean = Op::Reduce(ReduceDesc {
        kind: ReduceKind::Mean,
        axes: (a as i64..rank as i64).collect(),
        keepdims: true,
        noop_with_empty_axes: false,
    });
    let step = |op: Op, inputs: Vec<Src>, out: Dst, suffix: &str| Step {
        op,
        inputs,
        outputs: vec![out],
        suffix: Some(suffix.to_string()),
    };
    let has_bias = cx.input_name(2).is_some();
    let mut steps = vec![
        step(mean.clone(), vec![Src::Input(0)], Dst::Temp(0), "mean"),
        step(
            Op::Binary(BinaryOp::Sub),
            vec![Src::Input(0), Src::Temp(0)],
            Dst::Temp(1),
            "centered",
        ),
        step(
            Op::Binary(BinaryOp::Mul),
            vec![Src::Temp(1), Src::Temp(1)],
            Dst::Temp(2),
            "square",
        ),
        step(mean, vec![Src::Temp(2)], Dst::Temp(3), "variance"),
        step(
            Op::Binary(BinaryOp::Add),
            vec![Src::Temp(3), Src::Const(std::sync::Arc::new(eps))],
            Dst::Temp(4),
            "variance_eps",
        ),
        step(
            Op::Unary(UnaryOp::Sqrt),
            vec![Src::Temp(4)],
            Dst::Temp(5),
            "std",
        ),
        step(
            Op::Math(MathOp::Reciprocal),
            vec![Src::Temp(5)],
            Dst::Temp(6),
            "inv_std",
        ),
        step(
            Op::Binary(BinaryOp::Mul),
            vec![Src::Temp(1), Src::Temp(6)],
            Dst::Temp(7),
            "normalized",
        ),
    ];
    let mut scaled = step(
        Op::Binary(BinaryOp::Mul),
        vec![Src::Temp(7), Src::Input(1)],
        Dst::Output(0),
        "scaled",
    );
    if has_bias {
        scaled.outputs = vec![Dst::Temp(8)];
        steps.push(scaled);
        steps.push(Step {
            op: Op::Binary(BinaryOp::Add),
            inputs: vec![Src::Temp(8), Src::Input(2)],
            outputs: vec![Dst::Output(0)],
            suffix: None,
        });
    } else {
        scaled.suffix = None;
        steps.push(scaled);
    }
    for (out, temp, suffix) in [(1, 0, "mean_out"), (2, 6, "inv_std_out")] {
        if cx.output_used(out) {
            steps.push(step(
                Op::Identity,
                vec![Src::Temp(temp)],
                Dst::Output(out),
                suffix,
            ));
        }
    }
    Ok(Lowering::Steps(steps))
}

/// LpPool: `(sum over the window of |x|^p)^(1/p)`, lowered to Abs, Pow, an AveragePool that
/// counts the padding (whose mean times the window size is the sum; padding adds zeros), a
/// scale by the window size and the p-th root.
pub(super) fn lp_pool(cx: &NodeCx<'_>) -> Tx<Lowering> {
    use backplane_core::ops::{BinaryOp, UnaryOp};
    use std::sync::Arc;
    let x = cx.info(0)?;
    if cx.attr(cx.attrs.flag("ceil_mode", false))? {
        // Windows past the end padding would make the average's divisor smaller than the
        // window, so the lowering would be wrong.
        return Err(TxError::Unsupported(
            "LpPool with ceil_mode=1 is not supported".into(),
        ));
    }
    let p = cx.attr(cx.attrs.int_or("p", 2))?;
    if !(1..=64).contains(&p) {
        return Err(cx.invalid(format!("p must be in 1..=64, got {p}")));
    }
    let window = window(cx, None)?;
    let taps: usize = window.kernel.iter().product();
    let scalar = |v: f64| {
        super::elementwise::float_scalar(x.dtype, v as f32)
            .map(|t| Src::Const(Arc::new(t)))
            .ok_or_else(|| TxError::Unsupported(format!("LpPool of {} is not supported", x.dtype)))
    };
    let step = |op: Op, inputs: Vec<Src>, out: Dst, suffix: Option<&str>| Step {
        op,
        inputs,
        outputs: vec![out],
        suffix: suffix.map(str::to_string),
    };
    let pool = PoolDesc {
        kind: PoolKind::Average,
        window,
        ceil_mode: false,
        count_include_pad: true,
    };
    Ok(Lowering::Steps(vec![
        step(
            Op::Unary(UnaryOp::Abs),
            vec![Src::Input(0)],
            Dst::Temp(0),
            Some("abs"),
        ),
        step(
            Op::Binary(BinaryOp::Pow),
            vec![Src::Temp(0), scalar(p as f64)?],
            Dst::Temp(1),
            Some("pow"),
        ),
        step(
            Op::Pool(pool),
            vec![Src::Temp(1)],
            Dst::Temp(2),
            Some("mean"),
        ),
        step(
            Op::Binary(BinaryOp::Mul),
            vec![Src::Temp(2), scalar(taps as f64)?],
            Dst::Temp(3),
            Some("sum"),
        ),
        step(
            Op::Binary(BinaryOp::Pow),
            vec![Src::Temp(3), scalar(1.0 / p as f64)?],
            Dst::Output(0),
            None,
        ),
    ]))
}

/// MeanVarianceNormalization: `(X - E[X]) / (sqrt(E[X²] - E[X]²) + 1e-9)` over `axes`
/// (default N, H, W), lowered as ONNX's own function body does.
pub(super) fn mean_variance_normalization(cx: &NodeCx<'_>) -> Tx<Lowering> {
    use backplane_core::ops::{BinaryOp, ReduceDesc, ReduceKind, UnaryOp};
    use std::sync::Arc;
    let x = cx.info(0)?;
    let axes = cx
        .attr(cx.attrs.ints("axes"))?
        .unwrap_or_else(|| vec![0, 2, 3]);
    let constant = |v: f32| {
        super::elementwise::float_scalar(x.dtype, v)
            .map(|t| Src::Const(Arc::new(t)))
            .ok_or_else(|| {
                TxError::Unsupported(format!(
                    "MeanVarianceNormalization of {} is not supported",
                    x.dtype
                ))
            })
    };
    let mean = Op::Reduce(ReduceDesc {
        kind: ReduceKind::Mean,
        axes,
        keepdims: true,
        noop_with_empty_axes: false,
    });
    let step = |op: Op, inputs: Vec<Src>, out: Dst, suffix: Option<&str>| Step {
        op,
        inputs,
        outputs: vec![out],
        suffix: suffix.map(str::to_string),
    };
    let (t, mul, sub) = (Dst::Temp, BinaryOp::Mul, BinaryOp::Sub);
    Ok(Lowering::Steps(vec![
        step(mean.clone(), vec![Src::Input(0)], t(0), Some("mean")),
        step(
            Op::Binary(mul),
            vec![Src::Temp(0), Src::Temp(0)],
            t(1),
            Some("mean_squared"),
        ),
        step(
            Op::Binary(mul),
            vec![Src::Input(0), Src::Input(0)],
            t(2),
            Some("square"),
        ),
        step(mean, vec![Src::Temp(2)], t(3), Some("mean_of_squares")),
        step(
            Op::Binary(sub),
            vec![Src::Temp(3), Src::Temp(1)],
            t(4),
            Some("variance"),
        ),
        step(
            Op::Unary(UnaryOp::Sqrt),
            vec![Src::Temp(4)],
            t(5),
            Some("std"),
        ),
        step(
            Op::Binary(sub),
            vec![Src::Input(0), Src::Temp(0)],
            t(6),
            Some("centered"),
        ),
        step(
            Op::Binary(BinaryOp::Add),
            vec![Src::Temp(5), constant(1e-9)?],
            t(7),
            Some("std_eps"),
        ),
        step(
            Op::Binary(BinaryOp::Div),
            vec![Src::Temp(6), Src::Temp(7)],
            Dst::Output(0),
            None,
        ),
    ]))
}

/// GroupNormalization: X [N, C, ...] is viewed as [N, G, C/G * ...] and normalized per
/// (n, group) by an InstanceNormalization; the scale and bias are per group before opset 21
/// (the InstanceNormalization's own) and per channel from opset 21 (applied after the view
/// is undone).
pub(super) fn group_normalization(cx: &NodeCx<'_>) -> Tx<Lowering> {
    use backplane_core::ops::BinaryOp;
    use backplane_core::{Tensor, TensorInfo};
    use std::sync::Arc;
    cx.require_opset(18)?;
    let x = cx.info(0)?;
    let dims = x.shape.dims().to_vec();
    let groups = cx
        .attr(cx.attrs.int("num_groups"))?
        .ok_or_else(|| cx.invalid("the num_groups attribute is required"))?;
    let groups = to_usize(cx, "num_groups", groups, i64::from(u32::MAX))?;
    if dims.len() < 2 || groups == 0 || dims[1] % groups != 0 {
        return Err(cx.invalid(format!(
            "{groups} groups do not divide the channels of {}",
            x.shape
        )));
    }
    if cx.opset >= 21 && cx.attr(cx.attrs.int_or("stash_type", 1))? != 1 {
        return Err(TxError::Unsupported(
            "stash_type other than float is not supported".into(),
        ));
    }
    let epsilon = cx.attr(cx.attrs.float_or("epsilon", 1e-5))?;
    let channels = dims[1];
    let rest: usize = dims[2..].iter().product();
    let per_channel = cx.opset >= 21;
    let filled = |v: f64| -> Tx<Src> {
        let t = Tensor::from_f64_values(TensorInfo::new(x.dtype, vec![groups]), &vec![v; groups])
            .map_err(|e| cx.invalid(e))?;
        Ok(Src::Const(Arc::new(t)))
    };
    let (scale, bias) = if per_channel {
        (filled(1.0)?, filled(0.0)?)
    } else {
        (Src::Input(1), Src::Input(2))
    };
    let step = |op: Op, inputs: Vec<Src>, out: Dst, suffix: Option<&str>| Step {
        op,
        inputs,
        outputs: vec![out],
        suffix: suffix.map(str::to_string),
    };
    let grouped = vec![dims[0], groups, channels / groups * rest];
    let mut steps = vec![
        step(
            Op::Reshape { shape: grouped },
            vec![Src::Input(0)],
            Dst::Temp(0),
            Some("grouped"),
        ),
        step(
            Op::InstanceNormalization { epsilon },
            vec![Src::Temp(0), scale, bias],
            Dst::Temp(1),
            Some("normalized"),
        ),
    ];
    let back = Op::Reshape {
        shape: dims.clone(),
    };
    if !per_channel {
        steps.push(step(back, vec![Src::Temp(1)], Dst::Output(0), None));
        return Ok(Lowering::Steps(steps));
    }
    // [C] → [C, 1, ...] to broadcast over the spatial axes.
    let column: Vec<usize> = std::iter::once(channels)
        .chain(std::iter::repeat_n(1, dims.len() - 2))
        .collect();
    steps.extend([
        step(back, vec![Src::Temp(1)], Dst::Temp(2), Some("ungrouped")),
        step(
            Op::Reshape {
                shape: column.clone(),
            },
            vec![Src::Input(1)],
            Dst::Temp(3),
            Some("scale_column"),
        ),
        step(
            Op::Reshape { shape: column },
            vec![Src::Input(2)],
            Dst::Temp(4),
            Some("bias_column"),
        ),
        step(
            Op::Binary(BinaryOp::Mul),
            vec![Src::Temp(2), Src::Temp(3)],
            Dst::Temp(5),
            Some("scaled"),
        ),
        step(
            Op::Binary(BinaryOp::Add),
            vec![Src::Temp(5), Src::Temp(4)],
            Dst::Output(0),
            None,
        ),
    ]);
    Ok(Lowering::Steps(steps))
}
