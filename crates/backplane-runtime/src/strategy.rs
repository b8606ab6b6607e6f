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
//!    backend) copies into the consumer's first mappable factory (one with the same data
//!    layout when there is one);
//! 4. **permute** when the only factories both sides can map store the tensor in different
//!    data layouts ([`DataLayout`]): a `Permute` layer (builtin) copies and reorders;
//! 5. otherwise an error: the two backends cannot exchange this tensor.
//!
//! A network output computed into another memory than the host's, mappable and in the
//! standard layout, is not copied: the host maps its handle to read it (a **mapped read**).
//!
//! Sharing and export→import need the same layout on both sides. Consumers on the same
//! backend share one conversion. Network inputs and constants live in host memory in the
//! standard layout; network outputs must be mappable and standard (a copy or permute to host
//! is added otherwise).

use crate::builtin::BuiltinBackend;
use crate::host_memory::HostFactory;
use crate::{Result, RuntimeError};
use backplane_backend_api::{
    Backend, BackendId, DataLayout, FactoryId, TensorHandleFactoryRegistry,
};
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
    /// Copied and reordered into another data layout once per execution.
    Permute,
    /// Left in another memory than the host's and read by the host through `map` (a network
    /// output): no copy in the plan, but not the host's own memory either.
    MappedRead,
}

impl std::fmt::Display for EdgeStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EdgeStrategy::Direct => "direct",
            EdgeStrategy::ExportImport => "export->import",
            EdgeStrategy::Copy => "copy",
            EdgeStrategy::Permute => "permute",
            EdgeStrategy::MappedRead => "mapped read",
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
    /// Number of layout permutes per execution (their bytes count in `bytes_copied`).
    pub permutes: usize,
    /// Number of network outputs the host reads by mapping another memory's handle.
    pub mapped_reads: usize,
}

/// The physical axis order (outermost first, as logical axes) a layout stores a tensor of
/// `rank` in: see [`Op::Permute`].
pub fn layout_order(layout: DataLayout, rank: usize) -> Vec<usize> {
    match layout {
        DataLayout::ChannelsLast if rank == 4 => vec![0, 2, 3, 1],
        _ => (0..rank).collect(),
    }
}

/// Whether two axis orders store a tensor of `dims` in the same bytes: they list the axes
/// longer than 1 in the same sequence (e.g. NCHW and NHWC agree for `[1, C, 1, 1]`).
fn same_bytes(a: &[usize], b: &[usize], dims: &[usize]) -> bool {
    let long = |o: &[usize]| -> Vec<usize> {
        o.iter()
            .copied()
            .filter(|&x| dims.get(x).is_some_and(|&d| d > 1))
            .collect()
    };
    long(a) == long(b)
}

pub(crate) struct Strategy {
    pub network: Network,
    pub assignment: Vec<BackendId>,
    pub factories: Vec<FactoryId>,
    pub registry: TensorHandleFactoryRegistry,
    pub report: TensorStrategyReport,
}

