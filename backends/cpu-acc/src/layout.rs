//! Channels-last regions: after fusion, the fused convolutions of a MobileNet-style body
//! (pointwise and depthwise convolutions, and the first layer feeding them) are rewritten to
//! run on `[N, H, W, C]` tensors (see [`crate::conv::nhwc`]), with one `Transpose` at each tensor
//! that enters the region in NCHW (none for the first layer, which reads NCHW itself) and
//! one at each tensor that leaves it. Inside, no tensor is transposed. A tensor entering
//! two regions (one reading it as a convolution's input, the other as a residual) is
//! transposed by each, under a name made of the tensor's and the region's first layer
//! reading it, so that layer names stay unique.
//!
//! A GlobalAveragePool (or a ReduceMean over both spatial axes, keeping them: TFLite's MEAN)
//! reading a region's output joins it as a mean over the pixels of the
//! channels-last tensor (`[N, 1, 1, C]`, the bytes of `[N, C, 1, 1]`), so a classifier's
//! body ends without a transpose.
//!
//! A squeeze-excite block inside a body stays channels-last too: the pool's mean feeds its
//! two 1×1 convolutions (units of the region on `[N, 1, 1, C]`, the bytes of `[N, C, 1, 1]`)
//! and the gate's `Mul` joins as a per-channel scale of the region tensor, so the block costs
//! no transpose (it cost two of the whole tensor, out and back in). A convolution fusion left
//! alone (a projection with nothing after it) joins a region as a plain `FusedConv`. Both
//! join only regions that fused layers make worth forming; elsewhere they stay as they were.
//!
//! A region is a set of fused convolutions connected through their inputs and residuals. It
//! is only formed when it holds a depthwise convolution (where channels-last gains the most)
//! or a windowed one over a small output plane (a ResNet's 7×7 last stage, whose 49 pixels
//! fill 54 GEMM rows channels-last where NCHW's 16-wide columns fill 64; other networks keep
//! the NCHW paths), and at least two layers, and when it is convex:
//! no path leaves the region and comes back into it, so the region can be one substitution.
//! A region that is not (EfficientNetV2's fused blocks: a 3×3 convolution left NCHW between
//! two pointwise ones joined by a residual) is cut into convex pieces in execution order
//! (`convex_pieces`), and those holding a depthwise convolution form.
//! The option `nhwc=off` (in force when the network is optimized) keeps every layer NCHW,
//! for A/B measurements.

use crate::act::Activation;
use crate::fusion::{ConvLayout, ConvSpec, Fused};
use backplane_backend_api::{ReplacementLayer, SubgraphView, Substitution, ValueRef};
use backplane_core::ops::{BinaryOp, PoolKind, ReduceDesc, ReduceKind};
use backplane_core::{DataType, LayerId, Network, Op, TensorId, TensorInfo};
use std::collections::{BTreeSet, HashMap};

/// Fewest floats of an expansion's output for it to run with its depthwise convolution:
/// smaller tensors stay in L2 between two layers anyway (the measurement:
/// docs/cpu-acc-bounds.md, "Channels-last regions").
const PAIR_MIN_FLOATS: usize = 1 << 20;

/// Fewest floats of a depthwise convolution's output for it to run with its projection
/// (below it the pair was no faster: docs/cpu-acc-bounds.md, "Channels-last regions").
const PROJECTION_MIN_FLOATS: usize = 1 << 18;

/// How a fused convolution runs in a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// 1×1, stride 1, no padding, one group.
    Pointwise,
    /// One group per channel.
    Depthwise,
    /// One group, a window, few input channels, input from outside: reads NCHW.
    Entry,
    /// One group, a window or a stride, more channels, a small output plane (a ResNet's
    /// last stage), or a stride of 2 onto a plane of at most [`STRIDED_MAX_PIXELS`]:
    /// im2col rows of channels-last pixels, each tap's channels one run.
    Window,
    /// A squeeze-excite gate: `Mul` of a region tensor `[N, C, H, W]` (unit input `x`) by
    /// `[N, C, 1, 1]` (`residual`), `[N, H, W, C] × [N, 1, 1, C]` channels-last. `gate_first`:
    /// the gate is the Mul's first input.
    Scale { gate_first: bool },
}

