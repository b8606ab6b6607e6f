//! Recurrent layers: RNN, GRU and LSTM. Omitted optional inputs become constants (zero
//! bias, initial states and peepholes; full sequence lengths), so the layer always has all
//! of them; omitted optional outputs are not produced.

use super::{to_usize, Dst, Lowering, NodeCx, Src, Step, Tx, TxError};
use backplane_core::ops::{RnnActivation, RnnActivationKind, RnnDesc, RnnDirection, RnnKind};
use backplane_core::{DataType, Op, Tensor, TensorInfo};
use std::sync::Arc;

/// Largest hidden size accepted.
const MAX_HIDDEN: i64 = 1 << 24;

/// The activations of the node, with their alpha and beta, `per_dir` for each direction.
fn activations(cx: &NodeCx<'_>, kind: RnnKind, dirs: usize) -> Tx<Vec<RnnActivation>> {
    let per_dir = kind.activations_per_direction();
    let names: Vec<String> = match cx.attrs.get("activations") {
        Some(a) if !a.strings.is_empty() => a
            .strings
            .iter()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
        _ => match kind {
            RnnKind::Rnn => vec!["Tanh".into()],
            RnnKind::Gru => vec!["Sigmoid".into(), "Tanh".into()],
            RnnKind::Lstm => vec!["Sigmoid".into(), "Tanh".into(), "Tanh".into()],
        },
    };
    let names = if names.len() == per_dir && dirs == 2 {
        [names.clone(), names].concat()
    } else {
        names
    };
    if names.len() != per_dir * dirs {
        return Err(cx.invalid(format!(
            "{} activations expected, got {}",
            per_dir * dirs,
            names.len()
        )));
    }
    let alphas = cx
        .attr(cx.attrs.floats("activation_alpha"))?
        .unwrap_or_default();
    let betas = cx
        .attr(cx.attrs.floats("activation_beta"))?
        .unwrap_or_default();
    let (mut alphas, mut betas) = (alphas.into_iter(), betas.into_iter());
    names
        .iter()
        .map(|name| {
            let kind = RnnActivationKind::from_name(name).ok_or_else(|| {
                TxError::Unsupported(format!("{} activation '{name}'", cx.op_type()))
            })?;
            let (a, b) = kind.defaults();
            Ok(RnnActivation {
                kind,
                alpha: a.map_or(0.0, |d| alphas.next().unwrap_or(d)),
                beta: b.map_or(0.0, |d| betas.next().unwrap_or(d)),
            })
        })
        .collect()
}

/// RNN, GRU, LSTM (opset 7 and later; layout from opset 14).
pub(super) fn recurrent(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(7)?;
    let kind =
        RnnKind::from_name(cx.op_type()).ok_or_else(|| cx.invalid("not a recurrent operator"))?;
    let direction_name = cx.attr(cx.attrs.string_or("direction", "forward"))?;
    let direction = RnnDirection::from_name(&direction_name)
        .ok_or_else(|| cx.invalid(format!("unknown direction '{direction_name}'")))?;
    let dirs = direction.count();
    let x = cx.info(0)?;
    let r = cx.info(2)?;
    let hidden = match cx.attr(cx.attrs.int("hidden_size"))? {
        Some(v) => to_usize(cx, "hidden_size", v, MAX_HIDDEN)?,
        None => match r.shape.dims() {
            [_, _, h] => *h,
            _ => return Err(cx.invalid(format!("R must have rank 3, got {}", r.shape))),
        },
    };
    let layout = cx.attr(cx.attrs.int_or("layout", 0))?;
    let batch_first = match layout {
        0 => false,
        1 => true,
        other => return Err(cx.invalid(format!("layout must be 0 or 1, got {other}"))),
    };
    let clip = cx.attr(cx.attrs.float("clip"))?;
    if clip.is_some_and(|c| c.is_nan() || c < 0.0) {
        return Err(cx.invalid("clip must be non-negative"));
    }
    let linear_before_reset = cx.attr(cx.attrs.flag("linear_before_reset", false))?;
    let input_forget = cx.attr(cx.attrs.flag("input_forget", false))?;
    let xd = x.shape.dims();
    let [a, b, _] = xd else {
        return Err(cx.invalid(format!("X must have rank 3, got {}", x.shape)));
    };
    let (seq, batch) = if batch_first { (*b, *a) } else { (*a, *b) };
    let g = kind.gates();
    let state = if batch_first {
        vec![batch, dirs, hidden]
    } else {
        vec![dirs, batch, hidden]
    };
    let zeros = |dims: Vec<usize>| -> Tx<Src> {
        let t = Tensor::zeros(TensorInfo::new(x.dtype, dims)).map_err(|e| cx.invalid(e))?;
        Ok(Src::Const(Arc::new(t)))
    };
    let given = |i: usize| cx.input_name(i).is_some();
    let mut inputs = vec![Src::Input(0), Src::Input(1), Src::Input(2)];
    inputs.push(if given(3) {
        Src::Input(3)
    } else {
        zeros(vec![dirs, 2 * g * hidden])?
    });
    inputs.push(if given(4) {
        Src::Input(4)
    } else {
        let len = i32::try_from(seq)
            .map_err(|_| cx.invalid(format!("sequence length {seq} is too large")))?;
        let t = Tensor::from_vec(vec![batch], vec![len; batch]).map_err(|e| cx.invalid(e))?;
        Src::Const(Arc::new(t))
    });
    inputs.push(if given(5) {
        Src::Input(5)
    } else {
        zeros(state.clone())?
    });
    if kind == RnnKind::Lstm {
        inputs.push(if given(6) {
            Src::Input(6)
        } else {
            zeros(state)?
        });
        inputs.push(if given(7) {
            Src::Input(7)
        } else {
            zeros(vec![dirs, 3 * hidden])?
        });
    }
    let n_out = if kind == RnnKind::Lstm { 3 } else { 2 };
    let mut produced = [false; 3];
    let mut outputs = Vec::new();
    for (i, flag) in produced.iter_mut().enumerate().take(n_out) {
        if cx.output_named(i) {
            *flag = true;
            outputs.push(Dst::Output(i));
        }
    }
    if outputs.is_empty() {
        return Err(cx.invalid("the node has no output"));
    }
    let desc = RnnDesc {
        kind,
        direction,
        hidden_size: hidden,
        activations: activations(cx, kind, dirs)?,
        clip,
        linear_before_reset: kind == RnnKind::Gru && linear_before_reset,
        input_forget: kind == RnnKind::Lstm && input_forget,
        batch_first,
        outputs: produced,
    };
    if !matches!(x.dtype, DataType::F32 | DataType::F16 | DataType::F64) {
        return Err(cx.invalid(format!("X must be a float tensor, got {}", x.dtype)));
    }
    Ok(Lowering::Steps(vec![Step {
        op: Op::Rnn(desc),
        inputs,
        outputs,
        suffix: None,
    }]))
}
