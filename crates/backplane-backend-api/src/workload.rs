//! Workloads: a layer compiled for one backend, ready to execute.

use crate::{BackendError, LayerDesc, Result, TensorHandle};
use backplane_core::{TensorView, TensorViewMut};
use std::sync::Arc;

/// Turns layers into workloads. One factory is created per backend per loaded network.
pub trait WorkloadFactory: Send + Sync {
    /// Create the workload for a layer the backend declared supported. Load-time work
    /// (weight packing, constant preparation) belongs here, not in [`Workload::execute`].
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>>;

    /// Create the workload for a layer that runs nested networks (If, Loop, Scan: see
    /// [`backplane_core::Op::subgraphs`]). The runtime has already optimized and loaded each
    /// of them across the application's backends, as it does the main network, and hands
    /// them over in the op's order. The builtin backend runs control flow this way; any
    /// backend that declares such layers supported gets the same. The default refuses.
    fn create_workload_with_subgraphs(
        &self,
        layer: &LayerDesc,
        subgraphs: Vec<Arc<dyn NestedNetwork>>,
    ) -> Result<Box<dyn Workload>> {
        let _ = subgraphs;
        Err(BackendError::Unsupported {
            layer: layer.name.clone(),
            op: layer.op.name().to_string(),
            reason: "this backend does not run layers with nested networks".into(),
        })
    }
}

/// A nested network (a control-flow body) loaded by the runtime: optimized once, its
/// workloads created and its memory planned, ready to run any number of times.
pub trait NestedNetwork: Send + Sync {
    /// Run it: `inputs` match its inputs and `outputs` its outputs, in order, exactly in
    /// type and shape. Each call uses working memory from a pool, so repeated calls
    /// allocate no tensor memory after the first, and concurrent calls are safe.
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()>;
}

/// One executable layer.
///
/// `execute` may be called from several threads at once, each with its own buffers, so a
/// workload must not keep per-execution state in itself.
pub trait Workload: Send + Sync {
    /// Compute the outputs from the inputs. Buffers match the layer's descriptions exactly;
    /// output buffers' prior contents are unspecified.
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()>;

    /// Compute the outputs from tensor handles. The runtime calls this when some of the
    /// layer's tensors live in memory other than the host factory's; the default maps every
    /// handle and calls [`Workload::execute`]. A backend whose memory cannot be mapped
    /// overrides it and reaches its own handles through [`TensorHandle::as_any`].
    fn execute_handles(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
    ) -> Result<()> {
        let not_mapped = || {
            BackendError::Other("a tensor of this layer is in memory that cannot be mapped".into())
        };
        let ins = inputs
            .iter()
            .map(|h| h.map().ok_or_else(not_mapped))
            .collect::<Result<Vec<_>>>()?;
        let mut outs = outputs
            .iter_mut()
            .map(|h| h.map_mut().ok_or_else(not_mapped))
            .collect::<Result<Vec<_>>>()?;
        self.execute(&ins, &mut outs)
    }

    /// Whether [`Workload::execute`] reads input `slot` when that input is a constant. A
    /// workload that copied or packed a constant when it was created (weights packed for a
    /// GEMM) answers false: once no workload reads a constant, the runtime releases it after
    /// load, so the weights are in memory once, and passes an empty view (the layer's
    /// description, no bytes) in its place. The default, true, keeps every constant.
    fn reads_constant_input(&self, slot: usize) -> bool {
        let _ = slot;
        true
    }
}
