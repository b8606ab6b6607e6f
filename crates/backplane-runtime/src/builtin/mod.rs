//! The builtin backend: always registered in every runtime, it runs the layers the optimizer
//! inserts between backends (memory copies, layout permutes) and control flow (If, Loop,
//! Scan) through the same backend API as any other. Control-flow bodies reach it as nested
//! networks the runtime has loaded across the application's backends
//! ([`WorkloadFactory::create_workload_with_subgraphs`]).

mod control_flow;
mod permute;

use backplane_backend_api::{
    Backend, BackendError, BackendId, LayerDesc, LayerSupport, MemoryManager, NestedNetwork,
    Result, Support, TensorHandle, Workload, WorkloadFactory,
};
use backplane_core::{Op, TensorView, TensorViewMut};
use std::sync::Arc;

/// The builtin backend's id.
pub const BUILTIN: &str = "Builtin";

/// How many iterations a Loop may run unless the runtime options say otherwise: a guard
/// against models (or inputs) that would never end.
pub const DEFAULT_MAX_LOOP_ITERATIONS: u64 = 1 << 24;

/// The builtin backend.
#[derive(Debug, Clone, Copy)]
pub struct BuiltinBackend {
    /// A Loop or Scan whose iterations, with those of the Loops and Scans nested in it,
    /// reach this many fails instead of running on.
    pub max_loop_iterations: u64,
}

impl Default for BuiltinBackend {
    fn default() -> Self {
        BuiltinBackend {
            max_loop_iterations: DEFAULT_MAX_LOOP_ITERATIONS,
        }
    }
}

impl BuiltinBackend {
    /// Its id.
    pub fn backend_id() -> BackendId {
        BackendId::new(BUILTIN).unwrap_or_else(|_| unreachable!("'Builtin' is a valid id"))
    }
}

struct BuiltinSupport;

impl LayerSupport for BuiltinSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        match layer.op {
            Op::MemCopy | Op::MemImport | Op::Permute { .. } => Support::Supported,
            Op::If(_) | Op::Loop(_) | Op::Scan(_) => Support::Supported,
            _ => Support::no(format!(
                "the builtin backend runs only memory copies, permutes and control flow, not {}",
                layer.op.name()
            )),
        }
    }
}

struct BuiltinFactory {
    max_loop_iterations: u64,
}

fn refuse(layer: &LayerDesc, reason: &str) -> BackendError {
    BackendError::Unsupported {
        layer: layer.name.clone(),
        op: layer.op.name().to_string(),
        reason: reason.into(),
    }
}

impl WorkloadFactory for BuiltinFactory {
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>> {
        match &layer.op {
            Op::MemCopy | Op::MemImport => Ok(Box::new(MemCopyWorkload)),
            Op::Permute { from, to } => Ok(Box::new(permute::PermuteWorkload {
                from: from.clone(),
                to: to.clone(),
            })),
            Op::If(_) | Op::Loop(_) | Op::Scan(_) => Err(refuse(
                layer,
                "control flow needs its nested networks (create_workload_with_subgraphs)",
            )),
            _ => Err(refuse(
                layer,
                "the builtin backend runs only memory copies, permutes and control flow",
            )),
        }
    }

    fn create_workload_with_subgraphs(
        &self,
        layer: &LayerDesc,
        subgraphs: Vec<Arc<dyn NestedNetwork>>,
    ) -> Result<Box<dyn Workload>> {
        let mut bodies = subgraphs.into_iter();
        let mut next = || {
            bodies
                .next()
                .ok_or_else(|| refuse(layer, "a nested network is missing"))
        };
        match &layer.op {
            Op::If(_) => Ok(Box::new(control_flow::IfWorkload {
                then_branch: next()?,
                else_branch: next()?,
            })),
            Op::Loop(d) => Ok(Box::new(control_flow::LoopWorkload::new(
                d.clone(),
                next()?,
                self.max_loop_iterations,
            ))),
            Op::Scan(d) => Ok(Box::new(control_flow::ScanWorkload::new(
                d.clone(),
                next()?,
                self.max_loop_iterations,
            ))),
            _ => self.create_workload(layer),
        }
    }
}

/// Copies one tensor between two kinds of mappable memory.
struct MemCopyWorkload;

fn copy(src: &[u8], dst: &mut [u8]) -> Result<()> {
    if src.len() != dst.len() {
        return Err(BackendError::Execution(format!(
            "memory copy of {} bytes into {} bytes",
            src.len(),
            dst.len()
        )));
    }
    dst.copy_from_slice(src);
    Ok(())
}

impl Workload for MemCopyWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        match (inputs.first(), outputs.first_mut()) {
            (Some(i), Some(o)) => copy(i.data, o.data),
            _ => Err(BackendError::Execution(
                "memory copy needs one input and one output".into(),
            )),
        }
    }

    fn execute_handles(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
    ) -> Result<()> {
        let (Some(src), Some(dst)) = (inputs.first(), outputs.first_mut()) else {
            return Err(BackendError::Execution(
                "memory copy needs one input and one output".into(),
            ));
        };
        let src = src.map().ok_or_else(|| {
            BackendError::Execution("the source of a memory copy cannot be mapped".into())
        })?;
        let mut dst = dst.map_mut().ok_or_else(|| {
            BackendError::Execution("the target of a memory copy cannot be mapped".into())
        })?;
        copy(src.data, dst.data)?;
        // Drop the mapping before returning (unmap).
        let _ = &mut dst;
        Ok(())
    }
}

impl Backend for BuiltinBackend {
    fn id(&self) -> BackendId {
        Self::backend_id()
    }

    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        Arc::new(BuiltinSupport)
    }

    fn create_workload_factory(
        &self,
        _memory_manager: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        Ok(Box::new(BuiltinFactory {
            max_loop_iterations: self.max_loop_iterations,
        }))
    }
}