pub(crate) fn apply(
    owned: Network,
    assignment: &[BackendId],
    backends: &[(BackendId, &dyn Backend)],
) -> Result<Strategy> {
    let network = &owned;
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
            .filter(|f| {
                let known = registry.get(f).is_some();
                if !known {
                    tracing::warn!(
                        backend = %id,
                        factory = %f,
                        "the backend prefers a tensor-handle factory no backend registered; ignored"
                    );
                }
                known
            })
            .collect();
        if p.is_empty() {
            p.push(host.clone());
        }
        prefs.insert(id.clone(), p);
    }
    let props = |f: &FactoryId| registry.get(f).map(|x| x.properties()).unwrap_or_default();
    let prefs_of = |b: &BackendId| prefs.get(b).cloned().unwrap_or_else(|| vec![host.clone()]);

    let order = |f: &FactoryId, rank: usize| layout_order(props(f).layout, rank);
    let agree = |f: &FactoryId, g: &FactoryId, dims: &[usize]| {
        same_bytes(&order(f, dims.len()), &order(g, dims.len()), dims)
    };
    // How a tensor of `dims` in `from` reaches a consumer listing `to_prefs`, and into which
    // factory.
    let route = |from: &FactoryId,
                 to_prefs: &[FactoryId],
                 dims: &[usize]|
     -> Option<(EdgeStrategy, FactoryId)> {
        if to_prefs.contains(from) {
            return Some((EdgeStrategy::Direct, from.clone()));
        }
        let pf = props(from);
        let same_order = |g: &&FactoryId| agree(g, from, dims);
        if let Some(g) = to_prefs
            .iter()
            .filter(same_order)
            .find(|g| pf.export_sources.intersects(props(g).import_sources))
        {
            return Some((EdgeStrategy::ExportImport, g.clone()));
        }
        if pf.mappable {
            let mappable = || to_prefs.iter().filter(|g| props(g).mappable);
            if let Some(g) = mappable().find(same_order) {
                return Some((EdgeStrategy::Copy, g.clone()));
            }
            if let Some(g) = mappable().next() {
                return Some((EdgeStrategy::Permute, g.clone()));
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
        let dims = e.info.shape.dims();
        let candidates = prefs_of(&assignment[layer.0]);
        let is_output = network.outputs().contains(&TensorId(t));
        let cost = |f: &FactoryId| -> Option<usize> {
            let mut total = 0usize;
            for (c, _) in &consumers[t] {
                match route(f, &prefs_of(&assignment[c.0]), dims)?.0 {
                    EdgeStrategy::Copy | EdgeStrategy::Permute => {
                        total = total.saturating_add(bytes)
                    }
                    EdgeStrategy::Direct
                    | EdgeStrategy::ExportImport
                    | EdgeStrategy::MappedRead => {}
                }
            }
            if is_output && (!props(f).mappable || !agree(f, &host, dims)) {
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

    // Outputs whose memory cannot be mapped, or is not in the standard layout, get renamed;
    // the copy (or permute) to host takes the name.
    let unmappable_outputs: Vec<TensorId> = network
        .outputs()
        .iter()
        .copied()
        .filter(|t| {
            let f = &factory_of[t.0];
            !props(f).mappable || !agree(f, &host, network.tensor(*t).info.shape.dims())
        })
        .collect();
    let producer_name = |t: TensorId| match network.tensor(t).kind {
        TensorKind::Produced { layer, .. } => Some(network.layer(layer).name.clone()),
        _ => None,
    };
    let output_edge = |t: TensorId, strategy: EdgeStrategy| -> Result<EdgeRecord> {
        let e = network.tensor(t);
        Ok(EdgeRecord {
            tensor: e.name.clone(),
            producer: producer_name(t),
            consumer: None,
            from: factory_of[t.0].clone(),
            to: host.clone(),
            strategy,
            bytes: e.info.num_bytes()?,
        })
    };
    // The usual case, one memory throughout (or memories every consumer reads): nothing to
    // insert, so the network is kept as it is instead of being rebuilt.
    if unmappable_outputs.is_empty() {
        let mut report = TensorStrategyReport::default();
        let mut direct = true;
        'layers: for (li, layer) in network.layers().iter().enumerate() {
            let to_prefs = prefs_of(&assignment[li]);
            for &t in &layer.inputs {
                let from = &factory_of[t.0];
                if !to_prefs.contains(from) {
                    direct = false;
                    break 'layers;
                }
                let e = network.tensor(t);
                report.edges.push(EdgeRecord {
                    tensor: e.name.clone(),
                    producer: producer_name(t),
                    consumer: Some(layer.name.clone()),
                    from: from.clone(),
                    to: from.clone(),
                    strategy: EdgeStrategy::Direct,
                    bytes: e.info.num_bytes()?,
                });
            }
        }
        if direct {
            for &t in network.outputs() {
                let strategy = if factory_of[t.0] == host {
                    EdgeStrategy::Direct
                } else {
                    report.mapped_reads += 1;
                    EdgeStrategy::MappedRead
                };
                report.edges.push(output_edge(t, strategy)?);
            }
            return Ok(Strategy {
                network: owned,
                assignment: assignment.to_vec(),
                factories: factory_of,
                registry,
                report,
            });
        }
    }

    // Rebuild with conversion layers before their first consumer.
    let builtin = BuiltinBackend::backend_id();
    let mut new = Network::new();
    let mut new_assignment = Vec::new();
    let mut new_factories: Vec<FactoryId> = Vec::new();
    let mut map: HashMap<TensorId, TensorId> = HashMap::new();
    let mut conversions: HashMap<(TensorId, FactoryId), TensorId> = HashMap::new();
    let mut report = TensorStrategyReport::default();
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
            let rank = e.info.shape.rank();
            let (strategy, to) = route(&from, &to_prefs, e.info.shape.dims()).ok_or_else(|| RuntimeError::NoTensorStrategy {
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
                EdgeStrategy::Direct | EdgeStrategy::MappedRead => src,
                EdgeStrategy::Copy | EdgeStrategy::ExportImport | EdgeStrategy::Permute => {
                    match conversions.get(&(t, to.clone())) {
                        Some(id) => *id,
                        None => {
                            let (op, verb) = match strategy {
                                EdgeStrategy::Copy => (Op::MemCopy, "copy"),
                                EdgeStrategy::Permute => (
                                    Op::Permute {
                                        from: order(&from, rank),
                                        to: order(&to, rank),
                                    },
                                    "permute",
                                ),
                                _ => (Op::MemImport, "import"),
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
                            match strategy {
                                EdgeStrategy::Copy => {
                                    report.copies += 1;
                                    report.bytes_copied = report.bytes_copied.saturating_add(bytes);
                                }
                                EdgeStrategy::Permute => {
                                    report.permutes += 1;
                                    report.bytes_copied = report.bytes_copied.saturating_add(bytes);
                                }
                                _ => report.imports += 1,
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
            let rank = e.info.shape.rank();
            let (from_order, to_order) = (order(&from, rank), order(&host, rank));
            let (op, verb, strategy) = if agree(&from, &host, e.info.shape.dims()) {
                report.copies += 1;
                (Op::MemCopy, "copy", EdgeStrategy::Copy)
            } else {
                report.permutes += 1;
                let op = Op::Permute {
                    from: from_order,
                    to: to_order,
                };
                (op, "permute", EdgeStrategy::Permute)
            };
            id = new.add_layer_named(
                &format!("{verb}:{}->{}", e.name, host),
                op,
                &[id],
                std::slice::from_ref(&e.name),
            )?[0];
            new_assignment.push(builtin.clone());
            grow(&mut new_factories, id, host.clone());
            report.bytes_copied = report.bytes_copied.saturating_add(bytes);
            strategy
        } else if from != host {
            report.mapped_reads += 1;
            EdgeStrategy::MappedRead
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

/// Remove pairs of adjacent inverse layout permutes (`a -> b` then `b -> a`): readers of the
/// second read the first one's input, and a first permute left without readers goes too.
/// Returns the new network and the number of pairs cancelled, or `None` when there was
/// nothing to cancel (the network stays as it is, not copied).
pub(crate) fn cancel_inverse_permutes(network: &Network) -> Result<Option<(Network, usize)>> {
    let layers = network.layers();
    let is_output = |t: TensorId| network.outputs().contains(&t);
    let mut replace: HashMap<TensorId, TensorId> = HashMap::new();
    let mut dropped = vec![false; layers.len()];
    let mut cancelled = 0;
    for (i, l) in layers.iter().enumerate() {
        let Op::Permute { from, to } = &l.op else {
            continue;
        };
        let (Some(&mid), Some(&out)) = (l.inputs.first(), l.outputs.first()) else {
            continue;
        };
        let TensorKind::Produced { layer: first, .. } = network.tensor(mid).kind else {
            continue;
        };
        let first = network.layer(first);
        let Op::Permute {
            from: first_from,
            to: first_to,
        } = &first.op
        else {
            continue;
        };
        if first_from == to && first_to == from && !is_output(out) {
            let source = first.inputs[0];
            let source = replace.get(&source).copied().unwrap_or(source);
            replace.insert(out, source);
            dropped[i] = true;
            cancelled += 1;
        }
    }
    if cancelled == 0 {
        return Ok(None);
    }
    // Readers left for each tensor; permutes nobody reads any more go (last first, so that
    // chains unravel).
    let resolve = |t: TensorId| replace.get(&t).copied().unwrap_or(t);
    let mut readers = vec![0usize; network.tensors().len()];
    for (i, l) in layers.iter().enumerate() {
        if !dropped[i] {
            for t in &l.inputs {
                readers[resolve(*t).0] += 1;
            }
        }
    }
    for (i, l) in layers.iter().enumerate().rev() {
        if dropped[i] || !matches!(l.op, Op::Permute { .. }) {
            continue;
        }
        if l.outputs
            .iter()
            .all(|o| readers[o.0] == 0 && !is_output(*o))
        {
            dropped[i] = true;
            for t in &l.inputs {
                readers[resolve(*t).0] = readers[resolve(*t).0].saturating_sub(1);
            }
        }
    }
    let mut new = Network::new();
    let mut map: HashMap<TensorId, TensorId> = HashMap::new();
    for &t in network.inputs() {
        let e = network.tensor(t);
        map.insert(t, new.add_input(&e.name, e.info.clone())?);
    }
    for (i, l) in layers.iter().enumerate() {
        if dropped[i] {
            continue;
        }
        let inputs = l
            .inputs
            .iter()
            .map(|t| crate::optimizer::get(network, &mut new, &mut map, resolve(*t)))
            .collect::<Result<Vec<_>>>()?;
        let names: Vec<String> = l
            .outputs
            .iter()
            .map(|t| network.tensor(*t).name.clone())
            .collect();
        let outs = new.add_layer_named(&l.name, l.op.clone(), &inputs, &names)?;
        for (o, id) in l.outputs.iter().zip(outs) {
            map.insert(*o, id);
        }
    }
    for &t in network.outputs() {
        let id = crate::optimizer::get(network, &mut new, &mut map, resolve(t))?;
        new.mark_output(id)?;
    }
    Ok(Some((new, cancelled)))
}
