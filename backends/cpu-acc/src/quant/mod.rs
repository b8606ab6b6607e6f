//! Quantized layers on CpuAcc: QuantizeLinear / DequantizeLinear of 8-bit tensors
//! ([`qdq`]), the int8 convolution that a DequantizeLinear → Conv → (Relu/Clip) →
//! QuantizeLinear chain becomes ([`conv`], folded by [`fold`] in `optimize_subgraph`), the
//! int8 fully connected layer a Gemm's chain becomes ([`gemm`]), on the
//! kernel crate's integer GEMM (`qgemm`) with XNNPACK's requantization; connected int8
//! layers then run channels-last ([`region`], [`nhwc_conv`]). Elementwise functions of one
//! quantized tensor (int8 sigmoid, hard-swish) become byte tables ([`lookup`]), and the
//! mean over the pixels an 8-bit layer ([`mean`]); the 2-D average and max pools are
//! [`pool`]. ONNX Runtime's dynamic quantization (DynamicQuantizeLinear, MatMulInteger) runs
//! in [`dynamic`].

mod binary;
mod binary_affine;
mod binary_rows;
mod conv;
mod dynamic;
pub(crate) mod fixed_point;
pub(crate) mod fold;
mod gemm;
mod lookup;
mod mean;
mod nhwc_conv;
mod packed_b;
mod pool;
mod qdq;
mod region;
mod region_moves;

use crate::io::Io;
use crate::plan::Plan;
use backplane_backend_api::{BackendError, LayerDesc, Result as BResult};
use backplane_core::ops::{CustomOp, CustomPayload};
use backplane_core::{DataType, Op, Tensor, TensorInfo, TensorView, TensorViewMut};
use std::sync::Arc;

/// The custom operator of a folded int8 convolution (domain CpuAcc).
pub(crate) const QLINEAR_CONV: &str = "QLinearConv";
/// The custom operator of a channels-last int8 depthwise convolution and the pointwise one
/// that alone reads its output, run as one step (domain CpuAcc; made by [`region`]).
pub(crate) const QLINEAR_CONV_PAIR: &str = "QLinearConvPair";
/// The custom operator of a folded int8 fully connected layer (domain CpuAcc).
pub(crate) const QLINEAR_GEMM: &str = "QLinearGemm";
/// The custom operator of a folded quantized elementwise binary layer (domain CpuAcc).
pub(crate) const QLINEAR_BINARY: &str = "QLinearBinary";
/// The custom operator of a folded quantized elementwise function of one input, a byte
/// table (domain CpuAcc).
pub(crate) const QLINEAR_LOOKUP: &str = "QLinearLookup";
/// The custom operator of a folded quantized mean over the pixels (domain CpuAcc).
pub(crate) const QLINEAR_MEAN: &str = "QLinearMean";
/// The custom operator of a folded quantized 2-D average or max pool (domain CpuAcc).
pub(crate) const QLINEAR_POOL: &str = "QLinearPool";
/// The custom operator of a folded integer product of 8-bit values and constant weights, with
/// int32 sums (ONNX MatMulInteger; domain CpuAcc).
pub(crate) const MATMUL_INTEGER: &str = "MatMulInteger";
/// The custom operator quantizing an f32 NCHW tensor into a channels-last 8-bit one
/// (domain CpuAcc), where a channels-last region starts at a quantized image.
pub(crate) const QUANTIZE_NHWC: &str = "QuantizeToNhwc";

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
        // The 8-bit integer forms compute on the stored integers.
        Op::Lookup | Op::IntegerAveragePool(_) => true,
        Op::Transpose { .. }
        | Op::Concat { .. }
        | Op::Pad(_)
        | Op::Slice(_)
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
        && [
            QLINEAR_CONV,
            QLINEAR_CONV_PAIR,
            QLINEAR_BINARY,
            QLINEAR_GEMM,
            QLINEAR_LOOKUP,
            QLINEAR_MEAN,
            QLINEAR_POOL,
            QUANTIZE_NHWC,
            MATMUL_INTEGER,
        ]
        .contains(&c.op_type.as_str())
}

/// True for CpuAcc's folded layers that follow their chain's requantization rule, f32 or
/// fixed point ([`fixed_point`]): the int8 convolution, fully connected, binary and mean
/// layers, and the byte tables a binary layer may be fused into (built from its bytes).
pub(crate) fn follows_requant_rule(op: &Op) -> bool {
    match op {
        Op::Custom(c) => {
            c.domain == crate::CPU_ACC_ID
                && [
                    QLINEAR_CONV,
                    QLINEAR_CONV_PAIR,
                    QLINEAR_GEMM,
                    QLINEAR_BINARY,
                    QLINEAR_LOOKUP,
                    QLINEAR_MEAN,
                ]
                .contains(&c.op_type.as_str())
        }
        _ => false,
    }
}

/// The plan of a QuantizeLinear or DequantizeLinear layer.
pub(crate) fn plan_qdq(layer: &LayerDesc) -> Result<Plan<'_>, String> {
    qdq::plan(layer)
}

/// The plan of a DynamicQuantizeLinear layer.
pub(crate) fn plan_dynamic_quantize(layer: &LayerDesc) -> Result<Plan<'_>, String> {
    dynamic::plan_dynamic_quantize(layer)
}

/// The plan of a quantized custom layer.
pub(crate) fn plan_custom<'a>(c: &'a CustomOp, layer: &'a LayerDesc) -> Result<Plan<'a>, String> {
    match c.op_type.as_str() {
        QLINEAR_CONV => conv::plan(c, layer),
        QLINEAR_CONV_PAIR => nhwc_conv::pair::plan(c, layer),
        QLINEAR_BINARY => binary::plan(c, layer),
        QLINEAR_GEMM => gemm::plan(c, layer),
        QLINEAR_LOOKUP => lookup::plan(c, layer),
        QLINEAR_MEAN => mean::plan(c, layer),
        QLINEAR_POOL => pool::plan_pool(c, layer),
        QUANTIZE_NHWC => qdq::plan_nhwc(c, layer),
        MATMUL_INTEGER => dynamic::plan_matmul_integer(c, layer),
        other => Err(format!("{other} is not one of CpuAcc's quantized layers")),
    }
}

