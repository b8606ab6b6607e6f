//! The optimizer: backend assignment with fallback, per-backend subgraph optimization.
//!
//! 1. Each layer goes to the first backend whose layer support accepts it: its override (by
//!    layer name, then by op type) first, then the preference list.
//! 2. The graph is ordered so that layers of one backend stay together, and cut into runs of
//!    consecutive layers with the same backend. A run is convex (no path leaves and re-enters
//!    it), so a backend may replace any part of it.
//! 3. Each run goes to its backend's `optimize_subgraph`. Substitutions are validated and
//!    applied; failed layers are re-assigned to the next backends that accept them and their
//!    new runs optimized in turn. An invalid answer (static or dynamic backend alike) leaves
//!    its run untouched, with a warning and a [`RejectedOptimization`] in the report.

use crate::{BackendRegistry, Result, RuntimeError, UnsupportedLayer};
use backplane_backend_api::{
    Backend, BackendId, LayerDesc, LayerSupport, OptimizationViews, SubgraphView, Substitution,
    Support, ValueRef,
};
use backplane_core::{LayerId, Network, TensorId, TensorKind};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

mod rebuild;
mod record;
mod replay;
mod support_answers;
use rebuild::rebuild;
pub use record::OptimizationRecord;
pub(crate) use replay::replay;
pub use replay::ReplayOutcome;
pub use support_answers::SupportAnswers;

/// What the optimizer is asked to do.
#[derive(Debug, Clone, Default)]
pub struct OptimizerOptions {
    /// Backends in order of preference.
    pub backends: Vec<BackendId>,
    /// Per-layer overrides: a layer name (or an op type, matching every layer of that type)
    /// and the backend to try first for it.
    pub layer_backends: Vec<(String, BackendId)>,
    /// Support answers shared by the optimizations of one model at several shapes: answers a
    /// backend says hold at every shape are asked once and replayed ([`SupportAnswers`]).
    /// `None`: every layer is asked at every optimization.
    pub support_answers: Option<Arc<SupportAnswers>>,
}

impl OptimizerOptions {
    /// Options with a preference list and no overrides.
    pub fn new(backends: Vec<BackendId>) -> Self {
        OptimizerOptions {
            backends,
            layer_backends: Vec::new(),
            support_answers: None,
        }
    }
}

/// The reason the report gives for a layer a backend rejected in `optimize_subgraph` (it
/// went to the next backend that accepts it).
const SUBGRAPH_REFUSAL: &str = "rejected by optimize_subgraph";

/// One substitution a backend made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubstitutionRecord {
    /// The backend that made it.
    pub backend: BackendId,
    /// Names of the replaced layers.
    pub replaced: Vec<String>,
    /// Names of the replacement layers.
    pub replacement: Vec<String>,
}

/// What the optimizer decided, for users and tools (`backplane inspect`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OptimizationReport {
    /// Substitutions applied, in order.
    pub substitutions: Vec<SubstitutionRecord>,
    /// (layer, backend, reason) for every backend that refused a layer that then went
    /// elsewhere: by layer support, or by rejecting it in `optimize_subgraph`.
    pub refusals: Vec<(String, BackendId, String)>,
    /// Pairs of adjacent inverse layout permutes removed.
    pub permutes_cancelled: usize,
    /// Subgraph optimizations the optimizer refused as invalid (their runs were left as
    /// they were, on the same backend), in order.
    pub rejected: Vec<RejectedOptimization>,
}

/// A backend's answer from `optimize_subgraph` that the optimizer refused because it was
/// invalid (a layer accounted for twice, duplicate layer names, a replacement computing a
/// tensor with another type or shape, ...). Its run of layers was left untouched: they stay
/// on that backend, unfused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedOptimization {
    /// The backend whose answer was refused.
    pub backend: BackendId,
    /// Names of the layers of the run it was asked to optimize.
    pub layers: Vec<String>,
    /// What was wrong with the answer.
    pub reason: String,
}

