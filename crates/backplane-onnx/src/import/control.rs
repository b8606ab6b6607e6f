//! Control-flow nodes (If, Loop, Scan): their graph attributes become nested networks.
//!
//! A body reads outer-scope values by name. Constants among them are copied into the body
//! (shared, not duplicated); values computed at run time are *captured*: passed as extra
//! inputs of the layer and of the body, after the ones ONNX defines. An If whose condition is
//! known at import is replaced by the branch it takes (`branch.rs`).

use super::{not_a_tensor, Importer, Value};
use crate::attrs::Attrs;
use crate::ops::{Dst, Src, Step, TxError};
use crate::proto::{GraphProto, NodeProto};
use crate::tensor::check_size;
use crate::OnnxError;
use backplane_core::ops::{LoopDesc, ScanDesc};
use backplane_core::{DataType, Network, Op, Tensor, TensorInfo, TensorKind};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Names a graph (and the graphs nested in it) reads but does not define, in first-use order.
fn free_names(graph: &GraphProto) -> Vec<String> {
    let mut defined: HashSet<String> = graph.input.iter().filter_map(|v| v.name.clone()).collect();
    defined.extend(graph.initializer.iter().filter_map(|t| t.name.clone()));
    let mut free = Vec::new();
    let mut seen = HashSet::new();
    let mut note = |n: &str, defined: &HashSet<String>, free: &mut Vec<String>| {
        if !n.is_empty() && !defined.contains(n) && seen.insert(n.to_string()) {
            free.push(n.to_string());
        }
    };
    for node in &graph.node {
        for i in &node.input {
            note(i, &defined, &mut free);
        }
        for a in &node.attribute {
            for g in a.g.iter().chain(a.graphs.iter()) {
                for n in free_names(g) {
                    note(&n, &defined, &mut free);
                }
            }
        }
        defined.extend(node.output.iter().filter(|s| !s.is_empty()).cloned());
    }
    for o in &graph.output {
        note(o.name.as_deref().unwrap_or(""), &defined, &mut free);
    }
    free
}

pub(super) fn take_graph(
    node: &mut NodeProto,
    attr: &str,
    name: &str,
) -> Result<GraphProto, TxError> {
    node.attribute
        .iter_mut()
        .find(|a| a.name.as_deref() == Some(attr))
        .and_then(|a| a.g.take())
        .ok_or_else(|| {
            TxError::Fatal(OnnxError::invalid(format!(
                "node '{name}': the graph attribute '{attr}' is missing"
            )))
        })
}

pub(super) fn bad(name: &str, message: impl std::fmt::Display) -> TxError {
    TxError::Fatal(OnnxError::invalid(format!("node '{name}': {message}")))
}

/// The most nodes a Loop may unroll into (iterations times body nodes).
pub(super) const MAX_UNROLLED_NODES: usize = 4096;

/// Whether every output `graph` declares is a tensor (not a sequence or an optional).
pub(super) fn declares_tensors(graph: &GraphProto) -> bool {
    use crate::proto::type_proto::Value as T;
    graph.output.iter().all(|o| {
        matches!(
            o.r#type.as_ref().and_then(|t| t.value.as_ref()),
            None | Some(T::TensorType(_))
        )
    })
}

/// Every name `graph` defines (inputs, initializers, node outputs), at any depth.
pub(super) fn defined_names(graph: &GraphProto, out: &mut HashSet<String>) {
    out.extend(graph.input.iter().filter_map(|v| v.name.clone()));
    out.extend(graph.initializer.iter().filter_map(|t| t.name.clone()));
    for n in &graph.node {
        out.extend(n.output.iter().filter(|s| !s.is_empty()).cloned());
        for a in &n.attribute {
            for g in a.g.iter().chain(a.graphs.iter()) {
                defined_names(g, out);
            }
        }
    }
}

