//! Data-dependent shapes for [`DynamicNetwork`]: a plan that stops at the first node whose
//! output shape (or a parameter) needs run-time values.
//!
//! When the import of a model reports that a node needs the values of a run-time tensor
//! (NonZero, NonMaxSuppression, Unique, Compress, TopK with a computed k, a Reshape whose
//! shape is computed from data, ...), [`DynamicNetwork`] builds a [`Split`] plan: the nodes
//! before that node become one static network (its outputs are every tensor the rest reads),
//! the node itself is run on its inputs' values by importing it alone with those values bound
//! (the importer folds it with the CpuRef evaluator), and the nodes after it form a model of
//! their own, served by a nested [`DynamicNetwork`] whose inputs are the tensors produced so
//! far. The nested network keys its plans by the shapes those tensors have, so a second run
//! whose data-dependent node produces the same shapes reuses every plan; a new shape plans
//! the rest once more. The rest may split again at its own first data-dependent node. Every
//! plan that splits at the same node (for other input shapes) shares one nested network.

use crate::node_cache::{NodeEntry, SharedNodeCache};
use crate::onnx::node_names::{node_reads as reads, NodeNames, NodeNamesAt};
use crate::onnx::proto::{
    tensor_shape_proto, type_proto, GraphProto, ModelProto, NodeProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use crate::{DynamicNetwork, Error, Tensor};
use backplane_core::TensorKind;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

/// The most elements a graph input may have for its value to be bound at import (an
/// integer tensor that small is a parameter: a shape, a count, an axis list); larger inputs,
/// and any input that is not integer, are data: the model is split at the node instead.
pub const MAX_BOUND_ELEMENTS: usize = 64;

/// Whether a given input's value may be bound at import (see [`MAX_BOUND_ELEMENTS`]).
pub fn binds_at_import(t: &Tensor) -> bool {
    t.dtype().is_integer() && t.shape().dims().iter().product::<usize>() <= MAX_BOUND_ELEMENTS
}

/// A model's nodes from `start` on, shared: the rests of a model split at data-dependent
/// nodes are suffixes of one list, held once (a copy per rest made memory and planning time
/// grow with the square of the splits).
#[derive(Debug, Clone)]
pub(crate) struct Nodes {
    all: Arc<Vec<NodeProto>>,
    /// What the nodes of `all` read and define, built at the first use and shared by every
    /// rest: a split, and the import of a rest, ask it instead of walking the nodes after
    /// them.
    names: Arc<OnceLock<Arc<NodeNames>>>,
    start: usize,
}

impl Nodes {
    /// All of `nodes`.
    pub(crate) fn new(nodes: Vec<NodeProto>) -> Self {
        Nodes {
            all: Arc::new(nodes),
            names: Arc::new(OnceLock::new()),
            start: 0,
        }
    }

    /// The nodes, in order.
    pub(crate) fn get(&self) -> &[NodeProto] {
        self.all.get(self.start..).unwrap_or_default()
    }

    /// The nodes after the one at `index` (of [`Nodes::get`]).
    fn after(&self, index: usize) -> Nodes {
        Nodes {
            all: self.all.clone(),
            names: self.names.clone(),
            start: self.start.saturating_add(index).saturating_add(1),
        }
    }

    /// The first node at or after `index` (of [`Nodes::get`]) that reads `name`, as an index
    /// of [`Nodes::get`].
    fn first_reader(&self, name: &str, index: usize) -> Option<usize> {
        self.index()
            .first_reader(name, self.start.saturating_add(index))
            .map(|i| i - self.start)
    }

    fn index(&self) -> &Arc<NodeNames> {
        self.names
            .get_or_init(|| Arc::new(NodeNames::of(&self.all)))
    }

    /// The index of the whole list and where these nodes start in it, for an import of
    /// them (`ImportOptions::node_names`). None for the whole list before any split has
    /// built the index: the importer's own walk costs as much there, and a model that never
    /// splits then never holds the index.
    pub(crate) fn names_at(&self) -> Option<NodeNamesAt> {
        if self.start == 0 && self.names.get().is_none() {
            return None;
        }
        Some(NodeNamesAt {
            names: self.index().clone(),
            start: self.start,
        })
    }
}

/// How a node is named in import reports: its name, or `<op_type>_<index>`.
fn node_label(node: &NodeProto, index: usize) -> String {
    match node.name.as_deref() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => format!("{}_{index}", node.op_type.as_deref().unwrap_or_default()),
    }
}

