//! The tensor-handle strategy: one factory per tensor, one strategy per edge, and the
//! memory copies that the choice makes necessary.
//!
//! For every tensor a layer computes, the factory is chosen among its backend's preferences
//! so that the fewest bytes are copied to its consumers (ties go to the backend's order).
//! Then each edge (tensor → consumer) is:
//! 1. **direct** when the consumer's backend lists the tensor's factory: no copy;
//! 2. **export→import** when the tensor's factory exports a memory kind that a factory the
//!    consumer lists imports: a `MemImport` layer hands the memory over without copying;
//! 3. **copy** when both sides can map their memory: a `MemCopy` layer (run by the builtin
//!    backend) copies into the consumer's first mappable factory;
//! 4. otherwise an error: the two backends cannot exchange this tensor.
//!
//! Consumers on the same backend share one conversion. Network inputs and constants live in
//! host memory; network outputs must be mappable (a copy to host is added otherwise).

use crate::builtin::BuiltinBackend;
use crate::host_memory::HostFactory;
use crate::{Result, RuntimeError};
use backplane_backend_api::{Backend, BackendId, FactoryId, TensorHandleFactoryRegistry};
use backplane_core::{Network, Op, TensorId, TensorKind};
use std::collections::HashMap;
use std::sync::Arc;

/// How a tensor reaches one consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EdgeStrategy {
    /// Same memory on both sides.
    Direct,
    /// Memory handed over without a copy.
    ExportImport,
    /// Copied once per execution.
    Copy,
}

impl std::fmt::Display for EdgeStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EdgeStrategy::Direct => "direct",
            EdgeStrategy::ExportImport => "export->import",
            EdgeStrategy::Copy => "copy",
        })
    }
}

/// One edge of the plan, as users see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeRecord {
    /// The tensor, by its name in the original network.
    pub tensor: String,
    /// The producing layer (`None` for network inputs and constants).
    pub producer: Option<String>,
    /// The consuming layer (`None` when the edge is the network output).
    pub consumer: Option<String>,
    /// The memory the tensor is produced in.
    pub from: FactoryId,
    /// The memory the consumer reads.
    pub to: FactoryId,
    /// How it gets there.
    pub strategy: EdgeStrategy,
    /// Bytes per execution.
    pub bytes: usize,
}

/// The plan's edges and totals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TensorStrategyReport {
    /// Every edge.
    pub edges: Vec<EdgeRecord>,
    /// Number of copies per execution.
    pub copies: usize,
    /// Bytes copied per execution.
    pub bytes_copied: usize,
    /// Number of export→import hand-overs.
    pub imports: usize,
}

