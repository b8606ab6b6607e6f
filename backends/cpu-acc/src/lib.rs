//! # backplane-cpu-acc: the accelerated CPU backend
//!
//! CpuAcc runs the f32 operators and the data movement of real networks fast and leaves the
//! rest (integer arithmetic, comparisons, control flow, quantized and rare operators) to the
//! next backend in the user's preference list (usually CpuRef):
//!
//! * **SGEMM** ([`gemm`]): packed A/B panels, a 12×32 register-blocked micro-kernel in
//!   AVX-512 or 6×16 AVX2+FMA quarters of it (chosen at run time, with a portable fallback); with
//!   weights prepacked, one parallel step per product (threads over columns of C for small
//!   weights, over rows for large weights and narrow B), B packed right before use.
//! * **Convolution**: 1×1 as a GEMM on the input, general kernels as a GEMM over the input's
//!   zero-padded stride phases (each im2col row a contiguous run), depthwise as its own
//!   kernel over a padded copy of each plane; weights packed once at load, bias and
//!   activation fused in the GEMM epilogue. 3×3 stride-1 convolutions with at least 64
//!   channels each way and an output of at least 8×8 take a Winograd F(4×4, 3×3) path
//!   (weights transformed at load; the option `winograd=off` turns it off).
//!   ConvTranspose (1-D, 2-D) is a GEMM into columns and a scatter-add planned at load.
//! * **RNN, GRU, LSTM**: the input projection of every timestep as one
//!   SGEMM per direction, then a small product and the gate math per step.
//! * **Fusion** ([`Backend::optimize_subgraph`], [`fusion`]): Conv+BatchNormalization(folded)
//!   +Add(residual)+activation, MatMul+scale+Add(bias)+activation (with the Reshape/Transpose
//!   layers around it folded into strided reads and writes), Gemm+activation and
//!   Add+LayerNormalization become CpuAcc custom layers.
//! * **Elementwise** with broadcasting (Pow and PRelu included), activations (also
//!   HardSwish, HardSigmoid, Elu, Selu, Softplus, Mish and the other f32 math functions,
//!   which fuse into convolutions like the unary ones), pooling, Softmax and LogSoftmax, Layer- and InstanceNormalization,
//!   Gelu/Erf, reductions and ArgMax/ArgMin, vectorized by compiling safe kernel bodies for
//!   AVX2 ([`simd`]); Resize (nearest and linear, the last two axes) from source indices and
//!   weights planned at load.
//! * **Data movement** of every whole-byte element type (Slice, Gather, Expand, Tile, Pad,
//!   Split, Transpose, Concat; Where on the ordinary types), planned at load and copied in
//!   contiguous runs, and Cast between f32, f64, f16, i64, i32, i8, u8 and bool with CpuRef's
//!   exact results.
//!
//! Threads: [`CpuAccBackend::with_threads`] or the backend option `threads`; by default the
//! machine's hardware threads. With one thread no pool is involved at all. The other
//! options ([`CpuAccOptions`]) switch paths off for A/B measurements.
//!
//! CpuAcc has no `unsafe` code: the intrinsics and the thread pool live in the kernel crate
//! `backplane_cpu_kernels` ([`simd`] re-exports it and multiversions CpuAcc's safe bodies
//! through it). Convolutions are under `conv`, where `choose_conv_algorithm` picks each
//! layer's path.

#![forbid(unsafe_code)]

pub mod act;
mod arg_reduce;
mod cast;
mod concat;
mod conv;
mod elementwise;
pub mod fusion;
pub mod gemm;
mod int_arith;
mod int_matmul;
mod io;
mod layout;
mod math;
mod matmul;
mod movement;
mod norm;
mod ops;
pub mod options;
mod plan;
mod pow;
mod predicate;
mod quant;
mod recurrent;
mod reduce;
mod resize;
mod scratch;
pub mod simd;
mod support;
mod thread_choice;
mod transpose;
pub use backplane_cpu_kernels::threads;
pub mod weights;
mod workload;

// The paths the workload factory, support checks and ops use for the convolution modules.
use conv::{conv_transpose, depthwise, nhwc, window};

pub use options::CpuAccOptions;
pub use support::CpuAccLayerSupport;
pub use workload::CpuAccWorkloadFactory;

use backplane_backend_api::{
    Backend, BackendContext, BackendError, BackendId, BackendOptions, Capabilities,
    CapabilityValue, LayerSupport, MemoryManager, OptimizationViews, Result, SubgraphView,
    WorkloadFactory,
};
use backplane_core::LayerId;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// The id CpuAcc registers under.
pub const CPU_ACC_ID: &str = "CpuAcc";

/// The accelerated CPU backend. Clones share their options, so the backend options a
/// runtime hands to one backend object's context reach the workload factories of the others
/// created by the same registry factory (see [`CpuAccBackend::factory`]). They also share one
/// cache of packed constant operands ([`weights`]), so the plans of one model for several
/// input shapes pack each weight once.
#[derive(Debug, Clone, Default)]
pub struct CpuAccBackend {
    /// The options workloads are created and subgraphs optimized under.
    options: Arc<Mutex<CpuAccOptions>>,
    /// Packed constant operands, shared by the workloads of every network loaded through
    /// this backend and its clones.
    packed: Arc<weights::PackedWeights>,
}

impl CpuAccBackend {
    /// The folds and fusions of `subgraph` less the layers `refused`.
    fn optimize_without(
        &self,
        subgraph: &SubgraphView<'_>,
        refused: &BTreeSet<LayerId>,
    ) -> OptimizationViews {
        let rest;
        let view = if refused.is_empty() {
            subgraph
        } else {
            let kept = subgraph
                .layers()
                .iter()
                .copied()
                .filter(|l| !refused.contains(l))
                .collect();
            rest = SubgraphView::new(subgraph.network(), kept);
            &rest
        };
        options::scoped(self.options(), || {
            weights::scoped(&self.packed, || {
                quant::fold::optimize(view, fusion::optimize)
            })
        })
    }

