//! The graph walk: values, constant folding and layer creation.

use crate::attrs::Attrs;
use crate::ops::{self, Dst, Lowering, NodeCx, Src, Step, TxError};
use crate::proto::{GraphProto, ModelProto, NodeProto, TensorProto};
use crate::tensor::{check_size, map_dtype, Decoded, Loader};
use crate::{Dim, ImportOptions, ModelInput, OnnxError, SharedInitializers, UnsupportedOp};
use backplane_core::{Network, Op, Tensor, TensorId, TensorInfo, TensorKind};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

mod branch;
mod control;
mod inputs;
mod sequence;
mod steps;

use inputs::check_declared_shape;
pub(crate) use inputs::{describe_input, inspect, runtime_inputs};

/// The oldest default-domain opset the importer translates.
pub(crate) const MIN_OPSET: i64 = 7;

/// What the importer knows about an ONNX value.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    /// A constant known at import time.
    Known(Arc<Tensor>),
    /// A tensor computed at run time.
    Runtime(TensorId),
    /// Produced by a node that could not be imported.
    Poisoned,
    /// A constant of an element type backplane has no tensor for.
    Unsupported {
        /// Why (e.g. "tensor 'w' has element type DOUBLE").
        reason: String,
        /// The ONNX element type name.
        dtype: String,
        /// Its values as f64 where readable (usable as operator parameters).
        values: Option<Vec<f64>>,
    },
    /// A sequence or an optional (see `sequence.rs`).
    Structured(Structured),
}

/// A sequence or an optional, whose structure is known at import (its tensors may be
/// computed at run time).
#[derive(Debug, Clone)]
pub(crate) enum Structured {
    /// A sequence of values.
    Sequence(Vec<Value>),
    /// An empty optional, or one holding a value.
    Optional(Option<Box<Value>>),
}

impl Structured {
    /// "a sequence" or "an optional", for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Structured::Sequence(_) => "a sequence",
            Structured::Optional(_) => "an optional",
        }
    }
}

/// The error for a sequence or optional read where a tensor is expected.
pub(crate) fn not_a_tensor(name: &str, s: &Structured) -> TxError {
    TxError::Unsupported(format!(
        "input '{name}' is {}, where a tensor is expected",
        s.kind()
    ))
}

fn is_default_domain(d: &str) -> bool {
    d.is_empty() || d == "ai.onnx"
}

/// The imported opset version for each domain.
fn opsets(model: &ModelProto) -> HashMap<String, i64> {
    let mut m = HashMap::new();
    for o in &model.opset_import {
        let d = o.domain.clone().unwrap_or_default();
        let d = if is_default_domain(&d) {
            String::new()
        } else {
            d
        };
        m.insert(d, o.version.unwrap_or(0));
    }
    m
}

/// Operators of the default domain whose schema has exactly one output.
const SINGLE_OUTPUT_OPS: &[&str] = &[
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "And",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "AveragePool",
    "Cast",
    "Ceil",
    "Celu",
    "Clip",
    "Concat",
    "Conv",
    "ConvTranspose",
    "Cos",
    "Cosh",
    "Div",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Floor",
    "Gather",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Greater",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "LeakyRelu",
    "Less",
    "Log",
    "LogSoftmax",
    "MatMul",
    "Max",
    "Mean",
    "Min",
    "Mish",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "Pad",
    "Pow",
    "PRelu",
    "Reciprocal",
    "Relu",
    "Reshape",
    "Round",
    "Selu",
    "Shape",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Slice",
    "Softmax",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Tan",
    "Tanh",
    "Tile",
    "Transpose",
    "Unsqueeze",
    "Where",
    "Xor",
];

/// The importer's state while walking one graph.
pub(crate) struct Importer<'o> {
    net: Network,
    values: HashMap<String, Value>,
    const_ids: HashMap<String, TensorId>,
    tensor_names: HashSet<String>,
    layer_names: HashSet<String>,
    consumed: HashSet<String>,
    /// The index the given nodes are a suffix of ([`ImportOptions::node_names`]), for the
    /// top-level graph: what later nodes read and which names are taken, beside
    /// `consumed` and `tensor_names` (which then hold only what the importer adds).
    shared: Option<crate::node_names::NodeNamesAt>,
    unsupported: Vec<UnsupportedOp>,
    /// Nodes that need the values of graph inputs, with those inputs.
    needs_values: Vec<(UnsupportedOp, Vec<String>)>,
    options: &'o ImportOptions,
    loader: Loader<'o>,
}

