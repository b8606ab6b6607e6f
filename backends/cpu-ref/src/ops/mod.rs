//! The kernels, one file per op family, and [`execute`], which checks the buffers and runs
//! the kernel of an [`Op`].
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
mod erf;
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
mod pool;
mod quantize;
mod recurrent;
mod reduce;
mod resize;
mod sampling;
mod signal;
mod training;
mod unpool;

use crate::{support, Result};
use backplane_backend_api::BackendError;
use backplane_core::{DataType, Op, TensorInfo, TensorView, TensorViewMut};

/// The error for a dtype a kernel has no implementation for (layer support rejects these
/// first; reaching this is a bug in the support rules).
pub(crate) fn unsupported(op: &str, dtype: DataType) -> BackendError {
    BackendError::Other(format!("{op} on {dtype} is not implemented by CpuRef"))
}

/// Run `op` (of layer `layer`, for messages) on `inputs`, writing `outputs`.
pub(crate) fn execute(
    layer: &str,
    op: &Op,
    inputs: &[TensorView<'_>],
    outputs: &mut [TensorViewMut<'_>],
) -> Result<()> {
    let infos: Vec<&TensorInfo> = inputs.iter().map(|v| v.info).collect();
    let expected = support::check(op, &infos).map_err(|reason| BackendError::Unsupported {
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
    dispatch(op, inputs, outputs)
}

fn input<'a, 'b>(inputs: &'a [TensorView<'b>], slot: usize) -> Result<&'a TensorView<'b>> {
    inputs
        .get(slot)
        .ok_or_else(|| BackendError::Other(format!("input {slot} is missing")))
}

fn output<'a, 'b>(outputs: &'a mut [TensorViewMut<'b>]) -> Result<&'a mut TensorViewMut<'b>> {
    outputs
        .first_mut()
        .ok_or_else(|| BackendError::Other("the output buffer is missing".to_string()))
}

fn dispatch(op: &Op, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
    let x = input(inputs, 0)?;
    match op {
        Op::Identity
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. } => layout::copy(x, output(outputs)?),
        Op::Unary(u) => elementwise::unary(*u, x, output(outputs)?),
        Op::Binary(b) => elementwise::binary(*b, x, input(inputs, 1)?, output(outputs)?),
        Op::Conv(desc) => conv::conv(desc, x, input(inputs, 1)?, inputs.get(2), output(outputs)?),
        Op::ConvTranspose(desc) => conv_transpose::conv_transpose(
            desc,
            x,
            input(inputs, 1)?,
            inputs.get(2),
            output(outputs)?,
        ),
        Op::BatchNormalization { epsilon } => norm::batch_norm(
            *epsilon,
            x,
            [
                input(inputs, 1)?,
                input(inputs, 2)?,
                input(inputs, 3)?,
                input(inputs, 4)?,
            ],
            output(outputs)?,
        ),
        Op::MatMul => matmul::matmul(x, input(inputs, 1)?, output(outputs)?),
        Op::Gemm(desc) => matmul::gemm(desc, x, input(inputs, 1)?, inputs.get(2), output(outputs)?),
        Op::Pool(desc)
            if desc.kind == backplane_core::ops::PoolKind::Max && x.info.dtype != DataType::F32 =>
        {
            pool::max_pool_any(desc, x, output(outputs)?)
        }
        Op::Pool(desc) => pool::pool(desc, x, output(outputs)?),
        Op::GlobalPool(kind) => pool::global_pool(*kind, x, output(outputs)?),
        Op::Transpose { perm } => layout::transpose(perm, x, output(outputs)?),
        Op::Concat { axis } => layout::concat(*axis, inputs, output(outputs)?),
        Op::Split { axis, .. } => layout::split(*axis, x, outputs),
        Op::Slice(desc) => layout::slice(desc, x, output(outputs)?),
        Op::Gather { axis } => layout::gather(*axis, x, input(inputs, 1)?, output(outputs)?),
        Op::Softmax { axis } => norm::softmax(*axis, x, output(outputs)?),
        Op::LayerNormalization { axis, epsilon } => norm::layer_norm(
            *axis,
            *epsilon,
            x,
            input(inputs, 1)?,
            inputs.get(2),
            output(outputs)?,
        ),
        Op::Reduce(desc) => reduce::reduce(desc, x, output(outputs)?),
        Op::Cast { saturate, .. } => cast::cast(x, output(outputs)?, *saturate),
        Op::Pad(desc) => layout::pad(desc, x, output(outputs)?),
        Op::Resize(desc) => resize::resize(desc, x, output(outputs)?),
        Op::Math(m) => math::math(*m, x, output(outputs)?),
        Op::BinaryExt(b) => math::binary_ext(*b, x, input(inputs, 1)?, output(outputs)?),
        Op::Where => math::select(x, input(inputs, 1)?, input(inputs, 2)?, output(outputs)?),
        Op::ArgReduce(d) => axis::arg_reduce(d, x, output(outputs)?),
        Op::Expand { .. } => gather_scatter::expand(x, output(outputs)?),
        Op::Tile { .. } => gather_scatter::tile(x, output(outputs)?),
        Op::Trilu { upper, k } => gather_scatter::trilu(*upper, *k, x, output(outputs)?),
        Op::GatherElements { axis } => {
            gather_scatter::gather_elements(*axis, x, input(inputs, 1)?, output(outputs)?)
        }
        Op::GatherND { batch_dims } => {
            gather_scatter::gather_nd(*batch_dims, x, input(inputs, 1)?, output(outputs)?)
        }
        Op::ScatterND { reduction } => gather_scatter::scatter_nd(
            *reduction,
            x,
            input(inputs, 1)?,
            input(inputs, 2)?,
            output(outputs)?,
        ),
        Op::ScatterElements { axis, reduction } => gather_scatter::scatter_elements(
            *axis,
            *reduction,
            x,
            input(inputs, 1)?,
            input(inputs, 2)?,
            output(outputs)?,
        ),
        Op::OneHot { axis, depth } => {
            gather_scatter::one_hot(*axis, *depth, x, input(inputs, 1)?, output(outputs)?)
        }
        Op::TopK(d) => axis::top_k(d, x, outputs),
        Op::CumSum {
            axis,
            exclusive,
            reverse,
        } => axis::cum_sum(*axis, *exclusive, *reverse, x, output(outputs)?),
        Op::LogSoftmax { axis } => axis::log_softmax(*axis, x, output(outputs)?),
        Op::Hardmax { axis } => axis::hardmax(*axis, x, output(outputs)?),
        Op::InstanceNormalization { epsilon } => axis::instance_norm(
            *epsilon,
            x,
            input(inputs, 1)?,
            input(inputs, 2)?,
            output(outputs)?,
        ),
        Op::Lrn {
            alpha,
            beta,
            bias,
            size,
        } => axis::lrn(*alpha, *beta, *bias, *size, x, output(outputs)?),
        Op::QuantizeLinear {
            axis,
            block_size,
            saturate,
            ..
        } => quantize::quantize(
            quantize::Layout::new(*axis, *block_size),
            *saturate,
            x,
            input(inputs, 1)?,
            inputs.get(2),
            output(outputs)?,
        ),
        Op::DequantizeLinear {
            axis, block_size, ..
        } => quantize::dequantize(
            quantize::Layout::new(*axis, *block_size),
            x,
            input(inputs, 1)?,
            inputs.get(2),
            output(outputs)?,
        ),
        Op::DynamicQuantizeLinear => quantize::dynamic_quantize(x, outputs),
        Op::NegativeLogLikelihoodLoss(desc) => {
            loss::nll_loss(desc, x, input(inputs, 1)?, inputs.get(2), output(outputs)?)
        }
        Op::Einsum(desc) => einsum::einsum(desc, inputs, output(outputs)?),
        Op::Det => linalg::det(x, output(outputs)?),
        Op::GridSample(desc) => sampling::grid_sample(desc, x, input(inputs, 1)?, output(outputs)?),
        Op::Rnn(desc) => recurrent::recurrent(desc, inputs, outputs),
        Op::Dft(desc) => signal::dft(desc, x, output(outputs)?),
        Op::Stft(desc) => signal::stft(desc, x, inputs.get(1), output(outputs)?),
        Op::Col2Im(desc) => image::col2im(desc, x, output(outputs)?),
        Op::AffineGrid(desc) => image::affine_grid(desc, x, output(outputs)?),
        Op::RoiAlign(desc) => image::roi_align(
            desc,
            x,
            input(inputs, 1)?,
            input(inputs, 2)?,
            output(outputs)?,
        ),
        Op::DeformConv(desc) => image::deform_conv(desc, inputs, output(outputs)?),
        Op::MaxPoolWithIndices(desc) => pool::max_pool_indices(desc, x, outputs),
        Op::MaxUnpool(desc) => unpool::max_unpool(desc, x, input(inputs, 1)?, output(outputs)?),
        Op::Optimizer(desc) => training::optimizer(desc, inputs, outputs),
        Op::TfIdfVectorizer(desc) => ml::tfidf(desc, x, output(outputs)?),
        Op::TreeEnsemble(desc) => ml::tree_ensemble(desc, x, output(outputs)?),
        other => Err(BackendError::Other(format!(
            "{} is not implemented by CpuRef",
            other.name()
        ))),
    }
}
