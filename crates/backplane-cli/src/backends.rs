//! `backplane backends`: what is registered, static and dynamic, and why each dynamic-backend
//! file that was found was not loaded. Also where every command's runtime comes from, so that
//! `--dynamic-backends-path` and `--no-dynamic-backends` apply to all of them.

use crate::CliError;
use backplane::runtime::DynamicBackendsOption;
use backplane::{Runtime, RuntimeOptions};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Where dynamic backends come from (shared by every command).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DynamicArgs {
    /// Load dynamic backends from DIR only, instead of the directories built into backplane.
    #[arg(long, value_name = "DIR", conflicts_with = "no_dynamic_backends")]
    pub dynamic_backends_path: Option<PathBuf>,
    /// Load no dynamic backends at all.
    #[arg(long)]
    pub no_dynamic_backends: bool,
}

/// Split a `--backend-option` value, `BACKEND:KEY=VALUE`.
pub fn parse_backend_option(s: &str) -> Result<(String, String, String), String> {
    let (backend, rest) = s
        .split_once(':')
        .ok_or_else(|| format!("{s}: expected BACKEND:KEY=VALUE"))?;
    let (key, value) = rest
        .split_once('=')
        .ok_or_else(|| format!("{s}: expected BACKEND:KEY=VALUE"))?;
    if backend.is_empty() || key.is_empty() {
        return Err(format!("{s}: expected BACKEND:KEY=VALUE"));
    }
    Ok((backend.into(), key.into(), value.into()))
}

impl DynamicArgs {
    /// The runtime option these flags choose. A relative directory is taken from the current
    /// directory.
    pub fn option(&self) -> DynamicBackendsOption {
        if self.no_dynamic_backends {
            DynamicBackendsOption::Disabled
        } else if let Some(dir) = &self.dynamic_backends_path {
            DynamicBackendsOption::Path(std::path::absolute(dir).unwrap_or_else(|_| dir.clone()))
        } else {
            DynamicBackendsOption::BuildTimePaths
        }
    }
}

/// The dynamic-backend choice of this invocation (set once, from the command line).
static CHOICE: OnceLock<DynamicBackendsOption> = OnceLock::new();

/// `--backend-option` values of this invocation: (backend, key, value).
static BACKEND_OPTIONS: OnceLock<Vec<(String, String, String)>> = OnceLock::new();

/// Record the command line's dynamic-backend flags for every runtime this process creates.
pub fn choose(args: &DynamicArgs) {
    let _ = CHOICE.set(args.option());
}

/// Record the command line's `--backend-option` values for every runtime this process
/// creates.
pub fn set_backend_options(options: &[(String, String, String)]) {
    let _ = BACKEND_OPTIONS.set(options.to_vec());
}

/// `--profile` is on: backends that time layers differently when profiled are told so.
static PROFILING: OnceLock<bool> = OnceLock::new();

/// Record that this invocation profiles (`--profile`): GpuAcc then submits and waits per layer
/// (its option `profile=true`, unless the command line set it), so each GPU layer's time is
/// its own.
pub fn set_profiling() {
    let _ = PROFILING.set(true);
}

/// The intra-op thread count of this invocation (`--threads`), for the backends that take one.
static THREADS: OnceLock<usize> = OnceLock::new();

/// Record `--threads` for every runtime this process creates.
pub fn set_threads(n: usize) {
    let _ = THREADS.set(n);
}

/// `--time-limit`, `--max-loop-iterations` and `--max-memory` of this invocation.
static TIME_LIMIT: OnceLock<std::time::Duration> = OnceLock::new();
static LOOP_LIMIT: OnceLock<u64> = OnceLock::new();
static MEMORY_LIMIT: OnceLock<usize> = OnceLock::new();

/// Record the execution limits for every runtime this process creates.
pub fn set_limits(
    time: Option<std::time::Duration>,
    loop_iterations: Option<u64>,
    memory: Option<usize>,
) {
    if let Some(t) = time {
        let _ = TIME_LIMIT.set(t);
    }
    if let Some(n) = loop_iterations {
        let _ = LOOP_LIMIT.set(n);
    }
    if let Some(b) = memory {
        let _ = MEMORY_LIMIT.set(b);
    }
}

/// A runtime with the built-in backends and the dynamic backends the command line chose.
pub fn runtime() -> Result<Runtime, CliError> {
    runtime_from(backplane::builtin_registry())
}

