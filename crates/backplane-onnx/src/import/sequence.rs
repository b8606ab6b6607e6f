//! Sequences and optionals as import-time structure.
//!
//! backplane networks carry tensors only. The importer keeps an ONNX sequence as the list of
//! its elements' values and an optional as its value or nothing ([`Structured`]), which works
//! whenever the structure is known at import: sequences built by SequenceConstruct,
//! SequenceInsert or SplitToSequence, sequence inputs whose structure the caller gives
//! ([`crate::ImportOptions::input_structures`]), positions that are constants. The sequence
//! ops then become list edits, SequenceLength a constant, ConcatFromSequence a Concat, and
//! SequenceMap and Loops that carry sequences are unrolled (If with sequence branches needs its
//! condition at import). A sequence whose length is computed at run time is not supported.

use super::control::{bad, defined_names, rename, Operand, MAX_UNROLLED_NODES};
use super::{Importer, Structured, Value};
use crate::ops::{Dst, Src, Step, TxError};
use crate::proto::{type_proto, GraphProto, NodeProto, TypeProto, ValueInfoProto};
use crate::structured::element_name;
use crate::tensor::{check_size, dtype_name, map_dtype};
use crate::{InputStructure, OnnxError};
use backplane_core::{Op, Tensor, TensorInfo};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The node types handled here (Identity too, when its input is a sequence or an optional).
const STRUCTURE_OPS: &[&str] = &[
    "SequenceEmpty",
    "SequenceConstruct",
    "SequenceInsert",
    "SequenceAt",
    "SequenceErase",
    "SequenceLength",
    "ConcatFromSequence",
    "SplitToSequence",
    "SequenceMap",
    "Optional",
    "OptionalHasElement",
    "OptionalGetElement",
];

/// The deepest nesting of sequence and optional types followed.
const MAX_DEPTH: usize = 16;

/// Whether a graph input or output is declared as a sequence or an optional.
pub(super) fn declared_structured(vi: &ValueInfoProto) -> bool {
    matches!(
        vi.r#type.as_ref().and_then(|t| t.value.as_ref()),
        Some(type_proto::Value::SequenceType(_) | type_proto::Value::OptionalType(_))
    )
}

/// The error that turns an importer error into a model error at the graph's edges.
fn into_onnx(e: TxError) -> OnnxError {
    match e {
        TxError::Fatal(e) => e,
        TxError::Unsupported(r) | TxError::NeedsValues { reason: r, .. } => OnnxError::invalid(r),
        TxError::Skip => OnnxError::invalid("a value comes from a node that was not imported"),
    }
}

