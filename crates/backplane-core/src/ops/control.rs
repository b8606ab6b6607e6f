//! Control flow: If, Loop and Scan, whose bodies are nested [`Network`]s.
//!
//! A body is a self-contained network: every value it reads from the enclosing scope (ONNX's
//! outer-scope names) is passed explicitly, as an extra input of the control-flow layer after
//! its own inputs (*captured* values), and as the matching extra input of each body. That
//! keeps the graph a plain DAG that the optimizer can partition, and a body can be optimized
//! and loaded once like any network.
//!
//! Shapes are static, as everywhere in a validated network: loop-carried values keep their
//! shape, both branches of an If produce the same descriptions, and a Loop's scan outputs are
//! planned for [`LoopDesc::scan_length`] iterations (resolved at import; see ARCHITECTURE.md).

use crate::{CoreError, DataType, Network, Result, TensorInfo};
use std::sync::Arc;

/// If: inputs `[cond (bool, one element), captured...]`; each branch takes the captured
/// values, in the same order, as its inputs, and both produce the layer's outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct IfDesc {
    /// Run when the condition is true.
    pub then_branch: Arc<Network>,
    /// Run when the condition is false.
    pub else_branch: Arc<Network>,
}

/// Loop: inputs `[max trip count (i64, one element), condition (bool, one element),
/// carried..., captured...]`. The body takes `[iteration (i64 scalar), condition (bool
/// scalar), carried..., captured...]` and gives `[condition, carried..., scan slices...]`.
/// Outputs: the final carried values, then each scan output: its per-iteration slices stacked
/// along a new first axis of length [`LoopDesc::scan_length`].
#[derive(Debug, Clone, PartialEq)]
pub struct LoopDesc {
    /// The body.
    pub body: Arc<Network>,
    /// How many loop-carried values there are.
    pub num_carried: usize,
    /// The number of iterations the scan outputs hold. A loop with scan outputs that runs a
    /// different number of times fails at execution (its output shape cannot change).
    pub scan_length: usize,
}

/// Scan: inputs `[state..., scan inputs..., captured...]`. The body takes `[state..., one slice
/// of each scan input..., captured...]` and gives `[state..., one slice of each scan
/// output...]`. Outputs: the final states, then the scan outputs (slices stacked along their
/// axis).
#[derive(Debug, Clone, PartialEq)]
pub struct ScanDesc {
    /// The body.
    pub body: Arc<Network>,
    /// How many state values there are.
    pub num_state: usize,
    /// How many inputs are scanned.
    pub num_scan_inputs: usize,
    /// The axis each scan input is sliced along (already made non-negative).
    pub input_axes: Vec<usize>,
    /// Whether each scan input is read from its end.
    pub input_reverse: Vec<bool>,
    /// The axis each scan output's slices are stacked along.
    pub output_axes: Vec<usize>,
    /// Whether each scan output is written from its end.
    pub output_reverse: Vec<bool>,
    /// ONNX opset 8's form: states and scan inputs carry a leading batch axis, and the scan
    /// runs once per batch entry (scan axes then count from the axis after it).
    pub batched: bool,
}

fn err(op: &'static str, message: String) -> CoreError {
    CoreError::InvalidOp { op, message }
}

fn scalar_of(info: &TensorInfo, dtype: DataType) -> bool {
    info.dtype == dtype && info.shape.dims().iter().product::<usize>() == 1
}

/// Check that `body`'s inputs are exactly `given` (same types and shapes, same count).
fn check_body_inputs(
    op: &'static str,
    what: &str,
    body: &Network,
    given: &[TensorInfo],
) -> Result<()> {
    if body.inputs().len() != given.len() {
        return Err(err(
            op,
            format!(
                "the {what} takes {} inputs but the layer passes {}",
                body.inputs().len(),
                given.len()
            ),
        ));
    }
    for (k, (t, info)) in body.inputs().iter().zip(given).enumerate() {
        let e = body.tensor(*t);
        if !e.info.same_layout(info) {
            return Err(err(
                op,
                format!(
                    "input {k} ('{}') of the {what} is {} but the layer passes {info}",
                    e.name, e.info
                ),
            ));
        }
    }
    Ok(())
}

