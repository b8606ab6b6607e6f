//! Index-driven and shape-building operators: ArgMax/ArgMin, Expand, Tile, Trilu, GatherND,
//! ScatterND, ScatterElements, OneHot, TopK, CumSum, DepthToSpace/SpaceToDepth (lowered to
//! Reshape, Transpose, Reshape) and LRN.

use super::{Dst, Lowering, NodeCx, Src, Step, Tx, TxError};
use backplane_core::ops::{ArgReduceDesc, ScatterReduction, TopKDesc};
use backplane_core::Op;

fn usizes(cx: &NodeCx<'_>, what: &str, v: Vec<i64>) -> Tx<Vec<usize>> {
    v.into_iter()
        .map(|d| usize::try_from(d).map_err(|_| cx.invalid(format!("{what} has {d}"))))
        .collect()
}

pub(super) fn arg_reduce(cx: &NodeCx<'_>, max: bool) -> Tx<Lowering> {
    let desc = ArgReduceDesc {
        max,
        axis: cx.attr(cx.attrs.int_or("axis", 0))?,
        keepdims: cx.attr(cx.attrs.flag("keepdims", true))?,
        select_last_index: cx.attr(cx.attrs.flag("select_last_index", false))?,
    };
    Ok(Lowering::single(Op::ArgReduce(desc), vec![Src::Input(0)]))
}

pub(super) fn expand(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let shape = cx
        .const_ints(1, "shape")?
        .ok_or_else(|| cx.invalid("the shape input is required"))?;
    let shape = usizes(cx, "shape", shape)?;
    Ok(Lowering::single(Op::Expand { shape }, vec![Src::Input(0)]))
}

pub(super) fn tile(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let repeats = cx
        .const_ints(1, "repeats")?
        .ok_or_else(|| cx.invalid("the repeats input is required"))?;
    let repeats = usizes(cx, "repeats", repeats)?;
    Ok(Lowering::single(Op::Tile { repeats }, vec![Src::Input(0)]))
}

pub(super) fn trilu(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let upper = cx.attr(cx.attrs.flag("upper", true))?;
    let k = match cx.const_ints(1, "k")? {
        None => 0,
        Some(v) if v.len() == 1 => v[0],
        Some(_) => return Err(cx.invalid("k must be a scalar")),
    };
    Ok(Lowering::single(
        Op::Trilu { upper, k },
        vec![Src::Input(0)],
    ))
}

pub(super) fn gather_nd(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let b = cx.attr(cx.attrs.int_or("batch_dims", 0))?;
    let batch_dims = usize::try_from(b).map_err(|_| cx.invalid(format!("batch_dims {b}")))?;
    Ok(Lowering::single(
        Op::GatherND { batch_dims },
        cx.data_inputs(2, 0)?,
    ))
}

fn reduction(cx: &NodeCx<'_>) -> Tx<ScatterReduction> {
    Ok(
        match cx.attr(cx.attrs.string_or("reduction", "none"))?.as_str() {
            "none" => ScatterReduction::None,
            "add" => ScatterReduction::Add,
            "mul" => ScatterReduction::Mul,
            "max" => ScatterReduction::Max,
            "min" => ScatterReduction::Min,
            other => return Err(cx.invalid(format!("unknown reduction '{other}'"))),
        },
    )
}

pub(super) fn scatter_nd(cx: &NodeCx<'_>) -> Tx<Lowering> {
    Ok(Lowering::single(
        Op::ScatterND {
            reduction: reduction(cx)?,
        },
        cx.data_inputs(3, 0)?,
    ))
}

pub(super) fn scatter_elements(cx: &NodeCx<'_>) -> Tx<Lowering> {
    Ok(Lowering::single(
        Op::ScatterElements {
            axis: cx.attr(cx.attrs.int_or("axis", 0))?,
            reduction: reduction(cx)?,
        },
        cx.data_inputs(3, 0)?,
    ))
}

pub(super) fn one_hot(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let depth = cx
        .const_scalar(1, "depth")?
        .ok_or_else(|| cx.invalid("the depth input is required"))?;
    if !(depth >= 1.0 && depth <= f64::from(u32::MAX)) {
        return Err(cx.invalid(format!("depth must be positive, got {depth}")));
    }
    let axis = cx.attr(cx.attrs.int_or("axis", -1))?;
    if cx.input_name(2).is_none() {
        return Err(cx.invalid("the values input is required"));
    }
    Ok(Lowering::single(
        Op::OneHot {
            axis,
            depth: depth.trunc() as usize,
        },
        vec![Src::Input(0), Src::Input(2)],
    ))
}