    /// The backend with the default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// The backend using `threads` threads per operator (at least 1).
    pub fn with_threads(threads: usize) -> Self {
        Self::with_options(CpuAccOptions {
            threads: Some(threads.max(1)),
            ..CpuAccOptions::default()
        })
    }

    /// The backend with these options (those a runtime passes to its context are applied on
    /// top of them).
    pub fn with_options(options: CpuAccOptions) -> Self {
        CpuAccBackend {
            options: Arc::new(Mutex::new(options)),
            packed: Arc::default(),
        }
    }

    /// How many constant operands its workloads (and its clones') packed, and how many they
    /// took already packed by another network's workload.
    pub fn packing_stats(&self) -> weights::PackingStats {
        self.packed.stats()
    }

    /// [`packing_stats`](Self::packing_stats) per kind of packing (a MatMul's B, a
    /// convolution's Winograd weights, ...), sorted by kind: which operands were shared.
    pub fn packing_stats_by_kind(&self) -> Vec<(&'static str, weights::PackingStats)> {
        self.packed.stats_by_kind()
    }

    /// A registry factory: every backend object it creates shares one set of options.
    pub fn factory() -> impl Fn() -> Box<dyn Backend> + Send + Sync + 'static {
        let shared = CpuAccBackend::new();
        move || Box::new(shared.clone()) as Box<dyn Backend>
    }

    /// The options in force.
    pub fn options(&self) -> CpuAccOptions {
        *self.options.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The thread count workloads will use: the `threads` option, else the machine's
    /// hardware threads.
    pub fn threads(&self) -> usize {
        self.options()
            .threads
            .unwrap_or_else(threads::machine_threads)
    }
}

/// A workload factory that creates CpuAcc's workloads under the backend's options.
struct OptionsFactory {
    inner: CpuAccWorkloadFactory,
    options: CpuAccOptions,
    packed: Arc<weights::PackedWeights>,
}

impl WorkloadFactory for OptionsFactory {
    fn create_workload(
        &self,
        layer: &backplane_backend_api::LayerDesc,
    ) -> Result<Box<dyn backplane_backend_api::Workload>> {
        options::scoped(self.options, || {
            weights::scoped(&self.packed, || self.inner.create_workload(layer))
        })
    }
}

impl Backend for CpuAccBackend {
    #[allow(clippy::expect_used)]
    fn id(&self) -> BackendId {
        // A constant of ASCII letters: always a valid id (checked by a test).
        BackendId::new(CPU_ACC_ID).expect("CpuAcc is a valid backend id")
    }

    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        Arc::new(CpuAccLayerSupport)
    }

    fn create_workload_factory(
        &self,
        memory_manager: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        let threads = threads::Threads::new(self.threads())?;
        Ok(Box::new(OptionsFactory {
            inner: CpuAccWorkloadFactory::new(threads, memory_manager),
            options: self.options(),
            packed: self.packed.clone(),
        }))
    }

    fn create_backend_context(
        &self,
        options: &BackendOptions,
    ) -> Result<Option<Box<dyn BackendContext>>> {
        let merged = self.options().merged(options)?;
        if let Some(isa) = merged.isa {
            if !backplane_cpu_kernels::isa::limit_isa(isa) {
                return Err(BackendError::Other(format!(
                    "CpuAcc option isa={}: the kernels already run {} in this process",
                    isa.name(),
                    simd::isa()
                )));
            }
        }
        if let Some(us) = merged.spin_us {
            threads::set_keep_warm(std::time::Duration::from_micros(us));
        }
        *self.options.lock().unwrap_or_else(|e| e.into_inner()) = merged;
        Ok(None)
    }

    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> OptimizationViews {
        // The packed-weights cache too: a fusion that derives constants notes where they
        // came from, so their packings are shared across plans (`weights::derived`).
        // Chains that requantize by the fixed-point rule go to CpuRef unless a folded
        // integer layer computes them by it (see `quant::fixed_point`); the rest is
        // optimized as usual.
        let chains = quant::fixed_point::chains(subgraph);
        let mut refused: BTreeSet<LayerId> = chains
            .iter()
            .filter(|c| !c.computed)
            .flat_map(|c| c.layers.iter().copied())
            .collect();
        let mut views = self.optimize_without(subgraph, &refused);
        // A chain the folds left as float layers goes to CpuRef too, and the rest is
        // optimized again; each round refuses at least one more chain, so this ends.
        loop {
            let missed: Vec<_> = quant::fixed_point::missed(&chains, &views)
                .into_iter()
                .filter(|c| !refused.contains(&c.quantize))
                .collect();
            if missed.is_empty() {
                break;
            }
            refused.extend(missed.iter().flat_map(|c| c.layers.iter().copied()));
            views = self.optimize_without(subgraph, &refused);
        }
        if !refused.is_empty() {
            views.failed.push(refused.into_iter().collect());
        }
        views
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
            .with("NonConstWeights", CapabilityValue::Bool(true))
            .with("ConstantTensorsAsInputs", CapabilityValue::Bool(true))
            .with("AsyncExecution", CapabilityValue::Bool(true))
            .with("ProtectedContentAllocation", CapabilityValue::Bool(false))
            .with("Threads", CapabilityValue::Int(self.threads() as i64))
            .with("Isa", CapabilityValue::Text(simd::isa().into()))
            .with("Int8Isa", CapabilityValue::Text(simd::int8_isa().into()))
    }
}
