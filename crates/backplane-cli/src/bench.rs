//! `backplane bench`: latency and throughput of a model over many executions.

use crate::session::{prepare_binding, ModelArgs};
use crate::CliError;
use std::time::{Duration, Instant};

/// Arguments of `backplane bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Untimed executions first (at most 1,000,000,000; with --input-shapes, per shape set).
    #[arg(long, default_value_t = 5, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=crate::run::MAX_ITERATIONS))]
    pub warmup: usize,
    /// Keep warming up until this many seconds have passed too (0 for no minimum). A fresh
    /// process's first executions can be slower than the rest: on some machines the OS runs
    /// a new thread pool's helpers beside the calling thread for their first milliseconds.
    #[arg(long = "warmup-time", value_name = "SECONDS", default_value = "0.2", value_parser = parse_warmup_time)]
    pub warmup_time: Duration,
    /// Timed executions (1 to 1,000,000,000; with --input-shapes, per shape set).
    #[arg(long, default_value_t = 100, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=crate::run::MAX_ITERATIONS))]
    pub iterations: usize,
    /// Stop timing after this many seconds even if fewer iterations ran.
    #[arg(long, value_name = "SECONDS", value_parser = crate::session::parse_seconds)]
    pub time: Option<Duration>,
    /// Hide the progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Write per-layer timings as Chrome-trace JSON and print the 10 slowest layers.
    #[arg(long, value_name = "FILE.json")]
    pub profile: Option<std::path::PathBuf>,
    /// Time one loaded network across several input shapes, cycling through them: one
    /// shape set per flag, NAME=DIMS with `;` between inputs (e.g. `--input-shapes
    /// input_ids=1x7 --input-shapes input_ids=1x128`). Inputs are generated (--generate,
    /// random by default) unless given with --input; each set gets its own plan from the
    /// network's plan cache, and latency is reported per set.
    #[arg(
        long = "input-shapes",
        value_name = "NAME=DIMS[;NAME=DIMS]",
        conflicts_with = "input_shapes"
    )]
    pub shape_sets: Vec<String>,
    /// With --input-shapes: how many plans the network keeps (1 to 1024; default: one per
    /// shape set). Fewer than the sets makes every cycle rebuild plans.
    #[arg(long = "plan-cache", value_name = "N", requires = "shape_sets", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub plan_cache: Option<usize>,
    /// With --input-shapes: optimize every plan in full, never replaying an earlier plan's
    /// optimization of the same structure (the baseline to measure the replay against).
    #[arg(long = "no-replay", requires = "shape_sets")]
    pub no_replay: bool,
    /// For a model with data-dependent shapes: how many specialisations each node its plans
    /// are cut at keeps (0 to 1024; default 8). 0 imports the node at every execution.
    #[arg(long = "node-cache", value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=1024))]
    pub node_cache: Option<usize>,
    #[command(flatten)]
    pub dynamic: crate::backends::DynamicArgs,
}