impl<'o> Importer<'o> {
    /// An importer with an empty network.
    fn new(options: &'o ImportOptions, base_dir: Option<&'o Path>) -> Self {
        Importer {
            net: Network::new(),
            values: HashMap::new(),
            const_ids: HashMap::new(),
            tensor_names: HashSet::new(),
            layer_names: HashSet::new(),
            consumed: HashSet::new(),
            shared: None,
            unsupported: Vec::new(),
            needs_values: Vec::new(),
            options,
            loader: Loader {
                base_dir,
                max_bytes: options.max_tensor_bytes,
            },
        }
    }

    /// Note the names a graph's nodes read and define, before walking it.
    fn prescan(&mut self, graph: &GraphProto) {
        self.prescan_nodes(graph, &graph.node, None);
    }

    /// [`Importer::prescan`] with the graph's nodes given apart (taken out of it), and
    /// optionally the index of the list they are a suffix of, which answers for them.
    fn prescan_nodes(
        &mut self,
        graph: &GraphProto,
        nodes: &[NodeProto],
        shared: Option<&crate::node_names::NodeNamesAt>,
    ) {
        // Sized once: growing these maps rehashes every name, which dominated importing
        // long chains.
        let count = nodes.len();
        let values = count + graph.input.len() + graph.initializer.len();
        self.values.reserve(values);
        self.layer_names.reserve(count);
        if let Some(shared) = shared {
            self.shared = Some(shared.clone());
        } else {
            self.tensor_names.reserve(values);
            self.consumed.reserve(values);
            for n in nodes {
                self.consumed
                    .extend(n.input.iter().filter(|s| !s.is_empty()).cloned());
                self.tensor_names
                    .extend(n.output.iter().filter(|s| !s.is_empty()).cloned());
            }
        }
        for o in &graph.output {
            self.consumed.insert(o.name.clone().unwrap_or_default());
        }
        self.tensor_names
            .extend(graph.input.iter().filter_map(|v| v.name.clone()));
    }

    pub(crate) fn value(&self, name: &str) -> Option<&Value> {
        self.values.get(name)
    }

    /// Decode a tensor held by an attribute (e.g. ConstantOfShape's value).
    pub(crate) fn decode_attr_tensor(
        &self,
        tp: &TensorProto,
        name: &str,
    ) -> Result<Decoded, OnnxError> {
        let mut tp = tp.clone();
        self.loader.decode(&mut tp, name)
    }

    /// The largest tensor the import may create, in bytes.
    pub(crate) fn max_tensor_bytes(&self) -> usize {
        self.options.max_tensor_bytes
    }

    pub(crate) fn network(&self) -> &Network {
        &self.net
    }

    /// The names of the graph inputs a network tensor depends on.
    pub(crate) fn inputs_behind(&self, id: TensorId) -> Vec<String> {
        let mut seen = HashSet::new();
        let mut stack = vec![id];
        let mut names = Vec::new();
        while let Some(t) = stack.pop() {
            if !seen.insert(t) {
                continue;
            }
            let e = self.net.tensor(t);
            match &e.kind {
                TensorKind::Input => names.push(e.name.clone()),
                TensorKind::Constant(_) | TensorKind::Released => {}
                TensorKind::Produced { layer, .. } => {
                    stack.extend(self.net.layer(*layer).inputs.iter().copied());
                }
            }
        }
        names.sort();
        names
    }

    pub(crate) fn is_consumed(&self, name: &str) -> bool {
        self.consumed.contains(name) || self.shared.as_ref().is_some_and(|s| s.read_by_given(name))
    }

    /// Whether `name` is a value of the model or of the network so far.
    pub(crate) fn name_taken(&self, name: &str) -> bool {
        self.tensor_names.contains(name)
            || self.shared.as_ref().is_some_and(|s| s.names.defines(name))
    }

    /// A tensor name not used by the model or the network yet.
    fn fresh_tensor_name(&mut self, base: &str) -> String {
        let name = unique(|n| self.name_taken(n), base);
        self.tensor_names.insert(name.clone());
        name
    }

    fn fresh_layer_name(&mut self, base: &str) -> String {
        let name = unique(|n| self.layer_names.contains(n), base);
        self.layer_names.insert(name.clone());
        name
    }