/// A network with a backend for every layer, ready to load.
#[derive(Debug, Clone)]
pub struct OptimizedNetwork {
    pub(crate) network: Network,
    pub(crate) assignment: Vec<BackendId>,
    pub(crate) report: OptimizationReport,
    pub(crate) factories: Vec<backplane_backend_api::FactoryId>,
    pub(crate) handle_factories: backplane_backend_api::TensorHandleFactoryRegistry,
    pub(crate) tensor_report: crate::strategy::TensorStrategyReport,
    pub(crate) layout: crate::loaded::HostLayout,
    pub(crate) subgraphs: Vec<(usize, Vec<OptimizedNetwork>)>,
}

impl OptimizedNetwork {
    /// The optimized nested networks of control-flow layers: (layer index, one per subgraph
    /// of its op, in the op's order), each partitioned across backends like the main network.
    pub fn subgraphs(&self) -> &[(usize, Vec<OptimizedNetwork>)] {
        &self.subgraphs
    }

    /// The optimized graph (after substitutions).
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// The backend of each layer, indexed like `network().layers()`.
    pub fn assignment(&self) -> &[BackendId] {
        &self.assignment
    }

    /// The backend of one layer.
    pub fn backend_of(&self, layer: LayerId) -> &BackendId {
        &self.assignment[layer.0]
    }

    /// How many layers each backend runs, in order of first appearance.
    pub fn layer_counts(&self) -> Vec<(BackendId, usize)> {
        let mut counts: Vec<(BackendId, usize)> = Vec::new();
        for b in &self.assignment {
            match counts.iter_mut().find(|(id, _)| id == b) {
                Some((_, n)) => *n += 1,
                None => counts.push((b.clone(), 1)),
            }
        }
        counts
    }

    /// The optimizer's report.
    pub fn report(&self) -> &OptimizationReport {
        &self.report
    }

    /// The tensor-handle factory each tensor lives in, indexed like `network().tensors()`.
    pub fn tensor_factories(&self) -> &[backplane_backend_api::FactoryId] {
        &self.factories
    }

    /// The tensor-handle plan: every edge's strategy, copies and bytes copied per execution.
    pub fn tensor_strategy(&self) -> &crate::strategy::TensorStrategyReport {
        &self.tensor_report
    }

    /// The host-memory plan: arena bytes against the sum of tensor sizes and the lower bound.
    pub fn memory_plan(&self) -> &crate::memory_plan::MemoryPlan {
        &self.layout.plan
    }
}

struct Candidate {
    id: BackendId,
    backend: Box<dyn Backend>,
    support: Arc<dyn LayerSupport>,
}

#[derive(Clone)]
struct LayerState {
    backend: BackendId,
    settled: bool,
    excluded: BTreeSet<BackendId>,
}

impl LayerState {
    /// A layer whose backend is final: a replacement layer, or a replayed decision.
    fn settled(backend: BackendId) -> LayerState {
        LayerState {
            backend,
            settled: true,
            excluded: BTreeSet::new(),
        }
    }
}

pub(crate) fn optimize(
    registry: &BackendRegistry,
    network: &Network,
    options: &OptimizerOptions,
) -> Result<OptimizedNetwork> {
    optimize_network(registry, network, options, false)
}

/// Whether a layer of `network` or of a network nested in it has this name or op type.
fn matches_layer(network: &Network, key: &str) -> bool {
    network.layers().iter().any(|l| {
        l.name == key
            || l.op.name() == key
            || l.op.subgraphs().iter().any(|g| matches_layer(g, key))
    })
}

