//! Workloads: a layer compiled for one backend, ready to execute.

use crate::{LayerDesc, Result};
use backplane_core::{TensorView, TensorViewMut};

/// Turns layers into workloads. One factory is created per backend per loaded network.
pub trait WorkloadFactory: Send + Sync {
    /// Create the workload for a layer the backend declared supported. Load-time work
    /// (weight packing, constant preparation) belongs here, not in [`Workload::execute`].
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>>;
}

/// One executable layer.
///
/// `execute` may be called from several threads at once, each with its own buffers, so a
/// workload must not keep per-execution state in itself.
pub trait Workload: Send + Sync {
    /// Compute the outputs from the inputs. Buffers match the layer's descriptions exactly;
    /// output buffers' prior contents are unspecified.
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()>;
}