/// Most output pixels of a [`Role::Window`] convolution: with the pixels as GEMM rows a 7×7
/// plane fills 49 of 54 tile rows, where NCHW's 16-wide columns fill 64 lanes for 49. From
/// 8×8 up, 3×3 convolutions with enough channels take the Winograd path instead, which
/// channels-last would lose.
const WINDOW_MAX_PIXELS: usize = 49;

/// Most output pixels of a strided (2×2) [`Role::Window`] convolution: channels-last im2col
/// rows of pixels with the weights prepacked, where NCHW packs an im2col B of the input's
/// stride phases each run (padding columns included); the gain is about four times what the
/// transposes in and out cost (docs/cpu-acc-bounds.md, "Channels-last regions").
const STRIDED_MAX_PIXELS: usize = 28 * 28;

/// Fewest channels of a depthwise or pointwise convolution over a plane of at least
/// [`FEW_CHANNELS_MIN_PIXELS`] that joins a region: with fewer, the channel blocks of a
/// channels-last tensor are mostly padding lanes, and the NCHW paths (rows of pixels in the
/// lanes) were faster on such planes (docs/cpu-acc-bounds.md, "Channels-last regions").
const MIN_REGION_CHANNELS: usize = 16;

/// The plane size (output pixels) from which [`MIN_REGION_CHANNELS`] applies.
const FEW_CHANNELS_MIN_PIXELS: usize = 64 * 64;

/// A fused convolution that may join a region.
#[derive(Clone)]
struct Unit {
    /// Index of its substitution.
    sub: usize,
    x: TensorId,
    residual: Option<TensorId>,
    out: TensorId,
    role: Role,
}

/// The channels-last dims of `info` (rank 4), keeping the type.
fn nhwc_info(info: &TensorInfo) -> Option<TensorInfo> {
    let d = info.shape.dims();
    if d.len() != 4 {
        return None;
    }
    Some(TensorInfo::new(info.dtype, crate::conv::nhwc::to_nhwc(d)))
}

fn unit(view: &SubgraphView<'_>, sub: usize, s: &Substitution) -> Option<Unit> {
    let net = view.network();
    let [r] = s.replacement.as_slice() else {
        return None;
    };
    let Op::Custom(c) = &r.op else {
        return None;
    };
    let Fused::Conv(spec) = Fused::decode(c).ok()? else {
        return None;
    };
    // A normalization folded into the input's packing runs in the NCHW GEMM only.
    if spec.layout != ConvLayout::Nchw || spec.pre.is_some() {
        return None;
    }
    let desc = spec.desc;
    let existing = |v: &ValueRef| match v {
        ValueRef::Existing(t) => Some(*t),
        _ => None,
    };
    let constant = |v: &ValueRef| match v {
        ValueRef::NewConstant(_) => true,
        ValueRef::Existing(t) => net.tensor(*t).constant().is_some(),
        ValueRef::Produced { .. } => false,
    };
    let x = existing(r.inputs.first()?)?;
    if !constant(r.inputs.get(1)?) || r.inputs.get(2).is_some_and(|b| !constant(b)) {
        return None;
    }
    let residual = match r.inputs.get(3) {
        Some(v) => Some(existing(v)?),
        None => None,
    };
    let out = (*r.outputs.first()?)?;
    let xd = net.tensor(x).info.shape.dims();
    let yd = net.tensor(out).info.shape.dims();
    if xd.len() != 4 || yd.len() != 4 {
        return None;
    }
    let (ch, m) = (xd[1], yd[1]);
    let w = &desc.window;
    let ones = |v: &[usize]| v.iter().all(|&s| s == 1);
    let role = if desc.group == ch && m == ch && ch > 1 && ones(&w.dilations) {
        if ch < MIN_REGION_CHANNELS && yd[2] * yd[3] >= FEW_CHANNELS_MIN_PIXELS {
            return None;
        }
        Role::Depthwise
    } else if desc.group.max(1) == 1
        && ones(&w.kernel)
        && ones(&w.strides)
        && w.pads.iter().all(|&p| p == 0)
        && xd[2..] == yd[2..]
    {
        if ch.min(m) < MIN_REGION_CHANNELS && yd[2] * yd[3] >= FEW_CHANNELS_MIN_PIXELS {
            return None;
        }
        Role::Pointwise
    } else if desc.group.max(1) == 1 && ch <= 4 {
        Role::Entry
    } else if desc.group.max(1) == 1
        && (yd[2] * yd[3] <= WINDOW_MAX_PIXELS
            || (w.strides.iter().all(|&s| s == 2) && yd[2] * yd[3] <= STRIDED_MAX_PIXELS))
    {
        Role::Window
    } else {
        return None;
    };
    Some(Unit {
        sub,
        x,
        residual,
        out,
        role,
    })
}

