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

/// `base`, or `base` with a numbered suffix when a tensor that the rebuilt network keeps has
/// that name: one already in `new`, one of `old` that no layer of the substitution computes,
/// or one the substitution computes under its old name (`kept`). A replacement layer may take
/// the name of a layer it replaces while that layer's output, named `<layer>:0` by an
/// importer, keeps its name as the output of another replacement layer (a channels-last
/// region's exit transpose).
fn fresh_tensor_name(
    old: &Network,
    new: &Network,
    inside: &HashSet<TensorId>,
    kept: &HashSet<TensorId>,
    base: &str,
) -> String {
    let taken = |n: &str| {
        new.find_tensor(n).is_some()
            || old
                .find_tensor(n)
                .is_some_and(|t| !inside.contains(&t) || kept.contains(&t))
    };
    if !taken(base) {
        return base.to_string();
    }
    (2..)
        .map(|k| format!("{base}~{k}"))
        .find(|n| !taken(n))
        .unwrap_or_else(|| base.to_string())
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
                // The replaced layers' tensors that replacement layers compute under their
                // old names.
                let kept: HashSet<TensorId> = sub
                    .replacement
                    .iter()
                    .flat_map(|r| r.outputs.iter().flatten().copied())
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
                            None => names.push(fresh_tensor_name(
                                old,
                                &new,
                                &produced_inside,
                                &kept,
                                &format!("{}:{slot}", r.name),
                            )),
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

#[cfg(test)]
mod tests {
    use super::*;
    use backplane_backend_api::{ReplacementLayer, Substitution, ValueRef};
    use backplane_core::ops::UnaryOp;
    use backplane_core::{DataType, Op, TensorInfo};

    /// `x → r (Relu, output "r:0") → n (Neg)`, the names an importer gives with `add_layer`.
    fn network() -> (Network, LayerId, TensorId) {
        let mut net = Network::new();
        let x = net
            .add_input("x", TensorInfo::new(DataType::F32, vec![2, 3]))
            .unwrap();
        let r = net.add_layer("r", Op::Unary(UnaryOp::Relu), &[x]).unwrap()[0];
        let y = net.add_layer("n", Op::Unary(UnaryOp::Neg), &[r]).unwrap()[0];
        net.mark_output(y).unwrap();
        (net, LayerId(0), r)
    }

    /// A replacement layer named like the layer it replaces, its output new, while another
    /// replacement layer computes the replaced output under its old name `r:0`: the new
    /// output takes another name instead of failing the rebuild.
    #[test]
    fn a_new_tensor_avoids_the_name_of_a_kept_one() {
        let (net, r, r_out) = network();
        let sub = Substitution {
            replaced: vec![r],
            replacement: vec![
                ReplacementLayer {
                    name: "r".into(),
                    op: Op::Unary(UnaryOp::Relu),
                    inputs: vec![ValueRef::Existing(net.inputs()[0])],
                    outputs: vec![None],
                },
                ReplacementLayer {
                    name: "r_copy".into(),
                    op: Op::Identity,
                    inputs: vec![ValueRef::Produced { layer: 0, slot: 0 }],
                    outputs: vec![Some(r_out)],
                },
            ],
        };
        let backend = BackendId::new("Test").unwrap();
        let order: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
        let (new, layers) = rebuild(&net, &order, &[(&backend, &sub)]).unwrap();
        assert_eq!(layers.len(), 2);
        let relu = new.find_layer("r").unwrap();
        assert_eq!(new.tensor(new.layer(relu).outputs[0]).name, "r:0~2");
        let copy = new.find_layer("r_copy").unwrap();
        assert_eq!(new.tensor(new.layer(copy).outputs[0]).name, "r:0");
    }

    /// Without a clash the default name stays `<layer>:<slot>`.
    #[test]
    fn a_new_tensor_keeps_its_default_name_without_a_clash() {
        let (net, r, r_out) = network();
        let sub = Substitution {
            replaced: vec![r],
            replacement: vec![
                ReplacementLayer {
                    name: "fused".into(),
                    op: Op::Unary(UnaryOp::Relu),
                    inputs: vec![ValueRef::Existing(net.inputs()[0])],
                    outputs: vec![None],
                },
                ReplacementLayer {
                    name: "fused_copy".into(),
                    op: Op::Identity,
                    inputs: vec![ValueRef::Produced { layer: 0, slot: 0 }],
                    outputs: vec![Some(r_out)],
                },
            ],
        };
        let backend = BackendId::new("Test").unwrap();
        let order: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
        let (new, _) = rebuild(&net, &order, &[(&backend, &sub)]).unwrap();
        let fused = new.find_layer("fused").unwrap();
        assert_eq!(new.tensor(new.layer(fused).outputs[0]).name, "fused:0");
    }
}
