//! The symbolic signature of a model: its inputs with their declared (possibly symbolic)
//! dimensions and its outputs with the shapes symbolic shape inference finds for them.
//!
//! The pass walks the graph once with [`backplane_core::symbolic`]'s rules, without
//! importing anything: every value gets a symbolic shape when its op is one of the common
//! ones (elementwise and broadcasting, MatMul/Gemm, Conv and pooling, Reshape, Concat, Slice,
//! Gather, Transpose, Unsqueeze/Squeeze, Flatten, Expand, reductions, normalizations) and its
//! inputs' shapes are known; small integer tensors also carry their *values* as expressions,
//! so that `Shape → Gather → Concat → Reshape` chains keep their symbols. Anything else
//! (control flow, data-dependent shapes, an op not listed) leaves its outputs unknown, and so
//! everything computed from them. Concrete networks are still imported per shape: this is a
//! description for checking inputs, keying plans and showing users, not a plan.

use crate::proto::{
    tensor_proto::DataType as Dt, AttributeProto, ModelProto, NodeProto, TensorProto,
};
use crate::Dim;
use backplane_core::symbolic::{self as sym, DimExpr, SymShape, SymbolicSignature};
use std::collections::HashMap;

/// The most elements of an integer tensor whose values the pass follows.
const MAX_VALUE_ELEMENTS: usize = 64;

/// What the pass knows about one value.
#[derive(Debug, Clone, Default)]
struct Info {
    shape: Option<SymShape>,
    /// The elements of a small integer tensor, flattened.
    value: Option<Vec<DimExpr>>,
}

impl Info {
    fn shaped(shape: SymShape) -> Info {
        Info {
            shape: Some(shape),
            value: None,
        }
    }
}

/// The symbolic signature of `model` (see the [module documentation](self)). Inputs the
/// model declares no shape for, and outputs the pass cannot follow, are `None`.
pub fn symbolic_signature(model: &ModelProto) -> SymbolicSignature {
    let Some(graph) = model.graph.as_ref() else {
        return SymbolicSignature::default();
    };
    symbolic_signature_with_nodes(model, &graph.node)
}

/// [`symbolic_signature`] with the graph's nodes given apart (the graph's own are ignored).
pub fn symbolic_signature_with_nodes(model: &ModelProto, nodes: &[NodeProto]) -> SymbolicSignature {
    let Some(graph) = model.graph.as_ref() else {
        return SymbolicSignature::default();
    };
    let mut env: HashMap<String, Info> = HashMap::new();
    for t in &graph.initializer {
        if let Some(name) = &t.name {
            env.insert(name.clone(), tensor_info(t));
        }
    }
    let mut inputs = Vec::new();
    if let Ok(declared) = crate::inspect_model(model) {
        for input in declared {
            let shape = input.shape_known.then(|| {
                input
                    .dims
                    .iter()
                    .map(|d| match d {
                        Dim::Fixed(v) => DimExpr::Const(i64::try_from(*v).unwrap_or(i64::MAX)),
                        Dim::Symbolic(s) => DimExpr::sym(s),
                    })
                    .collect::<SymShape>()
            });
            if let Some(shape) = &shape {
                env.insert(input.name.clone(), Info::shaped(shape.clone()));
            }
            inputs.push((input.name, shape));
        }
    }
    for node in nodes {
        let ins: Vec<Option<&Info>> = node
            .input
            .iter()
            .map(|n| if n.is_empty() { None } else { env.get(n) })
            .collect();
        let outs = infer(node, &ins).unwrap_or_default();
        for (k, name) in node.output.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            match outs.get(k) {
                Some(info) if info.shape.is_some() => {
                    env.insert(name.clone(), info.clone());
                }
                _ => {
                    env.remove(name);
                }
            }
        }
    }
    let outputs = graph
        .output
        .iter()
        .filter_map(|o| o.name.clone())
        .map(|n| {
            let shape = env.get(&n).and_then(|i| i.shape.clone());
            (n, shape)
        })
        .collect();
    SymbolicSignature { inputs, outputs }
}

/// The shape (and small integer value) of an initializer or a Constant's tensor.
fn tensor_info(t: &TensorProto) -> Info {
    let shape: SymShape = t.dims.iter().map(|&d| DimExpr::Const(d)).collect();
    let count: i64 = t.dims.iter().product();
    let value = (usize::try_from(count).is_ok_and(|c| c <= MAX_VALUE_ELEMENTS))
        .then(|| int_values(t))
        .flatten()
        .filter(|v| i64::try_from(v.len()).ok() == Some(count));
    Info {
        shape: Some(shape),
        value: value.map(|v| v.into_iter().map(DimExpr::Const).collect()),
    }
}

