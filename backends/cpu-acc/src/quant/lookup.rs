//! The quantized lookup layer (custom `QLinearLookup`, made by [`super::fold`] from
//! `DequantizeLinear → one or more elementwise f32 functions of one input (Sigmoid, Tanh,
//! HardSwish, HardSigmoid, Relu, Clip, ..., or a binary operation with a constant of one
//! value) → QuantizeLinear`, all per tensor on 8-bit types):
//! one byte table lookup per element instead of three or more layers and two f32 tensors.
//! TFLite's int8 LOGISTIC and HARD_SWISH import as such chains.
//!
//! The table holds, for each of the 256 input bytes, what the unfolded chain computes on
//! CpuRef: the dequantized value `(q - z) · s` in f32, each function evaluated in f64 on the
//! f32 value and rounded once to f32 (CpuRef's rule for float elementwise ops:
//! `backplane_core::scalar::math_f64` for the [`MathOp`]s and `scalar::unary_f64` for the
//! [`UnaryOp`]s, the functions CpuRef calls; binary operations in f32, as CpuRef's arithmetic
//! does), then the quotient by the output scale in f32 rounded
//! half to even, the zero point added, saturated (NaN gives 0, as CpuRef writes it). So the
//! layer equals CpuRef's chain bit for bit, whatever CpuAcc's own f32 kernels would round
//! differently. XNNPACK's int8 HARD_SWISH uses a fixed-point form instead and may differ
//! from this (and CpuRef) by one quantum.
//!
//! The layer is elementwise, so it runs on channels-last tensors unchanged and joins int8
//! regions ([`super::region`]).

use super::{is_8bit, payload_of, range, widen, QLINEAR_LOOKUP};
use crate::io::Io;
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::{BinaryOp, CustomOp, MathOp, UnaryOp};
use backplane_core::scalar::{math_f64, unary_f64};
use backplane_core::{DataType, TensorInfo, TensorView, TensorViewMut};

/// One elementwise f32 function of a folded chain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Func {
    /// A [`UnaryOp`] (those [`Func::of_unary`] accepts).
    Unary(UnaryOp),
    /// A float [`MathOp`] (those [`Func::of_math`] accepts).
    Math(MathOp),
    /// A [`BinaryOp`] with a constant of one value as the other operand (first when
    /// `c_first`): a quantized model's rescaling or hard-sigmoid `Mul` by 1/6.
    Binary {
        /// The operation.
        op: BinaryOp,
        /// The constant, as the f32 value the chain computes with.
        c: f32,
        /// The constant is the first operand.
        c_first: bool,
    },
}

impl Func {
    /// The function of a unary op whose f32 formula the table can reproduce (not Erf or
    /// Gelu: CpuRef evaluates those with its own erf).
    pub(crate) fn of_unary(u: UnaryOp) -> Option<Func> {
        match u {
            UnaryOp::Erf | UnaryOp::Gelu { .. } => None,
            u => Some(Func::Unary(u)),
        }
    }

    /// The function of a math op with a float result.
    pub(crate) fn of_math(m: MathOp) -> Option<Func> {
        match m {
            MathOp::IsNaN | MathOp::IsInf { .. } | MathOp::Not | MathOp::BitwiseNot => None,
            m => Some(Func::Math(m)),
        }
    }

    /// The function of a binary op with a constant operand, for the operations CpuRef
    /// computes as one f32 operation (not Pow).
    pub(crate) fn of_binary(op: BinaryOp, c: f32, c_first: bool) -> Option<Func> {
        (op != BinaryOp::Pow).then_some(Func::Binary { op, c, c_first })
    }

    /// The function on one f32 value, as CpuRef computes it: unary and math functions in
    /// f64, rounded once to f32; binary operations in f32 (NaN-propagating Max and Min).
    pub(crate) fn apply(self, x: f32) -> f32 {
        match self {
            Func::Math(m) => math_f64(m, f64::from(x)) as f32,
            Func::Unary(u) => unary_f64(u, f64::from(x)) as f32,
            Func::Binary { op, c, c_first } => {
                let (p, q) = if c_first { (c, x) } else { (x, c) };
                match op {
                    BinaryOp::Add => p + q,
                    BinaryOp::Sub => p - q,
                    BinaryOp::Mul => p * q,
                    BinaryOp::Div => p / q,
                    _ if p.is_nan() || q.is_nan() => f32::NAN,
                    BinaryOp::Max => {
                        if p >= q {
                            p
                        } else {
                            q
                        }
                    }
                    BinaryOp::Min => {
                        if p <= q {
                            p
                        } else {
                            q
                        }
                    }
                    // Refused by `Func::of_binary`.
                    BinaryOp::Pow => f32::NAN,
                }
            }
        }
    }
}

/// The 256-entry table of the chain `DequantizeLinear(x: x_dt, sx, zx) → funcs →
/// QuantizeLinear(y_dt, sy, zy)`, indexed by the input byte.
pub(crate) fn table(
    x_dt: DataType,
    (sx, zx): (f32, i32),
    funcs: &[Func],
    y_dt: DataType,
    (sy, zy): (f32, i32),
) -> Vec<u8> {
    let (lo, hi) = range(y_dt);
    (0..=255u8)
        .map(|b| {
            let q = widen(x_dt == DataType::I8, b);
            let mut v = (q - zx) as f32 * sx;
            for f in funcs {
                v = f.apply(v);
            }
            let quotient = f64::from(v / sy);
            let r = quotient.round_ties_even() + f64::from(zy);
            let y = if r.is_nan() {
                0
            } else {
                r.clamp(f64::from(lo), f64::from(hi)) as i32
            };
            if y_dt == DataType::I8 {
                (y as i8) as u8
            } else {
                y as u8
            }
        })
        .collect()
}

