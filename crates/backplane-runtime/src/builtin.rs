//! The builtin backend: always registered in every runtime, it runs the layers the optimizer
//! inserts between backends (memory copies) through the same backend API as any other.

use backplane_backend_api::{
    Backend, BackendError, BackendId, LayerDesc, LayerSupport, MemoryManager, Result, Support,
    TensorHandle, Workload, WorkloadFactory,
};
use backplane_core::{Op, TensorView, TensorViewMut};
use std::sync::Arc;

/// The builtin backend's id.
pub const BUILTIN: &str = "Builtin";

/// The builtin backend.
#[derive(Debug, Default, Clone, Copy)]
pub struct BuiltinBackend;

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
            Op::MemCopy | Op::MemImport => Support::Supported,
            _ => Support::no(format!(
                "the builtin backend runs only memory copies, not {}",
                layer.op.name()
            )),
        }
    }
}

struct BuiltinFactory;

impl WorkloadFactory for BuiltinFactory {
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>> {
        match layer.op {
            Op::MemCopy | Op::MemImport => Ok(Box::new(MemCopyWorkload)),
            _ => Err(BackendError::Unsupported {
                layer: layer.name.clone(),
                op: layer.op.name().to_string(),
                reason: "the builtin backend runs only memory copies".into(),
            }),
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
        Ok(Box::new(BuiltinFactory))
    }
}