/// The mean over the pixels of an `[N, H, W, C]` tensor, keeping its rank.
fn pixel_mean() -> ReduceDesc {
    ReduceDesc {
        kind: ReduceKind::Mean,
        axes: vec![1, 2],
        keepdims: true,
        noop_with_empty_axes: false,
    }
}

/// A mean over both spatial axes of an NCHW tensor, keeping them (TFLite's MEAN over height
/// and width, as the importer writes it): a global average pool.
fn is_plane_mean(op: &Op) -> bool {
    let Op::Reduce(d) = op else {
        return false;
    };
    d.kind == ReduceKind::Mean && d.keepdims && {
        let mut axes = d.axes.clone();
        axes.sort_unstable();
        axes == [2, 3] || axes == [-2, -1]
    }
}

/// Layers fusion left alone that may join a region, each as a one-layer substitution: a
/// lone f32 convolution (as a `FusedConv` without activation), and a squeeze-excite gate's
/// `Mul` (`[N, C, H, W] × [N, C, 1, 1]`). Returned with the role of the Mul's unit.
fn candidates(
    view: &SubgraphView<'_>,
    fused: &BTreeSet<LayerId>,
) -> Vec<(Substitution, Option<Role>)> {
    let net = view.network();
    let mut out = Vec::new();
    for &l in view.layers() {
        if fused.contains(&l) || crate::support::check(&view.layer_desc(l)).is_err() {
            continue;
        }
        let layer = net.layer(l);
        let [y] = layer.outputs.as_slice() else {
            continue;
        };
        let yi = &net.tensor(*y).info;
        if yi.dtype != DataType::F32 || yi.shape.rank() != 4 {
            continue;
        }
        let existing = |ts: &[TensorId]| ts.iter().map(|&t| ValueRef::Existing(t)).collect();
        match &layer.op {
            Op::Conv(desc) if (2..=3).contains(&layer.inputs.len()) => {
                let spec = ConvSpec {
                    desc: desc.clone(),
                    act: Activation::None,
                    residual: false,
                    layout: ConvLayout::Nchw,
                    pre: None,
                };
                let replacement = ReplacementLayer {
                    name: layer.name.clone(),
                    op: Fused::Conv(spec).encode(yi.clone()),
                    inputs: existing(&layer.inputs),
                    outputs: vec![Some(*y)],
                };
                out.push((
                    Substitution {
                        replaced: vec![l],
                        replacement: vec![replacement],
                    },
                    None,
                ));
            }
            Op::Binary(BinaryOp::Mul) => {
                let [a, b] = layer.inputs.as_slice() else {
                    continue;
                };
                let yd = yi.shape.dims();
                let gate_dims = [yd[0], yd[1], 1, 1];
                let (ad, bd) = (
                    net.tensor(*a).info.shape.dims(),
                    net.tensor(*b).info.shape.dims(),
                );
                let gate_first = if ad == gate_dims && bd == yd {
                    true
                } else if bd == gate_dims && ad == yd {
                    false
                } else {
                    continue;
                };
                let types_ok = [a, b]
                    .iter()
                    .all(|t| net.tensor(**t).info.dtype == DataType::F32);
                if !types_ok || yd[2] * yd[3] == 1 {
                    continue;
                }
                let replacement = ReplacementLayer {
                    name: layer.name.clone(),
                    op: layer.op.clone(),
                    inputs: existing(&layer.inputs),
                    outputs: vec![Some(*y)],
                };
                out.push((
                    Substitution {
                        replaced: vec![l],
                        replacement: vec![replacement],
                    },
                    Some(Role::Scale { gate_first }),
                ));
            }
            _ => {}
        }
    }
    out
}