/// Optimize `network`; `nested` for a control-flow body (optimized with its parent's options).
fn optimize_network(
    registry: &BackendRegistry,
    network: &Network,
    options: &OptimizerOptions,
    nested: bool,
) -> Result<OptimizedNetwork> {
    network.validate()?;
    let cancelled = crate::strategy::cancel_inverse_permutes(network)?;
    let (network, permutes_cancelled) = match &cancelled {
        Some((n, count)) => (n, *count),
        None => (network, 0),
    };
    if options.backends.is_empty() && options.layer_backends.is_empty() {
        return Err(RuntimeError::NoBackends);
    }
    let candidates = candidates(registry, options)?;
    // Overrides apply inside control-flow bodies too; each must match some layer.
    if !nested {
        check_overrides(network, options)?;
    }

    let mut report = OptimizationReport {
        permutes_cancelled,
        ..OptimizationReport::default()
    };
    let mut states: HashMap<String, LayerState> = HashMap::with_capacity(network.layers().len());
    let mut unsupported = Vec::new();
    for layer in network.layers() {
        let mut desc = LazyDesc::new(network, layer);
        let excluded = BTreeSet::new();
        match choose(&candidates, options, &mut desc, &excluded, &mut report) {
            Ok(b) => {
                states.insert(
                    layer.name.clone(),
                    LayerState {
                        backend: b,
                        settled: false,
                        excluded,
                    },
                );
            }
            Err(u) => unsupported.push(u),
        }
    }
    if !unsupported.is_empty() {
        return Err(unsupported_error(options, unsupported));
    }

    let mut current = network.clone();
    // Each round settles every layer it optimizes; failed layers exclude one more backend, so
    // the loop ends after at most (number of backends + 1) rounds.
    for _round in 0..=candidates.len() {
        let assign: Vec<BackendId> = current
            .layers()
            .iter()
            .map(|l| states[&l.name].backend.clone())
            .collect();
        let order = grouped_order(&current, &assign);
        let runs = runs_of(&order, &assign, |l| states[&current.layer(l).name].settled);
        let mut answers: Vec<Answer> = Vec::new();
        // Invalid answers, with their run's position (to report them in run order).
        let mut refused: Vec<(usize, Answer, RuntimeError)> = Vec::new();
        for (k, run) in runs.into_iter().enumerate() {
            let backend_id = assign[run[0].0].clone();
            let cand = candidates
                .iter()
                .find(|c| c.id == backend_id)
                .ok_or(RuntimeError::NoBackends)?;
            let view = SubgraphView::new(&current, run.clone());
            let views = cand.backend.optimize_subgraph(&view);
            let answer = Answer {
                position: k,
                backend: backend_id,
                run,
                views,
            };
            match check_partition(&answer.backend, &answer.run, &answer.views) {
                Ok(()) => answers.push(answer),
                Err(e) => refused.push((k, answer, e)),
            }
        }
        // The substitutions of all answers are validated together (the usual case: all
        // valid); when that fails, answer by answer, so one backend's invalid answer leaves
        // its run untouched and the others still apply.
        let mut outcome = None;
        let mut invalid: Vec<(usize, RuntimeError)> = Vec::new();
        {
            let subs_of = |i: usize| {
                let a = &answers[i];
                a.views.substitutions.iter().map(move |s| (&a.backend, s))
            };
            let with_subs: Vec<usize> = (0..answers.len())
                .filter(|&i| !answers[i].views.substitutions.is_empty())
                .collect();
            if !with_subs.is_empty() {
                let all: Vec<(&BackendId, &Substitution)> =
                    with_subs.iter().flat_map(|&i| subs_of(i)).collect();
                match substitute(&current, &order, &all, &candidates) {
                    Ok(next) => outcome = Some(next),
                    Err(_) => {
                        let mut accepted: Vec<usize> = Vec::new();
                        for &i in &with_subs {
                            let trial: Vec<(&BackendId, &Substitution)> = accepted
                                .iter()
                                .chain([&i])
                                .flat_map(|&j| subs_of(j))
                                .collect();
                            match substitute(&current, &order, &trial, &candidates) {
                                Ok(next) => {
                                    accepted.push(i);
                                    outcome = Some(next);
                                }
                                Err(e) => invalid.push((i, e)),
                            }
                        }
                    }
                }
            }
        }
        // What remains are the answers applied (or without substitutions).
        for (i, e) in invalid.into_iter().rev() {
            let answer = answers.remove(i);
            refused.push((answer.position, answer, e));
        }
        refused.sort_by_key(|(k, _, _)| *k);
        for (_, answer, e) in refused {
            reject(&current, &answer, e, &mut report, &mut states);
        }
        // By name: layer ids change when the substitutions are applied.
        let mut failed: Vec<String> = Vec::new();
        for answer in &answers {
            let backend_id = &answer.backend;
            for l in answer.views.untouched.iter().flatten() {
                if let Some(s) = states.get_mut(&current.layer(*l).name) {
                    s.settled = true;
                }
            }
            for l in answer.views.failed.iter().flatten() {
                tracing::info!(layer = %current.layer(*l).name, "{backend_id} rejected it in optimize_subgraph; re-assigning");
                failed.push(current.layer(*l).name.clone());
                report.refusals.push((
                    current.layer(*l).name.clone(),
                    backend_id.clone(),
                    SUBGRAPH_REFUSAL.into(),
                ));
            }
        }
        if let Some((next, new_layers)) = outcome {
            for (name, backend) in new_layers {
                states.insert(name, LayerState::settled(backend));
            }
            let applied = answers
                .iter()
                .flat_map(|a| a.views.substitutions.iter().map(move |s| (&a.backend, s)));
            for (backend, s) in applied {
                tracing::info!(
                    "{backend} substituted [{}] with [{}]",
                    s.replaced
                        .iter()
                        .map(|l| current.layer(*l).name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    s.replacement
                        .iter()
                        .map(|r| r.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                report.substitutions.push(SubstitutionRecord {
                    backend: backend.clone(),
                    replaced: s
                        .replaced
                        .iter()
                        .map(|l| current.layer(*l).name.clone())
                        .collect(),
                    replacement: s.replacement.iter().map(|r| r.name.clone()).collect(),
                });
            }
            current = next;
        }
        if failed.is_empty() {
            break;
        }
        let mut unsupported = Vec::new();
        for name in failed {
            let Some(lid) = current.find_layer(&name) else {
                continue;
            };
            let mut desc = LazyDesc::new(&current, current.layer(lid));
            let st = states.get(&name).cloned();
            let Some(mut st) = st else { continue };
            st.excluded.insert(st.backend.clone());
            match choose(&candidates, options, &mut desc, &st.excluded, &mut report) {
                Ok(b) => {
                    st.backend = b;
                    st.settled = false;
                    states.insert(name, st);
                }
                Err(u) => unsupported.push(u),
            }
        }
        if !unsupported.is_empty() {
            return Err(unsupported_error(options, unsupported));
        }
    }

    finish(registry, current, &states, &candidates, report, options)
}

/// The candidate backends of one optimization: one backend object per backend named in
/// the options, and the builtin backend (when the registry has it).
fn candidates(registry: &BackendRegistry, options: &OptimizerOptions) -> Result<Vec<Candidate>> {
    // One backend object per backend for the whole optimization.
    let mut candidates: Vec<Candidate> = Vec::new();
    let wanted = options
        .backends
        .iter()
        .chain(options.layer_backends.iter().map(|(_, b)| b));
    for id in wanted {
        if candidates.iter().any(|c| &c.id == id) {
            continue;
        }
        let backend = registry.create(id)?;
        let support = backend.layer_support();
        candidates.push(Candidate {
            id: id.clone(),
            backend,
            support,
        });
    }
    // The builtin backend is a candidate for every network (when the registry has it).
    let builtin = crate::BuiltinBackend::backend_id();
    if !candidates.iter().any(|c| c.id == builtin) {
        if let Ok(backend) = registry.create(&builtin) {
            let support = backend.layer_support();
            candidates.push(Candidate {
                id: builtin,
                backend,
                support,
            });
        }
    }
    Ok(candidates)
}

/// Every per-layer override must match some layer of the network (or of a nested one).
fn check_overrides(network: &Network, options: &OptimizerOptions) -> Result<()> {
    for (key, _) in &options.layer_backends {
        if !matches_layer(network, key) {
            return Err(RuntimeError::UnknownOverride(key.clone()));
        }
    }
    Ok(())
}

/// The end of an optimization once every layer has its backend and the substitutions are
/// applied (`current`, `states` by layer name): the grouped execution order, the
/// tensor-handle strategy, the host-memory plan and the control-flow bodies.
fn finish(
    registry: &BackendRegistry,
    current: Network,
    states: &HashMap<String, LayerState>,
    candidates: &[Candidate],
    report: OptimizationReport,
    options: &OptimizerOptions,
) -> Result<OptimizedNetwork> {
    // Final order: grouped by backend, as loaded networks execute it.
    let assign: Vec<BackendId> = current
        .layers()
        .iter()
        .map(|l| states[&l.name].backend.clone())
        .collect();
    let order = grouped_order(&current, &assign);
    // Rebuilt in that order, unless it is the order the layers are in already (a network
    // on one backend, or already grouped): copying a long chain for nothing costs more
    // than the rest of the optimizer.
    let network = if order.iter().enumerate().all(|(i, l)| l.0 == i) {
        current
    } else {
        rebuild(&current, &order, &[])?.0
    };
    let assignment: Vec<BackendId> = network
        .layers()
        .iter()
        .map(|l| states[&l.name].backend.clone())
        .collect();
    // Where each tensor lives, and the copies that needs.
    let used: Vec<(BackendId, &dyn Backend)> = candidates
        .iter()
        .filter(|c| assignment.contains(&c.id))
        .map(|c| (c.id.clone(), c.backend.as_ref()))
        .collect();
    let strategy = crate::strategy::apply(network, &assignment, &used)?;
    for e in &strategy.report.edges {
        if e.strategy != crate::strategy::EdgeStrategy::Direct {
            tracing::info!(
                "{} '{}' from {} to {} ({} bytes)",
                e.strategy,
                e.tensor,
                e.from,
                e.to,
                e.bytes
            );
        }
    }
    // Planned once here; loading reuses it.
    let layout = crate::loaded::plan_host_memory(&strategy.network, &strategy.factories)?;
    // Control-flow bodies: optimized once, with the same backends and overrides.
    let mut subgraphs = Vec::new();
    for (i, layer) in strategy.network.layers().iter().enumerate() {
        let bodies = layer.op.subgraphs();
        if bodies.is_empty() {
            continue;
        }
        let mut optimized = Vec::with_capacity(bodies.len());
        for body in bodies {
            optimized.push(optimize_network(registry, body, options, true)?);
        }
        subgraphs.push((i, optimized));
    }
    Ok(OptimizedNetwork {
        network: strategy.network,
        assignment: strategy.assignment,
        report,
        factories: strategy.factories,
        handle_factories: strategy.registry,
        tensor_report: strategy.report,
        layout,
        subgraphs,
    })
}

/// One run's answer from its backend's `optimize_subgraph`.
struct Answer {
    /// The run's position among this round's runs.
    position: usize,
    backend: BackendId,
    run: Vec<LayerId>,
    views: OptimizationViews,
}

/// Refuse an invalid answer: its run stays as it was, on the same backend, settled (not
/// offered to the backend again), and the report says why.
fn reject(
    network: &Network,
    answer: &Answer,
    error: RuntimeError,
    report: &mut OptimizationReport,
    states: &mut HashMap<String, LayerState>,
) {
    let reason = match error {
        RuntimeError::InvalidOptimization { reason, .. } => reason,
        other => other.to_string(),
    };
    let layers: Vec<String> = answer
        .run
        .iter()
        .map(|l| network.layer(*l).name.clone())
        .collect();
    tracing::warn!(
        "backend '{}' returned an invalid subgraph optimization for {} layer(s) starting at '{}'; \
         leaving them untouched: {reason}",
        answer.backend,
        layers.len(),
        layers.first().map(String::as_str).unwrap_or_default()
    );
    for name in &layers {
        if let Some(s) = states.get_mut(name) {
            s.settled = true;
        }
    }
    report.rejected.push(RejectedOptimization {
        backend: answer.backend.clone(),
        layers,
        reason,
    });
}

/// Apply `subs` to `network` (in `order`, see [`rebuild`]) and check that every replacement
/// layer is supported by the backend that made it. Returns the new network and the (name,
/// backend) of every replacement layer.
fn substitute(
    network: &Network,
    order: &[LayerId],
    subs: &[(&BackendId, &Substitution)],
    candidates: &[Candidate],
) -> Result<(Network, Vec<(String, BackendId)>)> {
    let (next, new_layers) = rebuild(network, order, subs)?;
    let backend_of: HashMap<&str, &BackendId> = new_layers
        .iter()
        .map(|(name, backend)| (name.as_str(), backend))
        .collect();
    for layer in next.layers() {
        let Some(&backend) = backend_of.get(layer.name.as_str()) else {
            continue;
        };
        let Some(c) = candidates.iter().find(|c| &c.id == backend) else {
            continue;
        };
        if let Support::Unsupported(why) = c
            .support
            .is_layer_supported(&LayerDesc::from_layer(&next, layer))
        {
            return Err(RuntimeError::InvalidOptimization {
                backend: backend.clone(),
                reason: format!(
                    "its replacement layer '{}' is not supported by itself: {why}",
                    layer.name
                ),
            });
        }
    }
    Ok((next, new_layers))
}

fn unsupported_error(options: &OptimizerOptions, layers: Vec<UnsupportedLayer>) -> RuntimeError {
    RuntimeError::UnsupportedLayers {
        backends: options
            .backends
            .iter()
            .map(|b| b.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        layers,
    }
}

/// A layer's description for the support queries, built only when a backend is asked (a
/// replayed answer needs none).
struct LazyDesc<'a> {
    network: &'a Network,
    layer: &'a backplane_core::Layer,
    desc: Option<LayerDesc>,
}

impl<'a> LazyDesc<'a> {
    fn new(network: &'a Network, layer: &'a backplane_core::Layer) -> Self {
        LazyDesc {
            network,
            layer,
            desc: None,
        }
    }

    fn get(&mut self) -> &LayerDesc {
        let (network, layer) = (self.network, self.layer);
        self.desc
            .get_or_insert_with(|| LayerDesc::from_layer(network, layer))
    }
}

/// The first backend that accepts the layer: override first, then preferences.
fn choose(
    candidates: &[Candidate],
    options: &OptimizerOptions,
    desc: &mut LazyDesc<'_>,
    excluded: &BTreeSet<BackendId>,
    report: &mut OptimizationReport,
) -> std::result::Result<BackendId, UnsupportedLayer> {
    let layer = desc.layer;
    let by_name = options
        .layer_backends
        .iter()
        .find(|(k, _)| k == &layer.name);
    let by_op = options
        .layer_backends
        .iter()
        .find(|(k, _)| k == layer.op.name());
    let mut order: Vec<&BackendId> = Vec::new();
    if let Some((_, b)) = by_name.or(by_op) {
        order.push(b);
    }
    for b in &options.backends {
        if !order.contains(&b) {
            order.push(b);
        }
    }
    // The builtin backend runs what only it runs (control flow), after every preference.
    let builtin = crate::BuiltinBackend::backend_id();
    if !order.contains(&&builtin) {
        order.push(&builtin);
    }
    let mut reasons = Vec::new();
    for id in order {
        if excluded.contains(id) {
            reasons.push((id.clone(), "rejected by its optimize_subgraph".to_string()));
            continue;
        }
        let Some(c) = candidates.iter().find(|c| &c.id == id) else {
            continue;
        };
        let answer = match &options.support_answers {
            Some(kept) => match kept.kept(&c.id, desc.network, layer) {
                Some(answer) => answer,
                None => kept.answer(&c.id, c.support.as_ref(), desc.get()),
            },
            None => c.support.is_layer_supported(desc.get()),
        };
        match answer {
            Support::Supported => {
                for (b, r) in reasons {
                    tracing::info!(layer = %layer.name, op = layer.op.name(), "{b} refused it ({r}); falling back to {id}");
                    report.refusals.push((layer.name.clone(), b, r));
                }
                tracing::debug!(layer = %layer.name, op = layer.op.name(), "assigned to {id}");
                return Ok(id.clone());
            }
            Support::Unsupported(_) if id == &builtin => {}
            Support::Unsupported(r) => reasons.push((id.clone(), r)),
        }
    }
    Err(UnsupportedLayer {
        layer: layer.name.clone(),
        op: layer.op.name().to_string(),
        reasons,
    })
}

/// A topological order that keeps layers of the same backend together where the graph allows.
fn grouped_order(network: &Network, assign: &[BackendId]) -> Vec<LayerId> {
    let n = network.layers().len();
    let mut indegree = vec![0usize; n];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, l) in network.layers().iter().enumerate() {
        let mut deps = BTreeSet::new();
        for t in &l.inputs {
            if let TensorKind::Produced { layer, .. } = network.tensor(*t).kind {
                deps.insert(layer.0);
            }
        }
        indegree[i] = deps.len();
        for d in deps {
            users[d].push(i);
        }
    }
    let mut ready: BTreeSet<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    let mut last: Option<&BackendId> = None;
    while !ready.is_empty() {
        let pick = last
            .and_then(|b| ready.iter().copied().find(|&i| &assign[i] == b))
            .or_else(|| ready.iter().next().copied());
        let Some(i) = pick else { break };
        ready.remove(&i);
        order.push(LayerId(i));
        last = Some(&assign[i]);
        for &u in &users[i] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.insert(u);
            }
        }
    }
    order
}