/// Rename every occurrence of the names in `map`, at any depth.
pub(super) fn rename(graph: &mut GraphProto, map: &HashMap<String, String>, prefix: &str) {
    let re = |s: &mut String| {
        if let Some(n) = map.get(s.as_str()) {
            *s = n.clone();
        }
    };
    for v in graph.input.iter_mut().chain(graph.output.iter_mut()) {
        if let Some(n) = v.name.as_mut() {
            re(n);
        }
    }
    for t in &mut graph.initializer {
        if let Some(n) = t.name.as_mut() {
            re(n);
        }
    }
    for node in &mut graph.node {
        node.input.iter_mut().for_each(re);
        node.output.iter_mut().for_each(re);
        if let Some(n) = node.name.as_mut().filter(|n| !n.is_empty()) {
            *n = format!("{prefix}/{n}");
        }
        for a in &mut node.attribute {
            for g in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                rename(g, map, prefix);
            }
        }
    }
}

/// One node input: absent (empty name), or a value.
pub(super) enum Operand {
    Absent,
    Known(Arc<Tensor>),
    Runtime(backplane_core::TensorId),
}

impl Importer<'_> {
    /// The value behind `name`, turned into an error where it cannot be used.
    pub(super) fn operand(&self, node: &str, name: &str) -> Result<Operand, TxError> {
        if name.is_empty() {
            return Ok(Operand::Absent);
        }
        match self.values.get(name) {
            None => Err(bad(
                node,
                format!("input '{name}' is not defined before the node"),
            )),
            Some(Value::Poisoned) => Err(TxError::Skip),
            Some(Value::Unsupported { reason, .. }) => Err(TxError::Unsupported(format!(
                "{reason}, which backplane does not support"
            ))),
            Some(Value::Structured(s)) => Err(not_a_tensor(name, s)),
            Some(Value::Known(t)) => Ok(Operand::Known(t.clone())),
            Some(Value::Runtime(id)) => Ok(Operand::Runtime(*id)),
        }
    }

    fn operand_info(&self, node: &str, name: &str) -> Result<TensorInfo, TxError> {
        match self.operand(node, name)? {
            Operand::Absent => Err(bad(node, "a required input is missing")),
            Operand::Known(t) => Ok(t.info().clone()),
            Operand::Runtime(id) => Ok(self.net.tensor(id).info.clone()),
        }
    }

    /// The outer values `graphs` read, checked; returns those computed at run time (to capture).
    pub(super) fn captures(
        &self,
        node: &str,
        graphs: &[&GraphProto],
    ) -> Result<Vec<String>, TxError> {
        let mut seen = HashSet::new();
        let mut captured = Vec::new();
        for g in graphs {
            for n in free_names(g) {
                if !seen.insert(n.clone()) {
                    continue;
                }
                if let Operand::Runtime(_) = self.operand(node, &n)? {
                    captured.push(n);
                }
            }
        }
        Ok(captured)
    }

    /// Import `graph` as a nested network whose inputs are `formal` (the ONNX-defined body
    /// inputs, in order) followed by `captured` outer values.
    pub(super) fn import_body(
        &mut self,
        node: &str,
        what: &str,
        graph: GraphProto,
        formal: &[TensorInfo],
        captured: &[String],
        opsets: &HashMap<String, i64>,
    ) -> Result<Network, TxError> {
        self.import_body_noting(node, what, graph, formal, captured, opsets, &mut false)
    }

    /// [`Importer::import_body`], setting `per_iteration` when the body cannot be imported
    /// because an operator parameter depends on a value that changes at each iteration.
    #[allow(clippy::too_many_arguments)]
    fn import_body_noting(
        &mut self,
        node: &str,
        what: &str,
        mut graph: GraphProto,
        formal: &[TensorInfo],
        captured: &[String],
        opsets: &HashMap<String, i64>,
        per_iteration: &mut bool,
    ) -> Result<Network, TxError> {
        let mut inner = Importer::new(self.options, self.loader.base_dir);
        inner.prescan(&graph);
        if graph.input.len() != formal.len() {
            return Err(bad(
                node,
                format!(
                    "the {what} declares {} inputs but takes {}",
                    graph.input.len(),
                    formal.len()
                ),
            ));
        }
        for (vi, info) in graph.input.iter().zip(formal) {
            let name = vi.name.clone().unwrap_or_default();
            let id = inner
                .net
                .add_input(&name, info.clone())
                .map_err(|e| TxError::Fatal(OnnxError::core(node, e)))?;
            inner.values.insert(name, Value::Runtime(id));
        }
        for name in captured {
            let info = self.operand_info(node, name)?;
            let id = inner
                .net
                .add_input(name, info)
                .map_err(|e| TxError::Fatal(OnnxError::core(node, e)))?;
            inner.values.insert(name.clone(), Value::Runtime(id));
            inner.tensor_names.insert(name.clone());
        }
        // Outer constants the body reads are shared into it.
        for name in free_names(&graph) {
            if inner.values.contains_key(&name) {
                continue;
            }
            if let Some(Value::Known(t)) = self.values.get(&name) {
                inner.values.insert(name.clone(), Value::Known(t.clone()));
                inner.tensor_names.insert(name);
            }
        }
        for mut tp in std::mem::take(&mut graph.initializer) {
            let name = tp.name.clone().unwrap_or_default();
            inner.decode_into_values(&name, &mut tp)?;
            inner.tensor_names.insert(name);
        }
        for (index, n) in std::mem::take(&mut graph.node).into_iter().enumerate() {
            inner.import_node(std::borrow::Cow::Owned(n), index, opsets)?;
        }
        if !inner.unsupported.is_empty() {
            for mut u in std::mem::take(&mut inner.unsupported) {
                u.node = format!("{node}/{what}/{}", u.node);
                self.unsupported.push(u);
            }
            return Err(TxError::Skip);
        }
        if !inner.needs_values.is_empty() {
            // Values the body needs can be bound only when they come from outside the loop.
            let mut outer = Vec::new();
            let mut reasons = Vec::new();
            for (op, names) in std::mem::take(&mut inner.needs_values) {
                reasons.push(format!("{} ('{}')", op.reason, op.node));
                for n in names {
                    match self.values.get(&n) {
                        Some(Value::Runtime(id)) if captured.contains(&n) => {
                            outer.extend(self.inputs_behind(*id));
                        }
                        _ => {
                            *per_iteration = true;
                            return Err(TxError::Unsupported(format!(
                                "the {what} needs the value of '{n}', which changes while it \
                                 runs: {}",
                                reasons.join("; ")
                            )));
                        }
                    }
                }
            }
            outer.sort();
            outer.dedup();
            return Err(TxError::NeedsValues {
                reason: format!("in the {what}: {}", reasons.join("; ")),
                inputs: outer,
            });
        }
        // Every body output is a tensor of its own, produced by a layer of the body.
        let mut marked = HashSet::new();
        for (k, o) in graph.output.iter().enumerate() {
            let name = o.name.clone().unwrap_or_default();
            let id = match inner.values.get(&name) {
                Some(Value::Runtime(id)) => *id,
                Some(Value::Known(_)) => inner.const_id(&name, node).map_err(TxError::Fatal)?,
                Some(Value::Unsupported { reason, .. }) => {
                    return Err(TxError::Unsupported(reason.clone()))
                }
                Some(Value::Structured(s)) => {
                    return Err(TxError::Unsupported(format!(
                        "output '{name}' of the {what} is {}: such a body is imported only \
                         inlined or unrolled (its condition or trip count known at import)",
                        s.kind()
                    )))
                }
                Some(Value::Poisoned) | None => {
                    return Err(bad(
                        node,
                        format!("output '{name}' of the {what} is not produced"),
                    ))
                }
            };
            let produced = matches!(inner.net.tensor(id).kind, TensorKind::Produced { .. });
            let id = if produced && marked.insert(id) {
                id
            } else {
                let layer = inner.fresh_layer_name(&format!("{what}_output_{k}"));
                let out = inner
                    .net
                    .add_layer(&layer, Op::Identity, &[id])
                    .map_err(|e| TxError::Fatal(OnnxError::core(node, e)))?;
                out[0]
            };
            inner
                .net
                .mark_output(id)
                .map_err(|e| TxError::Fatal(OnnxError::core(node, e)))?;
        }
        inner
            .net
            .validate()
            .map_err(|e| TxError::Fatal(OnnxError::core(format!("{node} ({what})"), e)))?;
        Ok(inner.net)
    }

    /// Import `graph`'s initializers and nodes into this network (its inputs already bound).
    pub(super) fn inline_nodes(
        &mut self,
        graph: &mut GraphProto,
        base: usize,
        opsets: &HashMap<String, i64>,
    ) -> Result<(), TxError> {
        self.prescan(graph);
        for mut tp in std::mem::take(&mut graph.initializer) {
            let n = tp.name.clone().unwrap_or_default();
            self.decode_into_values(&n, &mut tp)?;
        }
        for (index, n) in std::mem::take(&mut graph.node).into_iter().enumerate() {
            self.import_node(std::borrow::Cow::Owned(n), base + index, opsets)?;
        }
        Ok(())
    }

    /// Make value `from` available as `to` (an Identity layer named after the node, folded
    /// when `from` is a constant), so a graph output keeps the node's output name.
    pub(super) fn alias(&mut self, from: &str, to: &str, node: &str) -> Result<(), TxError> {
        if let Some(v @ Value::Structured(_)) = self.values.get(from) {
            // Sequences and optionals are import-time structure: the name is enough.
            let v = v.clone();
            self.values.insert(to.to_string(), v);
            return Ok(());
        }
        let alias = NodeProto {
            input: vec![from.to_string()],
            output: vec![to.to_string()],
            ..Default::default()
        };
        self.run_steps(
            &alias,
            &format!("{node}/{to}"),
            vec![Step {
                op: Op::Identity,
                inputs: vec![Src::Input(0)],
                outputs: vec![Dst::Output(0)],
                suffix: None,
            }],
        )
    }

    /// Add the control-flow layer: `inputs` are the layer's inputs (node inputs, constants
    /// for absent optional ones, captured values), outputs the node's.
    pub(super) fn add_control_layer(
        &mut self,
        node: &NodeProto,
        name: &str,
        op: Op,
        inputs: Vec<Result<String, Arc<Tensor>>>,
    ) -> Result<(), TxError> {
        let mut synthetic = NodeProto {
            output: node.output.clone(),
            ..Default::default()
        };
        let mut srcs = Vec::with_capacity(inputs.len());
        for i in inputs {
            match i {
                Ok(n) => {
                    srcs.push(Src::Input(synthetic.input.len()));
                    synthetic.input.push(n);
                }
                Err(t) => srcs.push(Src::Const(t)),
            }
        }
        let outputs = (0..node.output.len()).map(Dst::Output).collect();
        self.run_steps(
            &synthetic,
            name,
            vec![Step {
                op,
                inputs: srcs,
                outputs,
                suffix: None,
            }],
        )
    }

    /// If, Loop or Scan.
    pub(super) fn control_node(
        &mut self,
        node: &mut NodeProto,
        name: &str,
        opset: i64,
        opsets: &HashMap<String, i64>,
    ) -> Result<(), TxError> {
        match node.op_type.as_deref().unwrap_or("") {
            "If" => self.if_node(node, name, opsets),
            "Loop" => self.loop_node(node, name, opsets),
            _ => self.scan_node(node, name, opset, opsets),
        }
    }

    fn loop_node(
        &mut self,
        node: &mut NodeProto,
        name: &str,
        opsets: &HashMap<String, i64>,
    ) -> Result<(), TxError> {
        let body_g = take_graph(node, "body", name)?;
        if node.input.len() < 2 {
            return Err(bad(
                name,
                "Loop takes a trip count and a condition (either may be empty)",
            ));
        }
        let carried_names: Vec<String> = node.input[2..].to_vec();
        let num_carried = carried_names.len();
        let num_scan = body_g
            .output
            .len()
            .checked_sub(1 + num_carried)
            .ok_or_else(|| {
                bad(
                    name,
                    "the body gives fewer outputs than a condition and the carried values",
                )
            })?;
        if node.output.len() != num_carried + num_scan {
            return Err(bad(
                name,
                format!(
                    "has {} outputs; its body defines {num_carried} carried values and {num_scan} scan outputs",
                    node.output.len()
                ),
            ));
        }
        let trip = self.operand(name, &node.input[0])?;
        let cond = self.operand(name, &node.input[1])?;
        let carries_structure = carried_names
            .iter()
            .any(|c| matches!(self.values.get(c), Some(Value::Structured(_))));
        if carries_structure || !declares_tensors(&body_g) {
            return self.unroll_structured_loop(node, name, body_g, &trip, &cond, opsets);
        }
        let mut formal = vec![
            TensorInfo::new(DataType::I64, vec![]),
            TensorInfo::new(DataType::Bool, vec![]),
        ];
        for c in &carried_names {
            formal.push(self.operand_info(name, c)?);
        }
        // The scan outputs' length: the number of iterations, which must be known at import.
        let scan_length = if num_scan == 0 {
            0
        } else {
            let mut needs = Vec::new();
            let trips =
                match &trip {
                    Operand::Absent => return Err(TxError::Unsupported(
                        "a Loop with scan outputs and no trip count (its output length is known \
                         only at run time)"
                            .into(),
                    )),
                    Operand::Known(t) => t.to_f64_vec().first().copied().unwrap_or(0.0).max(0.0),
                    Operand::Runtime(id) => {
                        needs.extend(self.inputs_behind(*id));
                        0.0
                    }
                };
            let runs = match &cond {
                Operand::Absent => true,
                Operand::Known(t) => t.to_f64_vec().first().is_some_and(|v| *v != 0.0),
                Operand::Runtime(id) => {
                    needs.extend(self.inputs_behind(*id));
                    true
                }
            };
            if !needs.is_empty() {
                needs.sort();
                needs.dedup();
                return Err(TxError::NeedsValues {
                    reason: "the length of a Loop's scan outputs (its trip count and condition)"
                        .into(),
                    inputs: needs,
                });
            }
            if runs {
                trips.min(usize::MAX as f64) as usize
            } else {
                0
            }
        };
        let captured = self.captures(name, &[&body_g])?;
        let mut per_iteration = false;
        let body = match self.import_body_noting(
            name,
            "body",
            body_g.clone(),
            &formal,
            &captured,
            opsets,
            &mut per_iteration,
        ) {
            Ok(body) => body,
            Err(e) if per_iteration => {
                // A parameter changes with each iteration (e.g. a Slice start computed from
                // the iteration number): unroll when the iterations are known and few.
                let trips = match (&trip, &cond) {
                    (Operand::Known(t), Operand::Absent) => t.to_f64_vec().first().copied(),
                    (Operand::Known(t), Operand::Known(c))
                        if c.to_f64_vec().first().is_some_and(|v| *v != 0.0) =>
                    {
                        t.to_f64_vec().first().copied()
                    }
                    _ => None,
                };
                let nodes = body_g.node.len().max(1) as f64;
                return match trips {
                    Some(m) if m >= 1.0 && m * nodes <= MAX_UNROLLED_NODES as f64 => {
                        self.unroll_loop(node, name, body_g, m as usize, None, opsets)
                    }
                    _ => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        if num_scan > 0 && scan_length > 0 && !condition_stays_true(&body) {
            return self.loop_ending_early(node, name, body_g, &trip, &carried_names, opsets);
        }
        for (k, t) in body.outputs()[1 + num_carried..].iter().enumerate() {
            let info = &body.tensor(*t).info;
            let mut dims = vec![scan_length];
            dims.extend_from_slice(info.shape.dims());
            check_size(
                &format!("{name} scan output {k}"),
                &dims,
                info.dtype.size(),
                self.options.max_tensor_bytes,
            )
            .map_err(TxError::Fatal)?;
        }
        let op = Op::Loop(LoopDesc {
            body: Arc::new(body),
            num_carried,
            scan_length,
        });
        let mut inputs = vec![
            match trip {
                Operand::Absent => Err(Arc::new(Tensor::scalar(i64::MAX))),
                _ => Ok(node.input[0].clone()),
            },
            match cond {
                Operand::Absent => Err(Arc::new(
                    Tensor::from_bools(Vec::<usize>::new(), &[true])
                        .map_err(|e| TxError::Fatal(OnnxError::core(name, e)))?,
                )),
                _ => Ok(node.input[1].clone()),
            },
        ];
        inputs.extend(carried_names.into_iter().map(Ok));
        inputs.extend(captured.into_iter().map(Ok));
        self.add_control_layer(node, name, op, inputs)
    }

    /// A Loop with scan outputs whose body computes its condition: it may stop before its
    /// trip count, so its scan outputs' length is known only once it has run. When every
    /// value it reads is known at import (a one-node import with its inputs bound: the data-
    /// dependent path of `backplane::DynamicNetwork`), it is unrolled until its condition
    /// turns false (at most [`MAX_UNROLLED_NODES`] nodes) and folds; otherwise the import
    /// reports that it needs the values of the inputs behind it.
    fn loop_ending_early(
        &mut self,
        node: &NodeProto,
        name: &str,
        body_g: GraphProto,
        trip: &Operand,
        carried: &[String],
        opsets: &HashMap<String, i64>,
    ) -> Result<(), TxError> {
        let mut needs = Vec::new();
        let mut names: Vec<&str> = vec![node.input[1].as_str()];
        names.extend(carried.iter().map(String::as_str));
        let captured = self.captures(name, &[&body_g])?;
        names.extend(captured.iter().map(String::as_str));
        let mut runtime = matches!(trip, Operand::Runtime(_));
        if let Operand::Runtime(id) = trip {
            needs.extend(self.inputs_behind(*id));
        }
        for n in names {
            if let Operand::Runtime(id) = self.operand(name, n)? {
                runtime = true;
                needs.extend(self.inputs_behind(id));
            }
        }
        if runtime {
            needs.sort();
            needs.dedup();
            return Err(TxError::NeedsValues {
                reason: "the length of a Loop's scan outputs (its body's condition may end it \
                         before its trip count)"
                    .into(),
                inputs: needs,
            });
        }
        let trips = match trip {
            Operand::Known(t) => {
                let v = t.to_f64_vec().first().copied().unwrap_or(0.0).max(0.0);
                v.min(usize::MAX as f64) as usize
            }
            _ => usize::MAX,
        };
        let most = MAX_UNROLLED_NODES / body_g.node.len().max(1);
        self.unroll_loop(node, name, body_g, trips, Some(most.max(1)), opsets)
    }

    /// Import a Loop as `trips` copies of its body, each iteration's names suffixed, the
    /// iteration number and condition known in each; carried values thread through and scan
    /// outputs are stacked. The loop ends early where a copy's condition is known false; one
    /// that would need more than `most` copies is refused (when `most` is given).
    pub(super) fn unroll_loop(
        &mut self,
        node: &NodeProto,
        name: &str,
        body: GraphProto,
        trips: usize,
        most: Option<usize>,
        opsets: &HashMap<String, i64>,
    ) -> Result<(), TxError> {
        let num_carried = node.input.len().saturating_sub(2);
        let num_scan = node.output.len().saturating_sub(num_carried);
        let mut names = HashSet::new();
        defined_names(&body, &mut names);
        let mut carried: Vec<String> = node.input[2..].to_vec();
        let mut slices: Vec<Vec<String>> = vec![Vec::new(); num_scan];
        let base = self.layer_names.len();
        for i in 0..trips {
            if most.is_some_and(|m| i >= m) {
                return Err(TxError::Unsupported(format!(
                    "a Loop whose condition ends it after more than {i} iterations (its scan \
                     outputs are computed by unrolling it, up to {MAX_UNROLLED_NODES} nodes)"
                )));
            }
            let prefix = format!("{name}/iteration{i}");
            let map: HashMap<String, String> = names
                .iter()
                .map(|n| (n.clone(), format!("{prefix}/{n}")))
                .collect();
            let mut g = body.clone();
            rename(&mut g, &map, &prefix);
            let formal: Vec<String> = g
                .input
                .iter()
                .map(|v| v.name.clone().unwrap_or_default())
                .collect();
            if formal.len() != 2 + num_carried || g.output.len() != 1 + num_carried + num_scan {
                return Err(bad(
                    name,
                    "the body's inputs and outputs do not match the node",
                ));
            }
            let iteration = i64::try_from(i).map_err(|_| bad(name, "too many iterations"))?;
            self.values.insert(
                formal[0].clone(),
                Value::Known(Arc::new(Tensor::scalar(iteration))),
            );
            let yes = Tensor::from_bools(Vec::<usize>::new(), &[true])
                .map_err(|e| TxError::Fatal(OnnxError::core(name, e)))?;
            self.values
                .insert(formal[1].clone(), Value::Known(Arc::new(yes)));
            for (k, c) in carried.iter().enumerate() {
                let v = match self.values.get(c) {
                    Some(v) => v.clone(),
                    None => return Err(bad(name, format!("carried value '{c}' is not defined"))),
                };
                self.values.insert(formal[2 + k].clone(), v);
            }
            self.inline_nodes(&mut g, base + i * 1000, opsets)?;
            let outs: Vec<String> = g
                .output
                .iter()
                .map(|v| v.name.clone().unwrap_or_default())
                .collect();
            carried = outs[1..1 + num_carried].to_vec();
            for (j, s) in outs[1 + num_carried..].iter().enumerate() {
                slices[j].push(s.clone());
            }
            match self.operand(name, &outs[0])? {
                Operand::Known(c) if c.to_f64_vec().first().is_some_and(|v| *v == 0.0) => break,
                Operand::Known(_) => {}
                _ => {
                    return Err(TxError::Unsupported(
                        "a Loop that needs its iteration number as a parameter and whose                          condition is computed at run time"
                            .into(),
                    ))
                }
            }
        }
        for (k, c) in carried.into_iter().enumerate() {
            let out = node.output[k].clone();
            if out.is_empty() {
                continue;
            }
            self.alias(&c, &out, name)?;
        }
        // Scan outputs: each slice gets a leading axis, then all are joined along it.
        for (j, parts) in slices.into_iter().enumerate() {
            let out = node.output[num_carried + j].clone();
            if out.is_empty() {
                continue;
            }
            let n = parts.len();
            let mut steps: Vec<Step> = (0..n)
                .map(|k| Step {
                    op: Op::Unsqueeze { axes: vec![0] },
                    inputs: vec![Src::Input(k)],
                    outputs: vec![Dst::Temp(k)],
                    suffix: Some(format!("stack{k}")),
                })
                .collect();
            steps.push(Step {
                op: Op::Concat { axis: 0 },
                inputs: (0..n).map(Src::Temp).collect(),
                outputs: vec![Dst::Output(0)],
                suffix: None,
            });
            self.run_steps(
                &NodeProto {
                    input: parts,
                    output: vec![out.clone()],
                    ..Default::default()
                },
                &format!("{name}/{out}"),
                steps,
            )?;
        }
        Ok(())
    }

    fn scan_node(
        &mut self,
        node: &mut NodeProto,
        name: &str,
        opset: i64,
        opsets: &HashMap<String, i64>,
    ) -> Result<(), TxError> {
        let body_g = take_graph(node, "body", name)?;
        let attrs = Attrs::new(node);
        let invalid = |m: String| bad(name, m);
        let num_scan_inputs = attrs
            .int("num_scan_inputs")
            .map_err(invalid)?
            .ok_or_else(|| bad(name, "the attribute num_scan_inputs is missing"))?;
        let batched = opset < 9;
        let mut operands: Vec<String> = node.input.clone();
        if operands.is_empty() {
            return Err(bad(name, "Scan has no inputs"));
        }
        if batched {
            // Opset 8: the first input is the optional per-batch sequence lengths.
            let lens = operands.first().cloned().unwrap_or_default();
            if !lens.is_empty() {
                return Err(TxError::Unsupported(
                    "Scan (opset 8) with sequence_lens".into(),
                ));
            }
            operands.remove(0);
        }
        let num_scan_inputs = usize::try_from(num_scan_inputs)
            .ok()
            .filter(|n| *n >= 1 && *n <= operands.len())
            .ok_or_else(|| {
                bad(
                    name,
                    format!("num_scan_inputs {num_scan_inputs} is out of range"),
                )
            })?;
        let num_state = operands.len() - num_scan_inputs;
        let num_scan_out = body_g
            .output
            .len()
            .checked_sub(num_state)
            .ok_or_else(|| bad(name, "the body gives fewer outputs than there are states"))?;
        let infos: Vec<TensorInfo> = operands
            .iter()
            .map(|o| self.operand_info(name, o))
            .collect::<Result<_, _>>()?;
        let directions = |attr: &str, n: usize| -> Result<Vec<bool>, TxError> {
            let v = attrs.ints(attr).map_err(|m| bad(name, m))?;
            match v {
                None => Ok(vec![false; n]),
                Some(v) if v.len() == n => Ok(v.iter().map(|d| *d != 0).collect()),
                Some(v) => Err(bad(
                    name,
                    format!("{attr} has {} entries, needs {n}", v.len()),
                )),
            }
        };
        let axes = |attr: &str, ranks: &[usize]| -> Result<Vec<usize>, TxError> {
            let v = attrs.ints(attr).map_err(|m| bad(name, m))?;
            let v = v.unwrap_or_else(|| vec![0; ranks.len()]);
            if v.len() != ranks.len() {
                return Err(bad(
                    name,
                    format!("{attr} has {} entries, needs {}", v.len(), ranks.len()),
                ));
            }
            v.iter()
                .zip(ranks)
                .map(|(a, r)| {
                    let a = if *a < 0 { *a + *r as i64 } else { *a };
                    usize::try_from(a)
                        .ok()
                        .filter(|a| a < r)
                        .ok_or_else(|| bad(name, format!("{attr} entry out of range for rank {r}")))
                })
                .collect()
        };
        let (input_axes, input_reverse) = if batched {
            (
                vec![0; num_scan_inputs],
                directions("directions", num_scan_inputs)?,
            )
        } else {
            let ranks: Vec<usize> = infos[num_state..].iter().map(|i| i.shape.rank()).collect();
            (
                axes("scan_input_axes", &ranks)?,
                directions("scan_input_directions", num_scan_inputs)?,
            )
        };
        let mut formal = Vec::with_capacity(num_state + num_scan_inputs);
        for (k, info) in infos.iter().enumerate() {
            let mut dims = info.shape.dims().to_vec();
            if batched {
                if dims.is_empty() {
                    return Err(bad(name, "a batched Scan input has no batch axis"));
                }
                dims.remove(0);
            }
            if k >= num_state {
                let axis = input_axes[k - num_state];
                if axis >= dims.len() {
                    return Err(bad(
                        name,
                        format!("scan input {} has no axis {axis}", k - num_state),
                    ));
                }
                dims.remove(axis);
            }
            formal.push(TensorInfo::new(info.dtype, dims));
        }
        let captured = self.captures(name, &[&body_g])?;
        let body = self.import_body(name, "body", body_g, &formal, &captured, opsets)?;
        let out_ranks: Vec<usize> = body.outputs()[num_state..]
            .iter()
            .map(|t| body.tensor(*t).info.shape.rank() + 1)
            .collect();
        let (output_axes, output_reverse) = if batched {
            (vec![0; num_scan_out], vec![false; num_scan_out])
        } else {
            (
                axes("scan_output_axes", &out_ranks)?,
                directions("scan_output_directions", num_scan_out)?,
            )
        };
        let op = Op::Scan(ScanDesc {
            body: Arc::new(body),
            num_state,
            num_scan_inputs,
            input_axes,
            input_reverse,
            output_axes,
            output_reverse,
            batched,
        });
        let mut inputs: Vec<Result<String, Arc<Tensor>>> = operands.into_iter().map(Ok).collect();
        inputs.extend(captured.into_iter().map(Ok));
        self.add_control_layer(node, name, op, inputs)
    }
}

/// Whether a Loop body's condition output is always true: the body passes its condition
/// input through (itself or by Identity layers) or computes a constant true. A body that
/// computes it otherwise may end the loop before its trip count.
fn condition_stays_true(body: &Network) -> bool {
    let (Some(&out), Some(&cond_in)) = (body.outputs().first(), body.inputs().get(1)) else {
        return true;
    };
    let mut t = out;
    for _ in 0..=body.layers().len() {
        if t == cond_in {
            return true;
        }
        match &body.tensor(t).kind {
            TensorKind::Constant(c) => return c.to_f64_vec().first().is_some_and(|v| *v != 0.0),
            TensorKind::Produced { layer, .. } => {
                let l = body.layer(*layer);
                match (&l.op, l.inputs.first()) {
                    (Op::Identity, Some(&input)) => t = input,
                    _ => return false,
                }
            }
            _ => return false,
        }
    }
    false
}
