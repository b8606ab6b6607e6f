//! Replaying a recorded optimization ([`OptimizationRecord`]) for a network of the same
//! structure ([`backplane_core::StructuralKey`]) at other shapes: the optimizer's decisions
//! are taken from the record where they still hold, and checked where they may not.
//!
//! * Every layer's backend is chosen again as in a full optimization: support answers kept
//!   for every shape ([`super::SupportAnswers`]) are replayed, every other answer is asked at
//!   the new shapes. The first of the given records (several decisions may be kept for one
//!   structure, a backend's answers changing with the shapes) whose layers are on those
//!   backends is replayed; none: the replay is refused.
//! * Each backend's substitutions are made again by its own `optimize_subgraph`, given only
//!   the layers it replaced in the record (not the runs it left as they were): a replacement
//!   carries shape-dependent parameters (CpuAcc's fused layers hold output descriptions and
//!   strided views), so it cannot be copied from the record. The answer must replace the
//!   same layers by replacement layers of the same names; anything else refuses the replay.
//! * The substitutions are applied and checked as in a full optimization (each replacement
//!   layer asked whether its backend supports it); then the tensor-handle strategy, the
//!   host-memory plan and the control-flow bodies (optimized in full) as always.
//! * The result must have the record's decisions exactly ([`OptimizedNetwork::record`]):
//!   layers, backends, order, substitutions, cancelled permutes.
//!
//! A refused replay costs what it did so far; the caller then optimizes in full. A replay does
//! not look for substitutions the record does not have (a fusion a backend would make only at
//! the new shapes): what it returns is a valid optimization, possibly less fused than a full
//! one would be.

use super::*;

/// What [`crate::Runtime::replay_optimization`] came to.
#[derive(Debug)]
pub enum ReplayOutcome {
    /// The record's decisions hold at the network's shapes: the network optimized as
    /// recorded, re-shaped.
    Replayed(Box<OptimizedNetwork>),
    /// A decision does not hold (why): the network needs a full optimization.
    Refused(String),
}

/// The layers each backend replaced in `record`, by backend, when every layer of `network`
/// goes where the record says (`assign`, indexed like its layers); else why not.
fn recorded_groups(
    network: &Network,
    assign: &[BackendId],
    record: &OptimizationRecord,
) -> std::result::Result<Vec<(BackendId, Vec<LayerId>)>, String> {
    if !record.replayable {
        return Err(
            "when it was recorded, a backend rejected layers (or returned an invalid answer) in \
             optimize_subgraph"
                .into(),
        );
    }
    // Every layer the record did not replace keeps its recorded backend.
    let recorded: HashMap<&str, &BackendId> = record
        .layers
        .iter()
        .map(|(name, backend)| (name.as_str(), backend))
        .collect();
    for (layer, backend) in network.layers().iter().zip(assign) {
        if let Some(&was) = recorded.get(layer.name.as_str()) {
            if was != backend {
                return Err(format!(
                    "layer '{}' goes to {backend} at these shapes, to {was} when recorded",
                    layer.name
                ));
            }
        }
    }
    // The replaced ones are on the backend that replaced them.
    let mut groups: Vec<(BackendId, Vec<LayerId>)> = Vec::new();
    for s in &record.substitutions {
        for name in &s.replaced {
            let Some(id) = network.find_layer(name) else {
                return Err(format!(
                    "the recorded substitution's layer '{name}' is missing"
                ));
            };
            if assign[id.0] != s.backend {
                return Err(format!(
                    "layer '{name}' goes to {} at these shapes, to {} when recorded",
                    assign[id.0], s.backend
                ));
            }
            match groups.iter_mut().find(|(b, _)| *b == s.backend) {
                Some((_, layers)) => layers.push(id),
                None => groups.push((s.backend.clone(), vec![id])),
            }
        }
    }
    Ok(groups)
}

