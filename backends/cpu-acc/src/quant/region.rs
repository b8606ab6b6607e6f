//! Channels-last regions of quantized layers: after folding, the int8 convolutions and the
//! quantized binary layers connected through their tensors become one substitution that
//! runs them on `[N, H, W, C]` tensors ([`super::nhwc_conv`]; the binary layers are
//! elementwise (broadcasting as numpy does), and the lookup layers ([`super::lookup`]) over
//! one tensor, so they run as they are on the channels-last shapes; the quantized means
//! ([`super::mean`]) read the channels-last tensor and write the same `N · C` bytes; an
//! 8-bit Concat along the channels, folded data movement, concatenates along the last axis;
//! the quantized average and max pools run channels-last by their description).
//!
//! A tensor enters the region once: where it is a `Transpose` NHWC → NCHW that only the
//! region reads (how the TFLite importer hands a channels-last model's image to
//! channels-first operators), the region reads the transpose's input and the transpose goes;
//! otherwise one `Transpose` NCHW → NHWC is added. A tensor read outside the region leaves
//! it through one `Transpose` back, under its own name. A DequantizeLinear whose readers all
//! were folded into the region (a residual tensor's, read by two folded layers, which no
//! single fold could remove) goes with it. A classifier's `DequantizeLinear → ReduceMean`
//! (or `GlobalAveragePool`) over the pixels of a region output joins it too, as the same
//! mean over the channels-last pixels (`[N, C]` either way). A region input quantized from
//! f32 by a per-tensor QuantizeLinear only the region reads (an ONNX QDQ model's image) is
//! quantized straight into the channels-last layout inside the region.
//!
//! A region is formed when it holds a convolution and either two layers or only inputs
//! that come channels-last already, and is convex (no path leaves it and comes back); a
//! candidate that is not convex drops the units such a path comes back to and tries again
//! (those units apart too). The option `nhwc=off` keeps every layer NCHW.

use super::binary::QBinaryDesc;
use super::conv::QConvDesc;
use super::mean::QMeanDesc;
use super::nhwc_conv::pair::{is_depthwise, is_pointwise, QConvPairDesc};
use super::pool::QPoolDesc;
use super::{QLINEAR_BINARY, QLINEAR_CONV, QLINEAR_LOOKUP, QLINEAR_MEAN, QLINEAR_POOL};
use crate::layout::is_convex;
use backplane_backend_api::{ReplacementLayer, SubgraphView, Substitution, ValueRef};
use backplane_core::ops::{CustomOp, PoolKind, ReduceDesc, ReduceKind};
use backplane_core::{DataType, LayerId, Network, Op, TensorId, TensorInfo, TensorKind};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// NCHW → NHWC.
const TO_NHWC: [usize; 4] = [0, 2, 3, 1];
/// NHWC → NCHW.
const TO_NCHW: [usize; 4] = [0, 3, 1, 2];

/// A folded quantized layer that may join a region.
struct Unit {
    /// Index of its substitution.
    sub: usize,
    /// The 8-bit tensors it reads (the first one or two inputs of its replacement).
    reads: Vec<TensorId>,
    out: TensorId,
    kind: Kind,
}

/// What a region unit is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An int8 convolution (channels-last by its description).
    Conv,
    /// Elementwise over its inputs (binary, lookup): the same layer on the channels-last
    /// shapes.
    Elementwise,
    /// The mean over the pixels: channels-last by its description; its `N · C` output bytes
    /// are the same in both layouts.
    Mean,
    /// An 8-bit Concat along the channels (folded data movement): along the last axis.
    Concat,
    /// The average pool: channels-last by its description.
    Pool,
    /// An 8-bit Pad or Slice (data movement, [`super::region_moves`]): the same layer with
    /// its axes taken to the channels-last order.
    Moves,
}

/// The channels-last dims of an NCHW `info`, keeping the type.
fn nhwc_info(info: &TensorInfo) -> Option<TensorInfo> {
    match info.shape.dims() {
        &[n, c, h, w] => Some(TensorInfo::new(info.dtype, vec![n, h, w, c])),
        _ => None,
    }
}