/// `--warmup-time`: seconds, 0 up to a day.
fn parse_warmup_time(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if !(0.0..=86_400.0).contains(&secs) {
        return Err(format!("'{text}': give 0 to 86400 seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Peak resident memory of this process in bytes (Linux), if known.
pub fn peak_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Latency statistics over sorted samples.
pub struct Stats {
    /// Fastest.
    pub min: Duration,
    /// Median.
    pub median: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// Slowest.
    pub max: Duration,
    /// Number of samples.
    pub count: usize,
}

impl Stats {
    /// Statistics of `times` (sorted in place); `None` when empty.
    pub fn of(times: &mut [Duration]) -> Option<Stats> {
        if times.is_empty() {
            return None;
        }
        times.sort();
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        Some(Stats {
            min: times[0],
            median: at(0.5),
            p90: at(0.9),
            max: times[times.len() - 1],
            count: times.len(),
        })
    }
}

/// A duration in milliseconds.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl std::fmt::Display for Stats {
    /// `latency over N executions: min … ms, median … ms, p90 … ms, max … ms`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "latency over {} execution{}: min {:.3} ms, median {:.3} ms, p90 {:.3} ms, max {:.3} ms",
            self.count,
            if self.count == 1 { "" } else { "s" },
            ms(self.min),
            ms(self.median),
            ms(self.p90),
            ms(self.max)
        )
    }
}

/// The throughput line of a timing report: `count` executions in `total`.
pub(crate) fn throughput_line(count: usize, total: Duration) -> String {
    format!(
        "throughput: {:.1} executions/s",
        count as f64 / total.as_secs_f64().max(1e-9)
    )
}

/// The peak-memory line of a timing report, where the platform tells it.
pub(crate) fn peak_memory_line() -> Option<String> {
    peak_memory_bytes()
        .map(|peak| format!("peak memory: {:.1} MiB", peak as f64 / (1024.0 * 1024.0)))
}

/// The bar shown over `len` timed executions (hidden with `--quiet`).
pub(crate) fn progress_bar(quiet: bool, len: usize) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:40} {pos}/{len} executions, {elapsed} elapsed, eta {eta}",
    ) {
        bar.set_style(style);
    }
    bar
}

/// Run the command.
pub fn bench(args: &BenchArgs) -> Result<(), CliError> {
    crate::backends::choose(&args.dynamic);
    if !args.shape_sets.is_empty() {
        return crate::shapes::bench_shapes(args);
    }
    let budget = args.time;
    if args.profile.is_some() {
        crate::backends::set_profiling();
    }
    // Data is never bound at import: a model whose shapes depend on it is served by a
    // DynamicNetwork, as `run` does.
    let session = match prepare_binding(&args.model.model, &args.model.common, Vec::new(), false) {
        Ok(session) => session,
        Err(e) if e.is_needs_values() => {
            tracing::info!(
                "the import needs run-time values (data-dependent shapes): serving the model \
                 through a DynamicNetwork"
            );
            return crate::data_dependent::bench_data_dependent(args);
        }
        Err(e) => return Err(e),
    };
    let named = session.named_inputs();
    let warm_start = Instant::now();
    let mut warm = 0usize;
    while warm < args.warmup
        || (warm_start.elapsed() < args.warmup_time && (warm as u64) < crate::run::MAX_ITERATIONS)
    {
        session.runtime.execute(session.id, &named)?;
        warm += 1;
    }
    let warm_time = warm_start.elapsed();
    let bar = progress_bar(args.quiet, args.iterations);
    let started = Instant::now();
    // Grown as executions run: a huge --iterations with a --time budget must not reserve
    // memory for executions that never happen.
    let mut times = Vec::with_capacity(args.iterations.min(1 << 16));
    let mut runs = Vec::new();
    for _ in 0..args.iterations {
        let t = Instant::now();
        if args.profile.is_some() {
            runs.push(session.runtime.execute_profiled(session.id, &named)?.1);
        } else {
            session.runtime.execute(session.id, &named)?;
        }
        times.push(t.elapsed());
        bar.inc(1);
        if budget.is_some_and(|b| started.elapsed() >= b) {
            break;
        }
    }
    bar.finish_and_clear();
    let total = started.elapsed();
    let Some(stats) = Stats::of(&mut times) else {
        return Err(CliError::failed("no execution was timed"));
    };
    out!("model: {}", args.model.model.display());
    if let Some(line) = crate::session::bound_summary(&session.bound) {
        out!("{line}");
    }
    out!(
        "backends: {}",
        crate::session::backend_summary(&session.layer_counts)
    );
    out!("{stats}");
    out!(
        "warm-up: {warm} executions in {:.3} s (not timed)",
        warm_time.as_secs_f64()
    );
    out!("{}", throughput_line(stats.count, total));
    if let Some(line) = peak_memory_line() {
        out!("{line}");
    }
    if let Some(path) = &args.profile {
        crate::profile::report(path, &session.runtime, session.views, &runs, true)?;
    }
    Ok(())
}
