//! Running a case through the runtime, as an application would, and comparing its outputs.

use crate::report::Outcome;
use backplane::backend_api::LayerDesc;
use backplane::compare::{compare, Mismatch};
use backplane::{BackendId, Network, OptimizerOptions, Runtime, RuntimeError, Tensor};

/// Compare output lists by position and name.
pub fn compare_outputs(
    got: &[(String, Tensor)],
    want: &[(String, Tensor)],
    rtol: f64,
    atol: f64,
) -> Outcome {
    if got.len() != want.len() {
        return Outcome::Failed {
            why: format!("{} outputs, expected {}", got.len(), want.len()),
            worst: None,
        };
    }
    for ((gn, g), (wn, w)) in got.iter().zip(want) {
        if gn != wn {
            return Outcome::Failed {
                why: format!("output '{gn}', expected '{wn}'"),
                worst: None,
            };
        }
        if let Err(Mismatch {
            message: why,
            worst,
            ..
        }) = compare(g, w, rtol, atol)
        {
            return Outcome::Failed {
                why: format!("output '{gn}': {why}"),
                worst: Some(worst),
            };
        }
    }
    Outcome::Passed
}

/// The result of running a network with the backend under test first in the preference.
pub enum Run {
    /// The backend ran `layers` layers; these are the outputs (or the error at load or
    /// execution, which is the backend's failure).
    Ran {
        /// Layers the backend itself ran.
        layers: usize,
        /// The outputs, or what went wrong.
        outputs: Result<Vec<(String, Tensor)>, String>,
    },
    /// The backend ran no layer of it: why.
    Refused(String),
}

/// Optimize `network` for `preference` (the backend under test first), load and execute it.
/// When the backend takes no layer, the answer is [`Run::Refused`] with its reason.
pub fn run_network(
    runtime: &Runtime,
    network: &Network,
    preference: &[BackendId],
    inputs: &[(String, Tensor)],
) -> Run {
    let Some(first) = preference.first() else {
        return Run::Refused("no backend to test".into());
    };
    let optimized = match runtime.optimize(network, &OptimizerOptions::new(preference.to_vec())) {
        Ok(o) => o,
        Err(RuntimeError::UnsupportedLayers { .. }) => {
            return Run::Refused(refusal_reason(runtime, network, first))
        }
        Err(e) => {
            return Run::Ran {
                layers: 0,
                outputs: Err(format!("optimize: {e}")),
            }
        }
    };
    // A layer the backend claims must be given to it (the optimizer tries it first), unless
    // the backend rejected it in `optimize_subgraph` (the API's answer for layers it takes
    // alone but not in this company, e.g. CpuAcc's fixed-point chains that no folded layer
    // computes by the rule): the runtime then gives it to the next backend.
    let rejected = |name: &str| {
        optimized
            .report()
            .refusals
            .iter()
            .any(|(layer, by, _)| layer == name && by == first)
    };
    if let Ok(backend) = runtime.backend(first) {
        let support = backend.layer_support();
        let net = optimized.network();
        for (layer, on) in net.layers().iter().zip(optimized.assignment()) {
            if on != first
                && !rejected(&layer.name)
                && support
                    .is_layer_supported(&LayerDesc::from_layer(net, layer))
                    .is_supported()
            {
                return Run::Ran {
                    layers: 0,
                    outputs: Err(format!(
                        "{first} claims layer '{}' but it was assigned to {on}",
                        layer.name
                    )),
                };
            }
        }
    }
    let layers = optimized
        .assignment()
        .iter()
        .filter(|b| *b == first)
        .count();
    if layers == 0 {
        return Run::Refused(refusal_reason(runtime, network, first));
    }
    let outputs = runtime
        .load_network(optimized)
        .map_err(|e| format!("load: {e}"))
        .and_then(|id| {
            let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
            let out = runtime
                .execute(id, &named)
                .map_err(|e| format!("execute: {e}"));
            let _ = runtime.unload_network(id);
            out
        });
    Run::Ran { layers, outputs }
}

/// Why `backend` takes no layer of `network`: its own answer for the first layer it refuses.
pub fn refusal_reason(runtime: &Runtime, network: &Network, backend: &BackendId) -> String {
    let support = match runtime.backend(backend) {
        Ok(b) => b.layer_support(),
        Err(e) => return format!("cannot create the backend: {e}"),
    };
    for layer in network.layers() {
        if let backplane::backend_api::Support::Unsupported(reason) =
            support.is_layer_supported(&LayerDesc::from_layer(network, layer))
        {
            return reason;
        }
    }
    "the optimizer gave every layer to another backend".into()
}
