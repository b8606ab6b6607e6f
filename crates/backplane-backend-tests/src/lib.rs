//! The backend test kit: checks any backplane backend — one compiled in, or one loaded from a
//! shared object — through the same runtime an application uses.
//!
//! Suites (each reports per op: claimed, passed, failed with the worst error, refused):
//! - **op table** ([`op_table`]): one-node ONNX models with stored expected outputs,
//!   the backend first and CpuRef behind it;
//! - **random sweeps** ([`sweeps`]): one-layer networks of random shapes and parameters on the
//!   backend alone, against CpuRef's kernels on the same inputs; failures name their seed;
//! - **f16 sweeps** ([`half_sweeps`]): the float sweeps with their tensors stored as f16, on
//!   the backend alone, against CpuRef on the same values in f32 rounded to f16 (a quarter
//!   as many cases per family);
//! - **quantized sweeps** ([`quant_sweeps`]): random QDQ chains (int8 and uint8 convolutions,
//!   fully connected layers, MatMuls of constant weights, ONNX's QLinearConv as imported,
//!   elementwise layers, and whole inverted-residual blocks behind an NHWC input; and the
//!   `…FixedPoint` families under LiteRT's builtin rule, `Requantization::FixedPoint`) with
//!   CpuRef behind the backend, equal to CpuRef to the byte on CpuAcc (within one quantum
//!   on other backends, which may run part of a chain in f32);
//! - **block sweeps** ([`block_sweeps`]): random CNN blocks (an inverted residual with
//!   squeeze-excite) that a backend may rewrite as a whole, CpuRef behind it, against CpuRef;
//! - **ONNX node tests** ([`node_tests`]), when the `onnx` package's test data is at hand;
//! - **contract** ([`contract`]): stable support answers, refusals with reasons, workloads
//!   shared by threads, a failed execution leaving the network usable; and ([`balance`])
//!   memory managers acquired and released in pairs, tensor handles destroyed (and a
//!   plugin's unmapped) once their network is unloaded.
//!
//! `backplane backend-test BACKEND` runs it from the command line; [`check`] from code:
//!
//! ```no_run
//! let runtime = backplane::RuntimeBuilder::new().build()?;
//! let id = backplane::BackendId::new("CpuAcc")?;
//! let report = backplane_backend_tests::check(&runtime, &id, &backplane_backend_tests::KitOptions::default());
//! println!("{}", report.to_text());
//! assert!(report.ok());
//! # Ok::<(), backplane::Error>(())
//! ```

pub mod balance;
pub mod block_sweeps;
pub mod contract;
pub mod exec;
pub mod generated;
pub mod half_sweeps;
pub mod node_tests;
pub mod op_table;
mod quant_blocks;
mod quant_entry;
mod quant_fixed_point;
mod quant_gemm_sweeps;
mod quant_int_forms;
mod quant_moves;
mod quant_pool_sweeps;
mod quant_qoperator_sweeps;
pub mod quant_sweeps;
pub mod report;
pub mod sweeps;
pub mod sweeps_movement;
pub mod sweeps_select;

pub use node_tests::NodeTests;
pub use report::{OpTally, Outcome, Report};

use backplane::{BackendId, Runtime};

/// Which suites to run, and how.
#[derive(Debug, Clone)]
pub struct KitOptions {
    /// Run the op table.
    pub op_table: bool,
    /// Random cases per op family (0: no sweeps).
    pub sweep_cases: usize,
    /// The seed of the random sweeps and contract cases.
    pub seed: u64,
    /// The ONNX node tests, if they are to run.
    pub node_tests: Option<NodeTests>,
    /// Run the contract checks.
    pub contract: bool,
}

impl Default for KitOptions {
    fn default() -> Self {
        KitOptions {
            op_table: true,
            sweep_cases: 40,
            seed: 1,
            node_tests: None,
            contract: true,
        }
    }
}

/// Run the chosen suites on `backend`, registered in `runtime` (CpuRef must be registered
/// too: it is the oracle and the fallback).
pub fn check(runtime: &Runtime, backend: &BackendId, options: &KitOptions) -> Report {
    let mut report = Report::new(backend.as_str());
    if options.contract {
        contract::run(runtime, backend, options.seed, &mut report);
        balance::run(runtime, backend, options.seed, 6, &mut report);
    }
    if options.op_table {
        op_table::run(runtime, backend, &mut report);
    }
    if options.sweep_cases > 0 {
        sweeps::run(
            runtime,
            backend,
            options.seed,
            options.sweep_cases,
            &mut report,
        );
        half_sweeps::run(
            runtime,
            backend,
            options.seed,
            options.sweep_cases.div_ceil(4),
            &mut report,
        );
    }
    if options.sweep_cases > 0 {
        quant_sweeps::run(
            runtime,
            backend,
            options.seed,
            options.sweep_cases,
            &mut report,
        );
        block_sweeps::run(
            runtime,
            backend,
            options.seed,
            options.sweep_cases,
            &mut report,
        );
    }
    if let Some(tests) = &options.node_tests {
        node_tests::run(runtime, backend, tests, &mut report);
    }
    report
}