fn existing(v: &ValueRef) -> Option<TensorId> {
    match v {
        ValueRef::Existing(t) => Some(*t),
        _ => None,
    }
}

fn quant_custom(op: &Op) -> Option<&CustomOp> {
    match op {
        Op::Custom(c) if super::is_quant_custom(c) => Some(c),
        _ => None,
    }
}

fn unit(net: &Network, sub: usize, s: &Substitution) -> Option<Unit> {
    let [r] = s.replacement.as_slice() else {
        return None;
    };
    let out = (*r.outputs.first()?)?;
    let four = |t: TensorId| net.tensor(t).info.shape.rank() == 4;
    if let Some(reads) = super::region_moves::unit_reads(net, &r.op, &r.inputs, out) {
        return Some(Unit {
            sub,
            reads,
            out,
            kind: Kind::Moves,
        });
    }
    if let Op::Concat { axis } = r.op {
        // A folded 8-bit Concat along the channels: along the last axis channels-last.
        let reads: Option<Vec<TensorId>> = r.inputs.iter().map(existing).collect();
        let reads = reads?;
        let channels = axis == 1 || axis == -3;
        return (channels && four(out) && !reads.is_empty() && reads.iter().all(|&t| four(t)))
            .then_some(Unit {
                sub,
                reads,
                out,
                kind: Kind::Concat,
            });
    }
    let c = quant_custom(&r.op)?;
    let (reads, kind) = if c.op_type == QLINEAR_CONV {
        let d = QConvDesc::decode(c).ok()?;
        let x = existing(r.inputs.first()?)?;
        let (xd, yd) = (
            net.tensor(x).info.shape.dims(),
            net.tensor(out).info.shape.dims(),
        );
        if d.nhwc || xd.len() != 4 || yd.len() != 4 || !super::nhwc_conv::runs(&d, xd[1], yd[1]) {
            return None;
        }
        (vec![x], Kind::Conv)
    } else if c.op_type == QLINEAR_BINARY {
        // One or two 8-bit inputs (the other operand a constant the layer carries).
        let reads: Option<Vec<TensorId>> = r.inputs.iter().map(existing).collect();
        (reads?, Kind::Elementwise)
    } else if c.op_type == QLINEAR_LOOKUP {
        (vec![existing(r.inputs.first()?)?], Kind::Elementwise)
    } else if c.op_type == QLINEAR_MEAN {
        (vec![existing(r.inputs.first()?)?], Kind::Mean)
    } else if c.op_type == QLINEAR_POOL {
        (vec![existing(r.inputs.first()?)?], Kind::Pool)
    } else {
        return None;
    };
    // A mean's [N, C] output leaves any region as it is.
    let flat = kind == Kind::Mean && net.tensor(out).info.shape.rank() == 2;
    if !(four(out) || flat) || reads.iter().any(|&t| !four(t)) {
        return None;
    }
    Some(Unit {
        sub,
        reads,
        out,
        kind,
    })
}

fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

/// Rewrite the folded quantized layers of `subs` into channels-last regions where they form
/// one; `used` (the layers the substitutions replace) takes the layers a region removes
/// besides theirs.
pub(crate) fn channels_last(
    view: &SubgraphView<'_>,
    subs: Vec<Substitution>,
    used: &mut BTreeSet<LayerId>,
) -> Vec<Substitution> {
    if !crate::options::current().nhwc {
        return subs;
    }
    let net = view.network();
    let mut subs = subs;
    super::region_moves::add_slices(view, &mut subs, used);
    let units: Vec<Unit> = subs
        .iter()
        .enumerate()
        .filter_map(|(i, s)| unit(net, i, s))
        .collect();
    let producer: HashMap<TensorId, usize> =
        units.iter().enumerate().map(|(i, u)| (u.out, i)).collect();
    let mut parent: Vec<usize> = (0..units.len()).collect();
    for (i, u) in units.iter().enumerate() {
        for t in &u.reads {
            if let Some(&p) = producer.get(t) {
                let (a, b) = (find(&mut parent, i), find(&mut parent, p));
                parent[a] = b;
            }
        }
    }
    let mut regions: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..units.len() {
        let root = find(&mut parent, i);
        regions.entry(root).or_default().push(i);
    }
    let mut taken = vec![false; subs.len()];
    let mut out = Vec::new();
    let consumers = net.consumers();
    let mut work: Vec<Vec<usize>> = regions.into_values().collect();
    while let Some(region) = work.pop() {
        let members: Vec<&Unit> = region.iter().map(|&i| &units[i]).collect();
        if !members.iter().any(|u| u.kind == Kind::Conv) {
            continue;
        }
        if let Some(s) = rewrite(view, &subs, &members, used) {
            for u in &members {
                taken[u.sub] = true;
            }
            used.extend(s.replaced.iter().copied());
            out.push(s);
            continue;
        }
        // Not convex: leave out the units that a path from the region through layers
        // outside it comes back to, and try the rest (and, apart, the units left out).
        let back = reentered(net, &consumers, &subs, &members);
        let (left, kept): (Vec<usize>, Vec<usize>) =
            region.iter().partition(|&&i| back.contains(&units[i].sub));
        if !left.is_empty() && !kept.is_empty() {
            work.push(left);
            work.push(kept);
        }
    }
    out.extend(
        subs.into_iter()
            .zip(taken)
            .filter(|(_, t)| !t)
            .map(|(s, _)| s),
    );
    out
}

