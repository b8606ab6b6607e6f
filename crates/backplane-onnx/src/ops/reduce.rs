//! Reductions (ReduceMean, ReduceSum, ...).

use super::{Lowering, NodeCx, Src, Tx};
use backplane_core::ops::{ReduceDesc, ReduceKind};
use backplane_core::Op;

pub(super) fn reduce(cx: &NodeCx<'_>, kind: ReduceKind) -> Tx<Lowering> {
    // ReduceSum took its axes as an input from opset 13, the others from opset 18.
    let axes_from_input = match kind {
        ReduceKind::Sum => cx.opset >= 13,
        _ => cx.opset >= 18,
    };
    let keepdims = cx.attr(cx.attrs.flag("keepdims", true))?;
    let (axes, noop_with_empty_axes) = if axes_from_input {
        (
            cx.const_ints(1, "axes")?.unwrap_or_default(),
            cx.attr(cx.attrs.flag("noop_with_empty_axes", false))?,
        )
    } else {
        (cx.attr(cx.attrs.ints("axes"))?.unwrap_or_default(), false)
    };
    Ok(Lowering::single(
        Op::Reduce(ReduceDesc {
            kind,
            axes,
            keepdims,
            noop_with_empty_axes,
        }),
        vec![Src::Input(0)],
    ))
}
