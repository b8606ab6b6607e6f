//! Elementwise operators beyond [`super::UnaryOp`] and [`super::BinaryOp`]: math functions and
//! parameterised activations, comparisons, logical and bitwise operators, Mod, PRelu and Where.

use crate::shape::broadcast_shapes;
use crate::{CoreError, DataType, Result, TensorInfo};

/// A one-input elementwise function (ONNX math and activation operators).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MathOp {
    /// Round down.
    Floor,
    /// Round up.
    Ceil,
    /// Round half to even.
    Round,
    /// -1, 0 or 1.
    Sign,
    /// 1 / x.
    Reciprocal,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// Tangent.
    Tan,
    /// Arc sine.
    Asin,
    /// Arc cosine.
    Acos,
    /// Arc tangent.
    Atan,
    /// Hyperbolic sine.
    Sinh,
    /// Hyperbolic cosine.
    Cosh,
    /// Inverse hyperbolic sine.
    Asinh,
    /// Inverse hyperbolic cosine.
    Acosh,
    /// Inverse hyperbolic tangent.
    Atanh,
    /// ln(1 + e^x).
    Softplus,
    /// x / (1 + |x|).
    Softsign,
    /// x * tanh(softplus(x)).
    Mish,
    /// max(0, min(1, alpha * x + beta)).
    HardSigmoid {
        /// Slope.
        alpha: f32,
        /// Offset.
        beta: f32,
    },
    /// x * max(0, min(1, x / 6 + 1 / 2)).
    HardSwish,
    /// gamma * (x if x > 0 else alpha * (e^x - 1)).
    Selu {
        /// Negative-side scale.
        alpha: f32,
        /// Overall scale.
        gamma: f32,
    },
    /// x if x >= 0 else alpha * (e^x - 1).
    Elu {
        /// Negative-side scale.
        alpha: f32,
    },
    /// max(0, x) + min(0, alpha * (e^(x / alpha) - 1)).
    Celu {
        /// Shape parameter.
        alpha: f32,
    },
    /// x if x > alpha else 0.
    ThresholdedRelu {
        /// Threshold.
        alpha: f32,
    },
    /// x - bias if x > lambd, x + bias if x < -lambd, else 0.
    Shrink {
        /// Shift.
        bias: f32,
        /// Threshold.
        lambd: f32,
    },
    /// Whether x is NaN (bool output).
    IsNaN,
    /// Whether x is infinite (bool output), by sign.
    IsInf {
        /// Detect -inf.
        detect_negative: bool,
        /// Detect +inf.
        detect_positive: bool,
    },
    /// Logical not (bool).
    Not,
    /// Bitwise not (integers).
    BitwiseNot,
}

impl MathOp {
    /// The ONNX operator name.
    pub fn name(&self) -> &'static str {
        match self {
            MathOp::Floor => "Floor",
            MathOp::Ceil => "Ceil",
            MathOp::Round => "Round",
            MathOp::Sign => "Sign",
            MathOp::Reciprocal => "Reciprocal",
            MathOp::Sin => "Sin",
            MathOp::Cos => "Cos",
            MathOp::Tan => "Tan",
            MathOp::Asin => "Asin",
            MathOp::Acos => "Acos",
            MathOp::Atan => "Atan",
            MathOp::Sinh => "Sinh",
            MathOp::Cosh => "Cosh",
            MathOp::Asinh => "Asinh",
            MathOp::Acosh => "Acosh",
            MathOp::Atanh => "Atanh",
            MathOp::Softplus => "Softplus",
            MathOp::Softsign => "Softsign",
            MathOp::Mish => "Mish",
            MathOp::HardSigmoid { .. } => "HardSigmoid",
            MathOp::HardSwish => "HardSwish",
            MathOp::Selu { .. } => "Selu",
            MathOp::Elu { .. } => "Elu",
            MathOp::Celu { .. } => "Celu",
            MathOp::ThresholdedRelu { .. } => "ThresholdedRelu",
            MathOp::Shrink { .. } => "Shrink",
            MathOp::IsNaN => "IsNaN",
            MathOp::IsInf { .. } => "IsInf",
            MathOp::Not => "Not",
            MathOp::BitwiseNot => "BitwiseNot",
        }
    }

    /// The input types the op is defined for.
    pub fn input_types(&self) -> &'static [DataType] {
        const FLOATS: &[DataType] = &[DataType::F32, DataType::F16, DataType::F64];
        const SIGNED: &[DataType] = &DataType::SIGNED;
        const NUMERIC: &[DataType] = &DataType::NUMERIC;
        const INTS: &[DataType] = &DataType::INTEGERS;
        match self {
            MathOp::Sign => NUMERIC,
            MathOp::Shrink { .. } => SIGNED,
            MathOp::Not => &[DataType::Bool],
            MathOp::BitwiseNot => INTS,
            _ => FLOATS,
        }
    }

    /// The output type for an input of type `x`.
    pub fn output_type(&self, x: DataType) -> DataType {
        match self {
            MathOp::IsNaN | MathOp::IsInf { .. } => DataType::Bool,
            _ => x,
        }
    }
}