/// The elements of an INT64 or INT32 tensor, from its typed or raw data.
fn int_values(t: &TensorProto) -> Option<Vec<i64>> {
    let dt = t.data_type?;
    let raw = t.raw_data.as_deref().unwrap_or_default();
    if dt == Dt::Int64 as i32 {
        if !t.int64_data.is_empty() {
            return Some(t.int64_data.clone());
        }
        return Some(
            raw.chunks_exact(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        );
    }
    if dt == Dt::Int32 as i32 {
        if !t.int32_data.is_empty() {
            return Some(t.int32_data.iter().map(|&v| i64::from(v)).collect());
        }
        return Some(
            raw.chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        );
    }
    None
}

fn attr<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute
        .iter()
        .find(|a| a.name.as_deref() == Some(name))
}

fn int_attr(node: &NodeProto, name: &str, default: i64) -> i64 {
    attr(node, name).and_then(|a| a.i).unwrap_or(default)
}

fn ints_attr(node: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(node, name).map(|a| a.ints.clone())
}

/// Constant integers: an input's value when every element is a number.
fn consts(info: Option<&Info>) -> Option<Vec<i64>> {
    info?
        .value
        .as_ref()?
        .iter()
        .map(DimExpr::as_const)
        .collect()
}

/// An integer list given as an input (newer opsets) or an attribute (older ones).
fn list(node: &NodeProto, ins: &[Option<&Info>], at: usize, name: &str) -> Option<Vec<i64>> {
    if node.input.get(at).is_some_and(|n| !n.is_empty()) {
        consts(ins.get(at).copied().flatten())
    } else {
        ints_attr(node, name)
    }
}

