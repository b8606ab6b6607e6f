//! `backplane backend-test BACKEND`: the backend test kit (`backplane-backend-tests`) on any
//! registered backend, static or loaded with `--dynamic-backends-path`.

use crate::CliError;
use backplane::BackendId;
use backplane_backend_tests::{check, KitOptions, NodeTests};
use std::path::{Path, PathBuf};

/// Arguments of `backplane backend-test`.
#[derive(Debug, clap::Args)]
pub struct BackendTestArgs {
    /// The backend to check: a built-in one (CpuAcc) or one loaded from a shared object.
    pub backend: String,
    #[command(flatten)]
    pub dynamic: crate::backends::DynamicArgs,
    /// Random cases per op family (0: no random sweeps).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub sweeps: u64,
    /// Seed of the random cases; a failing case prints the seed that reproduces it.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The ONNX node tests (onnx/backend/test/data/node of the onnx Python package); default:
    /// BACKPLANE_ONNX_NODE_TESTS when set. Without them that suite is not run.
    #[arg(long, value_name = "DIR")]
    pub node_tests: Option<PathBuf>,
    /// Run only the node tests whose name contains this.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub node_filter: String,
    /// Skip the op table.
    #[arg(long)]
    pub no_op_table: bool,
    /// Skip the contract checks.
    #[arg(long)]
    pub no_contract: bool,
    /// Pass option KEY=VALUE to backend BACKEND (repeatable), e.g.
    /// GpuAcc:allow_software=true.
    #[arg(long = "backend-option", value_name = "BACKEND:KEY=VALUE", value_parser = crate::backends::parse_backend_option)]
    pub backend_options: Vec<(String, String, String)>,
    /// Also write the report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Corrected node-test data shipped in the repository, when run from (or built in) a checkout.
fn errata_dir() -> Option<PathBuf> {
    let here = Path::new("testdata/conformance/errata");
    if here.is_dir() {
        return Some(here.to_path_buf());
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/conformance/errata");
    built.is_dir().then_some(built)
}

/// Run the command: the report on stdout, exit code 1 when any case failed.
pub fn backend_test(args: &BackendTestArgs) -> Result<(), CliError> {
    crate::backends::choose(&args.dynamic);
    crate::backends::set_backend_options(&args.backend_options);
    let runtime = crate::backends::runtime()?;
    let id = BackendId::new(&args.backend).map_err(CliError::usage)?;
    let registered = runtime.registry().ids();
    if !registered.contains(&id) {
        return Err(CliError::usage(format!(
            "no backend '{}' is registered; registered: {} (a dynamic backend needs \
             --dynamic-backends-path DIR; `backplane backends` says why a file was not loaded)",
            args.backend,
            registered
                .iter()
                .map(BackendId::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let node_dir = args
        .node_tests
        .clone()
        .or_else(|| std::env::var_os("BACKPLANE_ONNX_NODE_TESTS").map(PathBuf::from));
    let options = KitOptions {
        op_table: !args.no_op_table,
        sweep_cases: usize::try_from(args.sweeps).unwrap_or(usize::MAX),
        seed: args.seed,
        node_tests: node_dir.map(|dir| NodeTests {
            dir,
            errata: errata_dir(),
            filter: args.node_filter.clone(),
        }),
        contract: !args.no_contract,
    };
    let mut report = check(&runtime, &id, &options);
    if options.node_tests.is_none() {
        report.skipped_suites.push((
            backplane_backend_tests::node_tests::SUITE.into(),
            "no node tests given (--node-tests DIR or BACKPLANE_ONNX_NODE_TESTS)".into(),
        ));
    }
    out!("{}", report.to_text().trim_end());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.to_json())
            .map_err(|e| CliError::failed(e.to_string()))?;
        std::fs::write(path, text)
            .map_err(|e| CliError::failed(format!("{}: {e}", path.display())))?;
    }
    let (_, failed) = report.totals();
    if failed > 0 {
        return Err(CliError::failed(format!(
            "{failed} case{} failed on {}",
            if failed == 1 { "" } else { "s" },
            args.backend
        )));
    }
    Ok(())
}
