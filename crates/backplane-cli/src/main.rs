//! `backplane`: run ONNX models on pluggable backends from the command line.
//!
//! Exit codes: 0 success; 1 the model, an input or a backend failed; 2 bad command-line usage;
//! 3 `run --compare` found outputs that differ from the expected ones; 4 the model uses an
//! operator, attribute or data type that the importer or no preferred backend supports.

/// `println!` to stdout that fails with a [`CliError`] instead of panicking when stdout is
/// closed (`backplane inspect m.onnx | head`): the caller's `?` ends the command and `main`
/// exits quietly.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*).map_err($crate::CliError::output)?
    }};
}

mod backend_test;
mod backends;
mod bench;
mod data_dependent;
mod inspect;
mod profile;
mod run;
mod session;
mod shapes;
mod svg;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// backplane: a neural-network inference runtime with pluggable backends.
#[derive(Debug, Parser)]
#[command(name = "backplane", version, about)]
struct Cli {
    /// Log what backplane decides (-v: info, -vv: debug, -vvv: trace). BACKPLANE_LOG=LEVEL
    /// does the same.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

/// Send library logs to stderr at the level asked for by -v flags or BACKPLANE_LOG.
fn init_logging(verbose: u8) {
    use tracing::Level;
    let from_env =
        std::env::var("BACKPLANE_LOG")
            .ok()
            .and_then(|v| match v.to_ascii_lowercase().as_str() {
                "error" => Some(Level::ERROR),
                "warn" => Some(Level::WARN),
                "info" => Some(Level::INFO),
                "debug" => Some(Level::DEBUG),
                "trace" => Some(Level::TRACE),
                _ => None,
            });
    let from_flags = match verbose {
        0 => None,
        1 => Some(Level::INFO),
        2 => Some(Level::DEBUG),
        _ => Some(Level::TRACE),
    };
    let level = from_flags.or(from_env).unwrap_or(Level::WARN);
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .try_init();
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a model and print its outputs, backend assignment and latency.
    Run(run::RunArgs),
    /// Time a model over many executions: latency percentiles, throughput, peak memory.
    Bench(bench::BenchArgs),
    /// Show a model's inputs, outputs, ops, and how the optimizer placed its layers.
    Inspect(inspect::InspectArgs),
    /// List the registered backends with their versions and capabilities.
    Backends(backends::BackendsArgs),
    /// Check a backend (built in, or loaded with --dynamic-backends-path) with the backend
    /// test kit: op table, random sweeps against CpuRef, ONNX node tests, contract checks.
    BackendTest(backend_test::BackendTestArgs),
}

/// An error for the user: what went wrong and what to do.
#[derive(Debug)]
pub struct CliError {
    message: String,
    code: u8,
    /// Stdout was closed by its reader (a broken pipe): not reported.
    closed_output: bool,
    /// The import needs the values of data (a data-dependent shape): `run` serves such a
    /// model through a `DynamicNetwork` instead.
    needs_values: bool,
}

impl CliError {
    /// A failure of the model, inputs or backends (exit code 1).
    pub fn failed(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            code: 1,
            closed_output: false,
            needs_values: false,
        }
    }

    /// The model needs something no importer path or preferred backend supports (exit code 4).
    pub fn unsupported(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            code: 4,
            closed_output: false,
            needs_values: false,
        }
    }

    /// Outputs differ from the expected ones (exit code 3).
    pub fn mismatch(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            code: 3,
            closed_output: false,
            needs_values: false,
        }
    }

    /// A bad command line (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            code: 2,
            closed_output: false,
            needs_values: false,
        }
    }

    /// The import needs run-time values of data (exit code 1 where nothing serves it).
    pub fn needs_values(message: impl Into<String>) -> Self {
        CliError {
            needs_values: true,
            ..CliError::failed(message)
        }
    }

    /// Whether this is [`CliError::needs_values`].
    pub fn is_needs_values(&self) -> bool {
        self.needs_values
    }

    /// Writing to stdout failed: a broken pipe ends the command quietly, anything else is a
    /// failure (exit code 1).
    pub fn output(e: std::io::Error) -> Self {
        CliError {
            message: format!("cannot write to standard output: {e}"),
            code: 1,
            closed_output: e.kind() == std::io::ErrorKind::BrokenPipe,
            needs_values: false,
        }
    }
}

impl From<backplane::Error> for CliError {
    fn from(e: backplane::Error) -> Self {
        match e {
            backplane::Error::Runtime(e) => e.into(),
            backplane::Error::Onnx(e) => e.into(),
            e => CliError::failed(e.to_string()),
        }
    }
}

impl From<backplane::RuntimeError> for CliError {
    fn from(e: backplane::RuntimeError) -> Self {
        match e {
            backplane::RuntimeError::UnsupportedLayers { .. } => {
                CliError::unsupported(e.to_string())
            }
            e => CliError::failed(e.to_string()),
        }
    }
}

impl From<backplane::onnx::OnnxError> for CliError {
    fn from(e: backplane::onnx::OnnxError) -> Self {
        use backplane::onnx::OnnxError;
        match e {
            OnnxError::UnsupportedOps(_) | OnnxError::UnsupportedDataType { .. } => {
                CliError::unsupported(e.to_string())
            }
            e => CliError::failed(e.to_string()),
        }
    }
}

impl From<backplane::tflite::TfliteError> for CliError {
    fn from(e: backplane::tflite::TfliteError) -> Self {
        match e {
            backplane::tflite::TfliteError::UnsupportedOps(_) => {
                CliError::unsupported(e.to_string())
            }
            e => CliError::failed(e.to_string()),
        }
    }
}

impl From<backplane::npy::NpyError> for CliError {
    fn from(e: backplane::npy::NpyError) -> Self {
        CliError::failed(e.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Bench(args) => bench::bench(&args),
        Command::Inspect(args) => inspect::inspect(&args),
        Command::Backends(args) => backends::list(&args),
        Command::BackendTest(args) => backend_test::backend_test(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout went away (`| head`): what it wanted it has; nothing to say.
        Err(e) if e.closed_output => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}