/// The substitutions (by index) of the region's `units` that a path from one of their
/// outputs through at least one layer outside them reaches: where the region stops being
/// convex.
fn reentered(
    net: &Network,
    consumers: &[Vec<(LayerId, usize)>],
    subs: &[Substitution],
    units: &[&Unit],
) -> BTreeSet<usize> {
    let inside: HashMap<LayerId, usize> = units
        .iter()
        .flat_map(|u| subs[u.sub].replaced.iter().map(move |&l| (l, u.sub)))
        .collect();
    let readers = |t: TensorId| consumers.get(t.0).into_iter().flatten().map(|&(l, _)| l);
    let mut stack: Vec<LayerId> = units
        .iter()
        .flat_map(|u| readers(u.out))
        .filter(|l| !inside.contains_key(l))
        .collect();
    let mut seen: BTreeSet<LayerId> = BTreeSet::new();
    let mut back = BTreeSet::new();
    // A DequantizeLinear that only the units read goes with the region (`absorbed`): no
    // path leaves through it.
    let absorbable = |l: LayerId| {
        let layer = net.layer(l);
        matches!(layer.op, Op::DequantizeLinear { .. })
            && layer.outputs.iter().all(|&t| {
                !net.outputs().contains(&t) && readers(t).all(|r| inside.contains_key(&r))
            })
    };
    while let Some(l) = stack.pop() {
        if let Some(&sub) = inside.get(&l) {
            back.insert(sub);
        } else if seen.insert(l) && !absorbable(l) {
            stack.extend(net.layer(l).outputs.iter().copied().flat_map(readers));
        }
    }
    back
}

/// The layers of the subgraph outside every substitution whose outputs only the region's
/// layers read: dead DequantizeLinear layers, and NHWC → NCHW transposes feeding the region.
/// Returns them with, for each transpose, the tensor it made and the one it read.
fn absorbed(
    view: &SubgraphView<'_>,
    used: &BTreeSet<LayerId>,
    replaced: &BTreeSet<LayerId>,
    reads: &BTreeSet<TensorId>,
) -> (Vec<LayerId>, HashMap<TensorId, TensorId>) {
    let net = view.network();
    let consumers = net.consumers();
    let mut layers = Vec::new();
    let mut entries = HashMap::new();
    for &id in view.layers() {
        if used.contains(&id) {
            continue;
        }
        let layer = net.layer(id);
        let [t] = layer.outputs.as_slice() else {
            continue;
        };
        let readers = consumers.get(t.0).map(Vec::as_slice).unwrap_or(&[]);
        if net.outputs().contains(t)
            || readers.is_empty()
            || readers.iter().any(|(l, _)| !replaced.contains(l))
        {
            continue;
        }
        match &layer.op {
            Op::DequantizeLinear { .. } => layers.push(id),
            Op::Transpose { perm } if perm.as_slice() == TO_NCHW && reads.contains(t) => {
                let Some(&x) = layer.inputs.first() else {
                    continue;
                };
                // The transpose's input must be computed outside the region (or be a
                // graph input or constant).
                let outside = match net.tensor(x).kind {
                    TensorKind::Produced { layer, .. } => !replaced.contains(&layer),
                    _ => true,
                };
                if outside && net.tensor(x).info.shape.rank() == 4 {
                    layers.push(id);
                    entries.insert(*t, x);
                }
            }
            _ => {}
        }
    }
    (layers, entries)
}