/// A graph input declaration for `t`: its element type and rank, every dimension symbolic
/// (`<name>_d<k>`) so that the nested network takes any shape of that rank.
fn declare(name: &str, t: &Tensor) -> ValueInfoProto {
    let dim = t
        .shape()
        .dims()
        .iter()
        .enumerate()
        .map(|(k, _)| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimParam(format!(
                "{name}_d{k}"
            ))),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: i32::try_from(t.dtype().onnx_code()).ok(),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A graph output naming `name` (the importer needs only the name).
fn output(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.to_string()),
        ..Default::default()
    }
}

/// A model with `model`'s opsets and functions around `graph`.
fn with_graph(model: &ModelProto, graph: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: model.ir_version,
        opset_import: model.opset_import.clone(),
        functions: model.functions.clone(),
        graph: Some(graph),
        ..Default::default()
    }
}

/// The initializers of `graph` that `names` reads.
fn initializers_read(graph: &GraphProto, names: &HashSet<&str>) -> Vec<TensorProto> {
    graph
        .initializer
        .iter()
        .filter(|t| t.name.as_deref().is_some_and(|n| names.contains(n)))
        .cloned()
        .collect()
}

/// Where a model was split, found from the import's report of the nodes that need run-time
/// values.
pub(crate) struct Cut<'r> {
    /// The part before the node, when it computes anything the rest reads: a model whose
    /// inputs are the given inputs and whose outputs are the tensors the rest reads.
    pub prefix: Option<ModelProto>,
    /// The split.
    pub split: Split<'r>,
}

/// Whether a subgraph of `node` (at any depth) holds a node of `op_type`.
fn holds_op(node: &NodeProto, op_type: &str) -> bool {
    node.attribute
        .iter()
        .flat_map(|a| a.g.iter().chain(a.graphs.iter()))
        .flat_map(|g| g.node.iter())
        .any(|n| n.op_type.as_deref() == Some(op_type) || holds_op(n, op_type))
}

/// The first place a model's plan is cut, found without running it: for tools that show
/// the static part (`backplane inspect`).
#[derive(Debug, Clone)]
pub struct FirstCut {
    /// The node's name (or `<op_type>_<index>`).
    pub label: String,
    /// The node's operator.
    pub op_type: String,
    /// The model before the node (inputs: the given ones; outputs: every tensor the node
    /// and the rest read), when it computes anything.
    pub prefix: Option<ModelProto>,
}

/// Where the plan of `model` is first cut: at the first node among `needing` (label and
/// operator as the import reports them, see [`crate::onnx::OnnxError::NeedsInputValues`]);
/// `given` names the model's inputs.
pub fn first_cut(
    model: &ModelProto,
    needing: &[(String, String)],
    given: &[String],
) -> Result<FirstCut, Error> {
    let graph = graph_of(model)?;
    let index = find_node(&graph.node, needing)?;
    let node = &graph.node[index];
    Ok(FirstCut {
        label: node_label(node, index),
        op_type: node.op_type.clone().unwrap_or_default(),
        prefix: {
            let later: HashSet<&str> = graph.node[index..].iter().flat_map(reads).collect();
            let before = &graph.node[..index];
            prefix_of(model, graph, before, |n| later.contains(n), given).1
        },
    })
}

fn graph_of(model: &ModelProto) -> Result<&GraphProto, Error> {
    model
        .graph
        .as_ref()
        .ok_or_else(|| Error::Invalid("the model has no graph".into()))
}