    /// The network tensor of a constant value, adding it on first use.
    fn const_id(&mut self, name: &str, node: &str) -> Result<TensorId, OnnxError> {
        if let Some(&id) = self.const_ids.get(name) {
            return Ok(id);
        }
        let Some(Value::Known(arc)) = self.values.remove(name) else {
            return Err(OnnxError::invalid(format!("'{name}' is not a constant")));
        };
        // The value is shared, not copied: an initializer keeps its identity across the
        // imports of one model that share initializers (`ImportOptions::shared_initializers`).
        let id = self
            .net
            .add_shared_constant(name, arc)
            .map_err(|e| OnnxError::core(node, e))?;
        // Share the network's copy instead of keeping a second one.
        let arc = self
            .net
            .tensor(id)
            .constant()
            .cloned()
            .ok_or_else(|| OnnxError::invalid(format!("constant '{name}' was not stored")))?;
        self.values.insert(name.to_string(), Value::Known(arc));
        self.const_ids.insert(name.to_string(), id);
        Ok(id)
    }

    fn poison_outputs(&mut self, node: &NodeProto) {
        for o in node.output.iter().filter(|o| !o.is_empty()) {
            self.values.insert(o.clone(), Value::Poisoned);
        }
    }

    fn report(&mut self, node: &NodeProto, name: &str, opset: i64, reason: String) {
        self.unsupported.push(UnsupportedOp {
            node: name.to_string(),
            op_type: node.op_type.clone().unwrap_or_default(),
            domain: node.domain.clone().unwrap_or_default(),
            opset,
            reason,
        });
        self.poison_outputs(node);
    }

    fn decode_into_values(&mut self, name: &str, tp: &mut TensorProto) -> Result<(), OnnxError> {
        let value = match self.loader.decode(tp, name)? {
            Decoded::Tensor(t) => Value::Known(Arc::new(t)),
            Decoded::Unsupported {
                reason,
                dtype,
                values,
            } => Value::Unsupported {
                reason,
                dtype,
                values,
            },
        };
        self.values.insert(name.to_string(), value);
        Ok(())
    }

    /// A top-level initializer through `shared`: the tensor an earlier import of the same
    /// model decoded, or decoded now and kept there.
    fn shared_into_values(
        &mut self,
        shared: &SharedInitializers,
        name: &str,
        tp: &mut TensorProto,
    ) -> Result<(), OnnxError> {
        if let Some(t) = shared.get(name) {
            self.values.insert(name.to_string(), Value::Known(t));
            return Ok(());
        }
        self.decode_into_values(name, tp)?;
        if let Some(Value::Known(t)) = self.values.get(name) {
            shared.insert(name, t.clone());
        }
        Ok(())
    }

    /// A Constant node: its value attribute becomes a known value.
    fn constant_node(&mut self, node: &mut NodeProto, name: &str) -> Result<(), TxError> {
        let out = node.output.first().cloned().unwrap_or_default();
        let invalid = |m: String| {
            TxError::Fatal(OnnxError::invalid(format!("node '{name}' (Constant): {m}")))
        };
        let present: Vec<String> = Attrs::new(node).names().map(str::to_string).collect();
        let [attr] = present.as_slice() else {
            return Err(invalid(format!(
                "needs exactly one value attribute, has {present:?}"
            )));
        };
        let attrs = Attrs::new(node);
        let tensor = match attr.as_str() {
            "value" => None,
            "value_float" => Some(Tensor::scalar(
                attrs.float("value_float").map_err(invalid)?.unwrap_or(0.0),
            )),
            "value_int" => Some(Tensor::scalar(
                attrs.int("value_int").map_err(invalid)?.unwrap_or(0),
            )),
            "value_floats" => {
                let v = attrs
                    .floats("value_floats")
                    .map_err(invalid)?
                    .unwrap_or_default();
                Some(Tensor::from_vec(vec![v.len()], v).map_err(|e| invalid(e.to_string()))?)
            }
            "value_ints" => {
                let v = attrs
                    .ints("value_ints")
                    .map_err(invalid)?
                    .unwrap_or_default();
                Some(Tensor::from_vec(vec![v.len()], v).map_err(|e| invalid(e.to_string()))?)
            }
            other => {
                return Err(TxError::Unsupported(format!(
                    "Constant with the attribute '{other}' is not supported"
                )))
            }
        };
        if out.is_empty() {
            return Err(invalid("has no output".into()));
        }
        match tensor {
            Some(t) => {
                self.values.insert(out, Value::Known(Arc::new(t)));
            }
            None => {
                let mut tp = node
                    .attribute
                    .iter_mut()
                    .find(|a| a.name.as_deref() == Some("value"))
                    .and_then(|a| a.t.take())
                    .ok_or_else(|| invalid("the value attribute holds no tensor".into()))?;
                self.decode_into_values(&out, &mut tp)?;
            }
        }
        Ok(())
    }

