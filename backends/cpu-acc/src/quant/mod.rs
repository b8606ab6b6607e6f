//! Quantized layers on CpuAcc: QuantizeLinear / DequantizeLinear of 8-bit tensors
//! ([`qdq`]), the int8 convolution that a DequantizeLinear → Conv → (Relu/Clip) →
//! QuantizeLinear chain becomes ([`conv`], folded by [`fold`] in `optimize_subgraph`), the
//! int8 fully connected layer a Gemm's chain becomes ([`gemm`]), on the
//! kernel crate's integer GEMM (`qgemm`) with XNNPACK's requantization; connected int8
//! layers then run channels-last ([`region`], [`nhwc_conv`]).

mod binary;
mod conv;
pub(crate) mod fold;
mod gemm;
mod nhwc_conv;
mod qdq;
mod region;

use crate::plan::Plan;
use backplane_backend_api::LayerDesc;
use backplane_core::ops::{CustomOp, CustomPayload};
use backplane_core::{DataType, Op, TensorInfo};

/// The custom operator of a folded int8 convolution (domain CpuAcc).
pub(crate) const QLINEAR_CONV: &str = "QLinearConv";
/// The custom operator of a folded int8 fully connected layer (domain CpuAcc).
pub(crate) const QLINEAR_GEMM: &str = "QLinearGemm";
/// The custom operator of a folded quantized elementwise binary layer (domain CpuAcc).
pub(crate) const QLINEAR_BINARY: &str = "QLinearBinary";

/// A folded quantized layer: a CpuAcc custom op of type `op_type` carrying `desc` as its
/// typed payload (nothing written to attributes).
fn custom_op<T>(op_type: &str, desc: &T, y: TensorInfo) -> CustomOp
where
    T: Clone + std::fmt::Debug + Send + Sync + 'static,
{
    CustomOp {
        domain: crate::CPU_ACC_ID.to_string(),
        op_type: op_type.to_string(),
        attributes: Vec::new(),
        outputs: vec![y],
        payload: Some(CustomPayload::new(desc.clone())),
    }
}

/// The description a folded quantized layer of type `op_type` carries.
fn payload_of<T: Clone + 'static>(c: &CustomOp, op_type: &str) -> Result<T, String> {
    c.payload
        .as_ref()
        .and_then(|p| p.get::<T>())
        .cloned()
        .ok_or_else(|| format!("{op_type} carries no CpuAcc description"))
}

/// True for the layers whose inputs may carry quantization parameters on CpuAcc: the
/// quantized layers, and data movement, which moves the integers as they are (a quantized
/// model's input transpose then stays in the CpuAcc run of the layers after it).
pub(crate) fn takes_quantized(op: &Op) -> bool {
    match op {
        Op::QuantizeLinear { .. } | Op::DequantizeLinear { .. } => true,
        Op::Transpose { .. }
        | Op::Identity
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. } => true,
        Op::Custom(c) => is_quant_custom(c),
        _ => false,
    }
}

/// True for CpuAcc's quantized custom operators.
pub(crate) fn is_quant_custom(c: &CustomOp) -> bool {
    c.domain == crate::CPU_ACC_ID
        && (c.op_type == QLINEAR_CONV || c.op_type == QLINEAR_BINARY || c.op_type == QLINEAR_GEMM)
}

/// The plan of a QuantizeLinear or DequantizeLinear layer.
pub(crate) fn plan_qdq(layer: &LayerDesc) -> Result<Plan<'_>, String> {
    qdq::plan(layer)
}

/// The plan of a quantized custom layer.
pub(crate) fn plan_custom<'a>(c: &'a CustomOp, layer: &'a LayerDesc) -> Result<Plan<'a>, String> {
    if c.op_type == QLINEAR_BINARY {
        binary::plan(c, layer)
    } else if c.op_type == QLINEAR_GEMM {
        gemm::plan(c, layer)
    } else {
        conv::plan(c, layer)
    }
}

/// 8-bit integer types, signed or not; the quantized types CpuAcc computes on.
fn is_8bit(dt: DataType) -> bool {
    matches!(dt, DataType::I8 | DataType::U8)
}

/// The input, weights, bias and output of a folded int8 layer (`op` names it in messages),
/// the input, weights and output checked to be 8-bit.
fn int8_operands<'a>(layer: &'a LayerDesc, op: &str) -> Result<[&'a TensorInfo; 4], String> {
    let [x, w, b] = layer.inputs.as_slice() else {
        return Err(format!("{op} takes x, w and an int32 bias"));
    };
    let y = layer.outputs.first().ok_or("no output")?;
    for (t, what) in [(x, "x"), (w, "w"), (y, "y")] {
        if !is_8bit(t.dtype) {
            return Err(format!("{op}: {what} is {}, not 8-bit", t.dtype));
        }
    }
    Ok([x, w, b, y])
}

/// The value range of an 8-bit type.
fn range(dt: DataType) -> (i32, i32) {
    if dt == DataType::I8 {
        (-128, 127)
    } else {
        (0, 255)
    }
}

/// Byte `b` of an 8-bit tensor of type `dt` as an integer.
#[inline]
fn widen(dt_signed: bool, b: u8) -> i32 {
    if dt_signed {
        i32::from(b as i8)
    } else {
        i32::from(b)
    }
}