pub(super) fn top_k(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let k = if cx.opset < 10 {
        cx.attr(cx.attrs.int("k"))?
    } else {
        match cx.const_ints(1, "k")? {
            Some(v) if v.len() == 1 => Some(v[0]),
            Some(_) => return Err(cx.invalid("k must have one element")),
            None => None,
        }
    }
    .ok_or_else(|| cx.invalid("k is required"))?;
    let k = usize::try_from(k).map_err(|_| cx.invalid(format!("k = {k}")))?;
    let desc = TopKDesc {
        axis: cx.attr(cx.attrs.int_or("axis", -1))?,
        k,
        largest: cx.attr(cx.attrs.flag("largest", true))?,
        sorted: cx.attr(cx.attrs.flag("sorted", true))?,
    };
    Ok(Lowering::Steps(vec![Step {
        op: Op::TopK(desc),
        inputs: vec![Src::Input(0)],
        outputs: vec![Dst::Output(0), Dst::Output(1)],
        suffix: None,
    }]))
}

pub(super) fn cum_sum(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let axis = match cx.const_ints(1, "axis")? {
        Some(v) if v.len() == 1 => v[0],
        _ => return Err(cx.invalid("axis must be a scalar")),
    };
    Ok(Lowering::single(
        Op::CumSum {
            axis,
            exclusive: cx.attr(cx.attrs.flag("exclusive", false))?,
            reverse: cx.attr(cx.attrs.flag("reverse", false))?,
        },
        vec![Src::Input(0)],
    ))
}

pub(super) fn lrn(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let size = cx
        .attr(cx.attrs.int("size"))?
        .ok_or_else(|| cx.invalid("size is required"))?;
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| s >= 1)
        .ok_or_else(|| cx.invalid(format!("size must be >= 1, got {size}")))?;
    Ok(Lowering::single(
        Op::Lrn {
            alpha: cx.attr(cx.attrs.float_or("alpha", 1e-4))?,
            beta: cx.attr(cx.attrs.float_or("beta", 0.75))?,
            bias: cx.attr(cx.attrs.float_or("bias", 1.0))?,
            size,
        },
        vec![Src::Input(0)],
    ))
}

/// Reshape → Transpose → Reshape.
fn shuffle(first: Vec<usize>, perm: Vec<usize>, last: Vec<usize>) -> Lowering {
    Lowering::Steps(vec![
        Step {
            op: Op::Reshape { shape: first },
            inputs: vec![Src::Input(0)],
            outputs: vec![Dst::Temp(0)],
            suffix: Some("split".into()),
        },
        Step {
            op: Op::Transpose { perm },
            inputs: vec![Src::Temp(0)],
            outputs: vec![Dst::Temp(1)],
            suffix: Some("transpose".into()),
        },
        Step {
            op: Op::Reshape { shape: last },
            inputs: vec![Src::Temp(1)],
            outputs: vec![Dst::Output(0)],
            suffix: None,
        },
    ])
}

fn block(cx: &NodeCx<'_>) -> Tx<(usize, [usize; 4])> {
    let b = cx
        .attr(cx.attrs.int("blocksize"))?
        .ok_or_else(|| cx.invalid("blocksize is required"))?;
    let b = usize::try_from(b)
        .ok()
        .filter(|&b| b >= 1)
        .ok_or_else(|| cx.invalid(format!("blocksize must be >= 1, got {b}")))?;
    let x = cx.info(0)?;
    let d: [usize; 4] = x
        .shape
        .dims()
        .try_into()
        .map_err(|_| TxError::Unsupported("only 4-D inputs are supported".into()))?;
    Ok((b, d))
}

pub(super) fn depth_to_space(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let (b, [n, c, h, w]) = block(cx)?;
    if c % (b * b) != 0 {
        return Err(cx.invalid(format!("channels {c} are not divisible by {}", b * b)));
    }
    let c2 = c / (b * b);
    let last = vec![n, c2, h * b, w * b];
    Ok(match cx.attr(cx.attrs.string_or("mode", "DCR"))?.as_str() {
        "DCR" => shuffle(vec![n, b, b, c2, h, w], vec![0, 3, 4, 1, 5, 2], last),
        "CRD" => shuffle(vec![n, c2, b, b, h, w], vec![0, 1, 4, 2, 5, 3], last),
        other => return Err(cx.invalid(format!("unknown mode '{other}'"))),
    })
}

