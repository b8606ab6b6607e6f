//! If: a condition known at import inlines the branch it takes (the other is never imported);
//! otherwise both branches become nested networks of one If layer. What a branch needs that
//! only the condition can settle (different output shapes, a branch that does not fit these
//! inputs, sequences) makes the condition needed at import.

use super::control::{bad, declares_tensors, take_graph, Operand};
use super::Importer;
use crate::ops::TxError;
use crate::proto::{GraphProto, NodeProto};
use crate::OnnxError;
use backplane_core::ops::IfDesc;
use backplane_core::{Network, Op, TensorInfo};
use std::collections::HashMap;
use std::sync::Arc;

/// The error for a condition computed at run time that is needed at import: `NeedsValues`
/// for the graph inputs behind it, or unsupported when it depends on none.
fn needs_condition(reason: &str, inputs: Vec<String>) -> TxError {
    if inputs.is_empty() {
        TxError::Unsupported(format!("{reason} computed at run time"))
    } else {
        TxError::NeedsValues {
            reason: reason.into(),
            inputs,
        }
    }
}

/// Whether a branch failed on something that may hold only for the shapes and values of this
/// import (an operator's shape or type check, a parameter out of range), as opposed to a file
/// that cannot be read or a node that is not supported.
fn shape_dependent(e: &OnnxError) -> bool {
    matches!(
        e,
        OnnxError::Core { .. }
            | OnnxError::InvalidModel(_)
            | OnnxError::Evaluator { .. }
            | OnnxError::TensorTooLarge { .. }
    )
}

/// An error of a node inside `what` (an If's branch), renamed to say that it is inside the
/// node `name`.
fn in_branch(e: TxError, name: &str, what: &str) -> TxError {
    let TxError::Fatal(e) = e else { return e };
    TxError::Fatal(match e {
        OnnxError::Core { node, source } => OnnxError::Core {
            node: format!("{name}/{what}/{node}"),
            source,
        },
        OnnxError::Evaluator { node, message } => OnnxError::Evaluator {
            node: format!("{name}/{what}/{node}"),
            message,
        },
        OnnxError::InvalidModel(m) if !m.starts_with(&format!("node '{name}'")) => {
            OnnxError::InvalidModel(format!("node '{name}' ({what}): {m}"))
        }
        other => other,
    })
}

/// The error of an If whose condition is computed at run time and one of whose branches (or
/// both) failed to import. A failure that may come from this import's shapes needs the
/// condition: the branch may be one these inputs never take. When the condition depends on no
/// graph input the branch's own error stands.
fn branch_failure(
    name: &str,
    then_err: Option<TxError>,
    else_err: Option<TxError>,
    cond_inputs: Vec<String>,
) -> TxError {
    let mut first = None;
    for (err, what) in [(then_err, "then branch"), (else_err, "else branch")] {
        match err {
            None => {}
            Some(TxError::Fatal(e)) if shape_dependent(&e) => {
                first.get_or_insert((e, what));
            }
            // Unsupported nodes are reported as such; they win over a needed condition.
            Some(other) => return other,
        }
    }
    let Some((e, what)) = first else {
        return bad(name, "internal error: an If branch failed without an error");
    };
    if cond_inputs.is_empty() {
        return in_branch(TxError::Fatal(e), name, what);
    }
    let reason = format!(
        "its condition (the {what}, perhaps not taken for these inputs, cannot be imported \
         for them: {e})"
    );
    needs_condition(&reason, cond_inputs)
}

impl Importer<'_> {
    /// Import the nodes of `graph` into this network, as if they were written in place of
    /// `node`, whose outputs become the graph's outputs (an If whose branch is known).
    fn inline_graph(
        &mut self,
        node: &NodeProto,
        name: &str,
        mut graph: GraphProto,
        opsets: &HashMap<String, i64>,
    ) -> Result<(), TxError> {
        if graph.output.len() != node.output.len() {
            return Err(bad(
                name,
                format!(
                    "the branch gives {} outputs, the node has {}",
                    graph.output.len(),
                    node.output.len()
                ),
            ));
        }
        let base = self.layer_names.len();
        self.inline_nodes(&mut graph, base, opsets)?;
        // The branch's outputs go by the node's output names.
        for (o, target) in graph.output.iter().zip(&node.output) {
            if target.is_empty() {
                continue;
            }
            let from = o.name.clone().unwrap_or_default();
            self.alias(&from, target, name)?;
        }
        Ok(())
    }

    pub(super) fn if_node(
        &mut self,
        node: &mut NodeProto,
        name: &str,
        opsets: &HashMap<String, i64>,
    ) -> Result<(), TxError> {
        let then_g = take_graph(node, "then_branch", name)?;
        let else_g = take_graph(node, "else_branch", name)?;
        let cond = node.input.first().cloned().unwrap_or_default();
        let (cond_value, cond_id) = match self.operand(name, &cond)? {
            Operand::Absent => return Err(bad(name, "the condition is missing")),
            Operand::Known(t) => (Some(t), None),
            Operand::Runtime(id) => (None, Some(id)),
        };
        if let Some(t) = cond_value {
            // Known at import: only the branch taken is imported; the other is never looked
            // at, so it may well not fit these shapes (a path for other inputs).
            let take_then = t.to_f64_vec().first().is_some_and(|v| *v != 0.0);
            let (branch, what) = if take_then {
                (then_g, "then branch")
            } else {
                (else_g, "else branch")
            };
            return self
                .inline_graph(node, name, branch, opsets)
                .map_err(|e| in_branch(e, name, what));
        }
        let cond_inputs = cond_id.map(|id| self.inputs_behind(id)).unwrap_or_default();
        if !declares_tensors(&then_g) || !declares_tensors(&else_g) {
            // Sequences and optionals exist only at import: the branch must be known.
            return Err(needs_condition(
                "an If whose branches produce sequences or optionals (its condition)",
                cond_inputs,
            ));
        }
        let captured = self.captures(name, &[&then_g, &else_g])?;
        let formal: Vec<TensorInfo> = Vec::new();
        let then_branch = self.import_body(name, "then branch", then_g, &formal, &captured, opsets);
        let else_branch = self.import_body(name, "else branch", else_g, &formal, &captured, opsets);
        let (then_branch, else_branch) = match (then_branch, else_branch) {
            (Ok(t), Ok(e)) => (t, e),
            (t, e) => return Err(branch_failure(name, t.err(), e.err(), cond_inputs)),
        };
        let outputs = |n: &Network| -> Vec<TensorInfo> {
            n.outputs()
                .iter()
                .map(|t| n.tensor(*t).info.clone())
                .collect()
        };
        let (a, b) = (outputs(&then_branch), outputs(&else_branch));
        let same = a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.same_layout(y));
        if !same {
            // Shapes are static: which branch runs must then be known at import.
            return Err(needs_condition(
                "an If whose branches produce different shapes (its condition)",
                cond_inputs,
            ));
        }
        let op = Op::If(IfDesc {
            then_branch: Arc::new(then_branch),
            else_branch: Arc::new(else_branch),
        });
        let mut inputs = vec![Ok(cond)];
        inputs.extend(captured.into_iter().map(Ok));
        self.add_control_layer(node, name, op, inputs)
    }
}
