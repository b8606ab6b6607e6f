//! The attribute form of the ops added for ONNX conformance (math, comparison, indexing,
//! recurrent).

use super::codec::{Attrs, Reader};
use super::{dtype_from_onnx_code, onnx_dtype_code};
use crate::ops::{ArgReduceDesc, AttrValue, BinaryExtOp, MathOp, Op, ScatterReduction, TopKDesc};
use crate::quant::Requantization;
use crate::Result;

pub(super) const MATH: [MathOp; 30] = [
    MathOp::Floor,
    MathOp::Ceil,
    MathOp::Round,
    MathOp::Sign,
    MathOp::Reciprocal,
    MathOp::Sin,
    MathOp::Cos,
    MathOp::Tan,
    MathOp::Asin,
    MathOp::Acos,
    MathOp::Atan,
    MathOp::Sinh,
    MathOp::Cosh,
    MathOp::Asinh,
    MathOp::Acosh,
    MathOp::Atanh,
    MathOp::Softplus,
    MathOp::Softsign,
    MathOp::Mish,
    MathOp::HardSigmoid {
        alpha: 0.0,
        beta: 0.0,
    },
    MathOp::HardSwish,
    MathOp::Selu {
        alpha: 0.0,
        gamma: 0.0,
    },
    MathOp::Elu { alpha: 0.0 },
    MathOp::Celu { alpha: 0.0 },
    MathOp::ThresholdedRelu { alpha: 0.0 },
    MathOp::Shrink {
        bias: 0.0,
        lambd: 0.0,
    },
    MathOp::IsNaN,
    MathOp::IsInf {
        detect_negative: true,
        detect_positive: true,
    },
    MathOp::Not,
    MathOp::BitwiseNot,
];

pub(super) const BINARY_EXT: [BinaryExtOp; 16] = [
    BinaryExtOp::Equal,
    BinaryExtOp::Less,
    BinaryExtOp::LessOrEqual,
    BinaryExtOp::Greater,
    BinaryExtOp::GreaterOrEqual,
    BinaryExtOp::And,
    BinaryExtOp::Or,
    BinaryExtOp::Xor,
    BinaryExtOp::BitwiseAnd,
    BinaryExtOp::BitwiseOr,
    BinaryExtOp::BitwiseXor,
    BinaryExtOp::BitShiftLeft,
    BinaryExtOp::BitShiftRight,
    BinaryExtOp::Mod,
    BinaryExtOp::Fmod,
    BinaryExtOp::PRelu,
];