    /// A node of an operator that has exactly one output must not name more: a Relu
    /// declaring two outputs makes the model invalid, as ONNX Runtime finds it, rather than a
    /// tensor that silently never exists. (Operators with optional outputs the importer
    /// leaves uncomputed when unused, such as Dropout's mask, are not checked here.)
    fn check_outputs_defined(
        &self,
        node: &NodeProto,
        name: &str,
        op_type: &str,
    ) -> Result<(), TxError> {
        if !SINGLE_OUTPUT_OPS.contains(&op_type) {
            return Ok(());
        }
        let named = node.output.len();
        for (k, o) in node.output.iter().enumerate().skip(1) {
            if !self.values.contains_key(o) || o.is_empty() {
                return Err(TxError::Fatal(OnnxError::invalid(format!(
                    "node '{name}' ({op_type}) names {named} output(s), but {op_type} has no \
                     output #{k} ('{o}') here"
                ))));
            }
        }
        Ok(())
    }

    fn import_node(
        &mut self,
        mut node: Cow<'_, NodeProto>,
        index: usize,
        opsets: &HashMap<String, i64>,
    ) -> Result<(), OnnxError> {
        // A node the import owns is taken apart in place (a Constant's value moved, not
        // copied); a borrowed one is copied only on those paths.
        let op_type = node.op_type.clone().unwrap_or_default();
        let name = match node.name.as_deref() {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => format!("{op_type}_{index}"),
        };
        let domain = node.domain.clone().unwrap_or_default();
        let key = if is_default_domain(&domain) {
            ""
        } else {
            domain.as_str()
        };
        let opset = opsets.get(key).copied().unwrap_or(0);
        if !key.is_empty() && !ops::domain_op_supported(key, &op_type) {
            let reason = if ops::known_domain(key) {
                format!("{op_type} of the domain '{domain}' is not supported")
            } else {
                format!("operators of the domain '{domain}' are not supported")
            };
            self.report(&node, &name, opset, reason);
            return Ok(());
        }
        let earliest = ops::earliest_opset(&op_type);
        if key.is_empty() && opset < earliest {
            let reason = if earliest < MIN_OPSET {
                format!(
                    "the model imports opset {opset} of the default domain; backplane imports \
                     {op_type} from opset {earliest} on"
                )
            } else {
                format!(
                    "the model imports opset {opset} of the default domain; backplane imports \
                     opset {MIN_OPSET} and later"
                )
            };
            self.report(&node, &name, opset, reason);
            return Ok(());
        }
        if let Some(reason) = ops::too_new(key, &op_type, opset) {
            self.report(&node, &name, opset, reason);
            return Ok(());
        }
        let result = if op_type == "Constant" {
            self.constant_node(node.to_mut(), &name)
        } else if let Some(r) = self.structure_node(&mut node, &name, opsets) {
            r
        } else if matches!(op_type.as_str(), "If" | "Loop" | "Scan") {
            self.control_node(node.to_mut(), &name, opset, opsets)
        } else {
            let lowering = {
                let cx = NodeCx {
                    node: &node,
                    name: &name,
                    opset,
                    attrs: Attrs::new(&node),
                    imp: self,
                };
                ops::translate(&cx)
            };
            let done = match lowering {
                Ok(Lowering::Constants(ts)) => {
                    for (o, t) in node.output.iter().zip(ts) {
                        if !o.is_empty() {
                            self.values.insert(o.clone(), Value::Known(Arc::new(t)));
                        }
                    }
                    Ok(())
                }
                Ok(Lowering::Steps(steps)) => self.run_steps(&node, &name, steps),
                Err(e) => Err(e),
            };
            done.and_then(|()| self.check_outputs_defined(&node, &name, &op_type))
        };
        match result {
            Ok(()) => Ok(()),
            Err(TxError::Unsupported(reason)) => {
                self.report(&node, &name, opset, reason);
                Ok(())
            }
            Err(TxError::NeedsValues { reason, inputs }) if inputs.is_empty() => {
                // Computed from constants the importer could not fold: no input to bind.
                let reason = format!(
                    "{reason} is not supported: it is computed from constants that were not \
                     folded (import with an evaluator)"
                );
                self.report(&node, &name, opset, reason);
                Ok(())
            }
            Err(TxError::NeedsValues { reason, inputs }) => {
                let op = UnsupportedOp {
                    node: name.to_string(),
                    op_type: node.op_type.clone().unwrap_or_default(),
                    domain: node.domain.clone().unwrap_or_default(),
                    opset,
                    reason,
                };
                self.needs_values.push((op, inputs));
                self.poison_outputs(&node);
                Ok(())
            }
            Err(TxError::Skip) => {
                self.poison_outputs(&node);
                Ok(())
            }
            Err(TxError::Fatal(e)) => Err(e),
        }
    }
}