/// A two-input elementwise operator with numpy broadcasting, beyond [`super::BinaryOp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryExtOp {
    /// a == b (bool output).
    Equal,
    /// a < b (bool output).
    Less,
    /// a <= b (bool output).
    LessOrEqual,
    /// a > b (bool output).
    Greater,
    /// a >= b (bool output).
    GreaterOrEqual,
    /// Logical and (bool).
    And,
    /// Logical or (bool).
    Or,
    /// Logical xor (bool).
    Xor,
    /// Bitwise and (integers).
    BitwiseAnd,
    /// Bitwise or (integers).
    BitwiseOr,
    /// Bitwise xor (integers).
    BitwiseXor,
    /// a << b (unsigned integers).
    BitShiftLeft,
    /// a >> b (unsigned integers).
    BitShiftRight,
    /// Remainder with the sign of the divisor (integers; Python's `%`).
    Mod,
    /// Remainder with the sign of the dividend (C's `fmod`).
    Fmod,
    /// x if x >= 0 else slope * x (slope broadcasts to x).
    PRelu,
}

impl BinaryExtOp {
    /// The ONNX operator name.
    pub fn name(&self) -> &'static str {
        match self {
            BinaryExtOp::Equal => "Equal",
            BinaryExtOp::Less => "Less",
            BinaryExtOp::LessOrEqual => "LessOrEqual",
            BinaryExtOp::Greater => "Greater",
            BinaryExtOp::GreaterOrEqual => "GreaterOrEqual",
            BinaryExtOp::And => "And",
            BinaryExtOp::Or => "Or",
            BinaryExtOp::Xor => "Xor",
            BinaryExtOp::BitwiseAnd => "BitwiseAnd",
            BinaryExtOp::BitwiseOr => "BitwiseOr",
            BinaryExtOp::BitwiseXor => "BitwiseXor",
            BinaryExtOp::BitShiftLeft | BinaryExtOp::BitShiftRight => "BitShift",
            BinaryExtOp::Mod | BinaryExtOp::Fmod => "Mod",
            BinaryExtOp::PRelu => "PRelu",
        }
    }

    /// The input types the op is defined for.
    pub fn input_types(&self) -> &'static [DataType] {
        const NUMERIC: &[DataType] = &DataType::NUMERIC;
        const INTS: &[DataType] = &DataType::INTEGERS;
        match self {
            BinaryExtOp::Equal => &DataType::ORDINARY,
            BinaryExtOp::And | BinaryExtOp::Or | BinaryExtOp::Xor => &[DataType::Bool],
            BinaryExtOp::BitwiseAnd | BinaryExtOp::BitwiseOr | BinaryExtOp::BitwiseXor => INTS,
            BinaryExtOp::BitShiftLeft | BinaryExtOp::BitShiftRight => {
                &[DataType::U8, DataType::U16, DataType::U32, DataType::U64]
            }
            BinaryExtOp::Mod => INTS,
            BinaryExtOp::PRelu => &[
                DataType::F32,
                DataType::F16,
                DataType::F64,
                DataType::I8,
                DataType::I32,
                DataType::I64,
            ],
            _ => NUMERIC,
        }
    }

    /// Whether the result is bool (comparisons and logical operators).
    pub fn is_predicate(&self) -> bool {
        matches!(
            self,
            BinaryExtOp::Equal
                | BinaryExtOp::Less
                | BinaryExtOp::LessOrEqual
                | BinaryExtOp::Greater
                | BinaryExtOp::GreaterOrEqual
                | BinaryExtOp::And
                | BinaryExtOp::Or
                | BinaryExtOp::Xor
        )
    }
}

pub(crate) fn infer_math(op: MathOp, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    if !op.input_types().contains(&x.dtype) {
        return Err(CoreError::op(
            op.name(),
            format!("is not defined for {} inputs", x.dtype),
        ));
    }
    Ok(vec![TensorInfo::new(
        op.output_type(x.dtype),
        x.shape.clone(),
    )])
}

