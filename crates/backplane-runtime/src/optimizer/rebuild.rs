//! Rebuilding the network after the backends' substitutions: the kept layers and each
//! substitution's replacement, emitted in an order where every tensor is computed before it
//! is read.

use super::*;

/// The order in which `rebuild` emits layers: the kept layers of `order`, and each
/// substitution once (represented by its first replaced layer), sorted so that everything is
/// computed before it is read, staying as close to `order` as that allows. A substitution
/// cannot simply take the place of its first or its last replaced layer: a kept layer between
/// them may feed it (a residual branch) or read it (a consumer of a region's output).
pub(super) fn emission_order(
    old: &Network,
    order: &[LayerId],
    subs: &[(&BackendId, &Substitution)],
    replaced_by: &HashMap<LayerId, usize>,
) -> Result<Vec<LayerId>> {
    let Some((first_backend, _)) = subs.first() else {
        return Ok(order.to_vec());
    };
    // Nodes: kept layers and substitutions, in the order they first appear.
    #[derive(Clone, Copy, PartialEq, Eq, Hash)]
    enum Node {
        Layer(LayerId),
        Sub(usize),
    }
    let node_of = |l: LayerId| match replaced_by.get(&l) {
        Some(&s) => Node::Sub(s),
        None => Node::Layer(l),
    };
    let mut nodes: Vec<(Node, LayerId)> = Vec::new();
    let mut seen: HashSet<Node> = HashSet::new();
    for &l in order {
        if seen.insert(node_of(l)) {
            nodes.push((node_of(l), l));
        }
    }
    let producer = |t: TensorId| match old.tensor(t).kind {
        TensorKind::Produced { layer, .. } => Some(node_of(layer)),
        _ => None,
    };
    let deps: Vec<Vec<Node>> = nodes
        .iter()
        .map(|(n, _)| {
            let reads: Vec<TensorId> = match n {
                Node::Layer(l) => old.layer(*l).inputs.clone(),
                Node::Sub(s) => subs[*s]
                    .1
                    .replacement
                    .iter()
                    .flat_map(|r| &r.inputs)
                    .filter_map(|v| match v {
                        ValueRef::Existing(t) => Some(*t),
                        _ => None,
                    })
                    .collect(),
            };
            reads
                .into_iter()
                .filter_map(producer)
                .filter(|p| p != n)
                .collect()
        })
        .collect();
    let mut done: HashSet<Node> = HashSet::new();
    let mut emitted = vec![false; nodes.len()];
    let mut seq = Vec::with_capacity(nodes.len());
    // Everything before `start` is emitted: in the usual case each step takes `start`.
    let mut start = 0;
    while seq.len() < nodes.len() {
        while emitted.get(start) == Some(&true) {
            start += 1;
        }
        let next =
            (start..nodes.len()).find(|&i| !emitted[i] && deps[i].iter().all(|d| done.contains(d)));
        let Some(i) = next else {
            return Err(RuntimeError::InvalidOptimization {
                backend: (*first_backend).clone(),
                reason: "the substitutions leave a cycle between replaced and kept layers \
                         (is every replaced set convex?)"
                    .into(),
            });
        };
        emitted[i] = true;
        done.insert(nodes[i].0);
        seq.push(nodes[i].1);
    }
    Ok(seq)
}