fn body_outputs(body: &Network) -> Vec<TensorInfo> {
    body.outputs()
        .iter()
        .map(|t| body.tensor(*t).info.clone())
        .collect()
}

impl IfDesc {
    /// Output descriptions: the branches' (which must agree).
    pub fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        if inputs.is_empty() || !scalar_of(inputs[0], DataType::Bool) {
            return Err(err("If", "the condition must be one bool".into()));
        }
        let captured: Vec<TensorInfo> = inputs[1..].iter().map(|i| (*i).clone()).collect();
        check_body_inputs("If", "then branch", &self.then_branch, &captured)?;
        check_body_inputs("If", "else branch", &self.else_branch, &captured)?;
        let then_out = body_outputs(&self.then_branch);
        let else_out = body_outputs(&self.else_branch);
        let agree = then_out.len() == else_out.len()
            && then_out
                .iter()
                .zip(&else_out)
                .all(|(a, b)| a.same_layout(b));
        if !agree {
            let show = |v: &[TensorInfo]| {
                v.iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(err(
                "If",
                format!(
                    "the branches produce different outputs (then: [{}], else: [{}]); \
                     shapes must be static: fix the condition's value at import to pick one",
                    show(&then_out),
                    show(&else_out)
                ),
            ));
        }
        Ok(then_out)
    }
}

impl LoopDesc {
    /// Output descriptions: final carried values, then the stacked scan outputs.
    pub fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        if inputs.len() < 2 + self.num_carried {
            return Err(err(
                "Loop",
                format!(
                    "needs a trip count, a condition and {} carried values, got {} inputs",
                    self.num_carried,
                    inputs.len()
                ),
            ));
        }
        if !scalar_of(inputs[0], DataType::I64) {
            return Err(err("Loop", "the trip count must be one i64".into()));
        }
        if !scalar_of(inputs[1], DataType::Bool) {
            return Err(err("Loop", "the condition must be one bool".into()));
        }
        let mut given = vec![
            TensorInfo::new(DataType::I64, vec![]),
            TensorInfo::new(DataType::Bool, vec![]),
        ];
        given.extend(inputs[2..].iter().map(|i| (*i).clone()));
        check_body_inputs("Loop", "body", &self.body, &given)?;
        let outs = body_outputs(&self.body);
        if outs.len() < 1 + self.num_carried {
            return Err(err(
                "Loop",
                format!(
                    "the body gives {} outputs; it must give a condition and {} carried values",
                    outs.len(),
                    self.num_carried
                ),
            ));
        }
        if !scalar_of(&outs[0], DataType::Bool) {
            return Err(err(
                "Loop",
                "the body's first output (condition) must be one bool".into(),
            ));
        }
        let mut result = Vec::with_capacity(outs.len() - 1);
        for k in 0..self.num_carried {
            let (given, out) = (inputs[2 + k], &outs[1 + k]);
            if !given.same_layout(out) {
                return Err(err(
                    "Loop",
                    format!(
                        "carried value {k} enters as {given} but the body gives {out}; a carried \
                         value must keep its type and shape"
                    ),
                ));
            }
            result.push(out.clone());
        }
        for slice in &outs[1 + self.num_carried..] {
            let mut dims = vec![self.scan_length];
            dims.extend_from_slice(slice.shape.dims());
            result.push(TensorInfo::new(slice.dtype, dims));
        }
        Ok(result)
    }
}

