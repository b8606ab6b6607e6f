//! Layer support: CpuAcc claims only what it runs fast (f32 compute ops, data movement);
//! everything else is refused with a reason so the optimizer hands it to the next backend.
//! The answer is whether [`crate::plan::plan`] succeeds: the plan the workload factory
//! builds from.

use crate::plan;
use backplane_backend_api::{LayerDesc, LayerSupport, Support};

/// CpuAcc's layer-support oracle.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuAccLayerSupport;

impl LayerSupport for CpuAccLayerSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        match check(layer) {
            Ok(()) => Support::Supported,
            Err(reason) => Support::no(reason),
        }
    }
}

/// Why CpuAcc cannot run `layer`, if it cannot: the reason its planning refuses it.
pub fn check(layer: &LayerDesc) -> Result<(), String> {
    plan::plan(layer).map(|_| ())
}