/// The `DequantizeLinear` (per tensor) and the mean over the pixels after a region output
/// `t`, each the only reader of the tensor before it: a classifier's pooled features. A
/// `ReduceMean` over H and W (keepdims off) gives `[N, C]` in either layout; a
/// `GlobalAveragePool` gives `[N, C, 1, 1]`, whose bytes are those of `[N, C]` too. So the
/// pair joins the region and reads the channels-last tensor (no transpose back).
fn pooled_tail(
    view: &SubgraphView<'_>,
    used: &BTreeSet<LayerId>,
    t: TensorId,
) -> Option<(LayerId, LayerId)> {
    let net = view.network();
    let consumers = net.consumers();
    let sole = |t: TensorId| -> Option<LayerId> {
        if net.outputs().contains(&t) {
            return None;
        }
        match consumers.get(t.0).map(Vec::as_slice) {
            Some([(l, 0)]) if view.layers().contains(l) && !used.contains(l) => Some(*l),
            _ => None,
        }
    };
    let dq = sole(t)?;
    let layer = net.layer(dq);
    let Op::DequantizeLinear { .. } = layer.op else {
        return None;
    };
    let scale = net.tensor(*layer.inputs.get(1)?).info.shape.elements();
    let [f] = layer.outputs.as_slice() else {
        return None;
    };
    let mean = sole(*f)?;
    let ml = net.layer(mean);
    let plain = match &ml.op {
        Op::Reduce(r) => {
            let mut axes: Vec<i64> = r
                .axes
                .iter()
                .map(|&a| if a < 0 { a + 4 } else { a })
                .collect();
            axes.sort_unstable();
            r.kind == ReduceKind::Mean && !r.keepdims && axes == [2, 3]
        }
        Op::GlobalPool(PoolKind::Average) => true,
        _ => false,
    };
    (scale == 1 && plain && ml.inputs.len() == 1 && ml.outputs.len() == 1).then_some((dq, mean))
}

/// A per-tensor `QuantizeLinear` of a 4-D f32 tensor computed outside the region (a graph
/// input's, as an ONNX QDQ model starts) making region input `t`, which only the region
/// reads: the region then quantizes it straight into the channels-last layout
/// (`QuantizeToNhwc`) instead of transposing the 8-bit tensor (the generic transpose of
/// bytes cost several times the quantization).
fn quantized_entry(
    view: &SubgraphView<'_>,
    used: &BTreeSet<LayerId>,
    replaced: &BTreeSet<LayerId>,
    t: TensorId,
) -> Option<LayerId> {
    let net = view.network();
    let consumers = net.consumers();
    if net.outputs().contains(&t) {
        return None;
    }
    let TensorKind::Produced { layer: q, .. } = net.tensor(t).kind else {
        return None;
    };
    if !view.layers().contains(&q) || used.contains(&q) || replaced.contains(&q) {
        return None;
    }
    let readers = consumers.get(t.0).map(Vec::as_slice).unwrap_or(&[]);
    if readers.is_empty() || readers.iter().any(|(l, _)| !replaced.contains(l)) {
        return None;
    }
    let layer = net.layer(q);
    let Op::QuantizeLinear { .. } = layer.op else {
        return None;
    };
    let x = net.tensor(*layer.inputs.first()?);
    let per_tensor = layer
        .inputs
        .iter()
        .skip(1)
        .all(|&p| net.tensor(p).info.shape.elements() == 1);
    let outside = match x.kind {
        TensorKind::Produced { layer, .. } => !replaced.contains(&layer),
        _ => true,
    };
    (per_tensor
        && outside
        && layer.outputs.len() == 1
        && x.info.dtype == DataType::F32
        && x.info.shape.rank() == 4)
        .then_some(q)
}