impl Importer<'_> {
    /// Import `node` if it works on sequences or optionals; `None` for any other node.
    pub(super) fn structure_node(
        &mut self,
        node: &mut std::borrow::Cow<'_, NodeProto>,
        name: &str,
        opsets: &HashMap<String, i64>,
    ) -> Option<Result<(), TxError>> {
        let op = node.op_type.clone().unwrap_or_default();
        let identity_of_structure = op == "Identity"
            && node
                .input
                .first()
                .is_some_and(|i| matches!(self.values.get(i), Some(Value::Structured(_))));
        if !STRUCTURE_OPS.contains(&op.as_str()) && !identity_of_structure {
            return None;
        }
        // Structure ops may take their node's subgraphs (a borrowed node is copied).
        Some(self.structure_op(&op, node.to_mut(), name, opsets))
    }

    fn structure_op(
        &mut self,
        op: &str,
        node: &mut NodeProto,
        name: &str,
        opsets: &HashMap<String, i64>,
    ) -> Result<(), TxError> {
        let result = match op {
            "SequenceEmpty" => Value::Structured(Structured::Sequence(Vec::new())),
            "SequenceConstruct" => {
                let mut items = Vec::with_capacity(node.input.len());
                for i in 0..node.input.len() {
                    items.push(self.tensor_operand(node, name, i)?);
                }
                Value::Structured(Structured::Sequence(items))
            }
            "SequenceInsert" => {
                let mut items = self.sequence_operand(node, name, 0)?;
                let item = self.tensor_operand(node, name, 1)?;
                let at = self
                    .position(node, name, 2, items.len(), true)?
                    .unwrap_or(items.len());
                items.insert(at, item);
                Value::Structured(Structured::Sequence(items))
            }
            "SequenceAt" => {
                let items = self.sequence_operand(node, name, 0)?;
                let at = self
                    .position(node, name, 1, items.len(), false)?
                    .ok_or_else(|| bad(name, "SequenceAt needs a position"))?;
                items[at].clone()
            }
            "SequenceErase" => {
                let mut items = self.sequence_operand(node, name, 0)?;
                if items.is_empty() {
                    return Err(bad(name, "SequenceErase of an empty sequence"));
                }
                let at = self
                    .position(node, name, 1, items.len(), false)?
                    .unwrap_or(items.len() - 1);
                items.remove(at);
                Value::Structured(Structured::Sequence(items))
            }
            "SequenceLength" => {
                let items = self.sequence_operand(node, name, 0)?;
                let len = i64::try_from(items.len()).map_err(|_| bad(name, "too long"))?;
                Value::Known(Arc::new(Tensor::scalar(len)))
            }
            "ConcatFromSequence" => return self.concat_from_sequence(node, name),
            "SplitToSequence" => return self.split_to_sequence(node, name),
            "SequenceMap" => return self.sequence_map(node, name, opsets),
            "Optional" => match self.operand_value(node, name, 0)? {
                Some(v) => Value::Structured(Structured::Optional(Some(Box::new(v)))),
                None => Value::Structured(Structured::Optional(None)),
            },
            "OptionalHasElement" => {
                let has = match self.operand_value(node, name, 0)? {
                    None | Some(Value::Structured(Structured::Optional(None))) => false,
                    Some(_) => true,
                };
                let t = Tensor::from_bools(Vec::<usize>::new(), &[has])
                    .map_err(|e| TxError::Fatal(OnnxError::core(name, e)))?;
                Value::Known(Arc::new(t))
            }
            "OptionalGetElement" => match self.operand_value(node, name, 0)? {
                Some(Value::Structured(Structured::Optional(Some(v)))) => *v,
                Some(Value::Structured(Structured::Optional(None))) => {
                    return Err(bad(name, "OptionalGetElement of an empty optional"))
                }
                Some(v) => v,
                None => return Err(bad(name, "OptionalGetElement needs an input")),
            },
            // Identity of a sequence or an optional.
            _ => self
                .operand_value(node, name, 0)?
                .ok_or_else(|| bad(name, "Identity needs an input"))?,
        };
        match node.output.first().filter(|o| !o.is_empty()) {
            Some(out) => {
                self.values.insert(out.clone(), result);
                Ok(())
            }
            None => Err(bad(name, "the node has no output")),
        }
    }

    /// Input `i`'s value (`None` when absent).
    fn operand_value(
        &self,
        node: &NodeProto,
        name: &str,
        i: usize,
    ) -> Result<Option<Value>, TxError> {
        let Some(n) = node.input.get(i).filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        match self.values.get(n) {
            None => Err(bad(
                name,
                format!("input '{n}' is not defined before the node"),
            )),
            Some(Value::Poisoned) => Err(TxError::Skip),
            Some(Value::Unsupported { reason, .. }) => Err(TxError::Unsupported(format!(
                "{reason}, which backplane does not support"
            ))),
            Some(v) => Ok(Some(v.clone())),
        }
    }

    /// Input `i`, which must be a tensor.
    fn tensor_operand(&self, node: &NodeProto, name: &str, i: usize) -> Result<Value, TxError> {
        match self.operand_value(node, name, i)? {
            Some(Value::Structured(s)) => Err(bad(
                name,
                format!("input #{i} is {}, where a tensor is expected", s.kind()),
            )),
            Some(v) => Ok(v),
            None => Err(bad(name, format!("input #{i} is missing"))),
        }
    }

    /// Input `i`, which must be a sequence: its elements.
    fn sequence_operand(
        &self,
        node: &NodeProto,
        name: &str,
        i: usize,
    ) -> Result<Vec<Value>, TxError> {
        match self.operand_value(node, name, i)? {
            Some(Value::Structured(Structured::Sequence(items))) => Ok(items),
            Some(_) => Err(bad(name, format!("input #{i} is not a sequence"))),
            None => Err(bad(name, format!("input #{i} (a sequence) is missing"))),
        }
    }

    /// A position input into a sequence of `len` elements, made non-negative; `end_ok` allows
    /// `len` itself (an insertion at the end). `None` when the input is absent.
    fn position(
        &self,
        node: &NodeProto,
        name: &str,
        i: usize,
        len: usize,
        end_ok: bool,
    ) -> Result<Option<usize>, TxError> {
        let t = match self.operand_value(node, name, i)? {
            None => return Ok(None),
            Some(Value::Known(t)) => t,
            Some(Value::Runtime(id)) => {
                let inputs = self.inputs_behind(id);
                let reason = "a sequence position computed at run time";
                return Err(if inputs.is_empty() {
                    TxError::Unsupported(format!("{reason} is not supported"))
                } else {
                    TxError::NeedsValues {
                        reason: reason.into(),
                        inputs,
                    }
                });
            }
            Some(_) => return Err(bad(name, "the position is not a tensor")),
        };
        let values = t.to_f64_vec();
        let [p] = values.as_slice() else {
            return Err(bad(name, "the position must hold one integer"));
        };
        let n = len as f64;
        let top = if end_ok { n } else { n - 1.0 };
        if !(-n..=top).contains(p) || p.fract() != 0.0 {
            return Err(bad(
                name,
                format!("position {p} is out of range for a sequence of {len}"),
            ));
        }
        let p = if *p < 0.0 { p + n } else { *p };
        Ok(Some(p as usize))
    }

    /// Name `v` with a fresh value name (so that steps can read it).
    fn bind_fresh(&mut self, base: &str, v: Value) -> String {
        let n = self.fresh_tensor_name(base);
        self.values.insert(n.clone(), v);
        n
    }

    fn concat_from_sequence(&mut self, node: &NodeProto, name: &str) -> Result<(), TxError> {
        let items = self.sequence_operand(node, name, 0)?;
        let attrs = crate::attrs::Attrs::new(node);
        let axis = attrs
            .int("axis")
            .map_err(|e| bad(name, e))?
            .ok_or_else(|| bad(name, "ConcatFromSequence needs the axis attribute"))?;
        let new_axis = attrs.flag("new_axis", false).map_err(|e| bad(name, e))?;
        if items.is_empty() {
            return Err(TxError::Unsupported(
                "ConcatFromSequence of an empty sequence (its output shape is undefined)".into(),
            ));
        }
        let mut inputs = Vec::with_capacity(items.len());
        for (k, v) in items.into_iter().enumerate() {
            inputs.push(self.bind_fresh(&format!("{name}/element{k}"), v));
        }
        let n = inputs.len();
        let mut steps = Vec::new();
        let joined: Vec<Src> = if new_axis {
            for k in 0..n {
                steps.push(Step {
                    op: Op::Unsqueeze { axes: vec![axis] },
                    inputs: vec![Src::Input(k)],
                    outputs: vec![Dst::Temp(k)],
                    suffix: Some(format!("unsqueeze{k}")),
                });
            }
            (0..n).map(Src::Temp).collect()
        } else {
            (0..n).map(Src::Input).collect()
        };
        steps.push(Step {
            op: Op::Concat { axis },
            inputs: joined,
            outputs: vec![Dst::Output(0)],
            suffix: None,
        });
        let synthetic = NodeProto {
            input: inputs,
            output: node.output.clone(),
            ..Default::default()
        };
        self.run_steps(&synthetic, name, steps)
    }

    fn split_to_sequence(&mut self, node: &NodeProto, name: &str) -> Result<(), TxError> {
        let input = self.tensor_operand(node, name, 0)?;
        let info = match &input {
            Value::Known(t) => t.info().clone(),
            Value::Runtime(id) => self.network().tensor(*id).info.clone(),
            _ => return Err(bad(name, "the input is not a tensor")),
        };
        let attrs = crate::attrs::Attrs::new(node);
        let rank = info.shape.rank() as i64;
        let axis = attrs.int_or("axis", 0).map_err(|e| bad(name, e))?;
        let keepdims = attrs.flag("keepdims", true).map_err(|e| bad(name, e))?;
        let a = if axis < 0 { axis + rank } else { axis };
        if !(0..rank).contains(&a) {
            return Err(bad(
                name,
                format!("axis {axis} is out of range for rank {rank}"),
            ));
        }
        let dim = info.shape.dims()[a as usize];
        let split = match self.operand_value(node, name, 1)? {
            None => None,
            Some(Value::Known(t)) => Some((t.shape().rank(), t.to_f64_vec())),
            Some(Value::Runtime(id)) => {
                let inputs = self.inputs_behind(id);
                return Err(if inputs.is_empty() {
                    TxError::Unsupported("a split computed at run time".into())
                } else {
                    TxError::NeedsValues {
                        reason: "SplitToSequence's split (computed at run time)".into(),
                        inputs,
                    }
                });
            }
            Some(_) => return Err(bad(name, "split is not a tensor")),
        };
        let as_size = |v: f64| -> Result<usize, TxError> {
            if v < 0.0 || v.fract() != 0.0 || v > dim as f64 {
                Err(bad(
                    name,
                    format!("split size {v} is invalid for a dimension of {dim}"),
                ))
            } else {
                Ok(v as usize)
            }
        };
        let (sizes, squeeze) = match split {
            None => (vec![1; dim], !keepdims),
            Some((0, v)) => {
                let s = as_size(v.first().copied().unwrap_or(0.0))?;
                if s == 0 {
                    return Err(bad(name, "split must be positive"));
                }
                let mut sizes = vec![s; dim / s];
                if dim % s != 0 {
                    sizes.push(dim % s);
                }
                (sizes, false)
            }
            Some((_, v)) => {
                let sizes = v.into_iter().map(as_size).collect::<Result<Vec<_>, _>>()?;
                if sizes.iter().sum::<usize>() != dim {
                    return Err(bad(
                        name,
                        format!("split sizes {sizes:?} do not add up to {dim}"),
                    ));
                }
                (sizes, false)
            }
        };
        let out = node.output.first().filter(|o| !o.is_empty()).cloned();
        let Some(out) = out else {
            return Err(bad(name, "the node has no output"));
        };
        if sizes.is_empty() {
            self.values
                .insert(out, Value::Structured(Structured::Sequence(Vec::new())));
            return Ok(());
        }
        let n = sizes.len();
        let piece_names: Vec<String> = (0..n)
            .map(|k| self.fresh_tensor_name(&format!("{out}/{k}")))
            .collect();
        let from = self.bind_fresh(&format!("{name}/input"), input);
        let mut steps = vec![Step {
            op: Op::Split {
                axis,
                splits: sizes,
            },
            inputs: vec![Src::Input(0)],
            outputs: (0..n)
                .map(|k| {
                    if squeeze {
                        Dst::Temp(k)
                    } else {
                        Dst::Output(k)
                    }
                })
                .collect(),
            suffix: None,
        }];
        if squeeze {
            for k in 0..n {
                steps.push(Step {
                    op: Op::Squeeze { axes: vec![axis] },
                    inputs: vec![Src::Temp(k)],
                    outputs: vec![Dst::Output(k)],
                    suffix: Some(format!("squeeze{k}")),
                });
            }
        }
        let synthetic = NodeProto {
            input: vec![from],
            output: piece_names.clone(),
            ..Default::default()
        };
        self.run_steps(&synthetic, name, steps)?;
        let mut items = Vec::with_capacity(n);
        for p in &piece_names {
            match self.values.get(p) {
                Some(v) => items.push(v.clone()),
                None => return Err(bad(name, format!("piece '{p}' was not produced"))),
            }
        }
        self.values
            .insert(out, Value::Structured(Structured::Sequence(items)));
        Ok(())
    }

    /// SequenceMap: the body imported once per element, inlined (names prefixed per element).
    fn sequence_map(
        &mut self,
        node: &mut NodeProto,
        name: &str,
        opsets: &HashMap<String, i64>,
    ) -> Result<(), TxError> {
        let body = super::control::take_graph(node, "body", name)?;
        let first = self.sequence_operand(node, name, 0)?;
        let n = first.len();
        let mut operands = Vec::with_capacity(node.input.len());
        for i in 0..node.input.len() {
            match self.operand_value(node, name, i)? {
                Some(Value::Structured(Structured::Sequence(items))) => {
                    if items.len() != n {
                        return Err(bad(
                            name,
                            format!(
                                "input #{i} has {} elements, the first sequence {n}",
                                items.len()
                            ),
                        ));
                    }
                    operands.push(Ok(items));
                }
                Some(v) => operands.push(Err(v)),
                None => return Err(bad(name, format!("input #{i} is missing"))),
            }
        }
        if body.input.len() != operands.len() || body.output.len() != node.output.len() {
            return Err(bad(
                name,
                "the body's inputs and outputs do not match the node's",
            ));
        }
        if n.saturating_mul(body.node.len().max(1)) > MAX_UNROLLED_NODES {
            return Err(TxError::Unsupported(format!(
                "a SequenceMap over {n} elements of a {}-node body (backplane unrolls at most \
                 {MAX_UNROLLED_NODES} nodes)",
                body.node.len()
            )));
        }
        let mut defined = HashSet::new();
        defined_names(&body, &mut defined);
        let mut results: Vec<Vec<Value>> = vec![Vec::with_capacity(n); node.output.len()];
        let base = self.layer_names.len();
        for k in 0..n {
            let prefix = format!("{name}/element{k}");
            let map: HashMap<String, String> = defined
                .iter()
                .map(|d| (d.clone(), format!("{prefix}/{d}")))
                .collect();
            let mut g: GraphProto = body.clone();
            rename(&mut g, &map, &prefix);
            for (formal, operand) in g.input.iter().zip(&operands) {
                let v = match operand {
                    Ok(items) => items[k].clone(),
                    Err(v) => v.clone(),
                };
                self.values
                    .insert(formal.name.clone().unwrap_or_default(), v);
            }
            self.inline_nodes(&mut g, base + k * 1000, opsets)?;
            for (j, o) in g.output.iter().enumerate() {
                let o = o.name.clone().unwrap_or_default();
                match self.values.get(&o) {
                    Some(Value::Poisoned) => return Err(TxError::Skip),
                    Some(v) => results[j].push(v.clone()),
                    None => return Err(bad(name, format!("body output '{o}' is not produced"))),
                }
            }
        }
        for (out, items) in node.output.iter().zip(results) {
            if !out.is_empty() {
                self.values
                    .insert(out.clone(), Value::Structured(Structured::Sequence(items)));
            }
        }
        Ok(())
    }

    /// A Loop that carries sequences or optionals: unrolled, which needs its trip count.
    pub(super) fn unroll_structured_loop(
        &mut self,
        node: &NodeProto,
        name: &str,
        body: GraphProto,
        trip: &Operand,
        cond: &Operand,
        opsets: &HashMap<String, i64>,
    ) -> Result<(), TxError> {
        let mut needs = Vec::new();
        let trips = match trip {
            Operand::Absent => None,
            Operand::Known(t) => Some(t.to_f64_vec().first().copied().unwrap_or(0.0)),
            Operand::Runtime(id) => {
                needs.extend(self.inputs_behind(*id));
                Some(0.0)
            }
        };
        let runs = match cond {
            Operand::Absent => true,
            Operand::Known(c) => c.to_f64_vec().first().is_some_and(|v| *v != 0.0),
            Operand::Runtime(id) => {
                needs.extend(self.inputs_behind(*id));
                true
            }
        };
        let reason = "a Loop that carries sequences or optionals";
        if !needs.is_empty() {
            needs.sort();
            needs.dedup();
            return Err(TxError::NeedsValues {
                reason: format!("{reason} (its trip count and condition)"),
                inputs: needs,
            });
        }
        let Some(trips) = trips else {
            return Err(TxError::Unsupported(format!(
                "{reason} and has no trip count"
            )));
        };
        let trips = if runs { trips.max(0.0) } else { 0.0 };
        let nodes = body.node.len().max(1) as f64;
        if trips * nodes > MAX_UNROLLED_NODES as f64 {
            return Err(TxError::Unsupported(format!(
                "{reason} for {trips} iterations of a {}-node body (backplane unrolls at most \
                 {MAX_UNROLLED_NODES} nodes)",
                body.node.len()
            )));
        }
        let num_carried = node.input.len().saturating_sub(2);
        if trips == 0.0 && node.output.len() > num_carried {
            return Err(TxError::Unsupported(format!(
                "{reason} with scan outputs and no iterations"
            )));
        }
        self.unroll_loop(node, name, body, trips as usize, None, opsets)
    }

    /// Bind a graph input declared as a sequence or an optional, with the structure the
    /// caller gave: each tensor in it becomes a network input (or a constant, when its value
    /// is fixed through `input_values`).
    pub(super) fn bind_structured_input(&mut self, vi: &ValueInfoProto) -> Result<(), OnnxError> {
        let name = vi.name.clone().unwrap_or_default();
        let Some(structure) = self.options.input_structures.get(&name) else {
            return Err(OnnxError::invalid(format!(
                "input '{name}' is a sequence or an optional: its structure (length and element \
                 shapes) must be given for the import (ImportOptions::input_structures)"
            )));
        };
        let structure = structure.clone();
        let v = self.structured_value(&name, vi.r#type.as_ref(), &structure, 0)?;
        self.values.insert(name, v);
        Ok(())
    }

    fn structured_value(
        &mut self,
        path: &str,
        ty: Option<&TypeProto>,
        structure: &InputStructure,
        depth: usize,
    ) -> Result<Value, OnnxError> {
        use type_proto::Value as T;
        if depth > MAX_DEPTH {
            return Err(OnnxError::invalid(format!(
                "input '{path}' nests sequences and optionals too deeply"
            )));
        }
        let mismatch = || {
            OnnxError::invalid(format!(
                "the structure given for input '{path}' does not match its declared type"
            ))
        };
        match (ty.and_then(|t| t.value.as_ref()), structure) {
            (Some(T::SequenceType(s)), InputStructure::Sequence(items)) => {
                let mut values = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    values.push(self.structured_value(
                        &element_name(path, i),
                        s.elem_type.as_deref(),
                        item,
                        depth + 1,
                    )?);
                }
                Ok(Value::Structured(Structured::Sequence(values)))
            }
            (Some(T::OptionalType(o)), InputStructure::Optional(inner)) => {
                let inner = match inner {
                    Some(i) => Some(Box::new(self.structured_value(
                        path,
                        o.elem_type.as_deref(),
                        i,
                        depth + 1,
                    )?)),
                    None => None,
                };
                Ok(Value::Structured(Structured::Optional(inner)))
            }
            (Some(T::TensorType(t)), InputStructure::Tensor(dims)) => {
                let code = t.elem_type.unwrap_or(0);
                let Some(dtype) = map_dtype(code) else {
                    return Err(OnnxError::UnsupportedDataType {
                        what: format!("input '{path}'"),
                        dtype: dtype_name(code),
                    });
                };
                if let Some(value) = self.options.input_values.get(path) {
                    if value.dtype() != dtype || value.shape().dims() != dims.as_slice() {
                        return Err(OnnxError::invalid(format!(
                            "the value given for input '{path}' is {}, but its structure says \
                             {dtype} {dims:?}",
                            value.info()
                        )));
                    }
                    return Ok(Value::Known(value.clone()));
                }
                check_size(path, dims, dtype.size(), self.options.max_tensor_bytes)?;
                // (An optional input holding a tensor keeps the input's own name.)
                if path.contains('[') && self.name_taken(path) {
                    return Err(OnnxError::invalid(format!(
                        "the element name '{path}' is already a value of the model"
                    )));
                }
                self.tensor_names.insert(path.to_string());
                let id = self
                    .net
                    .add_input(path, TensorInfo::new(dtype, dims.clone()))
                    .map_err(|e| OnnxError::core(format!("input {path}"), e))?;
                Ok(Value::Runtime(id))
            }
            _ => Err(mismatch()),
        }
    }

    /// The network outputs that carry graph output `name`, a sequence or an optional: one
    /// value per tensor in it, named by [`element_name`]; an empty optional has none.
    pub(super) fn flatten_output(&mut self, name: &str) -> Result<Vec<String>, OnnxError> {
        let Some(v) = self.values.get(name).cloned() else {
            return Err(OnnxError::invalid(format!(
                "graph output '{name}' is not produced by any node"
            )));
        };
        let mut leaves = Vec::new();
        collect_leaves(name, v, &mut leaves);
        let mut names = Vec::with_capacity(leaves.len());
        for (path, v) in leaves {
            if path != name && self.name_taken(&path) {
                return Err(OnnxError::invalid(format!(
                    "the element name '{path}' is already a value of the model"
                )));
            }
            match v {
                Value::Known(_) => {
                    self.values.insert(path.clone(), v);
                }
                Value::Runtime(_) => {
                    let from = self.bind_fresh(&format!("{path}/element"), v);
                    self.alias(&from, &path, name).map_err(into_onnx)?;
                }
                Value::Poisoned => {
                    return Err(OnnxError::invalid(format!(
                        "graph output '{name}' is not produced by any node"
                    )))
                }
                Value::Unsupported { dtype, .. } => {
                    return Err(OnnxError::UnsupportedDataType {
                        what: format!("output '{path}'"),
                        dtype,
                    })
                }
                Value::Structured(_) => {
                    return Err(OnnxError::invalid(format!(
                        "output '{path}' was not flattened"
                    )))
                }
            }
            self.tensor_names.insert(path.clone());
            names.push(path);
        }
        Ok(names)
    }
}

/// The tensor values inside `v`, with their network names.
fn collect_leaves(path: &str, v: Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Structured(Structured::Sequence(items)) => {
            for (i, item) in items.into_iter().enumerate() {
                collect_leaves(&element_name(path, i), item, out);
            }
        }
        Value::Structured(Structured::Optional(Some(inner))) => collect_leaves(path, *inner, out),
        Value::Structured(Structured::Optional(None)) => {}
        other => out.push((path.to_string(), other)),
    }
}