impl ScanDesc {
    /// The number of iterations, from the first scan input (all must agree).
    pub fn sequence_length(&self, inputs: &[&TensorInfo]) -> Result<usize> {
        let lead = usize::from(self.batched);
        let mut len = None;
        for k in 0..self.num_scan_inputs {
            let info = inputs
                .get(self.num_state + k)
                .ok_or_else(|| err("Scan", format!("scan input {k} is missing")))?;
            let axis = *self.input_axes.get(k).unwrap_or(&0) + lead;
            let n = *info.shape.dims().get(axis).ok_or_else(|| {
                err(
                    "Scan",
                    format!("scan input {k} ({info}) has no axis {axis}"),
                )
            })?;
            match len {
                None => len = Some(n),
                Some(l) if l != n => {
                    return Err(err(
                        "Scan",
                        format!("scan inputs have different lengths ({l} and {n})"),
                    ))
                }
                _ => {}
            }
        }
        len.ok_or_else(|| err("Scan", "needs at least one scan input".into()))
    }

    /// Output descriptions: final states, then the stacked scan outputs.
    pub fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let n_in = self.num_state + self.num_scan_inputs;
        if inputs.len() < n_in
            || self.input_axes.len() != self.num_scan_inputs
            || self.input_reverse.len() != self.num_scan_inputs
        {
            return Err(err(
                "Scan",
                format!(
                    "needs {} states and {} scan inputs (with an axis and direction each), got {} inputs",
                    self.num_state,
                    self.num_scan_inputs,
                    inputs.len()
                ),
            ));
        }
        let len = self.sequence_length(inputs)?;
        let batch = if self.batched {
            let b = inputs
                .iter()
                .take(n_in)
                .map(|i| i.shape.dims().first().copied())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| err("Scan", "batched inputs need a batch axis".into()))?;
            if b.windows(2).any(|w| w[0] != w[1]) {
                return Err(err("Scan", "inputs have different batch sizes".into()));
            }
            b.first().copied()
        } else {
            None
        };
        let mut given = Vec::with_capacity(inputs.len());
        for (k, info) in inputs.iter().enumerate() {
            let mut dims = info.shape.dims().to_vec();
            if k < n_in && self.batched {
                dims.remove(0);
            }
            if k >= self.num_state && k < n_in {
                let axis = self.input_axes[k - self.num_state];
                if axis >= dims.len() {
                    return Err(err("Scan", format!("scan input axis {axis} out of range")));
                }
                dims.remove(axis);
            }
            given.push(TensorInfo::new(info.dtype, dims));
        }
        check_body_inputs("Scan", "body", &self.body, &given)?;
        let outs = body_outputs(&self.body);
        if outs.len() < self.num_state {
            return Err(err(
                "Scan",
                format!(
                    "the body gives {} outputs, fewer than the {} states",
                    outs.len(),
                    self.num_state
                ),
            ));
        }
        let num_scan_out = outs.len() - self.num_state;
        if self.output_axes.len() != num_scan_out || self.output_reverse.len() != num_scan_out {
            return Err(err(
                "Scan",
                format!("{num_scan_out} scan outputs need an axis and a direction each"),
            ));
        }
        let mut result = Vec::with_capacity(outs.len());
        for k in 0..self.num_state {
            if !given[k].same_layout(&outs[k]) {
                return Err(err(
                    "Scan",
                    format!(
                        "state {k} enters as {} but the body gives {}; a state must keep its type and shape",
                        given[k], outs[k]
                    ),
                ));
            }
            let mut dims = outs[k].shape.dims().to_vec();
            if let Some(b) = batch {
                dims.insert(0, b);
            }
            result.push(TensorInfo::new(outs[k].dtype, dims));
        }
        for (j, slice) in outs[self.num_state..].iter().enumerate() {
            let mut dims = slice.shape.dims().to_vec();
            let axis = self.output_axes[j];
            if axis > dims.len() {
                return Err(err("Scan", format!("scan output axis {axis} out of range")));
            }
            dims.insert(axis, len);
            if let Some(b) = batch {
                dims.insert(0, b);
            }
            result.push(TensorInfo::new(slice.dtype, dims));
        }
        Ok(result)
    }
}