/// The attribute form of the ops added for ONNX conformance (math, comparison, indexing).
pub(super) fn ext_to_attributes(op: &Op) -> Option<(String, Vec<(String, AttrValue)>)> {
    let a = Attrs::default();
    let attrs = match op {
        Op::Math(m) => match *m {
            MathOp::HardSigmoid { alpha, beta } => a.float("alpha", alpha).float("beta", beta),
            MathOp::Selu { alpha, gamma } => a.float("alpha", alpha).float("gamma", gamma),
            MathOp::Elu { alpha } | MathOp::Celu { alpha } | MathOp::ThresholdedRelu { alpha } => {
                a.float("alpha", alpha)
            }
            MathOp::Shrink { bias, lambd } => a.float("bias", bias).float("lambd", lambd),
            MathOp::IsInf {
                detect_negative,
                detect_positive,
            } => a
                .flag("detect_negative", detect_negative)
                .flag("detect_positive", detect_positive),
            _ => a,
        },
        Op::BinaryExt(b) => match b {
            BinaryExtOp::BitShiftLeft => a.string("direction", "LEFT"),
            BinaryExtOp::BitShiftRight => a.string("direction", "RIGHT"),
            BinaryExtOp::Mod => a.flag("fmod", false),
            BinaryExtOp::Fmod => a.flag("fmod", true),
            _ => a,
        },
        Op::Where => a,
        Op::ArgReduce(d) => a
            .int("axis", d.axis)
            .flag("keepdims", d.keepdims)
            .flag("select_last_index", d.select_last_index),
        Op::Expand { shape } => a.usizes("shape", shape),
        Op::Tile { repeats } => a.usizes("repeats", repeats),
        Op::Trilu { upper, k } => a.flag("upper", *upper).int("k", *k),
        Op::GatherElements { axis } | Op::LogSoftmax { axis } | Op::Hardmax { axis } => {
            a.int("axis", *axis)
        }
        Op::GatherND { batch_dims } => a.usize("batch_dims", *batch_dims),
        Op::ScatterND { reduction } => a.string("reduction", reduction.name()),
        Op::ScatterElements { axis, reduction } => {
            a.int("axis", *axis).string("reduction", reduction.name())
        }
        Op::OneHot { axis, depth } => a.int("axis", *axis).usize("depth", *depth),
        Op::TopK(t) => a
            .int("axis", t.axis)
            .usize("k", t.k)
            .flag("largest", t.largest)
            .flag("sorted", t.sorted),
        Op::CumSum {
            axis,
            exclusive,
            reverse,
        } => a
            .int("axis", *axis)
            .flag("exclusive", *exclusive)
            .flag("reverse", *reverse),
        Op::InstanceNormalization { epsilon } => a.float("epsilon", *epsilon),
        Op::QuantizeLinear {
            axis,
            to,
            block_size,
            saturate,
            requant,
        } => {
            let a = a
                .int("axis", *axis)
                .int("to", onnx_dtype_code(*to))
                .usize("block_size", *block_size)
                .flag("saturate", *saturate);
            // Written only when not the default, so earlier attribute lists stay as they were.
            match requant {
                Requantization::F32 => a,
                Requantization::FixedPoint => a.string("requant", requant.name()),
            }
        }
        Op::DequantizeLinear {
            axis,
            to,
            block_size,
        } => a
            .int("axis", *axis)
            .int("to", onnx_dtype_code(*to))
            .usize("block_size", *block_size),
        Op::DynamicQuantizeLinear => a,
        Op::Lrn {
            alpha,
            beta,
            bias,
            size,
        } => a
            .float("alpha", *alpha)
            .float("beta", *beta)
            .float("bias", *bias)
            .usize("size", *size),
        Op::Permute { from, to } => a.usizes("from", from).usizes("to", to),
        // Nested networks have no attribute form: only the counts are described, and
        // `from_attributes` refuses these ops.
        Op::If(_) => a,
        Op::Loop(d) => a
            .usize("num_carried", d.num_carried)
            .usize("scan_length", d.scan_length),
        Op::Scan(d) => a
            .usize("num_state", d.num_state)
            .usize("num_scan_inputs", d.num_scan_inputs),
        Op::NegativeLogLikelihoodLoss(d) => {
            let a = a.string("reduction", d.reduction.name());
            match d.ignore_index {
                Some(i) => a.int("ignore_index", i),
                None => a,
            }
        }
        Op::GridSample(d) => a
            .string("mode", d.mode.name())
            .string("padding_mode", d.padding.name())
            .flag("align_corners", d.align_corners),
        Op::Einsum(d) => a.string("equation", &d.equation),
        Op::Det => a,
        Op::Rnn(d) => {
            let names: Vec<&str> = d.activations.iter().map(|f| f.kind.name()).collect();
            let alphas: Vec<f32> = d.activations.iter().map(|f| f.alpha).collect();
            let betas: Vec<f32> = d.activations.iter().map(|f| f.beta).collect();
            let a = a
                .string("direction", d.direction.name())
                .usize("hidden_size", d.hidden_size)
                .string("activations", &names.join(","))
                .floats("activation_alpha", &alphas)
                .floats("activation_beta", &betas)
                .flag("linear_before_reset", d.linear_before_reset)
                .flag("input_forget", d.input_forget)
                .int("layout", i64::from(d.batch_first))
                .ints("outputs", &d.outputs.map(i64::from));
            match d.clip {
                Some(c) => a.float("clip", c),
                None => a,
            }
        }
        _ => return None,
    };
    Some((op.name().to_string(), attrs.0))
}

fn reduction(r: &Reader<'_>) -> Result<ScatterReduction> {
    Ok(match r.string("reduction")? {
        "none" => ScatterReduction::None,
        "add" => ScatterReduction::Add,
        "mul" => ScatterReduction::Mul,
        "max" => ScatterReduction::Max,
        "min" => ScatterReduction::Min,
        other => return Err(r.bad("reduction", other)),
    })
}

