//! 8-bit Pad and Slice inside channels-last regions ([`super::region`]): pure data movement,
//! so they run on the channels-last bytes as they are, their axes taken to that order, and a
//! region no longer ends at them (NASNet's `ZeroPadding2D → Cropping2D` pairs cut its int8
//! region into pieces, a transpose each way around every piece).
//!
//! A Pad joins once folded to the 8-bit tensor (`DequantizeLinear → Pad → QuantizeLinear`
//! on one quantization, filling with the zero point: [`super::fold`]'s movement fold). A
//! Slice of an 8-bit tensor joins as it is, or, where the TFLite importer wrapped it in
//! transposes (`Transpose NCHW → NHWC → Slice → Transpose NHWC → NCHW`, its STRIDED_SLICE
//! on the channels-last tensor), as the one channels-first Slice the three amount to: the
//! region then runs it channels-last again, and outside a region the two transposes are
//! gone anyway.

use super::is_8bit;
use backplane_backend_api::{ReplacementLayer, SubgraphView, Substitution, ValueRef};
use backplane_core::ops::{PadDesc, SliceDesc};
use backplane_core::{LayerId, Network, Op, TensorId, TensorKind};
use std::collections::BTreeSet;

/// NCHW → NHWC: NHWC axis `i` is NCHW axis `TO_NHWC[i]`.
const TO_NHWC: [usize; 4] = [0, 2, 3, 1];
/// NHWC → NCHW: NCHW axis `a` is NHWC axis `TO_NCHW[a]`.
const TO_NCHW: [usize; 4] = [0, 3, 1, 2];

fn four_8bit(net: &Network, t: TensorId) -> bool {
    let info = &net.tensor(t).info;
    info.shape.rank() == 4 && is_8bit(info.dtype)
}

/// The tensor a region Pad or Slice replacement (`op` on `inputs`, making `out`) reads: its
/// one 8-bit 4-D input, the output 8-bit 4-D too; `None` for other layers.
pub(super) fn unit_reads(
    net: &Network,
    op: &Op,
    inputs: &[ValueRef],
    out: TensorId,
) -> Option<Vec<TensorId>> {
    if !matches!(op, Op::Pad(_) | Op::Slice(_)) {
        return None;
    }
    let [ValueRef::Existing(x)] = inputs else {
        return None;
    };
    (four_8bit(net, *x) && four_8bit(net, out)).then(|| vec![*x])
}

/// Slice axes of a rank-4 tensor, each in `0..4` (empty: the first `starts.len()`).
fn slice_axes(d: &SliceDesc) -> Option<Vec<usize>> {
    let axes: Vec<i64> = if d.axes.is_empty() {
        (0..d.starts.len() as i64).collect()
    } else {
        d.axes.clone()
    };
    axes.iter()
        .map(|&a| {
            let a = if a < 0 { a + 4 } else { a };
            (0..4).contains(&a).then_some(a as usize)
        })
        .collect()
}

/// The Slice `d` with each axis `a` renamed `map[a]`.
fn remap_slice(d: &SliceDesc, map: [usize; 4]) -> Option<SliceDesc> {
    let axes = slice_axes(d)?.into_iter().map(|a| map[a] as i64).collect();
    Some(SliceDesc { axes, ..d.clone() })
}

/// The layer a region runs for the channels-first Pad or Slice `op`: the same movement of
/// the channels-last tensor.
pub(super) fn to_nhwc(op: &Op) -> Option<Op> {
    match op {
        Op::Slice(d) => Some(Op::Slice(remap_slice(d, TO_NCHW)?)),
        Op::Pad(d) => {
            let p = d.pads.as_slice();
            if p.len() != 8 {
                return None;
            }
            // NHWC axis i pads as NCHW axis TO_NHWC[i]: begins, then ends.
            let pads = (0..8).map(|k| p[(k / 4) * 4 + TO_NHWC[k % 4]]).collect();
            Some(Op::Pad(PadDesc { pads, ..d.clone() }))
        }
        _ => None,
    }
}

/// Add to `subs` (and their layers to `used`) the 8-bit 4-D Slices of `view` that may join
/// a region: one wrapped in transposes to and from channels-last as the one channels-first
/// Slice of the three layers, and one reading a folded layer's output as it is.
pub(super) fn add_slices(
    view: &SubgraphView<'_>,
    subs: &mut Vec<Substitution>,
    used: &mut BTreeSet<LayerId>,
) {
    let net = view.network();
    let consumers = net.consumers();
    let folded: BTreeSet<TensorId> = subs
        .iter()
        .flat_map(|s| {
            s.replacement
                .iter()
                .flat_map(|r| r.outputs.iter().flatten())
        })
        .copied()
        .collect();
    let free =
        |l: LayerId, used: &BTreeSet<LayerId>| view.layers().contains(&l) && !used.contains(&l);
    // The one layer reading `t` (not a graph output), free to take.
    let sole_reader = |t: TensorId, used: &BTreeSet<LayerId>| -> Option<LayerId> {
        if net.outputs().contains(&t) {
            return None;
        }
        match consumers.get(t.0).map(Vec::as_slice) {
            Some([(l, 0)]) if free(*l, used) => Some(*l),
            _ => None,
        }
    };
    let transpose = |l: LayerId, perm: [usize; 4]| -> Option<(TensorId, TensorId)> {
        let layer = net.layer(l);
        match (&layer.op, layer.inputs.as_slice(), layer.outputs.as_slice()) {
            (Op::Transpose { perm: p }, [x], [y]) if p.as_slice() == perm => Some((*x, *y)),
            _ => None,
        }
    };
    for &id in view.layers() {
        if used.contains(&id) {
            continue;
        }
        let layer = net.layer(id);
        let (Op::Slice(d), [x], [y]) =
            (&layer.op, layer.inputs.as_slice(), layer.outputs.as_slice())
        else {
            continue;
        };
        if !four_8bit(net, *x) || !four_8bit(net, *y) {
            continue;
        }
        let before = match net.tensor(*x).kind {
            TensorKind::Produced { layer: t, .. } if free(t, used) => transpose(t, TO_NHWC)
                .filter(|_| sole_reader(*x, used) == Some(id))
                .map(|(xi, _)| (t, xi)),
            _ => None,
        };
        let after = sole_reader(*y, used).and_then(|t| Some((t, transpose(t, TO_NCHW)?.1)));
        let sub = match (before, after) {
            (Some((t1, xi)), Some((t2, yo))) => {
                let Some(desc) = remap_slice(d, TO_NHWC) else {
                    continue;
                };
                Substitution {
                    replaced: vec![t1, id, t2],
                    replacement: vec![ReplacementLayer {
                        name: layer.name.clone(),
                        op: Op::Slice(desc),
                        inputs: vec![ValueRef::Existing(xi)],
                        outputs: vec![Some(yo)],
                    }],
                }
            }
            _ if folded.contains(x) => Substitution {
                replaced: vec![id],
                replacement: vec![ReplacementLayer {
                    name: layer.name.clone(),
                    op: layer.op.clone(),
                    inputs: vec![ValueRef::Existing(*x)],
                    outputs: vec![Some(*y)],
                }],
            },
            _ => continue,
        };
        used.extend(sub.replaced.iter().copied());
        subs.push(sub);
    }
}
