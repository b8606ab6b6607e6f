//! The kernels, one file per op family; [`plan`], which decides for every [`Op`] which kernel
//! runs it (or why none does); and [`execute`], which checks the buffers and runs a plan.
//!
//! Kernels may assume what [`execute`] established: the inputs passed [`Op::infer`] and the
//! layer-support rules, every output has exactly the inferred type and shape, and every buffer
//! has exactly the bytes its description needs. Under those conditions their indexing is in
//! bounds by construction; what can still go wrong depends on the data (a gather index out of
//! range, an integer division by zero) and is returned as [`BackendError::Execution`].

mod axis;
pub(crate) mod cast;
mod conv;
mod conv_transpose;
mod einsum;
mod elementwise;
mod gather_scatter;
mod image;
mod indexing;
mod layout;
mod linalg;
mod loss;
mod math;
mod matmul;
mod ml;
mod norm;
mod numeric;
pub(crate) mod plan;
mod pool;
pub(crate) mod qbuiltin;
mod qint;
pub(crate) mod qlinear;
mod quantize;
mod recurrent;
mod reduce;
mod resize;
mod sampling;
mod signal;
mod training;
mod unpool;

use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::{DataType, Op, TensorInfo, TensorView, TensorViewMut};
pub(crate) use plan::Plan;

/// The error for a dtype a kernel has no implementation for (layer support rejects these
/// first; reaching this is a bug in the support rules).
pub(crate) fn unsupported(op: &str, dtype: DataType) -> BackendError {
    BackendError::Other(format!("{op} on {dtype} is not implemented by CpuRef"))
}

/// Run `op` (of layer `layer`, for messages) by its `plan` on `inputs`, writing `outputs`.
pub(crate) fn execute(
    layer: &str,
    op: &Op,
    plan: &Plan,
    inputs: &[TensorView<'_>],
    outputs: &mut [TensorViewMut<'_>],
) -> Result<()> {
    let infos: Vec<&TensorInfo> = inputs.iter().map(|v| v.info).collect();
    let expected = plan
        .check(op, &infos)
        .map_err(|reason| BackendError::Unsupported {
            layer: layer.to_string(),
            op: op.name().to_string(),
            reason,
        })?;
    if outputs.len() != expected.len() {
        return Err(BackendError::Other(format!(
            "{}: {} output buffers given, the op produces {}",
            op.name(),
            outputs.len(),
            expected.len()
        )));
    }
    for (slot, (out, want)) in outputs.iter().zip(&expected).enumerate() {
        if !out.info.same_layout(want) {
            return Err(BackendError::Other(format!(
                "{}: output {slot} is described as {}, but the op produces {want}",
                op.name(),
                out.info
            )));
        }
    }
    let lengths = inputs
        .iter()
        .map(|v| (v.info, v.data.len()))
        .chain(outputs.iter().map(|v| (v.info, v.data.len())));
    for (info, len) in lengths {
        let need = info.num_bytes()?;
        if len != need {
            return Err(BackendError::Other(format!(
                "{}: a buffer for {info} holds {len} bytes, expected {need}",
                op.name()
            )));
        }
    }
    plan.run(inputs, outputs)
}