/// The inverse of [`ext_to_attributes`]; `None` for op types it does not know.
pub(super) fn ext_from_attributes(op_type: &str, r: &Reader<'_>) -> Result<Option<Op>> {
    if let Some(m) = MATH.iter().find(|m| m.name() == op_type) {
        return Ok(Some(Op::Math(match m {
            MathOp::HardSigmoid { .. } => MathOp::HardSigmoid {
                alpha: r.float("alpha")?,
                beta: r.float("beta")?,
            },
            MathOp::Selu { .. } => MathOp::Selu {
                alpha: r.float("alpha")?,
                gamma: r.float("gamma")?,
            },
            MathOp::Elu { .. } => MathOp::Elu {
                alpha: r.float("alpha")?,
            },
            MathOp::Celu { .. } => MathOp::Celu {
                alpha: r.float("alpha")?,
            },
            MathOp::ThresholdedRelu { .. } => MathOp::ThresholdedRelu {
                alpha: r.float("alpha")?,
            },
            MathOp::Shrink { .. } => MathOp::Shrink {
                bias: r.float("bias")?,
                lambd: r.float("lambd")?,
            },
            MathOp::IsInf { .. } => MathOp::IsInf {
                detect_negative: r.flag("detect_negative")?,
                detect_positive: r.flag("detect_positive")?,
            },
            other => *other,
        })));
    }
    if let Some(b) = BINARY_EXT.iter().find(|b| b.name() == op_type) {
        return Ok(Some(Op::BinaryExt(match b {
            BinaryExtOp::BitShiftLeft | BinaryExtOp::BitShiftRight => {
                match r.string("direction")? {
                    "LEFT" => BinaryExtOp::BitShiftLeft,
                    "RIGHT" => BinaryExtOp::BitShiftRight,
                    other => return Err(r.bad("direction", other)),
                }
            }
            BinaryExtOp::Mod | BinaryExtOp::Fmod => {
                if r.flag("fmod")? {
                    BinaryExtOp::Fmod
                } else {
                    BinaryExtOp::Mod
                }
            }
            other => *other,
        })));
    }
    Ok(Some(match op_type {
        "Where" => Op::Where,
        "ArgMax" | "ArgMin" => Op::ArgReduce(ArgReduceDesc {
            max: op_type == "ArgMax",
            axis: r.int("axis")?,
            keepdims: r.flag("keepdims")?,
            select_last_index: r.flag("select_last_index")?,
        }),
        "Expand" => Op::Expand {
            shape: r.usizes("shape")?,
        },
        "Tile" => Op::Tile {
            repeats: r.usizes("repeats")?,
        },
        "Trilu" => Op::Trilu {
            upper: r.flag("upper")?,
            k: r.int("k")?,
        },
        "GatherElements" => Op::GatherElements {
            axis: r.int("axis")?,
        },
        "LogSoftmax" => Op::LogSoftmax {
            axis: r.int("axis")?,
        },
        "Hardmax" => Op::Hardmax {
            axis: r.int("axis")?,
        },
        "GatherND" => Op::GatherND {
            batch_dims: r.usize("batch_dims")?,
        },
        "ScatterND" => Op::ScatterND {
            reduction: reduction(r)?,
        },
        "ScatterElements" => Op::ScatterElements {
            axis: r.int("axis")?,
            reduction: reduction(r)?,
        },
        "OneHot" => Op::OneHot {
            axis: r.int("axis")?,
            depth: r.usize("depth")?,
        },
        "TopK" => Op::TopK(TopKDesc {
            axis: r.int("axis")?,
            k: r.usize("k")?,
            largest: r.flag("largest")?,
            sorted: r.flag("sorted")?,
        }),
        "CumSum" => Op::CumSum {
            axis: r.int("axis")?,
            exclusive: r.flag("exclusive")?,
            reverse: r.flag("reverse")?,
        },
        "QuantizeLinear" | "DequantizeLinear" => {
            let code = r.int("to")?;
            let to = dtype_from_onnx_code(code).ok_or_else(|| r.bad("to", code))?;
            let axis = r.int("axis")?;
            // Absent in attributes written before they existed: per-axis, saturating.
            let block_size = match r.get("block_size") {
                Some(_) => r.usize("block_size")?,
                None => 0,
            };
            if op_type == "QuantizeLinear" {
                let saturate = r.get("saturate").is_none() || r.flag("saturate")?;
                // Absent in attributes written before it existed: the f32 rule.
                let requant = match r.get("requant") {
                    Some(_) => {
                        let name = r.string("requant")?;
                        Requantization::from_name(name).ok_or_else(|| r.bad("requant", name))?
                    }
                    None => Requantization::F32,
                };
                Op::QuantizeLinear {
                    axis,
                    to,
                    block_size,
                    saturate,
                    requant,
                }
            } else {
                Op::DequantizeLinear {
                    axis,
                    to,
                    block_size,
                }
            }
        }
        "DynamicQuantizeLinear" => Op::DynamicQuantizeLinear,
        "Permute" => Op::Permute {
            from: r.usizes("from")?,
            to: r.usizes("to")?,
        },
        "If" | "Loop" | "Scan" => {
            return Err(
                r.err("it runs nested networks, which cannot be described by attributes".into())
            )
        }
        "InstanceNormalization" => Op::InstanceNormalization {
            epsilon: r.float("epsilon")?,
        },
        "LRN" => Op::Lrn {
            alpha: r.float("alpha")?,
            beta: r.float("beta")?,
            bias: r.float("bias")?,
            size: r.usize("size")?,
        },
        "NegativeLogLikelihoodLoss" => {
            let name = r.string("reduction")?;
            Op::NegativeLogLikelihoodLoss(crate::ops::NllLossDesc {
                reduction: crate::ops::LossReduction::from_name(name)
                    .ok_or_else(|| r.bad("reduction", name))?,
                ignore_index: match r.get("ignore_index") {
                    Some(_) => Some(r.int("ignore_index")?),
                    None => None,
                },
            })
        }
        "GridSample" => {
            let mode = r.string("mode")?;
            let padding = r.string("padding_mode")?;
            Op::GridSample(crate::ops::GridSampleDesc {
                mode: crate::ops::GridSampleMode::from_name(mode)
                    .ok_or_else(|| r.bad("mode", mode))?,
                padding: crate::ops::GridSamplePadding::from_name(padding)
                    .ok_or_else(|| r.bad("padding_mode", padding))?,
                align_corners: r.flag("align_corners")?,
            })
        }
        "Det" => Op::Det,
        "RNN" | "GRU" | "LSTM" => Op::Rnn(rnn_from_attributes(op_type, r)?),
        "Einsum" => Op::Einsum(crate::ops::EinsumDesc {
            equation: r.string("equation")?.to_string(),
        }),
        _ => return Ok(None),
    }))
}

