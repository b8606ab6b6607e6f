//! GridSample.

use super::{Lowering, NodeCx, Tx};
use backplane_core::ops::{GridSampleDesc, GridSampleMode, GridSamplePadding};
use backplane_core::Op;

/// GridSample (opset 16: `bilinear`/`bicubic`, opset 20: `linear`/`cubic`, any rank).
pub(super) fn grid_sample(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(16)?;
    let default_mode = if cx.opset >= 20 { "linear" } else { "bilinear" };
    let mode = cx.attr(cx.attrs.string_or("mode", default_mode))?;
    let padding = cx.attr(cx.attrs.string_or("padding_mode", "zeros"))?;
    let desc = GridSampleDesc {
        mode: GridSampleMode::from_name(&mode)
            .ok_or_else(|| cx.invalid(format!("unknown mode '{mode}'")))?,
        padding: GridSamplePadding::from_name(&padding)
            .ok_or_else(|| cx.invalid(format!("unknown padding_mode '{padding}'")))?,
        align_corners: cx.attr(cx.attrs.flag("align_corners", false))?,
    };
    Ok(Lowering::single(
        Op::GridSample(desc),
        cx.data_inputs(2, 0)?,
    ))
}