/// Maximal runs of consecutive (in `order`) unsettled layers with the same backend.
fn runs_of(
    order: &[LayerId],
    assign: &[BackendId],
    settled: impl Fn(LayerId) -> bool,
) -> Vec<Vec<LayerId>> {
    let mut runs: Vec<Vec<LayerId>> = Vec::new();
    let mut current: Vec<LayerId> = Vec::new();
    for &l in order {
        if settled(l) {
            if !current.is_empty() {
                runs.push(std::mem::take(&mut current));
            }
            continue;
        }
        if let Some(&prev) = current.last() {
            if assign[prev.0] != assign[l.0] {
                runs.push(std::mem::take(&mut current));
            }
        }
        current.push(l);
    }
    if !current.is_empty() {
        runs.push(current);
    }
    runs
}

/// Every layer of the run appears exactly once across the three lists, and nothing else does.
fn check_partition(backend: &BackendId, run: &[LayerId], views: &OptimizationViews) -> Result<()> {
    let bad = |reason: String| RuntimeError::InvalidOptimization {
        backend: backend.clone(),
        reason,
    };
    let inside: HashSet<LayerId> = run.iter().copied().collect();
    let mut seen: HashSet<LayerId> = HashSet::new();
    let all = views
        .substitutions
        .iter()
        .flat_map(|s| s.replaced.iter())
        .chain(views.failed.iter().flatten())
        .chain(views.untouched.iter().flatten());
    for l in all {
        if !inside.contains(l) {
            return Err(bad(format!(
                "it names layer #{} which is not in its subgraph",
                l.0
            )));
        }
        if !seen.insert(*l) {
            return Err(bad(format!("it lists layer #{} more than once", l.0)));
        }
    }
    if seen.len() != inside.len() {
        return Err(bad(format!(
            "it accounts for {} of the {} layers of its subgraph",
            seen.len(),
            inside.len()
        )));
    }
    for s in &views.substitutions {
        if s.replaced.is_empty() || s.replacement.is_empty() {
            return Err(bad(
                "a substitution must replace at least one layer with at least one layer".into(),
            ));
        }
    }
    Ok(())
}

/// The tensor of `new` that stands for `t` of `old`: mapped already, or a constant added
/// now; anything else is read before it is computed.
pub(crate) fn get(
    old: &Network,
    new: &mut Network,
    map: &mut HashMap<TensorId, TensorId>,
    t: TensorId,
) -> Result<TensorId> {
    if let Some(id) = map.get(&t) {
        return Ok(*id);
    }
    let e = old.tensor(t);
    match &e.kind {
        TensorKind::Constant(c) => {
            let id = new.add_shared_constant(&e.name, c.clone())?;
            map.insert(t, id);
            Ok(id)
        }
        _ => Err(RuntimeError::Core(
            backplane_core::CoreError::InvalidNetwork(format!(
                "tensor '{}' is read before it is computed",
                e.name
            )),
        )),
    }
}