/// The rule of one node: its outputs' infos, or `None` when it cannot tell.
fn infer(node: &NodeProto, ins: &[Option<&Info>]) -> Option<Vec<Info>> {
    let op = node.op_type.as_deref()?;
    let shape = |k: usize| ins.get(k).copied().flatten().and_then(|i| i.shape.clone());
    let value = |k: usize| ins.get(k).copied().flatten().and_then(|i| i.value.clone());
    let one = |shape: SymShape| Some(vec![Info::shaped(shape)]);
    match op {
        "Identity" | "Cast" | "CastLike" | "Neg" | "Abs" | "Floor" | "Ceil" => {
            let mut out = Info::shaped(shape(0)?);
            out.value = match op {
                "Neg" => value(0).map(|v| v.iter().map(|e| DimExpr::Const(0).minus(e)).collect()),
                "Identity" | "Cast" | "CastLike" => value(0),
                _ => None,
            };
            Some(vec![out])
        }
        "Relu"
        | "Sigmoid"
        | "Tanh"
        | "Erf"
        | "Sqrt"
        | "Exp"
        | "Log"
        | "Softmax"
        | "LogSoftmax"
        | "Gelu"
        | "LeakyRelu"
        | "Clip"
        | "Dropout"
        | "LayerNormalization"
        | "BatchNormalization"
        | "InstanceNormalization"
        | "Not"
        | "Round"
        | "Sign"
        | "Reciprocal"
        | "HardSigmoid"
        | "HardSwish"
        | "Elu"
        | "Selu"
        | "Softplus"
        | "Mish"
        | "Sin"
        | "Cos"
        | "IsNaN"
        | "IsInf"
        | "LpNormalization"
        | "Hardmax"
        | "Celu"
        | "Softsign"
        | "ThresholdedRelu"
        | "Shrink"
        | "QuantizeLinear"
        | "DequantizeLinear" => one(shape(0)?),
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Equal" | "Less" | "Greater" | "LessOrEqual"
        | "GreaterOrEqual" | "And" | "Or" | "Xor" | "Max" | "Min" | "Mod" | "PRelu"
        | "BitShift" | "Sum" | "Mean" | "Where" => {
            let mut out = shape(0)?;
            for k in 1..ins.len() {
                out = sym::broadcast(&out, &shape(k)?).ok()?;
            }
            let mut info = Info::shaped(out);
            info.value = arithmetic(op, value(0), value(1));
            Some(vec![info])
        }
        "MatMul" => one(sym::matmul(&shape(0)?, &shape(1)?).ok()?),
        "Gemm" => one(sym::gemm(
            &shape(0)?,
            &shape(1)?,
            int_attr(node, "transA", 0) != 0,
            int_attr(node, "transB", 0) != 0,
        )
        .ok()?),
        "Conv" | "MaxPool" | "AveragePool" | "LpPool" => {
            let x = shape(0)?;
            let spatial = x.len().checked_sub(2)?;
            let kernel = match op {
                "Conv" => match ints_attr(node, "kernel_shape") {
                    Some(k) => k,
                    None => shape(1)?[2..]
                        .iter()
                        .map(DimExpr::as_const)
                        .collect::<Option<_>>()?,
                },
                _ => ints_attr(node, "kernel_shape")?,
            };
            let strides = ints_attr(node, "strides").unwrap_or_else(|| vec![1; spatial]);
            let dilations = ints_attr(node, "dilations").unwrap_or_else(|| vec![1; spatial]);
            let pads = ints_attr(node, "pads").unwrap_or_else(|| vec![0; 2 * spatial]);
            let auto_pad = attr(node, "auto_pad")
                .and_then(|a| a.s.as_deref())
                .unwrap_or(b"NOTSET");
            let ceil = int_attr(node, "ceil_mode", 0) != 0;
            if kernel.len() != spatial
                || strides.len() != spatial
                || dilations.len() != spatial
                || pads.len() != 2 * spatial
            {
                return None;
            }
            let channels = if op == "Conv" {
                shape(1)?.first()?.clone()
            } else {
                x[1].clone()
            };
            let mut out = vec![x[0].clone(), channels];
            for i in 0..spatial {
                let size = &x[2 + i];
                out.push(match auto_pad {
                    b"SAME_UPPER" | b"SAME_LOWER" => size
                        .plus(&DimExpr::Const(strides[i] - 1))
                        .div_floor(strides[i])?,
                    b"VALID" => {
                        sym::window_output(size, kernel[i], strides[i], (0, 0), dilations[i], ceil)
                            .ok()?
                    }
                    _ => sym::window_output(
                        size,
                        kernel[i],
                        strides[i],
                        (pads[i], pads[i + spatial]),
                        dilations[i],
                        ceil,
                    )
                    .ok()?,
                });
            }
            one(out)
        }
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let x = shape(0)?;
            let mut out: SymShape = x.iter().take(2).cloned().collect();
            out.extend(std::iter::repeat_n(
                DimExpr::Const(1),
                x.len().saturating_sub(2),
            ));
            one(out)
        }
        "Flatten" => {
            let x = shape(0)?;
            let axis = sym::normalize_axis(int_attr(node, "axis", 1), x.len() + 1).ok()?;
            let product = |d: &[DimExpr]| d.iter().fold(DimExpr::Const(1), |a, b| a.times(b));
            one(vec![product(&x[..axis]), product(&x[axis..])])
        }
        "Reshape" => {
            let target = value(1)?;
            one(sym::reshape(&shape(0)?, &target, int_attr(node, "allowzero", 0) != 0).ok()?)
        }
        "Expand" => one(sym::broadcast(&shape(0)?, &value(1)?).ok()?),
        "ConstantOfShape" => one(value(0)?),
        "Shape" => {
            let x = shape(0)?;
            let rank = i64::try_from(x.len()).ok()?;
            let clamp = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank);
            let start = usize::try_from(clamp(int_attr(node, "start", 0))).ok()?;
            let end = usize::try_from(clamp(int_attr(node, "end", rank))).ok()?;
            let dims = x.get(start..end.max(start))?.to_vec();
            Some(vec![Info {
                shape: Some(vec![DimExpr::Const(i64::try_from(dims.len()).ok()?)]),
                value: Some(dims),
            }])
        }
        "Size" => {
            let x = shape(0)?;
            Some(vec![Info {
                shape: Some(Vec::new()),
                value: Some(vec![x.iter().fold(DimExpr::Const(1), |a, b| a.times(b))]),
            }])
        }
        "Constant" => attr(node, "value")
            .and_then(|a| a.t.as_ref())
            .map(|t| vec![tensor_info(t)]),
        "Concat" => {
            let axis = int_attr(node, "axis", 0);
            let shapes: Vec<SymShape> = (0..ins.len()).map(shape).collect::<Option<_>>()?;
            let refs: Vec<&[DimExpr]> = shapes.iter().map(Vec::as_slice).collect();
            let mut info = Info::shaped(sym::concat(&refs, axis).ok()?);
            if shapes.iter().all(|s| s.len() == 1) {
                info.value = (0..ins.len())
                    .map(value)
                    .collect::<Option<Vec<_>>>()
                    .map(|v| v.concat());
            }
            Some(vec![info])
        }
        "Gather" => {
            let data = shape(0)?;
            let indices = shape(1)?;
            let axis = int_attr(node, "axis", 0);
            let mut info = Info::shaped(sym::gather(&data, &indices, axis).ok()?);
            if data.len() == 1 {
                if let (Some(v), Some(idx)) = (value(0), consts(ins.get(1).copied().flatten())) {
                    let n = i64::try_from(v.len()).ok()?;
                    info.value = idx
                        .iter()
                        .map(|&i| {
                            let i = if i < 0 { i + n } else { i };
                            usize::try_from(i).ok().and_then(|i| v.get(i).cloned())
                        })
                        .collect();
                }
            }
            Some(vec![info])
        }
        "Slice" => {
            let x = shape(0)?;
            let starts = if node.input.len() > 1 {
                value(1)?
            } else {
                consts_attr(node, "starts")?
            };
            let ends = if node.input.len() > 2 {
                value(2)?
            } else {
                consts_attr(node, "ends")?
            };
            let axes = list(node, ins, 3, "axes")
                .unwrap_or_else(|| (0..i64::try_from(starts.len()).unwrap_or(0)).collect());
            let steps = if node.input.get(4).is_some_and(|n| !n.is_empty()) {
                consts(ins.get(4).copied().flatten())?
            } else {
                vec![1; axes.len()]
            };
            if starts.len() != axes.len() || ends.len() != axes.len() || steps.len() != axes.len() {
                return None;
            }
            let mut out = x.clone();
            for (k, &axis) in axes.iter().enumerate() {
                let a = sym::normalize_axis(axis, x.len()).ok()?;
                out[a] = sym::slice_len(&x[a], &starts[k], &ends[k], steps[k]).ok()?;
            }
            let mut info = Info::shaped(out);
            // A slice of a shape value with constant bounds.
            if let (1, Some(v)) = (x.len(), value(0)) {
                if let (Some(s), Some(e), 1) = (starts[0].as_const(), ends[0].as_const(), steps[0])
                {
                    let n = i64::try_from(v.len()).ok()?;
                    let fix = |p: i64| (if p < 0 { p + n } else { p }).clamp(0, n);
                    let (s, e) = (usize::try_from(fix(s)).ok()?, usize::try_from(fix(e)).ok()?);
                    info.value = Some(v.get(s..e.max(s))?.to_vec());
                }
            }
            Some(vec![info])
        }
        "Transpose" => {
            one(sym::transpose(&shape(0)?, &ints_attr(node, "perm").unwrap_or_default()).ok()?)
        }
        "Unsqueeze" => {
            let axes = list(node, ins, 1, "axes")?;
            let mut info = Info::shaped(sym::unsqueeze(&shape(0)?, &axes).ok()?);
            info.value = value(0);
            Some(vec![info])
        }
        "Squeeze" => {
            let axes = list(node, ins, 1, "axes").unwrap_or_default();
            let mut info = Info::shaped(sym::squeeze(&shape(0)?, &axes).ok()?);
            info.value = value(0);
            Some(vec![info])
        }
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL2"
        | "ReduceL1" | "ReduceSumSquare" | "ReduceLogSumExp" | "ReduceLogSum" | "ArgMax"
        | "ArgMin" => {
            let x = shape(0)?;
            let keep = int_attr(node, "keepdims", 1) != 0;
            let axes: Vec<i64> = if op.starts_with("Arg") {
                vec![int_attr(node, "axis", 0)]
            } else {
                list(node, ins, 1, "axes").unwrap_or_default()
            };
            let axes: Vec<usize> = if axes.is_empty() {
                if int_attr(node, "noop_with_empty_axes", 0) != 0 {
                    return one(x);
                }
                (0..x.len()).collect()
            } else {
                axes.iter()
                    .map(|&a| sym::normalize_axis(a, x.len()).ok())
                    .collect::<Option<_>>()?
            };
            let out = x
                .iter()
                .enumerate()
                .filter_map(|(i, d)| match (axes.contains(&i), keep) {
                    (false, _) => Some(d.clone()),
                    (true, true) => Some(DimExpr::Const(1)),
                    (true, false) => None,
                })
                .collect();
            one(out)
        }
        _ => None,
    }
}

/// An attribute's integers as constant expressions.
fn consts_attr(node: &NodeProto, name: &str) -> Option<Vec<DimExpr>> {
    ints_attr(node, name).map(|v| v.into_iter().map(DimExpr::Const).collect())
}

/// Integer arithmetic on shape values (one side may be a single element, broadcast).
fn arithmetic(op: &str, a: Option<Vec<DimExpr>>, b: Option<Vec<DimExpr>>) -> Option<Vec<DimExpr>> {
    let (a, b) = (a?, b?);
    let n = a.len().max(b.len());
    if (a.len() != n && a.len() != 1) || (b.len() != n && b.len() != 1) {
        return None;
    }
    (0..n)
        .map(|i| {
            let x = &a[if a.len() == 1 { 0 } else { i }];
            let y = &b[if b.len() == 1 { 0 } else { i }];
            match op {
                "Add" => Some(x.plus(y)),
                "Sub" => Some(x.minus(y)),
                "Mul" => Some(x.times(y)),
                "Div" => x.div_floor(y.as_const()?),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
