//! Elementwise operators: one input (activations, math) or two with numpy broadcasting.

use crate::shape::broadcast_shapes;
use crate::{CoreError, DataType, Result, TensorInfo};

/// A one-input elementwise function. Parameterised functions carry their attributes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnaryOp {
    /// max(x, 0).
    Relu,
    /// x if x >= 0 else alpha * x.
    LeakyRelu {
        /// Slope for negative inputs.
        alpha: f32,
    },
    /// min(max(x, min), max).
    Clip {
        /// Lower bound (`-inf` when absent).
        min: f32,
        /// Upper bound (`+inf` when absent).
        max: f32,
    },
    /// 1 / (1 + exp(-x)).
    Sigmoid,
    /// Hyperbolic tangent.
    Tanh,
    /// The Gauss error function.
    Erf,
    /// Gaussian error linear unit; `tanh_approximation` selects the tanh formula.
    Gelu {
        /// Use 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))) instead of the exact erf form.
        tanh_approximation: bool,
    },
    /// Square root.
    Sqrt,
    /// e^x.
    Exp,
    /// Natural logarithm.
    Log,
    /// -x.
    Neg,
    /// |x|.
    Abs,
}

impl UnaryOp {
    /// The ONNX operator name.
    pub fn name(&self) -> &'static str {
        match self {
            UnaryOp::Relu => "Relu",
            UnaryOp::LeakyRelu { .. } => "LeakyRelu",
            UnaryOp::Clip { .. } => "Clip",
            UnaryOp::Sigmoid => "Sigmoid",
            UnaryOp::Tanh => "Tanh",
            UnaryOp::Erf => "Erf",
            UnaryOp::Gelu { .. } => "Gelu",
            UnaryOp::Sqrt => "Sqrt",
            UnaryOp::Exp => "Exp",
            UnaryOp::Log => "Log",
            UnaryOp::Neg => "Neg",
            UnaryOp::Abs => "Abs",
        }
    }
}

/// A two-input elementwise function with numpy broadcasting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// a + b.
    Add,
    /// a - b.
    Sub,
    /// a * b.
    Mul,
    /// a / b (integer division truncates toward zero).
    Div,
    /// a ^ b.
    Pow,
    /// max(a, b).
    Max,
    /// min(a, b).
    Min,
}

impl BinaryOp {
    /// The ONNX operator name.
    pub fn name(&self) -> &'static str {
        match self {
            BinaryOp::Add => "Add",
            BinaryOp::Sub => "Sub",
            BinaryOp::Mul => "Mul",
            BinaryOp::Div => "Div",
            BinaryOp::Pow => "Pow",
            BinaryOp::Max => "Max",
            BinaryOp::Min => "Min",
        }
    }
}

pub(crate) fn infer_unary(inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    Ok(vec![TensorInfo::new(
        inputs[0].dtype,
        inputs[0].shape.clone(),
    )])
}

pub(crate) fn infer_binary(op: BinaryOp, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let (a, b) = (inputs[0], inputs[1]);
    if a.dtype != b.dtype && op != BinaryOp::Pow {
        return Err(CoreError::op(
            op.name(),
            format!("input types differ: {} and {}", a.dtype, b.dtype),
        ));
    }
    if a.dtype == DataType::Bool {
        return Err(CoreError::op(op.name(), "bool inputs are not arithmetic"));
    }
    let shape = broadcast_shapes(a.shape.dims(), b.shape.dims())
        .map_err(|e| CoreError::op(op.name(), e.to_string()))?;
    Ok(vec![TensorInfo::new(a.dtype, shape)])
}