/// One substitution for a region, or `None` when it is not convex (or a description fails).
fn rewrite(
    view: &SubgraphView<'_>,
    subs: &[Substitution],
    units: &[&Unit],
    used: &BTreeSet<LayerId>,
) -> Option<Substitution> {
    let net = view.network();
    let consumers = net.consumers();
    let outputs: BTreeSet<TensorId> = units.iter().map(|u| u.out).collect();
    let mut replaced: BTreeSet<LayerId> = units
        .iter()
        .flat_map(|u| subs[u.sub].replaced.iter().copied())
        .collect();
    let reads: BTreeSet<TensorId> = units
        .iter()
        .flat_map(|u| u.reads.iter().copied())
        .filter(|t| !outputs.contains(t))
        .collect();
    let tails: HashMap<TensorId, (LayerId, LayerId)> = units
        .iter()
        .filter_map(|u| Some((u.out, pooled_tail(view, used, u.out)?)))
        .collect();
    replaced.extend(tails.values().flat_map(|&(a, b)| [a, b]));
    let (extra, entries) = absorbed(view, used, &replaced, &reads);
    // A lone layer only gains where no transpose is added to reach it.
    if units.len() < 2 && entries.len() < reads.len() {
        return None;
    }
    replaced.extend(extra);
    let quantized: HashMap<TensorId, LayerId> = reads
        .iter()
        .filter(|t| !entries.contains_key(t))
        .filter_map(|&t| Some((t, quantized_entry(view, used, &replaced, t)?)))
        .collect();
    replaced.extend(quantized.values().copied());
    if !is_convex(net, &consumers, units.iter().map(|u| u.out), &replaced) {
        return None;
    }
    // Execution order: a unit once the region tensors it reads are computed.
    let mut order: Vec<&Unit> = Vec::new();
    let mut done: BTreeSet<TensorId> = BTreeSet::new();
    while order.len() < units.len() {
        let before = order.len();
        for u in units {
            let ready = u
                .reads
                .iter()
                .all(|t| !outputs.contains(t) || done.contains(t));
            if !done.contains(&u.out) && ready {
                done.insert(u.out);
                order.push(u);
            }
        }
        if order.len() == before {
            return None;
        }
    }
    let paired = pairs(net, &consumers, subs, &replaced, &tails, units);
    // The depthwise layers of pairs, by output: (their name, inputs and description), taken
    // up by the pointwise layer after them.
    let mut pending: HashMap<TensorId, (String, Vec<ValueRef>, QConvDesc)> = HashMap::new();
    let mut layers: Vec<ReplacementLayer> = Vec::new();
    // Where each channels-last tensor comes from: a replacement layer, or an existing
    // tensor (the input of an absorbed transpose).
    let mut nhwc_of: HashMap<TensorId, ValueRef> = HashMap::new();
    for u in order {
        let r = subs[u.sub].replacement.first()?;
        let out_info = &net.tensor(u.out).info;
        let flat = out_info.shape.rank() == 2;
        let y = if flat {
            out_info.clone()
        } else {
            nhwc_info(out_info)?
        };
        let custom = || quant_custom(&r.op);
        let op = match u.kind {
            Kind::Concat => Op::Concat { axis: 3 },
            Kind::Moves => super::region_moves::to_nhwc(&r.op)?,
            Kind::Conv => {
                let c = custom()?;
                let d = QConvDesc::decode(c).ok()?;
                Op::Custom(QConvDesc { nhwc: true, ..d }.to_op(y))
            }
            Kind::Mean => {
                let d = QMeanDesc::decode(custom()?).ok()?;
                Op::Custom(QMeanDesc { nhwc: true, ..d }.to_op(y))
            }
            Kind::Pool => {
                let d = QPoolDesc::decode(custom()?).ok()?;
                Op::Custom(QPoolDesc { nhwc: true, ..d }.to_op(y))
            }
            Kind::Elementwise => {
                let c = custom()?;
                Op::Custom(if c.op_type == QLINEAR_BINARY {
                    // A binary layer's constant operand goes channels-last too.
                    QBinaryDesc::decode(c).ok()?.to_nhwc()?.to_op(y)
                } else {
                    // The same layer on the channels-last shape.
                    CustomOp {
                        outputs: vec![y],
                        ..c.clone()
                    }
                })
            }
        };
        let mut inputs = r.inputs.clone();
        // A pair's pointwise layer reads the intermediate inside the pair, not as a tensor.
        let in_pair = u.reads.first().is_some_and(|t| pending.contains_key(t));
        for (slot, &t) in u.reads.iter().enumerate().filter(|_| !in_pair) {
            let v = match nhwc_of.get(&t) {
                Some(v) => v.clone(),
                None => {
                    let v = match (entries.get(&t), quantized.get(&t)) {
                        (Some(&x), _) => ValueRef::Existing(x),
                        (None, Some(&q)) => {
                            // Quantized channels-last in one pass (no 8-bit transpose).
                            let ql = net.layer(q);
                            let Op::QuantizeLinear { to, .. } = ql.op else {
                                return None;
                            };
                            let y = nhwc_info(&net.tensor(t).info)?;
                            layers.push(ReplacementLayer {
                                name: format!("{}_nhwc", ql.name),
                                op: Op::Custom(super::qdq::quantize_nhwc_op(to, y)),
                                inputs: ql.inputs.iter().map(|&p| ValueRef::Existing(p)).collect(),
                                outputs: vec![None],
                            });
                            ValueRef::Produced {
                                layer: layers.len() - 1,
                                slot: 0,
                            }
                        }
                        (None, None) => {
                            nhwc_info(&net.tensor(t).info)?;
                            layers.push(ReplacementLayer {
                                name: format!("{}_to_nhwc_for_{}", net.tensor(t).name, r.name),
                                op: Op::Transpose {
                                    perm: TO_NHWC.to_vec(),
                                },
                                inputs: vec![ValueRef::Existing(t)],
                                outputs: vec![None],
                            });
                            ValueRef::Produced {
                                layer: layers.len() - 1,
                                slot: 0,
                            }
                        }
                    };
                    nhwc_of.insert(t, v.clone());
                    v
                }
            };
            *inputs.get_mut(slot)? = v;
        }
        if paired.contains(&u.out) {
            // A pair's depthwise layer: run by the pointwise layer after it.
            let Op::Custom(c) = op else {
                return None;
            };
            let d = QConvDesc::decode(&c).ok()?;
            pending.insert(u.out, (r.name.clone(), inputs, d));
            continue;
        }
        let (name, op, inputs) = match u.reads.first().and_then(|t| pending.remove(t)) {
            Some((dw_name, dw_inputs, dw)) => {
                // The pointwise layer of a pair: one layer, reading the depthwise layer's
                // input, weights and bias, then its own weights and bias.
                let Op::Custom(c) = op else {
                    return None;
                };
                let pw = QConvDesc::decode(&c).ok()?;
                let read = u.reads.first()?;
                let mid = nhwc_info(&net.tensor(*read).info)?;
                let mut both = dw_inputs;
                both.extend(inputs.iter().skip(1).cloned());
                let pair = QConvPairDesc { dw, pw, mid };
                (
                    format!("{dw_name}+{}", r.name),
                    Op::Custom(pair.to_op(nhwc_info(out_info)?)),
                    both,
                )
            }
            None => (r.name.clone(), op, inputs),
        };
        layers.push(ReplacementLayer {
            name,
            op,
            inputs,
            // An [N, C] mean is the tensor itself in either layout.
            outputs: vec![flat.then_some(u.out)],
        });
        let idx = layers.len() - 1;
        nhwc_of.insert(
            u.out,
            ValueRef::Produced {
                layer: idx,
                slot: 0,
            },
        );
        let leaves = net.outputs().contains(&u.out)
            || consumers[u.out.0]
                .iter()
                .any(|(l, _)| !replaced.contains(l));
        if let Some(&(dq, mean)) = tails.get(&u.out) {
            // Dequantized and averaged over the pixels channels-last: [N, C] as before.
            let d = net.layer(dq);
            let m = net.layer(mean);
            let mut inputs = vec![ValueRef::Produced {
                layer: idx,
                slot: 0,
            }];
            inputs.extend(d.inputs.iter().skip(1).map(|&t| ValueRef::Existing(t)));
            layers.push(ReplacementLayer {
                name: d.name.clone(),
                op: d.op.clone(),
                inputs,
                outputs: vec![None],
            });
            let pooled = *m.outputs.first()?;
            // A GlobalAveragePool's [N, C, 1, 1] is the mean's [N, C] reshaped.
            let global = matches!(m.op, Op::GlobalPool(_));
            layers.push(ReplacementLayer {
                name: m.name.clone(),
                op: Op::Reduce(ReduceDesc {
                    kind: ReduceKind::Mean,
                    axes: vec![1, 2],
                    keepdims: false,
                    noop_with_empty_axes: false,
                }),
                inputs: vec![ValueRef::Produced {
                    layer: layers.len() - 1,
                    slot: 0,
                }],
                outputs: vec![(!global).then_some(pooled)],
            });
            if global {
                layers.push(ReplacementLayer {
                    name: format!("{}_as_nc11", m.name),
                    op: Op::Reshape {
                        shape: net.tensor(pooled).info.shape.dims().to_vec(),
                    },
                    inputs: vec![ValueRef::Produced {
                        layer: layers.len() - 1,
                        slot: 0,
                    }],
                    outputs: vec![Some(pooled)],
                });
            }
        } else if leaves && !flat {
            // Leaves the region: back to NCHW, under the tensor's own name; a mean's
            // [N, 1, 1, C] holds the bytes of [N, C, 1, 1] already, so it only needs the dims.
            let op = if u.kind == Kind::Mean {
                Op::Reshape {
                    shape: out_info.shape.dims().to_vec(),
                }
            } else {
                Op::Transpose {
                    perm: TO_NCHW.to_vec(),
                }
            };
            layers.push(ReplacementLayer {
                name: format!("{}_to_nchw", net.tensor(u.out).name),
                op,
                inputs: vec![ValueRef::Produced {
                    layer: idx,
                    slot: 0,
                }],
                outputs: vec![Some(u.out)],
            });
        }
    }
    Some(Substitution {
        replaced: replaced.into_iter().collect(),
        replacement: layers,
    })
}