/// The unit of a squeeze-excite gate's substitution (see [`candidates`]).
fn scale_unit(sub: usize, s: &Substitution, gate_first: bool) -> Option<Unit> {
    let [r] = s.replacement.as_slice() else {
        return None;
    };
    let tensor = |v: Option<&ValueRef>| match v {
        Some(ValueRef::Existing(t)) => Some(*t),
        _ => None,
    };
    let (a, b) = (tensor(r.inputs.first())?, tensor(r.inputs.get(1))?);
    let (x, gate) = if gate_first { (b, a) } else { (a, b) };
    Some(Unit {
        sub,
        x,
        residual: Some(gate),
        out: (*r.outputs.first()?)?,
        role: Role::Scale { gate_first },
    })
}

/// Group `units` into regions (lists of unit indices): units are joined through the tensors
/// they read, and with `through_pools`, through a pool between them (`pool_input`: a pool's
/// output → its input) and with the squeeze-excite gates.
fn partition(
    units: &[Unit],
    pool_input: &HashMap<TensorId, TensorId>,
    through_pools: bool,
) -> Vec<Vec<usize>> {
    let producer: HashMap<TensorId, usize> =
        units.iter().enumerate().map(|(i, u)| (u.out, i)).collect();
    let mut parent: Vec<usize> = (0..units.len()).collect();
    for (i, u) in units.iter().enumerate() {
        if !through_pools && matches!(u.role, Role::Scale { .. }) {
            continue;
        }
        for t in std::iter::once(u.x).chain(u.residual) {
            let t = match pool_input.get(&t) {
                Some(&x) if through_pools => x,
                _ => t,
            };
            if let Some(&p) = producer.get(&t) {
                if !through_pools && matches!(units[p].role, Role::Scale { .. }) {
                    continue;
                }
                let (a, b) = (find(&mut parent, i), find(&mut parent, p));
                parent[a] = b;
            }
        }
    }
    {
        // Units reading the same tensor share one region (and one transpose of it): a
        // ResNet stage's strided convolution and its shortcut.
        let mut first_reader: HashMap<TensorId, usize> = HashMap::new();
        for (i, u) in units.iter().enumerate() {
            if u.role == Role::Entry || (!through_pools && matches!(u.role, Role::Scale { .. })) {
                continue;
            }
            match first_reader.get(&u.x) {
                Some(&j) => {
                    let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                    parent[a] = b;
                }
                None => {
                    first_reader.insert(u.x, i);
                }
            }
        }
    }
    let mut regions: HashMap<usize, Vec<usize>> = HashMap::new();
    for i in 0..units.len() {
        let root = find(&mut parent, i);
        regions.entry(root).or_default().push(i);
    }
    let mut members: Vec<Vec<usize>> = regions.into_values().collect();
    members.sort();
    members
}

fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