/// The index of the first of `nodes` among `needing`.
fn find_node(nodes: &[NodeProto], needing: &[(String, String)]) -> Result<usize, Error> {
    nodes
        .iter()
        .enumerate()
        .position(|(i, n)| {
            let label = node_label(n, i);
            needing
                .iter()
                .any(|(l, op)| *l == label || holds_op(n, op))
        })
        .ok_or_else(|| {
            Error::Invalid(format!(
                "the import reported nodes that need run-time values ({}) that are not in the graph",
                needing
                    .iter()
                    .map(|(l, _)| l.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// The tensors computed before node `index` that it, the nodes after it or the graph
/// outputs read (the frontier), and the model computing them, if there are any.
fn prefix_of(
    model: &ModelProto,
    graph: &GraphProto,
    before: &[NodeProto],
    read_later: impl Fn(&str) -> bool,
    given: &[String],
) -> (Vec<String>, Option<ModelProto>) {
    let outputs: HashSet<&str> = graph
        .output
        .iter()
        .filter_map(|o| o.name.as_deref())
        .collect();
    let later = |name: &str| outputs.contains(name) || read_later(name);
    let mut frontier: Vec<String> = Vec::new();
    for name in before.iter().flat_map(|n| n.output.iter()) {
        if !name.is_empty() && later(name) && !frontier.contains(name) {
            frontier.push(name.clone());
        }
    }
    let prefix = (!frontier.is_empty()).then(|| {
        let read: HashSet<&str> = before.iter().flat_map(reads).collect();
        let inputs = graph
            .input
            .iter()
            .filter(|v| v.name.as_ref().is_some_and(|n| given.contains(n)))
            .cloned()
            .collect();
        with_graph(
            model,
            GraphProto {
                name: graph.name.clone(),
                node: before.to_vec(),
                initializer: initializers_read(graph, &read),
                input: inputs,
                output: frontier.iter().map(|n| output(n)).collect(),
                ..Default::default()
            },
        )
    });
    (frontier, prefix)
}

/// Find the first of a model's `nodes` among `needing` (label and operator, as the import
/// reports them; a node inside a subgraph stands for the top-level node holding it) and split
/// the model there (`model` gives the rest of its graph: inputs, initializers, outputs).
/// `given` names the model's inputs in the order given.
pub(crate) fn cut<'r>(
    model: &ModelProto,
    nodes: &Nodes,
    needing: &[(String, String)],
    given: &[String],
    node_cache: SharedNodeCache<'r>,
) -> Result<Cut<'r>, Error> {
    let graph = graph_of(model)?;
    let list = nodes.get();
    let index = find_node(list, needing)?;
    let before = list.get(..index).unwrap_or_default();
    let read_later = |name: &str| nodes.first_reader(name, index).is_some();
    let (frontier, prefix) = prefix_of(model, graph, before, read_later, given);
    let node = list[index].clone();
    let after = list.get(index + 1..).unwrap_or_default();
    let outputs: Vec<String> = graph.output.iter().filter_map(|o| o.name.clone()).collect();

    // Known after the node: the given inputs, the prefix's outputs and the node's outputs.
    let mut known: HashSet<&str> = given.iter().map(String::as_str).collect();
    known.extend(frontier.iter().map(String::as_str));
    known.extend(
        node.output
            .iter()
            .filter(|n| !n.is_empty())
            .map(String::as_str),
    );
    let rest_outputs: Vec<String> = outputs
        .iter()
        .filter(|o| !known.contains(o.as_str()))
        .cloned()
        .collect();
    // The rest's inputs: what is known that a node after it reads, in the order first read
    // (by node, then by the place among the node's reads). From the shared readers, so a
    // split does not walk the nodes after it.
    let mut first_read: Vec<((usize, usize), &str)> = known
        .iter()
        .filter_map(|&name| {
            let i = nodes.first_reader(name, index + 1)?;
            let place = reads(after.get(i - index - 1)?)
                .iter()
                .position(|&r| r == name)?;
            Some(((i, place), name))
        })
        .collect();
    first_read.sort_unstable();
    let rest_inputs: Vec<String> = first_read.iter().map(|(_, n)| n.to_string()).collect();
    let rest_graph = (!rest_outputs.is_empty()).then(|| GraphProto {
        name: graph.name.clone(),
        initializer: graph
            .initializer
            .iter()
            .filter(|t| {
                t.name
                    .as_deref()
                    .is_some_and(|n| nodes.first_reader(n, index + 1).is_some())
            })
            .cloned()
            .collect(),
        output: rest_outputs.iter().map(|n| output(n)).collect(),
        ..Default::default()
    });
    let node_read: HashSet<&str> = reads(&node).into_iter().collect();
    Ok(Cut {
        prefix,
        split: Split {
            label: node_label(&node, index),
            op_type: node.op_type.clone().unwrap_or_default(),
            node_initializers: initializers_read(graph, &node_read),
            node,
            frontier,
            rest_inputs,
            rest_graph,
            rest_nodes: nodes.after(index),
            rest_template: with_graph(model, GraphProto::default()),
            outputs,
            rest: Mutex::new(None),
            nodes: node_cache,
        },
    })
}

/// A plan's split: the node run on its values and the rest of the model, planned for the
/// shapes the node produces.
pub struct Split<'r> {
    /// The node's name (or `<op_type>_<index>`).
    pub label: String,
    /// The node's operator.
    pub op_type: String,
    node: NodeProto,
    node_initializers: Vec<TensorProto>,
    /// The part before the split's outputs (empty when it has none).
    frontier: Vec<String>,
    rest_inputs: Vec<String>,
    /// The rest's graph but its nodes: the initializers and outputs (inputs are declared
    /// when their types are known, at the first run); `None` when the rest computes no output.
    rest_graph: Option<GraphProto>,
    /// The nodes after the split (shared with the model's other rests).
    rest_nodes: Nodes,
    /// The model's opsets and functions.
    rest_template: ModelProto,
    /// The graph outputs, in order.
    outputs: Vec<String>,
    rest: Mutex<Option<Arc<DynamicNetwork<'r>>>>,
    /// The node's imports, by what they were specialised on ([`crate::node_cache`]).
    nodes: SharedNodeCache<'r>,
}

impl std::fmt::Debug for Split<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Split")
            .field("label", &self.label)
            .field("op_type", &self.op_type)
            .field("frontier", &self.frontier)
            .field("rest_inputs", &self.rest_inputs)
            .finish_non_exhaustive()
    }
}

/// The values known at a point of a split run, by name, borrowed: the run's inputs, what the
/// part before the split produced and, after the node, its outputs (later ones win).
struct Env<'a> {
    by_name: HashMap<&'a str, &'a Tensor>,
}