pub(crate) fn infer_binary_ext(op: BinaryExtOp, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let (a, b) = (inputs[0], inputs[1]);
    if a.dtype != b.dtype {
        return Err(CoreError::op(
            op.name(),
            format!("input types differ: {} and {}", a.dtype, b.dtype),
        ));
    }
    if !op.input_types().contains(&a.dtype) {
        return Err(CoreError::op(
            op.name(),
            format!("is not defined for {} inputs", a.dtype),
        ));
    }
    let shape = if op == BinaryExtOp::PRelu {
        // The slope broadcasts to X; the output has X's shape.
        let s = broadcast_shapes(a.shape.dims(), b.shape.dims())
            .map_err(|e| CoreError::op(op.name(), e.to_string()))?;
        if s != a.shape.dims() {
            return Err(CoreError::op(
                op.name(),
                format!("slope {} does not broadcast to X {}", b.shape, a.shape),
            ));
        }
        s
    } else {
        broadcast_shapes(a.shape.dims(), b.shape.dims())
            .map_err(|e| CoreError::op(op.name(), e.to_string()))?
    };
    let dtype = if op.is_predicate() {
        DataType::Bool
    } else {
        a.dtype
    };
    Ok(vec![TensorInfo::new(dtype, shape)])
}

pub(crate) fn infer_where(inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let (c, x, y) = (inputs[0], inputs[1], inputs[2]);
    if c.dtype != DataType::Bool {
        return Err(CoreError::op("Where", "the condition must be bool"));
    }
    if x.dtype != y.dtype {
        return Err(CoreError::op(
            "Where",
            format!("X and Y types differ: {} and {}", x.dtype, y.dtype),
        ));
    }
    let s = broadcast_shapes(c.shape.dims(), x.shape.dims())
        .and_then(|s| broadcast_shapes(&s, y.shape.dims()))
        .map_err(|e| CoreError::op("Where", e.to_string()))?;
    Ok(vec![TensorInfo::new(x.dtype, s)])
}

/// Check a quantization scale (or zero point) against X: a scalar (per tensor), a 1-D
/// tensor with one value per slice along `axis`, or with `block_size` > 0 a tensor of X's
/// shape except `ceil(d_axis / block_size)` along `axis` (blocked).
fn check_quant_param(
    op: &'static str,
    axis: i64,
    block_size: usize,
    x: &TensorInfo,
    p: &TensorInfo,
) -> Result<()> {
    if block_size > 0 {
        let a = crate::shape::normalize_axis(axis, x.shape.rank())?;
        let mut want = x.shape.dims().to_vec();
        want[a] = want[a].div_ceil(block_size);
        if p.shape.dims() != want.as_slice() {
            return Err(CoreError::op(
                op,
                format!(
                    "blocked scale/zero point {} must be {:?} (block size {block_size} along \
                     axis {a} of {})",
                    p.shape, want, x.shape
                ),
            ));
        }
        return Ok(());
    }
    if p.shape.elements() == 1 && p.shape.rank() <= 1 {
        return Ok(());
    }
    let a = crate::shape::normalize_axis(axis, x.shape.rank())?;
    if p.shape.rank() == 1 && p.shape.dims()[0] == x.shape.dims()[a] {
        Ok(())
    } else {
        Err(CoreError::op(
            op,
            format!(
                "scale/zero point {} must be a scalar or [{}] (axis {a} of {})",
                p.shape,
                x.shape.dims()[a],
                x.shape
            ),
        ))
    }
}

pub(crate) fn infer_quantize(
    op: &'static str,
    axis: i64,
    to: DataType,
    block_size: usize,
    inputs: &[&TensorInfo],
) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    for p in &inputs[1..] {
        check_quant_param(op, axis, block_size, x, p)?;
    }
    if let Some(zp) = inputs.get(2) {
        let want = if op == "QuantizeLinear" { to } else { x.dtype };
        if zp.dtype != want {
            return Err(CoreError::op(
                op,
                format!("the zero point is {}, expected {want}", zp.dtype),
            ));
        }
    }
    if !inputs[1].dtype.is_float() {
        return Err(CoreError::op(op, "the scale must be a float"));
    }
    Ok(vec![TensorInfo::new(to, x.shape.clone())])
}

pub(crate) fn infer_dynamic_quantize(inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    if x.dtype != DataType::F32 {
        return Err(CoreError::op(
            "DynamicQuantizeLinear",
            "the input must be f32",
        ));
    }
    Ok(vec![
        TensorInfo::new(DataType::U8, x.shape.clone()),
        TensorInfo::new(DataType::F32, Vec::<usize>::new()),
        TensorInfo::new(DataType::U8, Vec::<usize>::new()),
    ])
}