/// Rewrite the fused convolutions of `subs` into channels-last regions where they form one.
pub fn channels_last(view: &SubgraphView<'_>, subs: Vec<Substitution>) -> Vec<Substitution> {
    if !crate::options::current().nhwc {
        return subs;
    }
    let fused: BTreeSet<LayerId> = subs
        .iter()
        .flat_map(|s| s.replaced.iter().copied())
        .collect();
    // Lone convolutions and squeeze-excite gates, after the fused layers: used only where a
    // region takes them in.
    let real = subs.len();
    let mut subs = subs;
    let mut roles: Vec<Option<Role>> = vec![None; real];
    for (s, role) in candidates(view, &fused) {
        subs.push(s);
        roles.push(role);
    }
    let units: Vec<Unit> = subs
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match roles[i] {
            Some(Role::Scale { gate_first }) => scale_unit(i, s, gate_first),
            _ => unit(view, i, s),
        })
        .collect();
    let producer: HashMap<TensorId, usize> =
        units.iter().enumerate().map(|(i, u)| (u.out, i)).collect();
    // An entry reads NCHW: its input must come from outside any region.
    let units: Vec<Unit> = units
        .into_iter()
        .filter(|u| u.role != Role::Entry || !producer.contains_key(&u.x))
        .collect();
    // Average pools over a whole plane the backend runs as they are: a region whose output
    // they read takes them in (a mean over the pixels of its channels-last output).
    let net = view.network();
    let pools: Vec<LayerId> = view
        .layers()
        .iter()
        .copied()
        .filter(|l| !fused.contains(l))
        .filter(|&l| {
            let layer = net.layer(l);
            (layer.op == Op::GlobalPool(PoolKind::Average) || is_plane_mean(&layer.op))
                && layer.inputs.len() == 1
                && layer.outputs.len() == 1
                && net.tensor(layer.inputs[0]).info.shape.rank() == 4
                && crate::support::check(&view.layer_desc(l)).is_ok()
        })
        .collect();
    let pool_input: HashMap<TensorId, TensorId> = pools
        .iter()
        .map(|&l| (net.layer(l).outputs[0], net.layer(l).inputs[0]))
        .collect();
    let merged = partition(&units, &pool_input, true);
    let plain = partition(&units, &pool_input, false);
    let mut taken = vec![false; subs.len()];
    let mut out = Vec::new();
    let worth = |region: &[usize]| {
        // A lone windowed convolution is worth its two transposes too (measured on
        // ResNet-18's strided ones; see STRIDED_MAX_PIXELS). Only fused layers make a region
        // worth forming: the lone ones join regions, they do not start them (ShuffleNet's
        // lone depthwise convolutions would make a region of each branch, four transposes
        // of its tensors per block: not measured to pay).
        region.iter().any(|&i| {
            units[i].sub < real && matches!(units[i].role, Role::Depthwise | Role::Window)
        }) && (region.len() >= 2 || units[region[0]].role == Role::Window)
    };
    for region in merged {
        let mut tries = vec![region.clone()];
        if region.len() > 1 {
            // Should the region with its squeeze-excite blocks not form (not convex), its
            // parts joined without them may.
            tries.extend(
                plain
                    .iter()
                    .filter(|p| p.first().is_some_and(|i| region.contains(i)))
                    .filter(|p| **p != region)
                    .cloned(),
            );
        }
        // One substitution for `part` when it forms; its units then are taken.
        let mut form = |part: &[usize], taken: &mut Vec<bool>| {
            let region_units: Vec<&Unit> = part.iter().map(|&i| &units[i]).collect();
            let Some(s) = rewrite(view, &subs, &region_units, &pools) else {
                return false;
            };
            for u in &region_units {
                taken[u.sub] = true;
            }
            out.push(s);
            true
        };
        for (k, part) in tries.iter().enumerate() {
            if worth(part) && form(part, &mut taken) && k == 0 {
                break;
            }
        }
        if region.len() < 2 || region.iter().any(|&i| taken[units[i].sub]) {
            continue;
        }
        // Nothing formed: a path leaves the region and comes back (EfficientNetV2's
        // fused blocks, whose 3×3 convolutions stay NCHW between a pointwise convolution
        // and the one adding its output). Its convex pieces may form, those with a
        // depthwise convolution only (where channels-last gains the most).
        for part in convex_pieces(view, &subs, &units, &region, &pools, &pool_input) {
            let depthwise = part
                .iter()
                .any(|&i| units[i].sub < real && units[i].role == Role::Depthwise);
            if depthwise && worth(&part) {
                form(&part, &mut taken);
            }
        }
    }
    out.extend(
        subs.into_iter()
            .zip(taken)
            .enumerate()
            .filter(|&(i, (_, t))| !t && i < real)
            .map(|(_, (s, _))| s),
    );
    out
}

