//! The quantized elementwise binary layer (custom `QLinearBinary`, made by [`super::fold`]
//! from `DequantizeLinear(a), DequantizeLinear(b) → Add | Sub | Mul | Max | Min → (Relu |
//! Clip) → QuantizeLinear` on tensors of one shape): one pass over the 8-bit inputs instead of
//! four layers and two f32 tensors.
//!
//! Each element is computed with the f32 operations of the unfolded chain, in its order
//! (`(q - z) · s` per input, the operation, the quotient by the output scale rounded half to
//! even, the zero point added, saturated), so it equals CpuRef's chain bit for bit; the fused
//! activation is the clamp of the quantized result, which equals quantizing the clamped value
//! (quantization is monotone). TFLite's reference ADD instead rescales in fixed point (20-bit
//! left shift, 31-bit multipliers): its results may differ by one quantum near a boundary.

use super::{range, widen, QLINEAR_BINARY};
use crate::io::Io;
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::{BinaryOp, CustomOp};
use backplane_core::{DataType, TensorInfo, TensorView, TensorViewMut};

/// What a folded quantized binary layer computes (its custom op's payload).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QBinaryDesc {
    /// The operation.
    pub op: BinaryOp,
    /// Scale and zero point of the first input.
    pub a: (f32, i32),
    /// Scale and zero point of the second input.
    pub b: (f32, i32),
    /// Scale and zero point of the output.
    pub y: (f32, i32),
    /// The fused activation's range in output units.
    pub clamp: (i32, i32),
}

/// The operations the layer computes (those whose f32 result the chain quantizes as is).
pub(crate) fn foldable(op: BinaryOp) -> bool {
    matches!(
        op,
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Max | BinaryOp::Min
    )
}

impl QBinaryDesc {
    /// The custom op, with output `y`.
    pub(crate) fn to_op(&self, y: TensorInfo) -> CustomOp {
        super::custom_op(QLINEAR_BINARY, self, y)
    }

    /// The description [`QBinaryDesc::to_op`] put in the custom op.
    pub(crate) fn decode(c: &CustomOp) -> std::result::Result<QBinaryDesc, String> {
        super::payload_of(c, QLINEAR_BINARY)
    }
}

/// The plan of a folded quantized binary layer: two 8-bit inputs and an 8-bit output, all
/// of one shape.
pub(super) fn plan<'a>(
    c: &'a CustomOp,
    layer: &'a LayerDesc,
) -> std::result::Result<Plan<'a>, String> {
    let d = QBinaryDesc::decode(c)?;
    let [a, b] = layer.inputs.as_slice() else {
        return Err(format!("{QLINEAR_BINARY} takes two inputs"));
    };
    let y = layer.outputs.first().ok_or("no output")?;
    for (t, what) in [(a, "a"), (b, "b"), (y, "y")] {
        if !super::is_8bit(t.dtype) {
            return Err(format!(
                "{QLINEAR_BINARY}: {what} is {}, not 8-bit",
                t.dtype
            ));
        }
    }
    if a.shape != b.shape || a.shape != y.shape {
        return Err(format!(
            "{QLINEAR_BINARY}: inputs {} and {} and output {} differ in shape",
            a.shape, b.shape, y.shape
        ));
    }
    let (lo, hi) = range(y.dtype);
    if d.clamp.0 < lo || d.clamp.1 > hi || d.clamp.0 > d.clamp.1 {
        return Err(format!("{QLINEAR_BINARY}: clamp outside the output type"));
    }
    Ok(Plan::new(move |io, th| done(QBinary::new(io, d, th))))
}

/// The folded quantized binary layer.
struct QBinary {
    io: Io,
    d: QBinaryDesc,
    signed: [bool; 3],
    th: Threads,
}

/// Round half to even for |v| < 2²², by the float adder: adding and taking away 1.5·2²³
/// leaves the nearest integer under the default rounding mode (the same as
/// `round_ties_even` on that range, and vectorizable).
#[inline]
fn round_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

impl QBinary {
    fn new(io: Io, d: QBinaryDesc, th: Threads) -> QBinary {
        let s = |t: &TensorInfo| t.dtype == DataType::I8;
        let signed = [s(&io.inputs[0]), s(&io.inputs[1]), s(&io.outputs[0])];
        QBinary { io, d, signed, th }
    }

    fn run(&self, a: &[u8], b: &[u8], y: &mut [u8]) {
        let d = &self.d;
        let f = |v: f32| -> u8 {
            // Clamp far outside the 8-bit range first: the rounding trick needs |v| < 2²².
            let q = round_even((v / d.y.0).clamp(-1e6, 1e6)) + d.y.1 as f32;
            let q = (q as i32).clamp(d.clamp.0, d.clamp.1);
            if self.signed[2] {
                (q as i8) as u8
            } else {
                q as u8
            }
        };
        let deq = |signed: bool, q: u8, (s, z): (f32, i32)| (widen(signed, q) - z) as f32 * s;
        let (sa, sb) = (self.signed[0], self.signed[1]);
        macro_rules! each {
            ($e:expr) => {
                for ((o, &qa), &qb) in y.iter_mut().zip(a).zip(b) {
                    let (va, vb) = (deq(sa, qa, d.a), deq(sb, qb, d.b));
                    *o = f($e(va, vb));
                }
            };
        }
        match d.op {
            BinaryOp::Add => each!(|x: f32, z: f32| x + z),
            BinaryOp::Sub => each!(|x: f32, z: f32| x - z),
            BinaryOp::Mul => each!(|x: f32, z: f32| x * z),
            BinaryOp::Max => each!(|x: f32, z: f32| x.max(z)),
            BinaryOp::Min => each!(|x: f32, z: f32| x.min(z)),
            // Refused by decode.
            BinaryOp::Div | BinaryOp::Pow => {}
        }
    }
}

impl Workload for QBinary {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let missing = || BackendError::Execution(format!("{}: missing buffer", self.io.layer));
        let a = inputs.first().ok_or_else(missing)?.data;
        let b = inputs.get(1).ok_or_else(missing)?.data;
        let y = &mut outputs.first_mut().ok_or_else(missing)?.data;
        let chunk = self.th.chunk_size(y.len(), 16 * 1024, 64);
        self.th.chunks(y, chunk, |i, yc| {
            let at = i * chunk;
            let n = yc.len();
            self.run(&a[at..at + n], &b[at..at + n], yc);
            Ok(())
        })
    }
}