impl<'a> Env<'a> {
    fn new(inputs: &'a [(&'a str, &'a Tensor)], produced: &'a [(String, Tensor)]) -> Self {
        let mut by_name = HashMap::with_capacity(inputs.len() + produced.len());
        by_name.extend(inputs.iter().copied());
        by_name.extend(produced.iter().map(|(n, t)| (n.as_str(), t)));
        Env { by_name }
    }

    /// Add `later` values (a node's outputs), over earlier ones of the same name.
    fn extend(&mut self, later: &'a [(String, Tensor)]) {
        self.by_name
            .extend(later.iter().map(|(n, t)| (n.as_str(), t)));
    }

    fn get(&self, name: &str) -> Option<&'a Tensor> {
        self.by_name.get(name).copied()
    }
}

impl<'r> Split<'r> {
    /// The nested network serving the rest, once a run has built it.
    pub fn rest(&self) -> Option<Arc<DynamicNetwork<'r>>> {
        self.rest.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Run the split node on the values known so far (the caller's `inputs`, borrowed, and
    /// what the part before the split `produced`), then the rest; returns the graph outputs in
    /// order. No value is copied on the way: the rest borrows them, and the outputs are moved
    /// out of what was produced (only an output that is one of `inputs` is copied).
    pub(crate) fn run(
        &self,
        parent: &DynamicNetwork<'r>,
        inputs: &[(&str, &Tensor)],
        produced: Vec<(String, Tensor)>,
    ) -> Result<Vec<(String, Tensor)>, Error> {
        let mut rest_values: Vec<(String, Tensor)> = Vec::new();
        let mut env = Env::new(inputs, &produced);
        let node_values = self.evaluate_node(parent, &env)?;
        if let Some(graph) = &self.rest_graph {
            env.extend(&node_values);
            let rest = {
                let mut slot = self.rest.lock().unwrap_or_else(|e| e.into_inner());
                match slot.as_ref() {
                    Some(rest) => rest.clone(),
                    None => {
                        let mut graph = graph.clone();
                        let mut key = self.label.clone();
                        for name in &self.rest_inputs {
                            let t = env.get(name).ok_or_else(|| self.missing(name))?;
                            graph.input.push(declare(name, t));
                            key.push_str(&format!(
                                " {name}:{}/{}",
                                t.dtype().name(),
                                t.shape().dims().len()
                            ));
                        }
                        let rest = parent.rest_network(key, || {
                            (
                                with_graph(&self.rest_template, graph),
                                self.rest_nodes.clone(),
                            )
                        });
                        *slot = Some(rest.clone());
                        rest
                    }
                }
            };
            let rest_inputs: Vec<(&str, &Tensor)> = self
                .rest_inputs
                .iter()
                .map(|n| {
                    env.get(n)
                        .map(|t| (n.as_str(), t))
                        .ok_or_else(|| self.missing(n))
                })
                .collect::<Result<_, _>>()?;
            rest_values = rest.execute(&rest_inputs)?;
        }
        drop(env);
        // Moved out of what this run owns (the latest first: a later value of a name wins).
        let mut owned = [rest_values, node_values, produced];
        let mut take = |name: &str| {
            owned.iter_mut().find_map(|values| {
                let at = values.iter().position(|(n, _)| n == name)?;
                Some(values.swap_remove(at).1)
            })
        };
        let mut out: Vec<(String, Tensor)> = Vec::with_capacity(self.outputs.len());
        for name in &self.outputs {
            let t = match take(name) {
                Some(t) => t,
                // An input given back, or an output listed twice: a copy.
                None => out
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, t)| t.clone())
                    .or_else(|| {
                        inputs
                            .iter()
                            .find(|(n, _)| *n == name.as_str())
                            .map(|(_, t)| (*t).clone())
                    })
                    .ok_or_else(|| self.missing(name))?,
            };
            out.push((name.clone(), t));
        }
        Ok(out)
    }

    fn missing(&self, name: &str) -> Error {
        Error::Invalid(format!(
            "the plan split at node '{}' ({}) has no value for '{name}'",
            self.label, self.op_type
        ))
    }

    /// The node's outputs on `env` (every value known so far): from the node's
    /// cache when it was imported for the same shapes and bound values before, else by
    /// importing it alone with the values its import needs bound (the importer computes
    /// it, or makes a network of it that is loaded and kept).
    fn evaluate_node(
        &self,
        parent: &DynamicNetwork<'r>,
        env: &Env<'_>,
    ) -> Result<Vec<(String, Tensor)>, Error> {
        let mut names: Vec<&str> = Vec::new();
        for name in reads(&self.node) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        let mut inputs: Vec<(&str, &Tensor)> = Vec::with_capacity(names.len());
        for &name in &names {
            if let Some(t) = env.get(name) {
                inputs.push((name, t));
            } else if !self
                .node_initializers
                .iter()
                .any(|i| i.name.as_deref() == Some(name))
            {
                return Err(self.missing(name));
            }
        }
        // Held while the entry runs: an eviction by a concurrent run cannot unload it.
        let mut cache = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let entry = match cache.get(&inputs) {
            Some(entry) => entry,
            None => {
                let (entry, bound) = self.import_node(parent, &inputs)?;
                cache.insert(&inputs, &bound, entry, &self.label)?
            }
        };
        let values = match &*entry {
            NodeEntry::Folded(values) => values.clone(),
            NodeEntry::Loaded {
                id, feeds, outputs, ..
            } => {
                let fed: Vec<(&str, &Tensor)> = inputs
                    .iter()
                    .filter(|(n, _)| feeds.iter().any(|f| f == n))
                    .copied()
                    .collect();
                let mut produced = parent.runtime().execute(*id, &fed).map_err(|e| {
                    Error::Invalid(format!(
                        "node '{}' ({}) decides shapes from run-time values, and running it \
                         failed: {e}",
                        self.label, self.op_type
                    ))
                })?;
                outputs
                    .iter()
                    .map(|n| {
                        produced
                            .iter()
                            .position(|(p, _)| p == n)
                            .map(|at| produced.swap_remove(at))
                            .ok_or_else(|| self.missing(n))
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
        };
        drop(entry);
        cache.settle();
        drop(cache);
        tracing::debug!(
            node = %self.label,
            op = %self.op_type,
            shapes = ?values.iter().map(|(n, t)| (n.as_str(), t.shape().dims().to_vec())).collect::<Vec<_>>(),
            "data-dependent node run"
        );
        Ok(values)
    }

    /// Import the node alone for `inputs`, binding the values its import needs (all of
    /// them when that fails): its outputs when the importer computed them, else the loaded
    /// network it made. Returns the entry and the inputs bound.
    fn import_node(
        &self,
        parent: &DynamicNetwork<'r>,
        inputs: &[(&str, &Tensor)],
    ) -> Result<(NodeEntry, Vec<String>), Error> {
        // Shapes and values given for the whole model name inputs this one-node model lacks.
        let mut options = parent.import_options().clone();
        options.input_shapes.clear();
        options.input_values.clear();
        for (name, t) in inputs {
            options
                .input_shapes
                .insert(name.to_string(), t.shape().dims().to_vec());
        }
        let outputs: Vec<String> = self
            .node
            .output
            .iter()
            .filter(|n| !n.is_empty())
            .cloned()
            .collect();
        let model = with_graph(
            &self.rest_template,
            GraphProto {
                node: vec![self.node.clone()],
                initializer: self.node_initializers.clone(),
                input: inputs.iter().map(|(n, t)| declare(n, t)).collect(),
                output: outputs.iter().map(|n| output(n)).collect(),
                ..Default::default()
            },
        );
        let values: Vec<(String, Tensor)> = inputs
            .iter()
            .map(|(n, t)| (n.to_string(), (*t).clone()))
            .collect();
        let failed = |e: &dyn std::fmt::Display| {
            Error::Invalid(format!(
                "node '{}' ({}) decides shapes from run-time values, and running it on them \
                 failed: {e}",
                self.label, self.op_type
            ))
        };
        // Only what the import needs, so that the entry serves other values of the rest.
        let specialised = crate::onnx::import_model_specialized(
            model.clone(),
            parent.base_dir(),
            &options,
            &values,
        )
        .map_err(Error::from)
        .and_then(|(network, bound)| {
            let entry = self.entry(parent, &network, &outputs)?;
            Ok((entry, bound))
        });
        match specialised {
            Ok(found) => Ok(found),
            Err(first) => {
                tracing::debug!(
                    node = %self.label,
                    "the node imported with only the values it needs failed ({first}): every \
                     input bound"
                );
                for (name, t) in &values {
                    options
                        .input_values
                        .insert(name.clone(), Arc::new(t.clone()));
                }
                // The importer's own error (an unsupported operator stays one).
                let network = crate::onnx::import_model(model, parent.base_dir(), &options)?;
                let entry = self
                    .entry(parent, &network, &outputs)
                    .map_err(|e| failed(&e))?;
                Ok((entry, values.into_iter().map(|(n, _)| n).collect()))
            }
        }
    }

    /// The cache entry of an imported one-node network: its outputs when they are all
    /// constants, else the network loaded.
    fn entry(
        &self,
        parent: &DynamicNetwork<'r>,
        network: &crate::Network,
        outputs: &[String],
    ) -> Result<NodeEntry, Error> {
        let mut values = Vec::with_capacity(outputs.len());
        for (name, &id) in outputs.iter().zip(network.outputs()) {
            if let TensorKind::Constant(t) = &network.tensor(id).kind {
                values.push((name.clone(), (**t).clone()));
            }
        }
        if values.len() == outputs.len() && network.outputs().len() == outputs.len() {
            return Ok(NodeEntry::Folded(values));
        }
        // Not folded (a TopK whose data stays an input, a Loop kept as a layer): loaded.
        let (id, optimized) =
            parent.load(network, &mut crate::dynamic_network::PlanTimings::default())?;
        let names: Vec<String> = network
            .outputs()
            .iter()
            .map(|&t| network.tensor(t).name.clone())
            .collect();
        if outputs.iter().any(|o| !names.contains(o)) {
            if let Err(e) = parent.runtime().unload_network(id) {
                tracing::warn!(network = id.0, "one-node network not unloaded: {e}");
            }
            return Err(Error::Invalid(format!(
                "the network made of node '{}' does not compute all of {outputs:?}",
                self.label
            )));
        }
        Ok(NodeEntry::Loaded {
            id,
            feeds: network
                .inputs()
                .iter()
                .map(|&t| network.tensor(t).name.clone())
                .collect(),
            outputs: outputs.to_vec(),
            bytes: optimized.working_bytes(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ImportOptions;

    /// A model split twice (at a NonZero, then at a NonMaxSuppression): every network serving
    /// a rest holds the model's one node list, not a copy of its suffix.
    #[test]
    fn rests_share_the_model_node_list() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let rt = crate::RuntimeBuilder::new().build().unwrap();
        let net = DynamicNetwork::from_file(
            &rt,
            &root.join("testdata/dynamic/data_dependent.onnx"),
            &ImportOptions::default(),
            crate::default_optimizer_options(),
        )
        .unwrap();
        let dir = root.join("testdata/dynamic/data_dependent/a");
        let read = |n: &str| crate::npy::read_file(&dir.join(format!("{n}.npy"))).unwrap();
        let (logits, boxes) = (read("logits"), read("boxes"));
        net.execute(&[("logits", &logits), ("boxes", &boxes)])
            .unwrap();
        let (_, top) = net.kept_model();
        assert_eq!(top.start, 0);
        // Every network serving a rest, at any depth: two (after each cut).
        let mut found = Vec::new();
        let mut todo = net.nested_networks();
        while let Some(rest) = todo.pop() {
            let (model, nodes) = rest.kept_model();
            assert!(Arc::ptr_eq(&nodes.all, &top.all), "a rest holds a copy");
            assert!(model.graph.as_ref().is_some_and(|g| g.node.is_empty()));
            found.push(nodes.start);
            todo.extend(rest.nested_networks());
        }
        found.sort_unstable();
        // The split built the index, and the rests share it.
        assert!(top.names.get().is_some(), "a split did not build the index");
        assert!(top.names_at().is_some());
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(0 < found[0] && found[0] < found[1], "{found:?}");
        assert!(found[1] < top.all.len(), "{found:?}");
    }

    /// A model that never splits never builds the node index (its import walks the nodes
    /// itself), so it does not hold one for its life.
    #[test]
    fn a_model_that_never_splits_builds_no_node_index() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let rt = crate::RuntimeBuilder::new().build().unwrap();
        let net = DynamicNetwork::from_file(
            &rt,
            &root.join("testdata/dynamic/bert_tiny.onnx"),
            &ImportOptions::default(),
            crate::default_optimizer_options(),
        )
        .unwrap();
        for seq in [5usize, 9] {
            let values: Vec<f64> = (0..seq).map(|i| (i % 64) as f64).collect();
            let ids = Tensor::from_f64_values(
                backplane_core::TensorInfo::new(backplane_core::DataType::I64, vec![1, seq]),
                &values,
            )
            .unwrap();
            net.execute(&[("input_ids", &ids)]).unwrap();
        }
        assert!(net.nested_networks().is_empty(), "the model split");
        let (_, top) = net.kept_model();
        assert!(top.names.get().is_none());
        assert!(top.names_at().is_none());
    }
}