/// `base`, or `base_2`, `base_3`, ... whichever is not in `used`.
fn unique(used: impl Fn(&str) -> bool, base: &str) -> String {
    if !used(base) {
        return base.to_string();
    }
    (2usize..)
        .map(|k| format!("{base}_{k}"))
        .find(|n| !used(n))
        .unwrap_or_else(|| base.to_string())
}

/// A copy of `model` for importing it again after a first import that shares its
/// initializers (`ImportOptions::shared_initializers`): each top-level initializer that
/// decodes to a tensor keeps its name and description but none of its data (the retry finds
/// the tensor the first import decoded), others are copied whole. `model` is unchanged.
pub(crate) fn without_initializer_data(model: &mut ModelProto) -> ModelProto {
    let initializers = model
        .graph
        .as_mut()
        .map(|g| std::mem::take(&mut g.initializer))
        .unwrap_or_default();
    let mut copy = model.clone();
    if let Some(g) = copy.graph.as_mut() {
        g.initializer = initializers
            .iter()
            .map(|tp| {
                let decodes = tp.segment.is_none()
                    && tp.name.as_deref().is_some_and(|n| !n.is_empty())
                    && map_dtype(tp.data_type.unwrap_or(0)).is_some();
                if decodes {
                    TensorProto {
                        name: tp.name.clone(),
                        data_type: tp.data_type,
                        dims: tp.dims.clone(),
                        ..TensorProto::default()
                    }
                } else {
                    tp.clone()
                }
            })
            .collect();
    }
    if let Some(g) = model.graph.as_mut() {
        g.initializer = initializers;
    }
    copy
}

/// Import a decoded model, moving its initializers' data into the network's constants (no
/// copy of the weights).
pub(crate) fn import(
    mut model: ModelProto,
    base_dir: Option<&Path>,
    options: &ImportOptions,
) -> Result<Network, OnnxError> {
    // The walk reads the graph by reference; the nodes and the initializers' data are moved
    // out first and taken apart from there (the graph keeps the initializers' names, which
    // the walk reads), so nothing is copied.
    let owned = match model.graph.as_mut() {
        Some(graph) => {
            let initializers = std::mem::take(&mut graph.initializer);
            graph.initializer = initializers
                .iter()
                .map(|tp| TensorProto {
                    name: tp.name.clone(),
                    ..TensorProto::default()
                })
                .collect();
            Owned {
                initializers,
                nodes: std::mem::take(&mut graph.node),
            }
        }
        None => Owned::default(),
    };
    import_graph(&model, Some(owned), None, base_dir, options)
}

/// Import a decoded model it borrows: the graph is read in place, never copied. An
/// initializer is taken from `options.shared_initializers` when the set holds it (a model
/// whose weights were moved there, as a `DynamicNetwork`'s, copies nothing); one it does not
/// hold is copied to be decoded (and then added to the set, when there is one).
pub(crate) fn import_borrowed(
    model: &ModelProto,
    base_dir: Option<&Path>,
    options: &ImportOptions,
) -> Result<Network, OnnxError> {
    import_graph(model, None, None, base_dir, options)
}