/// The inverse of the RNN/GRU/LSTM arm of [`ext_to_attributes`].
fn rnn_from_attributes(op_type: &str, r: &Reader<'_>) -> Result<crate::ops::RnnDesc> {
    use crate::ops::{RnnActivation, RnnActivationKind, RnnDirection, RnnKind};
    let kind = RnnKind::from_name(op_type).ok_or_else(|| r.err("not a recurrent op".into()))?;
    let direction = r.string("direction")?;
    let names = r.string("activations")?;
    let alphas = r.floats("activation_alpha")?;
    let betas = r.floats("activation_beta")?;
    let mut activations = Vec::new();
    if !names.is_empty() {
        for (i, name) in names.split(',').enumerate() {
            let kind =
                RnnActivationKind::from_name(name).ok_or_else(|| r.bad("activations", name))?;
            let (Some(&alpha), Some(&beta)) = (alphas.get(i), betas.get(i)) else {
                return Err(r.bad("activation_alpha", alphas.len()));
            };
            activations.push(RnnActivation { kind, alpha, beta });
        }
    }
    let outputs = r.ints("outputs")?;
    let outputs = match outputs.as_slice() {
        &[y, y_h, y_c] => [y != 0, y_h != 0, y_c != 0],
        _ => return Err(r.bad("outputs", format!("{outputs:?}"))),
    };
    Ok(crate::ops::RnnDesc {
        kind,
        direction: RnnDirection::from_name(direction)
            .ok_or_else(|| r.bad("direction", direction))?,
        hidden_size: r.usize("hidden_size")?,
        activations,
        clip: match r.get("clip") {
            Some(_) => Some(r.float("clip")?),
            None => None,
        },
        linear_before_reset: r.flag("linear_before_reset")?,
        input_forget: r.flag("input_forget")?,
        batch_first: r.flag("layout")?,
        outputs,
    })
}