/// What a folded lookup layer computes (its custom op's payload).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QLookupDesc {
    /// The output byte of each input byte.
    pub table: Vec<u8>,
}

impl QLookupDesc {
    /// The custom op, with output `y`.
    pub(crate) fn to_op(&self, y: TensorInfo) -> CustomOp {
        super::custom_op(QLINEAR_LOOKUP, self, y)
    }

    /// The description [`QLookupDesc::to_op`] put in the custom op.
    pub(crate) fn decode(c: &CustomOp) -> std::result::Result<QLookupDesc, String> {
        payload_of(c, QLINEAR_LOOKUP)
    }
}

/// The plan of a folded lookup layer: an 8-bit input and an 8-bit output of one shape.
pub(super) fn plan<'a>(
    c: &'a CustomOp,
    layer: &'a LayerDesc,
) -> std::result::Result<Plan<'a>, String> {
    let d = QLookupDesc::decode(c)?;
    let [x] = layer.inputs.as_slice() else {
        return Err(format!("{QLINEAR_LOOKUP} takes one input"));
    };
    let y = layer.outputs.first().ok_or("no output")?;
    if !is_8bit(x.dtype) || !is_8bit(y.dtype) {
        return Err(format!(
            "{QLINEAR_LOOKUP}: {} to {}, not 8-bit",
            x.dtype, y.dtype
        ));
    }
    if x.shape != y.shape {
        return Err(format!(
            "{QLINEAR_LOOKUP}: input {} and output {} differ in shape",
            x.shape, y.shape
        ));
    }
    let table: [u8; 256] = d
        .table
        .as_slice()
        .try_into()
        .map_err(|_| format!("{QLINEAR_LOOKUP}: a table of {} entries", d.table.len()))?;
    Ok(Plan::new(move |io, th| done(QLookup { io, table, th })))
}

/// The plan of an `Op::Lookup` layer whose table is a constant: the byte table.
pub(super) fn plan_op(layer: &LayerDesc) -> std::result::Result<Plan<'_>, String> {
    let [x, t] = layer.inputs.as_slice() else {
        return Err("Lookup takes an input and a table".into());
    };
    let y = layer.outputs.first().ok_or("no output")?;
    if !is_8bit(x.dtype) || !is_8bit(t.dtype) || y.dtype != t.dtype || x.shape != y.shape {
        return Err(format!(
            "Lookup: {} through a {} table to {}",
            x.dtype, t.dtype, y.dtype
        ));
    }
    let table: [u8; 256] = layer
        .constant(1)
        .ok_or("Lookup: the table is not a constant")?
        .bytes()
        .try_into()
        .map_err(|_| "Lookup: a table of other than 256 entries".to_string())?;
    Ok(Plan::new(move |io, th| done(QLookup { io, table, th })))
}

/// The folded lookup layer.
struct QLookup {
    io: Io,
    table: [u8; 256],
    th: Threads,
}

impl Workload for QLookup {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let missing = || BackendError::Execution(format!("{}: missing buffer", self.io.layer));
        let x = inputs.first().ok_or_else(missing)?.data;
        let y = &mut outputs.first_mut().ok_or_else(missing)?.data;
        let chunk = self.th.chunk_size(y.len(), 64 * 1024, 256);
        self.th.chunks(y, chunk, |i, yc| {
            let at = i * chunk;
            let xc = x.get(at..at + yc.len()).ok_or_else(missing)?;
            backplane_cpu_kernels::byte_table::apply(&self.table, xc, yc);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_saturate_and_round_half_to_even() {
        // Identity through Relu on a scale of 1: negative inputs give the zero point, the
        // rest themselves, clamped to the output range.
        let t = table(
            DataType::I8,
            (1.0, 0),
            &[Func::Unary(UnaryOp::Relu)],
            DataType::U8,
            (1.0, 10),
        );
        assert_eq!(t[0], 10); // 0 → 0 → 10
        assert_eq!(t[100], 110);
        assert_eq!(t[127], 137);
        assert_eq!(t[200], 10); // -56 → 0
                                // Halves round to even: x·0.5 on an output scale of 1.
        let t = table(DataType::U8, (0.5, 0), &[], DataType::U8, (1.0, 0));
        assert_eq!(t[1], 0); // 0.5 → 0
        assert_eq!(t[3], 2); // 1.5 → 2
        assert_eq!(t[5], 2); // 2.5 → 2
        assert_eq!(t[255], 128); // 127.5 → 128
                                 // NaN (log of a negative value) gives 0.
        let t = table(
            DataType::I8,
            (1.0, 0),
            &[Func::Unary(UnaryOp::Log)],
            DataType::I8,
            (1.0, 5),
        );
        assert_eq!(t[255], 0); // log(-1)
        assert_eq!(t[1], 5); // log(1) = 0
    }

    #[test]
    fn erf_and_predicates_are_not_tabulated() {
        assert!(Func::of_unary(UnaryOp::Erf).is_none());
        assert!(Func::of_unary(UnaryOp::Gelu {
            tanh_approximation: true
        })
        .is_none());
        assert!(Func::of_math(MathOp::IsNaN).is_none());
        assert_eq!(
            Func::of_math(MathOp::HardSwish),
            Some(Func::Math(MathOp::HardSwish))
        );
    }
}