/// Replay the first of `records` whose backend choices hold for `network` (see the module
/// documentation).
pub(crate) fn replay(
    registry: &BackendRegistry,
    network: &Network,
    options: &OptimizerOptions,
    records: &[&OptimizationRecord],
) -> Result<ReplayOutcome> {
    let refused = |why: String| Ok(ReplayOutcome::Refused(why));
    network.validate()?;
    let cancelled = crate::strategy::cancel_inverse_permutes(network)?;
    let (network, permutes_cancelled) = match &cancelled {
        Some((n, count)) => (n, *count),
        None => (network, 0),
    };
    let mut why_not: Option<String> = None;
    let records: Vec<&OptimizationRecord> = records
        .iter()
        .copied()
        .filter(|r| {
            let fits = r.permutes_cancelled == permutes_cancelled;
            if !fits && why_not.is_none() {
                why_not = Some(format!(
                    "{permutes_cancelled} pairs of inverse permutes cancel, {} when recorded",
                    r.permutes_cancelled
                ));
            }
            fits
        })
        .collect();
    if records.is_empty() {
        return refused(why_not.unwrap_or_else(|| "no record to replay".into()));
    }
    if options.backends.is_empty() && options.layer_backends.is_empty() {
        return Err(RuntimeError::NoBackends);
    }
    let candidates = candidates(registry, options)?;
    check_overrides(network, options)?;
    let mut report = OptimizationReport {
        permutes_cancelled,
        ..OptimizationReport::default()
    };

    // Every layer's backend, as a full optimization chooses it: kept answers replayed, the
    // others asked at these shapes.
    let mut states: HashMap<String, LayerState> = HashMap::with_capacity(network.layers().len());
    for layer in network.layers() {
        let mut desc = LazyDesc::new(network, layer);
        match choose(
            &candidates,
            options,
            &mut desc,
            &BTreeSet::new(),
            &mut report,
        ) {
            Ok(backend) => {
                states.insert(layer.name.clone(), LayerState::settled(backend));
            }
            Err(u) => {
                return refused(format!(
                    "no backend supports layer '{}' at these shapes",
                    u.layer
                ))
            }
        }
    }
    let assign: Vec<BackendId> = network
        .layers()
        .iter()
        .map(|l| states[&l.name].backend.clone())
        .collect();
    // The first record whose backends these are.
    let mut chosen = None;
    for record in records {
        match recorded_groups(network, &assign, record) {
            Ok(groups) => {
                chosen = Some((record, groups));
                break;
            }
            Err(why) => {
                why_not.get_or_insert(why);
            }
        }
    }
    let Some((record, replaced)) = chosen else {
        return refused(why_not.unwrap_or_else(|| "no record to replay".into()));
    };
    let order = grouped_order(network, &assign);
    let mut position = vec![0usize; network.layers().len()];
    for (at, l) in order.iter().enumerate() {
        if let Some(p) = position.get_mut(l.0) {
            *p = at;
        }
    }

    // Each backend's substitutions again, from its optimize_subgraph on those layers alone.
    // A recorded substitution is found by its first replaced layer (each layer is replaced
    // once in an optimization).
    let by_first: HashMap<&str, usize> = record
        .substitutions
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.replaced.first().map(|name| (name.as_str(), i)))
        .collect();
    let mut found: Vec<Option<Substitution>> = vec![None; record.substitutions.len()];
    for (backend_id, mut layers) in replaced {
        layers.sort_by_key(|l| position.get(l.0).copied().unwrap_or(usize::MAX));
        let Some(cand) = candidates.iter().find(|c| c.id == backend_id) else {
            return refused(format!("backend {backend_id} is not among the candidates"));
        };
        let view = SubgraphView::new(network, layers.clone());
        let views = cand.backend.optimize_subgraph(&view);
        if let Err(e) = check_partition(&backend_id, &layers, &views) {
            return refused(format!("{backend_id}'s answer is invalid: {e}"));
        }
        if views
            .failed
            .iter()
            .chain(&views.untouched)
            .any(|l| !l.is_empty())
        {
            return refused(format!(
                "{backend_id} no longer replaces every layer it replaced when recorded"
            ));
        }
        let names = |ids: &[LayerId]| -> Vec<String> {
            ids.iter().map(|l| network.layer(*l).name.clone()).collect()
        };
        for s in views.substitutions {
            let replaced_names = names(&s.replaced);
            let at = replaced_names
                .first()
                .and_then(|first| by_first.get(first.as_str()).copied())
                .filter(|&i| {
                    let r = &record.substitutions[i];
                    found[i].is_none()
                        && r.backend == backend_id
                        && r.replaced == replaced_names
                        && r.replacement.len() == s.replacement.len()
                        && r.replacement
                            .iter()
                            .zip(&s.replacement)
                            .all(|(a, b)| *a == b.name)
                });
            let Some(at) = at else {
                return refused(format!(
                    "{backend_id} replaced [{}] otherwise than recorded",
                    replaced_names.join(", ")
                ));
            };
            found[at] = Some(s);
        }
    }
    let mut subs: Vec<(&BackendId, Substitution)> = Vec::with_capacity(found.len());
    for (r, s) in record.substitutions.iter().zip(found) {
        let Some(s) = s else {
            return refused(format!(
                "{} did not replace [{}] again",
                r.backend,
                r.replaced.join(", ")
            ));
        };
        subs.push((&r.backend, s));
    }

    // Applied and checked as a full optimization applies them.
    let current = if subs.is_empty() {
        network.clone()
    } else {
        let all: Vec<(&BackendId, &Substitution)> = subs.iter().map(|(b, s)| (*b, s)).collect();
        match substitute(network, &order, &all, &candidates) {
            Ok((next, new_layers)) => {
                for (name, backend) in new_layers {
                    states.insert(name, LayerState::settled(backend));
                }
                next
            }
            Err(e) => return refused(format!("the substitutions do not apply again: {e}")),
        }
    };
    report.substitutions = record.substitutions.clone();
    let optimized = finish(registry, current, &states, &candidates, report, options)?;
    if optimized.record() != *record {
        return refused(
            "the replayed network's layers, their order or their backends differ from the record"
                .into(),
        );
    }
    Ok(ReplayOutcome::Replayed(Box::new(optimized)))
}
