//! `optimize_subgraph` across the ABI: the subgraph sent as C structs, the plugin's answer
//! collected through sinks and checked id by id.

use super::backend::DynamicBackend;
use crate::abi::{self};
use crate::convert::{read_substitution, OwnedSubgraph};
use backplane_backend_api::{OptimizationViews, Substitution};
use backplane_core::{LayerId, Network};
use std::collections::HashSet;
use std::ffi::c_void;

/// What the plugin reported through the optimization sink.
pub(super) struct Collected<'a> {
    pub(super) network: &'a Network,
    pub(super) allowed: HashSet<LayerId>,
    pub(super) substitutions: Vec<Substitution>,
    pub(super) failed: Vec<Vec<LayerId>>,
    pub(super) untouched: Vec<Vec<LayerId>>,
    pub(super) error: Option<String>,
}

impl Collected<'_> {
    pub(super) fn layers(&mut self, layers: *const u64, n: usize) -> Option<Vec<LayerId>> {
        // SAFETY: `n` entries per the ABI.
        let ids = match unsafe { crate::convert::slice(layers, n) } {
            Ok(ids) => ids,
            Err(e) => {
                self.error.get_or_insert(e);
                return None;
            }
        };
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            let l = usize::try_from(id).map(LayerId).ok();
            match l.filter(|l| self.allowed.contains(l)) {
                Some(l) => out.push(l),
                None => {
                    self.error
                        .get_or_insert(format!("layer {id} is not in its subgraph"));
                    return None;
                }
            }
        }
        Some(out)
    }
}

/// `add_substitution` of the host's sink.
///
/// # Safety
/// `user` is the `Collected` of the current call; `sub` null or valid for the call.
pub(super) unsafe extern "C" fn sink_substitution(
    user: *mut c_void,
    sub: *const abi::Substitution,
) -> abi::Status {
    // SAFETY: `user` is `&mut Collected` for the duration of the call, per the caller.
    let Some(c) = (unsafe { user.cast::<Collected<'_>>().as_mut() }) else {
        return abi::STATUS_INVALID_ARGUMENT;
    };
    // SAFETY: null or valid per the ABI.
    match unsafe { read_substitution(sub, c.network, &c.allowed) } {
        Ok(s) => {
            c.substitutions.push(s);
            abi::STATUS_OK
        }
        Err(e) => {
            c.error.get_or_insert(e);
            abi::STATUS_INVALID_ARGUMENT
        }
    }
}

/// `add_failed` of the host's sink.
///
/// # Safety
/// As [`sink_substitution`]; `layers` has `n` entries.
pub(super) unsafe extern "C" fn sink_failed(
    user: *mut c_void,
    layers: *const u64,
    n: usize,
) -> abi::Status {
    // SAFETY: `user` is `&mut Collected` for the duration of the call, per the caller.
    let Some(c) = (unsafe { user.cast::<Collected<'_>>().as_mut() }) else {
        return abi::STATUS_INVALID_ARGUMENT;
    };
    match c.layers(layers, n) {
        Some(l) => {
            c.failed.push(l);
            abi::STATUS_OK
        }
        None => abi::STATUS_INVALID_ARGUMENT,
    }
}

/// `add_untouched` of the host's sink.
///
/// # Safety
/// As [`sink_failed`].
pub(super) unsafe extern "C" fn sink_untouched(
    user: *mut c_void,
    layers: *const u64,
    n: usize,
) -> abi::Status {
    // SAFETY: `user` is `&mut Collected` for the duration of the call, per the caller.
    let Some(c) = (unsafe { user.cast::<Collected<'_>>().as_mut() }) else {
        return abi::STATUS_INVALID_ARGUMENT;
    };
    match c.layers(layers, n) {
        Some(l) => {
            c.untouched.push(l);
            abi::STATUS_OK
        }
        None => abi::STATUS_INVALID_ARGUMENT,
    }
}

impl DynamicBackend {
    /// Offer one segment to the plugin and add its answer to `views`. A malformed answer or
    /// an error leaves the segment untouched; a panic marks it failed (the instance is then
    /// disabled, so the layers go to the next backends). Layers the answer does not mention
    /// are untouched.
    pub(super) fn optimize_segment(
        &self,
        f: abi::OptimizeSubgraphFn,
        network: &Network,
        segment: &[LayerId],
        views: &mut OptimizationViews,
    ) {
        if segment.is_empty() {
            return;
        }
        let c_subgraph = OwnedSubgraph::new(network, segment);
        let mut collected = Collected {
            network,
            allowed: segment.iter().copied().collect(),
            substitutions: Vec::new(),
            failed: Vec::new(),
            untouched: Vec::new(),
            error: None,
        };
        let sink = abi::OptimizationSink {
            struct_size: abi::size_u32::<abi::OptimizationSink>(),
            reserved: 0,
            user: (&mut collected as *mut Collected<'_>).cast::<c_void>(),
            add_substitution: Some(sink_substitution),
            add_failed: Some(sink_failed),
            add_untouched: Some(sink_untouched),
        };
        let raw = self.instance.raw;
        // SAFETY: a live instance; the subgraph and the sink (whose `user` points to
        // `collected`, not otherwise used during the call) are valid for the call.
        let result = self
            .instance
            .call(|msg| unsafe { f(raw, c_subgraph.as_ptr(), &sink, msg) });
        match result {
            Ok(()) => {}
            Err(e) if e.status == abi::STATUS_PANICKED => {
                views.failed.push(segment.to_vec());
                return;
            }
            Err(_) => {
                views.untouched.push(segment.to_vec());
                return;
            }
        }
        // Each layer in at most one part, or the whole answer is discarded.
        let mut seen: HashSet<LayerId> = HashSet::new();
        let parts = collected
            .substitutions
            .iter()
            .map(|s| &s.replaced)
            .chain(&collected.failed)
            .chain(&collected.untouched);
        let mut overlapping = false;
        for part in parts {
            for l in part {
                overlapping |= !seen.insert(*l);
            }
        }
        if collected.error.is_some() || overlapping {
            views.untouched.push(segment.to_vec());
            return;
        }
        let rest: Vec<LayerId> = segment
            .iter()
            .copied()
            .filter(|l| !seen.contains(l))
            .collect();
        views.substitutions.extend(collected.substitutions);
        views
            .failed
            .extend(collected.failed.into_iter().filter(|p| !p.is_empty()));
        views
            .untouched
            .extend(collected.untouched.into_iter().filter(|p| !p.is_empty()));
        if !rest.is_empty() {
            views.untouched.push(rest);
        }
    }
}