/// The units of `region` (indices into `units`) cut into convex pieces: in execution order
/// (of the last layer each replaces), a unit joins the piece before it while the two stay
/// convex (the `pools` reading them counted in) and starts the next piece otherwise; each
/// piece is then split into its connected parts ([`partition`]).
fn convex_pieces(
    view: &SubgraphView<'_>,
    subs: &[Substitution],
    units: &[Unit],
    region: &[usize],
    pools: &[LayerId],
    pool_input: &HashMap<TensorId, TensorId>,
) -> Vec<Vec<usize>> {
    let net = view.network();
    let consumers = net.consumers();
    let last_layer = |i: usize| subs[units[i].sub].replaced.iter().max().copied();
    let mut ordered = region.to_vec();
    ordered.sort_by_key(|&i| last_layer(i));
    // The layers a set of units replaces, with the pools reading their outputs.
    let replaced = |piece: &[usize]| -> BTreeSet<LayerId> {
        let outs: BTreeSet<TensorId> = piece.iter().map(|&i| units[i].out).collect();
        let pools = pools.iter().copied().filter(|&l| {
            net.layer(l)
                .inputs
                .first()
                .is_some_and(|x| outs.contains(x))
        });
        piece
            .iter()
            .flat_map(|&i| subs[units[i].sub].replaced.iter().copied())
            .chain(pools)
            .collect()
    };
    let convex = |piece: &[usize]| {
        let outs = piece.iter().map(|&i| units[i].out);
        is_convex(net, &consumers, outs, &replaced(piece))
    };
    let mut pieces: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for i in ordered {
        current.push(i);
        if current.len() > 1 && !convex(&current) {
            current.pop();
            pieces.push(std::mem::replace(&mut current, vec![i]));
        }
    }
    pieces.push(current);
    let mut out = Vec::new();
    for piece in pieces {
        let piece_units: Vec<Unit> = piece.iter().map(|&i| units[i].clone()).collect();
        for part in partition(&piece_units, pool_input, true) {
            out.push(part.iter().map(|&k| piece[k]).collect());
        }
    }
    out
}