pub(crate) struct Strategy {
    pub network: Network,
    pub assignment: Vec<BackendId>,
    pub factories: Vec<FactoryId>,
    pub registry: TensorHandleFactoryRegistry,
    pub report: TensorStrategyReport,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Conversion {
    Import,
    Copy,
}

pub(crate) fn apply(
    network: &Network,
    assignment: &[BackendId],
    backends: &[(BackendId, &dyn Backend)],
) -> Result<Strategy> {
    let mut registry = TensorHandleFactoryRegistry::new();
    registry.register_factory(Arc::new(HostFactory));
    for (_, b) in backends {
        b.register_tensor_handle_factories(&mut registry);
    }
    let host = FactoryId::host();
    let mut prefs: HashMap<BackendId, Vec<FactoryId>> = HashMap::new();
    for (id, b) in backends {
        let mut p: Vec<FactoryId> = b
            .handle_factory_preferences()
            .into_iter()
            .filter(|f| registry.get(f).is_some())
            .collect();
        if p.is_empty() {
            p.push(host.clone());
        }
        prefs.insert(id.clone(), p);
    }
    let props = |f: &FactoryId| registry.get(f).map(|x| x.properties()).unwrap_or_default();
    let prefs_of = |b: &BackendId| prefs.get(b).cloned().unwrap_or_else(|| vec![host.clone()]);

    // How `from` reaches a consumer listing `to_prefs`, and into which factory.
    let route = |from: &FactoryId, to_prefs: &[FactoryId]| -> Option<(EdgeStrategy, FactoryId)> {
        if to_prefs.contains(from) {
            return Some((EdgeStrategy::Direct, from.clone()));
        }
        let pf = props(from);
        if let Some(g) = to_prefs
            .iter()
            .find(|g| pf.export_sources.intersects(props(g).import_sources))
        {
            return Some((EdgeStrategy::ExportImport, g.clone()));
        }
        if pf.mappable {
            if let Some(g) = to_prefs.iter().find(|g| props(g).mappable) {
                return Some((EdgeStrategy::Copy, g.clone()));
            }
        }
        None
    };

    let consumers = network.consumers();
    let n_tensors = network.tensors().len();
    let mut factory_of: Vec<FactoryId> = vec![host.clone(); n_tensors];
    for (t, e) in network.tensors().iter().enumerate() {
        let TensorKind::Produced { layer, .. } = e.kind else {
            continue;
        };
        let bytes = e.info.num_bytes()?;
        let candidates = prefs_of(&assignment[layer.0]);
        let is_output = network.outputs().contains(&TensorId(t));
        let cost = |f: &FactoryId| -> Option<usize> {
            let mut total = 0usize;
            for (c, _) in &consumers[t] {
                match route(f, &prefs_of(&assignment[c.0]))?.0 {
                    EdgeStrategy::Copy => total = total.saturating_add(bytes),
                    EdgeStrategy::Direct | EdgeStrategy::ExportImport => {}
                }
            }
            if is_output && !props(f).mappable {
                total = total.saturating_add(bytes);
            }
            Some(total)
        };
        let best = candidates
            .iter()
            .filter_map(|f| cost(f).map(|c| (c, f)))
            .min_by_key(|(c, _)| *c)
            .map(|(_, f)| f.clone());
        factory_of[t] = best.ok_or_else(|| RuntimeError::NoTensorStrategy {
            tensor: e.name.clone(),
            reason: format!(
                "none of {}'s factories [{}] can reach all its consumers",
                assignment[layer.0],
                candidates
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?;
    }

    // Rebuild with conversion layers before their first consumer.
    let builtin = BuiltinBackend::backend_id();
    let mut new = Network::new();
    let mut new_assignment = Vec::new();
    let mut new_factories: Vec<FactoryId> = Vec::new();
    let mut map: HashMap<TensorId, TensorId> = HashMap::new();
    let mut conversions: HashMap<(TensorId, FactoryId), TensorId> = HashMap::new();
    let mut report = TensorStrategyReport::default();
    let producer_name = |t: TensorId| match network.tensor(t).kind {
        TensorKind::Produced { layer, .. } => Some(network.layer(layer).name.clone()),
        _ => None,
    };
    fn grow(v: &mut Vec<FactoryId>, id: TensorId, f: FactoryId) {
        if v.len() <= id.0 {
            v.resize(id.0 + 1, FactoryId::host());
        }
        v[id.0] = f;
    }
    for &t in network.inputs() {
        let e = network.tensor(t);
        let id = new.add_input(&e.name, e.info.clone())?;
        grow(&mut new_factories, id, host.clone());
        map.insert(t, id);
    }
    // Outputs whose memory cannot be mapped get renamed; the copy to host takes the name.
    let unmappable_outputs: Vec<TensorId> = network
        .outputs()
        .iter()
        .copied()
        .filter(|t| !props(&factory_of[t.0]).mappable)
        .collect();
    for (li, layer) in network.layers().iter().enumerate() {
        let backend = &assignment[li];
        let to_prefs = prefs_of(backend);
        let mut inputs = Vec::with_capacity(layer.inputs.len());
        for &t in &layer.inputs {
            let e = network.tensor(t);
            let src = match map.get(&t) {
                Some(id) => *id,
                None => match &e.kind {
                    TensorKind::Constant(c) => {
                        let id = new.add_shared_constant(&e.name, c.clone())?;
                        grow(&mut new_factories, id, host.clone());
                        map.insert(t, id);
                        id
                    }
                    _ => {
                        return Err(RuntimeError::Core(
                            backplane_core::CoreError::InvalidNetwork(format!(
                                "tensor '{}' is read before it is computed",
                                e.name
                            )),
                        ))
                    }
                },
            };
            let from = factory_of[t.0].clone();
            let (strategy, to) = route(&from, &to_prefs).ok_or_else(|| RuntimeError::NoTensorStrategy {
                tensor: e.name.clone(),
                reason: format!(
                    "{backend} reads only [{}] and '{}' can neither be shared, imported nor copied there",
                    to_prefs.iter().map(|f| f.as_str()).collect::<Vec<_>>().join(", "),
                    from
                ),
            })?;
            let bytes = e.info.num_bytes()?;
            report.edges.push(EdgeRecord {
                tensor: e.name.clone(),
                producer: producer_name(t),
                consumer: Some(layer.name.clone()),
                from: from.clone(),
                to: to.clone(),
                strategy,
                bytes,
            });
            let input = match strategy {
                EdgeStrategy::Direct => src,
                EdgeStrategy::Copy | EdgeStrategy::ExportImport => {
                    let kind = if strategy == EdgeStrategy::Copy {
                        Conversion::Copy
                    } else {
                        Conversion::Import
                    };
                    match conversions.get(&(t, to.clone())) {
                        Some(id) => *id,
                        None => {
                            let (op, verb) = match kind {
                                Conversion::Copy => (Op::MemCopy, "copy"),
                                Conversion::Import => (Op::MemImport, "import"),
                            };
                            let name = format!("{verb}:{}->{}", e.name, to);
                            let out = new.add_layer_named(
                                &name,
                                op,
                                &[src],
                                &[format!("{}@{}", e.name, to)],
                            )?[0];
                            new_assignment.push(builtin.clone());
                            grow(&mut new_factories, out, to.clone());
                            conversions.insert((t, to.clone()), out);
                            match kind {
                                Conversion::Copy => {
                                    report.copies += 1;
                                    report.bytes_copied = report.bytes_copied.saturating_add(bytes);
                                }
                                Conversion::Import => report.imports += 1,
                            }
                            out
                        }
                    }
                }
            };
            inputs.push(input);
        }
        let names: Vec<String> = layer
            .outputs
            .iter()
            .map(|t| {
                let n = &network.tensor(*t).name;
                if unmappable_outputs.contains(t) {
                    format!("{n}@{}", factory_of[t.0])
                } else {
                    n.clone()
                }
            })
            .collect();
        let outs = new.add_layer_named(&layer.name, layer.op.clone(), &inputs, &names)?;
        new_assignment.push(backend.clone());
        for (o, id) in layer.outputs.iter().zip(outs) {
            grow(&mut new_factories, id, factory_of[o.0].clone());
            map.insert(*o, id);
        }
    }
    for &t in network.outputs() {
        let e = network.tensor(t);
        let mut id = match map.get(&t) {
            Some(id) => *id,
            None => match &e.kind {
                TensorKind::Constant(c) => {
                    let id = new.add_shared_constant(&e.name, c.clone())?;
                    grow(&mut new_factories, id, host.clone());
                    id
                }
                _ => {
                    return Err(RuntimeError::Core(
                        backplane_core::CoreError::InvalidNetwork(format!(
                            "output '{}' is never computed",
                            e.name
                        )),
                    ))
                }
            },
        };
        let from = factory_of[t.0].clone();
        let bytes = e.info.num_bytes()?;
        let strategy = if unmappable_outputs.contains(&t) {
            id = new.add_layer_named(
                &format!("copy:{}->{}", e.name, host),
                Op::MemCopy,
                &[id],
                std::slice::from_ref(&e.name),
            )?[0];
            new_assignment.push(builtin.clone());
            grow(&mut new_factories, id, host.clone());
            report.copies += 1;
            report.bytes_copied = report.bytes_copied.saturating_add(bytes);
            EdgeStrategy::Copy
        } else {
            EdgeStrategy::Direct
        };
        report.edges.push(EdgeRecord {
            tensor: e.name.clone(),
            producer: producer_name(t),
            consumer: None,
            from,
            to: host.clone(),
            strategy,
            bytes,
        });
        new.mark_output(id)?;
    }
    new_factories.resize(new.tensors().len(), host.clone());
    Ok(Strategy {
        network: new,
        assignment: new_assignment,
        factories: new_factories,
        registry,
        report,
    })
}
