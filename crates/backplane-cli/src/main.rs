//! `backplane`: run ONNX models on pluggable backends from the command line.
//!
//! Exit codes: 0 success; 1 the model, an input or a backend failed; 2 bad command-line usage;
//! 3 `run --compare` found outputs that differ from the expected ones.

mod backends;
mod bench;
mod inspect;
mod profile;
mod run;
mod session;
mod svg;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// backplane: a neural-network inference runtime with pluggable backends.
#[derive(Debug, Parser)]
#[command(name = "backplane", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    Backends,
}

/// An error for the user: what went wrong and what to do.
#[derive(Debug)]
pub struct CliError {
    message: String,
    code: u8,
}

impl CliError {
    /// A failure of the model, inputs or backends (exit code 1).
    pub fn failed(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            code: 1,
        }
    }

    /// Outputs differ from the expected ones (exit code 3).
    pub fn mismatch(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            code: 3,
        }
    }

    /// A bad command line (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            code: 2,
        }
    }
}

impl From<backplane::Error> for CliError {
    fn from(e: backplane::Error) -> Self {
        CliError::failed(e.to_string())
    }
}

impl From<backplane::RuntimeError> for CliError {
    fn from(e: backplane::RuntimeError) -> Self {
        CliError::failed(e.to_string())
    }
}

impl From<backplane::onnx::OnnxError> for CliError {
    fn from(e: backplane::onnx::OnnxError) -> Self {
        CliError::failed(e.to_string())
    }
}

impl From<backplane::npy::NpyError> for CliError {
    fn from(e: backplane::npy::NpyError) -> Self {
        CliError::failed(e.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Bench(args) => bench::bench(&args),
        Command::Inspect(args) => inspect::inspect(&args),
        Command::Backends => backends::list(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}