/// The plan of an 8-bit integer form left unfolded (`Op::Lookup` with a constant table,
/// `Op::IntegerAveragePool`): the byte table and the quantized pool.
pub(crate) fn plan_integer_form(layer: &LayerDesc) -> Result<Plan<'_>, String> {
    match layer.op {
        Op::Lookup => lookup::plan_op(layer),
        _ => pool::plan_integer(layer),
    }
}

/// 8-bit integer types, signed or not; the quantized types CpuAcc computes on.
fn is_8bit(dt: DataType) -> bool {
    matches!(dt, DataType::I8 | DataType::U8)
}

/// The input, weights, bias and output of a folded int8 layer (`op` names it in messages),
/// the input, weights and output checked to be 8-bit, the weights and the int32 bias to be
/// constants.
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
    if b.dtype != DataType::I32 || layer.constant(1).is_none() || layer.constant(2).is_none() {
        return Err(format!("{op}: constant weights and int32 bias expected"));
    }
    Ok([x, w, b, y])
}

/// The constant weights and int32 bias of a folded int8 layer (input slots 1 and 2), as
/// [`int8_operands`] checked them.
fn int8_constants<'a>(layer: &'a LayerDesc, io: &Io) -> BResult<(&'a Arc<Tensor>, &'a Tensor)> {
    let w = layer
        .constants
        .get(1)
        .and_then(Option::as_ref)
        .ok_or_else(|| io.error("weights not constant".into()))?;
    let b = layer
        .constant(2)
        .ok_or_else(|| io.error("bias not constant".into()))?;
    Ok((w, b))
}

/// The input and output bytes of a folded int8 layer's execution, after the buffer check
/// (its weights and bias were copied at load).
fn int8_buffers<'a, 'o>(
    io: &Io,
    inputs: &[TensorView<'a>],
    outputs: &'o mut [TensorViewMut<'_>],
) -> BResult<(&'a [u8], &'o mut [u8])> {
    io.check_copied(inputs, outputs, |k| k == 1 || k == 2)?;
    let missing = || BackendError::Execution(format!("{}: missing buffer", io.layer));
    let x = inputs.first().ok_or_else(missing)?.data;
    let y = &mut *outputs.first_mut().ok_or_else(missing)?.data;
    Ok((x, y))
}

/// The byte GEMM's form of an 8-bit type's values (`qgemm::quads`, unsigned bytes): the XOR
/// that makes a byte unsigned (`x ^ 0x80 = x + 128` for int8, nothing for uint8) and the
/// zero point `zero` in that form.
fn unsigned_form(signed: bool, zero: i32) -> (u8, i32) {
    if signed {
        (0x80, zero + 128)
    } else {
        (0, zero)
    }
}

/// Rows of `k` bytes from `src` into rows of `pitch` bytes of `dst`, each byte XORed with
/// `flip` ([`unsigned_form`]): the byte GEMM's A rows. The bytes of a row past `k` are left
/// as they are (they meet zero weights).
fn unsigned_rows(src: &[u8], k: usize, flip: u8, dst: &mut [u8], pitch: usize) {
    let (k, pitch) = (k.max(1), pitch.max(1));
    if k == pitch {
        // Rows end to end on both sides: one run (a pointwise layer's pixels).
        let n = (src.len() / k).min(dst.len() / pitch) * k;
        xor_bytes(&src[..n], flip, &mut dst[..n]);
        return;
    }
    for (row, xr) in dst.chunks_exact_mut(pitch).zip(src.chunks_exact(k)) {
        let n = k.min(pitch);
        xor_bytes(&xr[..n], flip, &mut row[..n]);
    }
}

/// [`xor_bytes`]'s body.
#[inline(always)]
fn xor_bytes_body(src: &[u8], flip: u8, dst: &mut [u8]) {
    for (d, &v) in dst.iter_mut().zip(src) {
        *d = v ^ flip;
    }
}

backplane_cpu_kernels::multiversion! {
    /// `dst[i] = src[i] ^ flip` over the shorter of the two, at each tier's vector width.
    fn xor_bytes(src: &[u8], flip: u8, dst: &mut [u8]) => xor_bytes_body;
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

#[cfg(test)]
mod tests {
    use super::unsigned_rows;

    #[test]
    fn unsigned_rows_flip_each_row_and_keep_the_padding() {
        // Rows end to end (one run) and rows into a wider pitch (the padding kept), over
        // lengths that are not multiples of any vector width.
        for (k, pitch, rows) in [
            (1, 1, 1),
            (16, 16, 7),
            (67, 67, 3),
            (27, 28, 5),
            (3, 4, 129),
        ] {
            let src: Vec<u8> = (0..k * rows).map(|i| (i * 37 % 251) as u8).collect();
            for flip in [0u8, 0x80] {
                let mut dst = vec![0xA5u8; pitch * rows + 3];
                unsigned_rows(&src, k, flip, &mut dst, pitch);
                for (i, &d) in dst.iter().enumerate() {
                    let (r, j) = (i / pitch, i % pitch);
                    let want = if r < rows && j < k {
                        src[r * k + j] ^ flip
                    } else {
                        0xA5
                    };
                    assert_eq!(d, want, "k {k} pitch {pitch} byte {i} flip {flip:#x}");
                }
            }
        }
    }
}