/// One substitution for a region, or `None` when it is not convex (or a description fails).
fn rewrite(
    view: &SubgraphView<'_>,
    subs: &[Substitution],
    units: &[&Unit],
    pools: &[LayerId],
) -> Option<Substitution> {
    let net = view.network();
    let consumers = net.consumers();
    let outputs: BTreeSet<TensorId> = units.iter().map(|u| u.out).collect();
    // The pools reading a region output: unit output → pool layer.
    let pooled: Vec<(TensorId, LayerId)> = pools
        .iter()
        .filter_map(|&l| {
            let x = *net.layer(l).inputs.first()?;
            let dims = crate::conv::nhwc::to_nhwc(net.tensor(x).info.shape.dims());
            let runs = crate::reduce::ReducePlan::new(&pixel_mean(), &dims).is_ok();
            (outputs.contains(&x) && runs).then_some((x, l))
        })
        .collect();
    let replaced: BTreeSet<LayerId> = units
        .iter()
        .flat_map(|u| subs[u.sub].replaced.iter().copied())
        .chain(pooled.iter().map(|&(_, l)| l))
        .collect();
    if !is_convex(net, &consumers, units.iter().map(|u| u.out), &replaced) {
        return None;
    }
    // Execution order: a unit once its region inputs are computed (a pool's output once the
    // pool's input is).
    let pool_input: HashMap<TensorId, TensorId> = pooled
        .iter()
        .filter_map(|&(x, l)| Some((*net.layer(l).outputs.first()?, x)))
        .collect();
    let produced: BTreeSet<TensorId> = units.iter().map(|u| u.out).collect();
    let mut order: Vec<&Unit> = Vec::new();
    let mut done: BTreeSet<TensorId> = BTreeSet::new();
    while order.len() < units.len() {
        let before = order.len();
        for u in units {
            let ready = std::iter::once(u.x)
                .chain(u.residual)
                .map(|t| pool_input.get(&t).copied().unwrap_or(t))
                .all(|t| !produced.contains(&t) || done.contains(&t));
            if !done.contains(&u.out) && ready {
                done.insert(u.out);
                order.push(u);
            }
        }
        if order.len() == before {
            return None;
        }
    }
    // Two units run as one layer when the second alone reads the first's large output: a
    // pointwise expansion and its depthwise convolution, or a depthwise convolution and its
    // pointwise projection (expansions first; a unit joins one pair at most). Keyed by the
    // second unit's output.
    let first_of: HashMap<TensorId, &Unit> = if !crate::options::current().conv_pairs {
        HashMap::new()
    } else {
        let biased = |u: &Unit| subs[u.sub].replacement.first().map(|r| r.inputs.len()) >= Some(3);
        let kinds = [
            (Role::Pointwise, Role::Depthwise, PAIR_MIN_FLOATS),
            (Role::Depthwise, Role::Pointwise, PROJECTION_MIN_FLOATS),
        ];
        let mut pairs: HashMap<TensorId, &Unit> = HashMap::new();
        let mut taken: BTreeSet<TensorId> = BTreeSet::new();
        for (first_role, second_role, min_floats) in kinds {
            for s in units {
                let Some(f) = units.iter().find(|f| f.out == s.x) else {
                    continue;
                };
                let only_reader = consumers[f.out.0]
                    .iter()
                    .all(|(l, _)| subs[s.sub].replaced.contains(l));
                let size: usize = net.tensor(f.out).info.shape.dims().iter().product();
                // Only a projection takes a residual (its own, added to its output), and
                // not the tensor between the two, which the pair never writes.
                let residual_ok = match s.residual {
                    None => true,
                    Some(r) => second_role == Role::Pointwise && r != f.out,
                };
                if f.role == first_role
                    && s.role == second_role
                    && f.residual.is_none()
                    && residual_ok
                    && only_reader
                    && !net.outputs().contains(&f.out)
                    && biased(f)
                    && biased(s)
                    && size >= min_floats
                    && !taken.contains(&f.out)
                    && !taken.contains(&s.out)
                {
                    taken.extend([f.out, s.out]);
                    pairs.insert(s.out, f);
                }
            }
        }
        pairs
    };
    let paired: BTreeSet<TensorId> = first_of.values().map(|f| f.out).collect();
    let mut layers: Vec<ReplacementLayer> = Vec::new();
    let mut nhwc_of: HashMap<TensorId, usize> = HashMap::new();
    for u in order {
        if paired.contains(&u.out) {
            // Runs with the convolution reading it.
            continue;
        }
        let first = first_of.get(&u.out);
        let r = subs[u.sub].replacement.first()?;
        let mut inputs = r.inputs.clone();
        // Where the residual goes: after X, W, B, or after the pair's X, W1, B1, W2, B2.
        let mut residual_slot = 3;
        let mut x_slot = 0;
        if let Role::Scale { gate_first } = u.role {
            // The Mul as it was, its inputs channels-last: [N, H, W, C] × [N, 1, 1, C].
            (x_slot, residual_slot) = if gate_first { (1, 0) } else { (0, 1) };
        }
        let c = match (&r.op, u.role) {
            (Op::Custom(c), _) => Some(c),
            (_, Role::Scale { .. }) => None,
            _ => return None,
        };
        let x = match first {
            Some(f) => {
                // X, W1, B1 of the first, then W2, B2 (and R) of the second.
                let fr = subs[f.sub].replacement.first()?;
                inputs = fr
                    .inputs
                    .get(..3)?
                    .iter()
                    .chain(r.inputs.get(1..)?)
                    .cloned()
                    .collect();
                residual_slot = 5;
                f.x
            }
            None => u.x,
        };
        let layout = if u.role == Role::Entry {
            ConvLayout::NchwToNhwc
        } else {
            ConvLayout::Nhwc
        };
        let y = nhwc_info(&net.tensor(u.out).info)?;
        let (name, op) = match (first, c) {
            (_, None) => (r.name.clone(), r.op.clone()),
            (Some(f), Some(c)) => {
                let fr = subs[f.sub].replacement.first()?;
                let Op::Custom(fc) = &fr.op else {
                    return None;
                };
                let mid = nhwc_info(&net.tensor(f.out).info)?;
                let (Fused::Conv(first), Fused::Conv(second)) =
                    (Fused::decode(fc).ok()?, Fused::decode(c).ok()?)
                else {
                    return None;
                };
                // Both halves run channels-last inside the pair, whatever layout the
                // convolutions had as separate layers.
                let first = ConvSpec {
                    layout: ConvLayout::Nhwc,
                    ..first
                };
                let second = ConvSpec {
                    layout: ConvLayout::Nhwc,
                    ..second
                };
                let op = Fused::ConvPair { first, second, mid }.encode(y);
                (format!("{}+{}", fr.name, r.name), op)
            }
            (None, Some(c)) => {
                let Fused::Conv(spec) = Fused::decode(c).ok()? else {
                    return None;
                };
                (
                    r.name.clone(),
                    Fused::Conv(ConvSpec { layout, ..spec }).encode(y),
                )
            }
        };
        let slots = std::iter::once((x_slot, x)).chain(u.residual.map(|t| (residual_slot, t)));
        for (slot, t) in slots {
            if slot == x_slot && u.role == Role::Entry {
                continue;
            }
            let idx = match nhwc_of.get(&t) {
                Some(&i) => i,
                None => {
                    // Enters the region: NCHW → NHWC once, for every unit that reads it.
                    // Another region may read it too (one as a convolution's input, the
                    // other as a residual: MobileNetV3's blocks after a squeeze-excite), and
                    // transposes it under its own name: the tensor's and its first reader's
                    // (a replacement layer of this region only).
                    nhwc_info(&net.tensor(t).info)?;
                    layers.push(ReplacementLayer {
                        name: format!("{}_to_nhwc_for_{name}", net.tensor(t).name),
                        op: Op::Transpose {
                            perm: vec![0, 2, 3, 1],
                        },
                        inputs: vec![ValueRef::Existing(t)],
                        outputs: vec![None],
                    });
                    nhwc_of.insert(t, layers.len() - 1);
                    layers.len() - 1
                }
            };
            *inputs.get_mut(slot)? = ValueRef::Produced {
                layer: idx,
                slot: 0,
            };
        }
        layers.push(ReplacementLayer {
            name,
            op,
            inputs,
            outputs: vec![None],
        });
        let idx = layers.len() - 1;
        nhwc_of.insert(u.out, idx);
        for &(_, pool) in pooled.iter().filter(|(t, _)| *t == u.out) {
            // Mean over the pixels, [N, 1, 1, C], which has the bytes of [N, C, 1, 1].
            let pooled_out = *net.layer(pool).outputs.first()?;
            let d = net.tensor(u.out).info.shape.dims().to_vec();
            // Named apart from the pool, whose output tensor (and name) the Reshape takes.
            layers.push(ReplacementLayer {
                name: format!("{}_nhwc", net.layer(pool).name),
                op: Op::Reduce(pixel_mean()),
                inputs: vec![ValueRef::Produced {
                    layer: idx,
                    slot: 0,
                }],
                outputs: vec![None],
            });
            nhwc_of.insert(pooled_out, layers.len() - 1);
            let pool_leaves = net.outputs().contains(&pooled_out)
                || consumers[pooled_out.0]
                    .iter()
                    .any(|(l, _)| !replaced.contains(l));
            if pool_leaves {
                layers.push(ReplacementLayer {
                    name: net.layer(pool).name.clone(),
                    op: Op::Reshape {
                        shape: vec![*d.first()?, *d.get(1)?, 1, 1],
                    },
                    inputs: vec![ValueRef::Produced {
                        layer: layers.len() - 1,
                        slot: 0,
                    }],
                    outputs: vec![Some(pooled_out)],
                });
            }
        }
        let leaves = net.outputs().contains(&u.out)
            || consumers[u.out.0]
                .iter()
                .any(|(l, _)| !replaced.contains(l));
        if leaves {
            // Leaves the region: back to NCHW, under the tensor's own name.
            layers.push(ReplacementLayer {
                name: format!("{}_to_nchw", net.tensor(u.out).name),
                op: Op::Transpose {
                    perm: vec![0, 3, 1, 2],
                },
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

/// Whether a region replacing the layers `replaced`, whose units write `outputs`, is convex:
/// nothing reachable from those outputs through layers outside the region is inside it (the
/// region runs as one layer, so a path out of it and back in would be a cycle).
pub(crate) fn is_convex(
    net: &Network,
    consumers: &[Vec<(LayerId, usize)>],
    outputs: impl Iterator<Item = TensorId>,
    replaced: &BTreeSet<LayerId>,
) -> bool {
    let readers = |t: TensorId| consumers.get(t.0).into_iter().flatten().map(|&(l, _)| l);
    let mut stack: Vec<LayerId> = outputs
        .flat_map(readers)
        .filter(|l| !replaced.contains(l))
        .collect();
    let mut seen: BTreeSet<LayerId> = BTreeSet::new();
    while let Some(l) = stack.pop() {
        if replaced.contains(&l) {
            return false;
        }
        if seen.insert(l) {
            stack.extend(net.layer(l).outputs.iter().copied().flat_map(readers));
        }
    }
    true
}