pub(super) fn space_to_depth(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let (b, [n, c, h, w]) = block(cx)?;
    if h % b != 0 || w % b != 0 {
        return Err(cx.invalid(format!("{h}x{w} is not divisible by the block size {b}")));
    }
    let split = vec![n, c, h / b, b, w / b, b];
    let last = vec![n, c * b * b, h / b, w / b];
    // SpaceToDepth-13 has no `mode`; a model that sets it means what DepthToSpace's mode
    // means, and this is DepthToSpace's inverse: DCR puts the block offsets before the
    // channel, CRD after it.
    Ok(match cx.attr(cx.attrs.string_or("mode", "DCR"))?.as_str() {
        "DCR" => shuffle(split, vec![0, 3, 5, 1, 2, 4], last),
        "CRD" => shuffle(split, vec![0, 1, 3, 5, 2, 4], last),
        other => return Err(cx.invalid(format!("unknown mode '{other}'"))),
    })
}

/// The i64 constant of `values` with shape `dims`, as a step input.
fn index_constant(cx: &NodeCx<'_>, dims: Vec<usize>, values: Vec<i64>) -> Tx<Src> {
    let t = backplane_core::Tensor::from_vec(dims, values).map_err(|e| cx.invalid(e))?;
    Ok(Src::Const(std::sync::Arc::new(t)))
}

/// Compress: the slices along `axis` (of the flattened input without one) where the
/// condition is true. The condition decides the output shape, so it must be known (the model
/// is imported specialized on it otherwise); the op becomes a Gather of those indices.
pub(super) fn compress(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let x = cx.info(0)?;
    let condition = cx.known(1, "Compress's output shape")?;
    let dims = x.shape.dims().to_vec();
    let axis = cx.attr(cx.attrs.int("axis"))?;
    let len = match axis {
        Some(a) => {
            let a =
                backplane_core::shape::normalize_axis(a, dims.len()).map_err(|e| cx.invalid(e))?;
            dims[a]
        }
        None => dims.iter().product(),
    };
    let picks: Vec<i64> = condition
        .to_f64_vec()
        .iter()
        .enumerate()
        .filter(|(_, &c)| c != 0.0)
        .map(|(i, _)| i as i64)
        .collect();
    if let Some(&last) = picks.last() {
        if last as usize >= len {
            return Err(cx.invalid(format!(
                "the condition selects index {last} of an axis of {len}"
            )));
        }
    }
    let indices = index_constant(cx, vec![picks.len()], picks)?;
    Ok(match axis {
        Some(axis) => Lowering::single(Op::Gather { axis }, vec![Src::Input(0), indices]),
        None => Lowering::Steps(vec![
            Step {
                op: Op::Reshape { shape: vec![len] },
                inputs: vec![Src::Input(0)],
                outputs: vec![Dst::Temp(0)],
                suffix: Some("flatten".into()),
            },
            Step {
                op: Op::Gather { axis: 0 },
                inputs: vec![Src::Temp(0), indices],
                outputs: vec![Dst::Output(0)],
                suffix: None,
            },
        ]),
    })
}

/// ReverseSequence: reverse the first `sequence_lens[b]` elements along the time axis of
/// each batch entry b. The lengths must be known (else the model is imported specialized on
/// them); the op becomes a GatherElements along the time axis with constant indices.
pub(super) fn reverse_sequence(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let x = cx.info(0)?;
    let dims = x.shape.dims().to_vec();
    let lens = cx.known(1, "ReverseSequence's indices")?.to_f64_vec();
    let time = cx.attr(cx.attrs.int_or("time_axis", 0))?;
    let batch = cx.attr(cx.attrs.int_or("batch_axis", 1))?;
    let (t_axis, b_axis) = match (time, batch) {
        (0, 1) => (0, 1),
        (1, 0) => (1, 0),
        _ => {
            return Err(cx.invalid(format!(
                "time_axis and batch_axis must be 0 and 1, got {time} and {batch}"
            )))
        }
    };
    if dims.len() < 2 || lens.len() != dims[b_axis] {
        return Err(cx.invalid(format!(
            "sequence_lens has {} values for input {}",
            lens.len(),
            x.shape
        )));
    }
    crate::tensor::check_size(cx.name, &dims, 8, cx.imp.max_tensor_bytes())?;
    let strides = backplane_core::shape::strides_of(&dims);
    let total: usize = dims.iter().product();
    let mut indices = Vec::with_capacity(total);
    for flat in 0..total {
        let t = (flat / strides[t_axis]) % dims[t_axis];
        let b = (flat / strides[b_axis]) % dims[b_axis];
        let len = lens[b];
        if !(0.0..=dims[t_axis] as f64).contains(&len) {
            return Err(cx.invalid(format!(
                "sequence length {len} is outside 0..={}",
                dims[t_axis]
            )));
        }
        let len = len as usize;
        indices.push(if t < len { len - 1 - t } else { t } as i64);
    }
    let indices = index_constant(cx, dims, indices)?;
    Ok(Lowering::single(
        Op::GatherElements {
            axis: t_axis as i64,
        },
        vec![Src::Input(0), indices],
    ))
}
