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
use backplane_core::ops::{LoopDesc, ScanDesc};
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

/// What the builtin backend does with a layer: the one decision its layer support and its
/// workload factory share, so "supported" cannot disagree with "can build".
enum Plan<'a> {
    /// A memory copy or import: bytes moved as they are.
    Copy,
    /// A layout change between two tensor-handle factories.
    Permute(&'a [usize], &'a [usize]),
    /// If: built from its two branches.
    If,
    /// Loop: built from its body.
    Loop(&'a LoopDesc),
    /// Scan: built from its body.
    Scan(&'a ScanDesc),
}

/// Decides every op explicitly (no catch-all arm), so a new `Op` variant does not compile
/// until the builtin backend says whether it runs it.
fn plan(op: &Op) -> std::result::Result<Plan<'_>, &'static str> {
    match op {
        Op::MemCopy | Op::MemImport => Ok(Plan::Copy),
        Op::Permute { from, to } => Ok(Plan::Permute(from, to)),
        Op::If(_) => Ok(Plan::If),
        Op::Loop(d) => Ok(Plan::Loop(d)),
        Op::Scan(d) => Ok(Plan::Scan(d)),
        Op::Identity
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Conv(_)
        | Op::ConvTranspose(_)
        | Op::BatchNormalization { .. }
        | Op::MatMul
        | Op::Gemm(_)
        | Op::Pool(_)
        | Op::GlobalPool(_)
        | Op::IntegerAveragePool(_)
        | Op::Lookup
        | Op::Flatten { .. }
        | Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Concat { .. }
        | Op::Split { .. }
        | Op::Slice(_)
        | Op::Gather { .. }
        | Op::Softmax { .. }
        | Op::LayerNormalization { .. }
        | Op::Reduce(_)
        | Op::Cast { .. }
        | Op::Pad(_)
        | Op::Resize(_)
        | Op::Math(_)
        | Op::BinaryExt(_)
        | Op::Where
        | Op::ArgReduce(_)
        | Op::Expand { .. }
        | Op::Tile { .. }
        | Op::Trilu { .. }
        | Op::GatherElements { .. }
        | Op::GatherND { .. }
        | Op::ScatterND { .. }
        | Op::ScatterElements { .. }
        | Op::OneHot { .. }
        | Op::TopK(_)
        | Op::CumSum { .. }
        | Op::LogSoftmax { .. }
        | Op::Hardmax { .. }
        | Op::InstanceNormalization { .. }
        | Op::Lrn { .. }
        | Op::QuantizeLinear { .. }
        | Op::DequantizeLinear { .. }
        | Op::DynamicQuantizeLinear
        | Op::NegativeLogLikelihoodLoss(_)
        | Op::GridSample(_)
        | Op::Einsum(_)
        | Op::Det
        | Op::Rnn(_)
        | Op::MaxPoolWithIndices(_)
        | Op::MaxUnpool(_)
        | Op::Optimizer(_)
        | Op::TfIdfVectorizer(_)
        | Op::TreeEnsemble(_)
        | Op::Dft(_)
        | Op::Stft(_)
        | Op::Col2Im(_)
        | Op::AffineGrid(_)
        | Op::RoiAlign(_)
        | Op::DeformConv(_)
        | Op::Custom(_) => {
            Err("the builtin backend runs only memory copies, permutes and control flow")
        }
    }
}

struct BuiltinSupport;

impl LayerSupport for BuiltinSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        match plan(&layer.op) {
            Ok(_) => Support::Supported,
            Err(reason) => Support::no(format!("{reason}, not {}", layer.op.name())),
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
        match plan(&layer.op).map_err(|reason| refuse(layer, reason))? {
            Plan::Copy => Ok(Box::new(MemCopyWorkload)),
            Plan::Permute(from, to) => Ok(Box::new(permute::PermuteWorkload {
                from: from.to_vec(),
                to: to.to_vec(),
            })),
            Plan::If | Plan::Loop(_) | Plan::Scan(_) => Err(refuse(
                layer,
                "control flow needs its nested networks (create_workload_with_subgraphs)",
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
        match plan(&layer.op).map_err(|reason| refuse(layer, reason))? {
            Plan::If => Ok(Box::new(control_flow::IfWorkload {
                then_branch: next()?,
                else_branch: next()?,
            })),
            Plan::Loop(d) => Ok(Box::new(control_flow::LoopWorkload::new(
                d.clone(),
                next()?,
                self.max_loop_iterations,
            ))),
            Plan::Scan(d) => Ok(Box::new(control_flow::ScanWorkload::new(
                d.clone(),
                next()?,
                self.max_loop_iterations,
            ))),
            // No nested network: the plain path builds it.
            Plan::Copy | Plan::Permute(..) => self.create_workload(layer),
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