/// The pairs of the region's `units` that run as one step ([`super::nhwc_conv::pair`]): a
/// depthwise convolution whose output only a pointwise convolution reads (no other unit, no
/// layer outside the region, not a network output, no pooled tail), by that output.
fn pairs(
    net: &Network,
    consumers: &[Vec<(LayerId, usize)>],
    subs: &[Substitution],
    replaced: &BTreeSet<LayerId>,
    tails: &HashMap<TensorId, (LayerId, LayerId)>,
    units: &[&Unit],
) -> HashSet<TensorId> {
    let conv =
        |u: &Unit| QConvDesc::decode(quant_custom(&subs.get(u.sub)?.replacement.first()?.op)?).ok();
    let dims = |t: TensorId| net.tensor(t).info.shape.dims();
    let mut out = HashSet::new();
    for u in units.iter().filter(|u| u.kind == Kind::Conv) {
        let Some(d) = conv(u) else { continue };
        let (Some(&x), &[_, c, h, w]) = (u.reads.first(), dims(u.out)) else {
            continue;
        };
        if dims(x).get(1) != Some(&c) || !is_depthwise(&d, c, c) {
            continue;
        }
        let readers: Vec<&&Unit> = units.iter().filter(|v| v.reads.contains(&u.out)).collect();
        let [v] = readers.as_slice() else { continue };
        let leaves = net.outputs().contains(&u.out)
            || tails.contains_key(&u.out)
            || consumers
                .get(u.out.0)
                .is_none_or(|c| c.iter().any(|(l, _)| !replaced.contains(l)));
        if leaves || v.kind != Kind::Conv || v.reads.as_slice() != [u.out] {
            continue;
        }
        let Some(p) = conv(v) else { continue };
        let &[_, _, oh, ow] = dims(v.out) else {
            continue;
        };
        if is_pointwise(&p, (h, w), (oh, ow)) {
            out.insert(u.out);
        }
    }
    out
}