/// [`runtime`] with `acc` (and its clones) as its CpuAcc, so the caller can read the
/// backend's packing counts (`CpuAccBackend::packing_stats`).
pub fn runtime_with_cpu_acc(acc: &backplane::cpu_acc::CpuAccBackend) -> Result<Runtime, CliError> {
    let mut registry = backplane::builtin_registry();
    let id =
        backplane::BackendId::new("CpuAcc").map_err(|e| CliError::usage(format!("CpuAcc: {e}")))?;
    registry.unregister(&id);
    let acc = acc.clone();
    let factory: backplane::BackendFactory =
        std::sync::Arc::new(move || Box::new(acc.clone()) as Box<dyn backplane::Backend>);
    registry
        .register(id, factory)
        .map_err(|e| CliError::usage(format!("CpuAcc: {e}")))?;
    runtime_from(registry)
}

/// A runtime on `registry` with the options the command line chose.
fn runtime_from(registry: backplane::BackendRegistry) -> Result<Runtime, CliError> {
    let mut options = RuntimeOptions {
        dynamic_backends: CHOICE.get().cloned().unwrap_or_default(),
        max_execution_time: TIME_LIMIT.get().copied(),
        max_loop_iterations: LOOP_LIMIT.get().copied(),
        max_memory: MEMORY_LIMIT.get().copied(),
        ..RuntimeOptions::default()
    };
    if let Some(n) = THREADS.get() {
        let mut threads = backplane::BackendOptions::default();
        threads.values.insert("threads".into(), n.to_string());
        if let Ok(id) = backplane::BackendId::new("CpuAcc") {
            options.backend_options.insert(id, threads);
        }
    }
    for (backend, key, value) in BACKEND_OPTIONS.get().into_iter().flatten() {
        let id = backplane::BackendId::new(backend)
            .map_err(|e| CliError::usage(format!("--backend-option {backend}: {e}")))?;
        let entry = options.backend_options.entry(id).or_default();
        entry.values.insert(key.clone(), value.clone());
    }
    if PROFILING.get().copied().unwrap_or(false) {
        if let Ok(id) = backplane::BackendId::new("GpuAcc") {
            let entry = options.backend_options.entry(id).or_default();
            entry
                .values
                .entry("profile".into())
                .or_insert_with(|| "true".into());
        }
    }
    Ok(Runtime::new(registry, options)?)
}

/// Arguments of `backplane backends`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BackendsArgs {
    #[command(flatten)]
    pub dynamic: DynamicArgs,
    /// Pass option KEY=VALUE to backend BACKEND (repeatable), e.g.
    /// GpuAcc:allow_software=true to list a software adapter.
    #[arg(long = "backend-option", value_name = "BACKEND:KEY=VALUE", value_parser = parse_backend_option)]
    pub backend_options: Vec<(String, String, String)>,
}

/// Print every registered backend (id, version, API version, static or dynamic, file,
/// capabilities), then the dynamic-backend search: paths, warnings and skipped files.
pub fn list(args: &BackendsArgs) -> Result<(), CliError> {
    choose(&args.dynamic);
    set_backend_options(&args.backend_options);
    let runtime = runtime()?;
    let report = runtime.dynamic_backends();
    out!(
        "{:<12} {:<9} {:<5} {:<8} {:<12} capabilities",
        "backend",
        "version",
        "api",
        "kind",
        "file"
    );
    for id in runtime.registry().ids() {
        let backend = runtime
            .backend(&id)
            .map_err(|e| CliError::failed(e.to_string()))?;
        let caps = backend
            .capabilities()
            .0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let (kind, file) = match report.backend(&id) {
            Some(d) => ("dynamic", d.file.display().to_string()),
            None => ("static", String::from("-")),
        };
        out!(
            "{:<12} {:<9} {:<5} {:<8} {:<12} {}",
            id.as_str(),
            backend.version(),
            backend.api_version().to_string(),
            kind,
            file,
            if caps.is_empty() {
                "-".to_string()
            } else {
                caps
            }
        );
    }
    out!();
    if report.search_paths.is_empty() {
        out!("dynamic backends: no directory searched");
    } else {
        let paths = report
            .search_paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        out!(
            "dynamic backends: searched {paths} (plugin ABI {})",
            backplane::runtime::dynamic::abi_version()
        );
    }
    for w in &report.warnings {
        out!("warning: {w}");
    }
    if !report.rejected.is_empty() {
        out!("skipped files:");
        for r in &report.rejected {
            out!("  {}: {}", r.file.display(), r.reason);
        }
    }
    Ok(())
}
