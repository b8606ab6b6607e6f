//! Exported `optimize_subgraph`: the host's subgraph rebuilt as a network, the answer
//! translated back to the host's ids.

use crate::abi;
use crate::convert::{read_subgraph, OwnedSubstitution};
use backplane_backend_api::{Backend, SubgraphView};
use backplane_core::LayerId;

use super::instance::PluginInstance;
use super::{guard, invalid, object, Export};

/// # Safety
/// Pointers as the ABI documents; `sink`'s functions may be called with its `user`.
pub(super) unsafe extern "C" fn optimize_subgraph<E: Export>(
    instance: *mut abi::Instance,
    subgraph: *const abi::Subgraph,
    sink: *const abi::OptimizationSink,
    error: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: a live instance per the ABI.
        let inst = unsafe { object::<PluginInstance<E::Backend>>(instance.cast(), "instance") }?;
        // SAFETY: null or valid per the ABI.
        let sink = unsafe { sink.as_ref() }.ok_or_else(|| invalid("the sink is null"))?;
        if (sink.struct_size as usize) < field_end!(abi::OptimizationSink, add_untouched) {
            return Err(invalid("the sink's struct_size is too small"));
        }
        let (Some(add_sub), Some(add_failed), Some(add_untouched)) =
            (sink.add_substitution, sink.add_failed, sink.add_untouched)
        else {
            return Err(invalid("the sink lacks a function"));
        };
        // SAFETY: a valid subgraph per the ABI.
        let read = unsafe { read_subgraph(subgraph) }.map_err(invalid)?;
        let layers: Vec<LayerId> = (0..read.network.layers().len()).map(LayerId).collect();
        let view = SubgraphView::new(&read.network, layers);
        let views = inst.backend.optimize_subgraph(&view);
        let host_layers = |ls: &[LayerId]| -> Result<Vec<u64>, (abi::Status, String)> {
            ls.iter()
                .map(|l| {
                    read.layer_ids.get(l.0).copied().ok_or_else(|| {
                        (
                            abi::STATUS_FAILED,
                            format!("optimize_subgraph names unknown layer #{}", l.0),
                        )
                    })
                })
                .collect()
        };
        let check = |status: abi::Status| {
            if status == abi::STATUS_OK {
                Ok(())
            } else {
                Err((
                    abi::STATUS_FAILED,
                    String::from("the host refused part of the answer"),
                ))
            }
        };
        for sub in &views.substitutions {
            let c = OwnedSubstitution::new(&read, sub).map_err(|m| (abi::STATUS_FAILED, m))?;
            // SAFETY: the host's function with its `user`; `c` lives across the call.
            check(unsafe { add_sub(sink.user, c.as_ptr()) })?;
        }
        for part in &views.failed {
            let ids = host_layers(part)?;
            // SAFETY: as above; `ids` lives across the call.
            check(unsafe { add_failed(sink.user, ids.as_ptr(), ids.len()) })?;
        }
        for part in &views.untouched {
            let ids = host_layers(part)?;
            // SAFETY: as above.
            check(unsafe { add_untouched(sink.user, ids.as_ptr(), ids.len()) })?;
        }
        Ok(())
    };
    // SAFETY: `error` is null or valid per the ABI.
    unsafe { guard(error, body) }
}