/// Build a new network from `old` in `order`, applying substitutions. Returns the network
/// and the (name, backend) of every replacement layer.
pub(super) fn rebuild(
    old: &Network,
    order: &[LayerId],
    subs: &[(&BackendId, &Substitution)],
) -> Result<(Network, Vec<(String, BackendId)>)> {
    let mut new = Network::new();
    let mut map: HashMap<TensorId, TensorId> = HashMap::new();
    for &t in old.inputs() {
        let e = old.tensor(t);
        map.insert(t, new.add_input(&e.name, e.info.clone())?);
    }
    // Which substitution replaces each layer, and where each substitution is emitted.
    let mut replaced_by: HashMap<LayerId, usize> = HashMap::new();
    for (i, (_, s)) in subs.iter().enumerate() {
        for l in &s.replaced {
            replaced_by.insert(*l, i);
        }
    }
    let seq = emission_order(old, order, subs, &replaced_by)?;
    let mut emit_at: HashMap<usize, usize> = HashMap::new();
    for (pos, l) in seq.iter().enumerate() {
        if let Some(&s) = replaced_by.get(l) {
            emit_at.insert(s, pos);
        }
    }
    let mut new_layers = Vec::new();
    // Who reads each tensor of `old`: computed once for every substitution's check (per
    // substitution it made rebuilding quadratic in the network's size).
    let consumers = if subs.is_empty() {
        Vec::new()
    } else {
        old.consumers()
    };
    for (pos, &l) in seq.iter().enumerate() {
        match replaced_by.get(&l) {
            None => {
                let layer = old.layer(l);
                let inputs = layer
                    .inputs
                    .iter()
                    .map(|t| get(old, &mut new, &mut map, *t))
                    .collect::<Result<Vec<_>>>()?;
                let names: Vec<String> = layer
                    .outputs
                    .iter()
                    .map(|t| old.tensor(*t).name.clone())
                    .collect();
                let outs = new.add_layer_named(&layer.name, layer.op.clone(), &inputs, &names)?;
                for (o, n) in layer.outputs.iter().zip(outs) {
                    map.insert(*o, n);
                }
            }
            Some(&si) if emit_at.get(&si) == Some(&pos) => {
                let (backend, sub) = &subs[si];
                let bad = |reason: String| RuntimeError::InvalidOptimization {
                    backend: (*backend).clone(),
                    reason,
                };
                let replaced: HashSet<LayerId> = sub.replaced.iter().copied().collect();
                let produced_inside: HashSet<TensorId> = sub
                    .replaced
                    .iter()
                    .flat_map(|l| old.layer(*l).outputs.iter().copied())
                    .collect();
                let mut local: Vec<Vec<TensorId>> = Vec::new();
                for r in &sub.replacement {
                    let mut inputs = Vec::with_capacity(r.inputs.len());
                    for (k, v) in r.inputs.iter().enumerate() {
                        let id = match v {
                            ValueRef::Existing(t) => {
                                if produced_inside.contains(t) {
                                    return Err(bad(format!(
                                        "replacement '{}' reads '{}', which the replaced layers computed",
                                        r.name,
                                        old.tensor(*t).name
                                    )));
                                }
                                get(old, &mut new, &mut map, *t).map_err(|_| {
                                    bad(format!("replacement '{}' reads a tensor that is not available there (is the replaced set convex?)", r.name))
                                })?
                            }
                            ValueRef::NewConstant(c) => {
                                new.add_shared_constant(&format!("{}:const{k}", r.name), c.clone())?
                            }
                            ValueRef::Produced { layer, slot } => *local
                                .get(*layer)
                                .and_then(|o| o.get(*slot))
                                .ok_or_else(|| bad(format!("replacement '{}' reads output {slot} of replacement layer {layer}, which does not exist yet", r.name)))?,
                        };
                        inputs.push(id);
                    }
                    let mut names = Vec::with_capacity(r.outputs.len());
                    for (slot, o) in r.outputs.iter().enumerate() {
                        match o {
                            Some(t) if produced_inside.contains(t) => names.push(old.tensor(*t).name.clone()),
                            Some(t) => {
                                return Err(bad(format!(
                                    "replacement '{}' claims tensor '{}', which the replaced layers did not compute",
                                    r.name,
                                    old.tensor(*t).name
                                )))
                            }
                            None => names.push(format!("{}:{slot}", r.name)),
                        }
                    }
                    let outs = new
                        .add_layer_named(&r.name, r.op.clone(), &inputs, &names)
                        .map_err(|e| bad(e.to_string()))?;
                    for (o, n) in r.outputs.iter().zip(&outs) {
                        if let Some(t) = o {
                            if !new.tensor(*n).info.same_layout(&old.tensor(*t).info) {
                                return Err(bad(format!(
                                    "replacement '{}' computes '{}' as {} but it was {}",
                                    r.name,
                                    old.tensor(*t).name,
                                    new.tensor(*n).info,
                                    old.tensor(*t).info
                                )));
                            }
                            map.insert(*t, *n);
                        }
                    }
                    new_layers.push((r.name.clone(), (*backend).clone()));
                    local.push(outs);
                }
                // Everything used outside the replaced set must have been taken over.
                for t in &produced_inside {
                    let used_outside = consumers
                        .get(t.0)
                        .is_some_and(|c| c.iter().any(|(c, _)| !replaced.contains(c)))
                        || old.outputs().contains(t);
                    if used_outside && !map.contains_key(t) {
                        return Err(bad(format!(
                            "tensor '{}' is used outside the replaced layers but no replacement computes it",
                            old.tensor(*t).name
                        )));
                    }
                }
            }
            Some(_) => {}
        }
    }
    for &t in old.outputs() {
        let id = get(old, &mut new, &mut map, t)?;
        new.mark_output(id)?;
    }
    Ok((new, new_layers))
}
