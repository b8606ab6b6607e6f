//! What a model's nodes read and define, indexed once per node list. A data-dependent model
//! is imported again from each of its split points on (a suffix of one node list): the
//! imports and the splits ask this index which later nodes read a name, instead of walking
//! the nodes after them each time.

use crate::proto::{GraphProto, NodeProto};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The names a node reads: its inputs and, for nodes with subgraphs (If, Loop, Scan), the
/// outer values its subgraphs use.
pub fn node_reads(node: &NodeProto) -> Vec<&str> {
    let mut out: Vec<&str> = node
        .input
        .iter()
        .filter(|n| !n.is_empty())
        .map(String::as_str)
        .collect();
    for attr in &node.attribute {
        if let Some(g) = &attr.g {
            graph_reads(g, &mut out);
        }
        for g in &attr.graphs {
            graph_reads(g, &mut out);
        }
    }
    out
}

/// The outer values a subgraph reads.
fn graph_reads<'a>(graph: &'a GraphProto, out: &mut Vec<&'a str>) {
    let mut local: HashSet<&str> = graph
        .input
        .iter()
        .filter_map(|v| v.name.as_deref())
        .collect();
    local.extend(graph.initializer.iter().filter_map(|t| t.name.as_deref()));
    for node in &graph.node {
        for name in node_reads(node) {
            if !local.contains(name) {
                out.push(name);
            }
        }
        local.extend(node.output.iter().map(String::as_str));
    }
    for o in &graph.output {
        if let Some(n) = o.name.as_deref() {
            if !local.contains(n) {
                out.push(n);
            }
        }
    }
}

/// For each name a node list reads ([`node_reads`]), the indices of the nodes reading it
/// (ascending), and every name the nodes define.
#[derive(Debug, Default)]
pub struct NodeNames {
    readers: HashMap<String, Vec<usize>>,
    defined: HashSet<String>,
}

impl NodeNames {
    /// The index of `nodes`.
    pub fn of(nodes: &[NodeProto]) -> NodeNames {
        let mut readers: HashMap<String, Vec<usize>> = HashMap::new();
        let mut defined = HashSet::new();
        for (i, node) in nodes.iter().enumerate() {
            for name in node_reads(node) {
                let at = readers.entry(name.to_string()).or_default();
                if at.last() != Some(&i) {
                    at.push(i);
                }
            }
            defined.extend(node.output.iter().filter(|n| !n.is_empty()).cloned());
        }
        NodeNames { readers, defined }
    }

    /// The first node at or after index `from` that reads `name`.
    pub fn first_reader(&self, name: &str, from: usize) -> Option<usize> {
        let at = self.readers.get(name)?;
        at.get(at.partition_point(|&i| i < from)).copied()
    }

    /// Whether a node of the list defines `name`.
    pub fn defines(&self, name: &str) -> bool {
        self.defined.contains(name)
    }
}

/// An index and where in its node list the nodes an import is given start
/// ([`crate::ImportOptions::node_names`]).
#[derive(Debug, Clone)]
pub struct NodeNamesAt {
    /// The index of the whole list.
    pub names: Arc<NodeNames>,
    /// The index of the first node given.
    pub start: usize,
}

impl NodeNamesAt {
    /// Whether a node given (at or after `start`) reads `name`.
    pub fn read_by_given(&self, name: &str) -> bool {
        self.names.first_reader(name, self.start).is_some()
    }
}