/// [`import_borrowed`] with the graph's nodes given apart (the graph's own are ignored): a
/// caller serving parts of one node list shares the list instead of copying it per part.
pub(crate) fn import_borrowed_nodes(
    model: &ModelProto,
    nodes: &[NodeProto],
    base_dir: Option<&Path>,
    options: &ImportOptions,
) -> Result<Network, OnnxError> {
    import_graph(model, None, Some(nodes), base_dir, options)
}

/// What an import of a model it owns takes out of the graph before walking it.
#[derive(Default)]
struct Owned {
    /// The initializers, in the graph's order (the graph's own then carry only names).
    initializers: Vec<TensorProto>,
    /// The nodes (the graph then has none).
    nodes: Vec<NodeProto>,
}

/// The import of `model`; `owned`, when given, holds the graph's initializers and nodes;
/// `apart`, when given, the nodes (borrowed) in place of the graph's.
fn import_graph(
    model: &ModelProto,
    owned: Option<Owned>,
    apart: Option<&[NodeProto]>,
    base_dir: Option<&Path>,
    options: &ImportOptions,
) -> Result<Network, OnnxError> {
    let ir_version = model.ir_version.unwrap_or(0);
    if ir_version > ops::NEWEST_IR_VERSION {
        return Err(OnnxError::UnsupportedIrVersion {
            version: ir_version,
            newest: ops::NEWEST_IR_VERSION,
        });
    }
    let opsets = opsets(model);
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| OnnxError::invalid("the model has no graph"))?;
    let (owned_inits, owned_nodes) = match owned {
        Some(o) => (Some(o.initializers), Some(o.nodes)),
        None => (None, None),
    };
    let borrowed: &[NodeProto] = apart.unwrap_or(&graph.node);
    let nodes: &[NodeProto] = owned_nodes.as_deref().unwrap_or(borrowed);
    let has_default_nodes = nodes
        .iter()
        .any(|n| is_default_domain(n.domain.as_deref().unwrap_or("")));
    if has_default_nodes && !opsets.contains_key("") {
        return Err(OnnxError::invalid(
            "the model does not declare an opset for the default ONNX domain",
        ));
    }

    let mut imp = Importer::new(options, base_dir);
    imp.prescan_nodes(graph, nodes, options.node_names.as_ref());

    // Runtime inputs, with their shapes resolved; sequences and optionals as their structure.
    let (structured, tensors): (Vec<_>, Vec<_>) = runtime_inputs(graph)
        .into_iter()
        .partition(|vi| sequence::declared_structured(vi));
    for vi in structured {
        imp.bind_structured_input(vi)?;
    }
    let inputs: Vec<ModelInput> = tensors
        .into_iter()
        .map(describe_input)
        .collect::<Result<_, _>>()?;
    for name in options.input_shapes.keys() {
        if !inputs.iter().any(|i| &i.name == name) {
            return Err(OnnxError::UnknownInput {
                name: name.clone(),
                inputs: inputs.iter().map(|i| i.name.clone()).collect(),
            });
        }
    }
    for input in &inputs {
        if let Some(value) = options.input_values.get(&input.name) {
            check_declared_shape(input, value.shape().dims())?;
            if value.dtype() != input.dtype {
                return Err(OnnxError::invalid(format!(
                    "the value given for input '{}' is {}, but the input is {}",
                    input.name,
                    value.info(),
                    input.dtype
                )));
            }
            imp.values
                .insert(input.name.clone(), Value::Known(value.clone()));
            continue;
        }
        let dims: Vec<usize> =
            match options.input_shapes.get(&input.name) {
                Some(d) => {
                    check_declared_shape(input, d)?;
                    d.clone()
                }
                None if !input.shape_known => {
                    return Err(OnnxError::MissingShape {
                        input: input.name.clone(),
                    })
                }
                None => input
                    .dims
                    .iter()
                    .map(|d| match d {
                        Dim::Fixed(v) => Ok(*v),
                        Dim::Symbolic(s) => options.dim_values.get(s).copied().ok_or_else(|| {
                            OnnxError::MissingDim {
                                input: input.name.clone(),
                                dim_name: s.clone(),
                            }
                        }),
                    })
                    .collect::<Result<_, _>>()?,
            };
        check_size(
            &input.name,
            &dims,
            input.dtype.size(),
            options.max_tensor_bytes,
        )?;
        let id = imp
            .net
            .add_input(&input.name, TensorInfo::new(input.dtype, dims))
            .map_err(|e| OnnxError::core(format!("input {}", input.name), e))?;
        imp.values.insert(input.name.clone(), Value::Runtime(id));
    }

    // Initializers (also those listed as graph inputs) are constants.
    let mut owned = owned_inits.map(Vec::into_iter);
    for listed in &graph.initializer {
        let name = listed.name.clone().unwrap_or_default();
        if name.is_empty() {
            return Err(OnnxError::invalid("an initializer has no name"));
        }
        let shared = options.shared_initializers.as_ref();
        match (owned.as_mut().and_then(Iterator::next), shared) {
            (Some(mut tp), Some(shared)) => imp.shared_into_values(shared, &name, &mut tp)?,
            (Some(mut tp), None) => imp.decode_into_values(&name, &mut tp)?,
            // Borrowed: copied only when the shared set does not hold it yet.
            (None, Some(shared)) => match shared.get(&name) {
                Some(t) => {
                    imp.values.insert(name.clone(), Value::Known(t));
                }
                None => imp.shared_into_values(shared, &name, &mut listed.clone())?,
            },
            (None, None) => imp.decode_into_values(&name, &mut listed.clone())?,
        }
        imp.tensor_names.insert(name);
    }
    if !graph.sparse_initializer.is_empty() {
        return Err(OnnxError::invalid("sparse initializers are not supported"));
    }

    match owned_nodes {
        Some(nodes) => {
            for (index, node) in nodes.into_iter().enumerate() {
                imp.import_node(Cow::Owned(node), index, &opsets)?;
                if options.stop_at_value_need && !imp.needs_values.is_empty() {
                    break;
                }
            }
        }
        None => {
            for (index, node) in borrowed.iter().enumerate() {
                imp.import_node(Cow::Borrowed(node), index, &opsets)?;
                if options.stop_at_value_need && !imp.needs_values.is_empty() {
                    break;
                }
            }
        }
    }

    if !imp.unsupported.is_empty() {
        let mut all = imp.unsupported;
        all.extend(imp.needs_values.into_iter().map(|(op, _)| op));
        return Err(OnnxError::UnsupportedOps(all));
    }
    if !imp.needs_values.is_empty() {
        let mut inputs: Vec<String> = imp
            .needs_values
            .iter()
            .flat_map(|(_, i)| i.iter().cloned())
            .collect();
        inputs.sort();
        inputs.dedup();
        return Err(OnnxError::NeedsInputValues {
            inputs,
            nodes: imp.needs_values.into_iter().map(|(op, _)| op).collect(),
        });
    }
    let mut output_names = Vec::with_capacity(graph.output.len());
    for o in &graph.output {
        let name = o.name.clone().unwrap_or_default();
        let value = imp.values.get(&name).cloned();
        match value {
            Some(Value::Structured(_)) => output_names.extend(imp.flatten_output(&name)?),
            // A value that kept another tensor's name (an alias made by a sequence op) gets
            // its own, through an Identity.
            Some(Value::Runtime(id)) if imp.net.tensor(id).name != name => {
                let from = imp.fresh_tensor_name(&format!("{name}/value"));
                imp.values.insert(from.clone(), Value::Runtime(id));
                imp.alias(&from, &name, &name).map_err(|e| match e {
                    TxError::Fatal(e) => e,
                    _ => OnnxError::invalid(format!("output '{name}' cannot be named")),
                })?;
                output_names.push(name);
            }
            _ => output_names.push(name),
        }
    }
    for name in output_names {
        let id = match imp.values.get(&name) {
            Some(Value::Runtime(id)) => *id,
            Some(Value::Known(_)) => imp.const_id(&name, &format!("output {name}"))?,
            Some(Value::Unsupported { dtype, .. }) => {
                return Err(OnnxError::UnsupportedDataType {
                    what: format!("output '{name}'"),
                    dtype: dtype.clone(),
                })
            }
            Some(Value::Poisoned | Value::Structured(_)) | None => {
                return Err(OnnxError::invalid(format!(
                    "graph output '{name}' is not produced by any node"
                )))
            }
        };
        imp.net
            .mark_output(id)
            .map_err(|e| OnnxError::core(format!("output {name}"), e))?;
    }
    imp.net
        .validate()
        .map_err(|e| OnnxError::core("graph", e))?;
    Ok(imp.net)
}
