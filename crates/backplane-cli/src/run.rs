//! `backplane run`: import, optimize, load, execute, report.

use crate::session::{prepare_binding, CommonArgs};
use crate::CliError;
use backplane::onnx::{GraphValue, ModelSignature, OnnxValue, ValueType};
use backplane::{DataType, Tensor, TensorInfo};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Arguments of `backplane run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The ONNX model. Without it, the digits classifier shipped in the repo runs on its
    /// shipped samples.
    pub model: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
    /// Number of timed executions (1 to 1,000,000,000); the median is reported.
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_ITERATIONS))]
    pub iterations: usize,
    /// How many classes to show per row for classifier outputs (at most 1,000,000).
    #[arg(long, default_value_t = 3, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=1_000_000))]
    pub top_k: usize,
    /// Write each output to DIR/<output name>.npy.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Compare each output with DIR/<output name>.npy or .pb, or, in an ONNX test data set
    /// (a folder holding output_0.pb), with output_<k>.pb by the output's position; exit with
    /// code 3 on a mismatch.
    #[arg(long, value_name = "DIR")]
    pub compare: Option<PathBuf>,
    /// Relative tolerance for --compare.
    #[arg(long, default_value_t = 1e-4, value_parser = parse_tolerance)]
    pub rtol: f64,
    /// Absolute tolerance for --compare.
    #[arg(long, default_value_t = 1e-5, value_parser = parse_tolerance)]
    pub atol: f64,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write per-layer timings as Chrome-trace JSON and print the 10 slowest layers.
    #[arg(long, value_name = "FILE.json")]
    pub profile: Option<PathBuf>,
    /// Run one loaded network on several input shapes in turn: one shape set per flag,
    /// NAME=DIMS with `;` between inputs. Inputs are generated (--generate, random by
    /// default) unless given with --input; prints each set's output shapes and the plan
    /// cache's counts.
    #[arg(long = "input-shapes", value_name = "NAME=DIMS[;NAME=DIMS]", requires = "model",
          conflicts_with_all = ["input_shapes", "compare", "output_dir", "json", "profile"])]
    pub shape_sets: Vec<String>,
    #[command(flatten)]
    pub dynamic: crate::backends::DynamicArgs,
}

/// The most executions `--iterations` (and `bench --warmup`) takes.
pub const MAX_ITERATIONS: u64 = 1_000_000_000;

/// A tolerance: a finite number, zero or more.
fn parse_tolerance(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or_else(|| format!("'{text}' must be a finite number, zero or more"))
}

/// Where the shipped digits model lives: under the current directory when run from the repo
/// root, else beside the sources this binary was built from.
fn shipped_model_dir() -> PathBuf {
    let here = Path::new("models/digits");
    if here.join("model.onnx").is_file() {
        return here.to_path_buf();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/digits")
}

/// The shipped samples stacked into one batch, with their labels.
fn shipped_samples(dir: &Path) -> Result<(Tensor, Vec<i64>), CliError> {
    let labels_path = dir.join("samples/labels.json");
    let text = std::fs::read_to_string(&labels_path)
        .map_err(|e| CliError::failed(format!("{}: {e}", labels_path.display())))?;
    let labels: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| CliError::failed(format!("{}: {e}", labels_path.display())))?;
    let mut names: Vec<(&String, i64)> = labels
        .as_object()
        .ok_or_else(|| CliError::failed(format!("{}: expected an object", labels_path.display())))?
        .iter()
        .filter_map(|(k, v)| v.as_i64().map(|l| (k, l)))
        .collect();
    names.sort();
    let mut data = Vec::new();
    let mut sample_dims = Vec::new();
    for (file, _) in &names {
        let t = backplane::npy::read_file(&dir.join("samples").join(file))?;
        sample_dims = t.shape().dims().to_vec();
        data.extend_from_slice(t.bytes());
    }
    if sample_dims.is_empty() {
        return Err(CliError::failed(format!(
            "no samples listed in {}",
            labels_path.display()
        )));
    }
    sample_dims[0] = names.len();
    let batch = Tensor::from_bytes(TensorInfo::new(DataType::F32, sample_dims), &data)
        .map_err(|e| CliError::failed(e.to_string()))?;
    Ok((batch, names.iter().map(|(_, l)| *l).collect()))
}

/// Longest file name stem [`file_name_for`] writes: file systems refuse names past 255 bytes
/// (`.npy` and the hash suffix included), and TFLite's fused tensor names can be longer.
const MAX_STEM: usize = 200;

/// A file name for an output: its name with path separators and odd characters replaced.
/// A name longer than [`MAX_STEM`] keeps its start and gets a hash of the whole name, so two
/// long names that share a start still get two files.
pub fn file_name_for(output: &str) -> String {
    let clean: String = output
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_STEM {
        return clean;
    }
    // FNV-1a: the same file name for the same output in every build.
    let hash = output.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    // The cleaned name is ASCII, so any byte index is a character boundary.
    format!("{}-{hash:016x}", &clean[..MAX_STEM - 17])
}

/// Run the command.
pub fn run(args: &RunArgs) -> Result<(), CliError> {
    crate::backends::choose(&args.dynamic);
    if let (false, Some(model)) = (args.shape_sets.is_empty(), &args.model) {
        return crate::shapes::run_shapes(model, &args.common, &args.shape_sets, args.iterations);
    }
    let mut preset = Vec::new();
    let mut labels = None;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => {
            let dir = shipped_model_dir();
            if args.common.inputs.is_empty() {
                let (batch, l) = shipped_samples(&dir)?;
                preset.push(("input".to_string(), batch));
                labels = Some(l);
            }
            dir.join("model.onnx")
        }
    };
    if args.profile.is_some() {
        crate::backends::set_profiling();
    }
    let session = match prepare_binding(&model, &args.common, preset, false) {
        Ok(session) => session,
        Err(e) if e.is_needs_values() => {
            tracing::info!(
                "the import needs run-time values (data-dependent shapes): serving the model \
                 through a DynamicNetwork"
            );
            if args.profile.is_some() {
                return Err(CliError::usage(format!(
                    "--profile times one static network; this model has data-dependent shapes:\n{}",
                    e.message
                )));
            }
            let ran =
                crate::data_dependent::run_data_dependent(&model, &args.common, args.iterations)?;
            let mut times = ran.times;
            times.sort();
            return report(
                args,
                &model,
                Ran {
                    signature: &ran.signature,
                    bound: &ran.bound,
                    layer_counts: &ran.layer_counts,
                    outputs: &ran.outputs,
                    times: &times,
                    runs: &[],
                    labels: labels.as_deref(),
                    dynamic: Some(&ran.summary),
                    runtime: None,
                    views: 0,
                },
            );
        }
        Err(e) => return Err(e),
    };
    let named = session.named_inputs();
    let mut times = Vec::with_capacity(args.iterations.min(1 << 16));
    let mut outputs = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..args.iterations {
        let start = Instant::now();
        if args.profile.is_some() {
            let (o, timings) = session.runtime.execute_profiled(session.id, &named)?;
            outputs = o;
            runs.push(timings);
        } else {
            outputs = session.runtime.execute(session.id, &named)?;
        }
        times.push(start.elapsed());
    }
    times.sort();
    report(
        args,
        &model,
        Ran {
            signature: &session.signature,
            bound: &session.bound,
            layer_counts: &session.layer_counts,
            outputs: &outputs,
            times: &times,
            runs: &runs,
            labels: labels.as_deref(),
            dynamic: None,
            runtime: Some(&session.runtime),
            views: session.views,
        },
    )
}

/// What one `run` produced, for [`report`].
struct Ran<'a> {
    signature: &'a ModelSignature,
    bound: &'a [String],
    layer_counts: &'a [(backplane::BackendId, usize)],
    outputs: &'a [(String, Tensor)],
    /// Sorted.
    times: &'a [Duration],
    runs: &'a [Vec<backplane::runtime::LayerTiming>],
    labels: Option<&'a [i64]>,
    /// For a model served through a DynamicNetwork: the line saying so.
    dynamic: Option<&'a str>,
    /// The runtime that ran a static network, for the profile's notes (none when dynamic).
    runtime: Option<&'a backplane::Runtime>,
    /// Layers that do not run (views and parts of other tensors' memory), for the profile.
    views: usize,
}

/// Write, compare and print what a run produced.
fn report(args: &RunArgs, model: &Path, ran: Ran<'_>) -> Result<(), CliError> {
    let Ran {
        signature,
        bound,
        layer_counts: counts,
        outputs,
        times,
        runs,
        labels,
        dynamic,
        runtime,
        views,
    } = ran;
    if let Some(dir) = &args.output_dir {
        write_outputs(dir, signature, outputs)?;
    }
    let mismatches = match &args.compare {
        Some(dir) => compare_outputs(dir, signature, outputs, args.rtol, args.atol)?,
        None => Vec::new(),
    };

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    if args.json {
        let doc = serde_json::json!({
            "model": model.display().to_string(),
            "bound_inputs": bound,
            "dynamic": dynamic,
            "backends": counts.iter().map(|(b, n)| serde_json::json!({"backend": b.as_str(), "layers": n})).collect::<Vec<_>>(),
            "outputs": outputs.iter().map(|(name, t)| serde_json::json!({
                "name": name,
                "dtype": t.dtype().name(),
                "shape": t.shape().dims(),
                "values": t.to_f64_vec().iter().map(|v| if v.is_finite() { serde_json::json!(v) } else { serde_json::json!(v.to_string()) }).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "latency_ms": {
                "median": ms(times[times.len() / 2]),
                "min": ms(times[0]),
                "max": ms(times[times.len() - 1]),
                "iterations": times.len(),
            },
            "compare": args.compare.as_ref().map(|_| serde_json::json!({
                "matched": mismatches.is_empty(),
                "mismatches": mismatches.iter().map(|(n, w)| serde_json::json!({"output": n, "reason": w})).collect::<Vec<_>>(),
            })),
        });
        out!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| CliError::failed(e.to_string()))?
        );
    } else {
        out!("model: {}", model.display());
        if let Some(line) = crate::session::bound_summary(bound) {
            out!("{line}");
        }
        if let Some(line) = dynamic {
            out!("{line}");
        }
        out!("backends: {}", crate::session::backend_summary(counts));
        for (name, t) in outputs {
            print_output(name, t, args.top_k, labels)?;
        }
        out!(
            "latency: median {:.3} ms over {} iteration{} (min {:.3} ms, max {:.3} ms)",
            ms(times[times.len() / 2]),
            times.len(),
            if times.len() == 1 { "" } else { "s" },
            ms(times[0]),
            ms(times[times.len() - 1])
        );
        if let Some(dir) = &args.output_dir {
            out!("outputs written to {}", dir.display());
        }
        if args.compare.is_some() && mismatches.is_empty() {
            out!(
                "compare: every output matches (rtol {}, atol {})",
                args.rtol,
                args.atol
            );
        }
    }
    if let Some(path) = &args.profile {
        if let Some(runtime) = runtime {
            crate::profile::report(path, runtime, views, runs, !args.json)?;
        }
    }
    if !mismatches.is_empty() {
        let list = mismatches
            .iter()
            .map(|(n, w)| format!("  output '{n}': {w}"))
            .collect::<Vec<_>>()
            .join("\n");
        return Err(CliError::mismatch(format!(
            "outputs differ from {}:\n{list}",
            args.compare.as_deref().unwrap_or(Path::new("")).display()
        )));
    }
    Ok(())
}

/// The graph outputs to report: the model's own list, or (for a model without one) every
/// network output as a tensor.
fn graph_outputs(signature: &ModelSignature, outputs: &[(String, Tensor)]) -> Vec<GraphValue> {
    if signature.outputs.is_empty() {
        return outputs
            .iter()
            .map(|(n, _)| GraphValue {
                name: n.clone(),
                ty: ValueType::Tensor,
            })
            .collect();
    }
    signature.outputs.clone()
}

/// Write each output to DIR: a tensor as `<name>.npy`, a sequence or optional as `<name>.pb`
/// (a SequenceProto or OptionalProto, as ONNX test data sets hold them).
fn write_outputs(
    dir: &Path,
    signature: &ModelSignature,
    outputs: &[(String, Tensor)],
) -> Result<(), CliError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::failed(format!("{}: {e}", dir.display())))?;
    for value in graph_outputs(signature, outputs) {
        let got = value.ty.collect(&value.name, outputs)?;
        let base = file_name_for(&value.name);
        match got {
            OnnxValue::Tensor(t) => {
                backplane::npy::write_file(&dir.join(format!("{base}.npy")), &t)?
            }
            other => {
                let path = dir.join(format!("{base}.pb"));
                let bytes = value.ty.encode(&other, &value.name)?;
                std::fs::write(&path, bytes)
                    .map_err(|e| CliError::failed(format!("{}: {e}", path.display())))?;
            }
        }
    }
    Ok(())
}

/// Compare each graph output with its expected value in DIR: in an ONNX test data set (a
/// folder holding `output_0.pb`) the file `output_<k>.pb` of the output's position k in the
/// graph, else `<name>.npy` (a tensor) or `<name>.pb` (any value), as `--output-dir` writes
/// them, or `output_<k>.npy` (as scripts/gen_tflite_models.py writes LiteRT's). Returns (output, why) for each output that differs.
fn compare_outputs(
    dir: &Path,
    signature: &ModelSignature,
    outputs: &[(String, Tensor)],
    rtol: f64,
    atol: f64,
) -> Result<Vec<(String, String)>, CliError> {
    let test_data_set = dir.join("output_0.pb").is_file();
    let mut mismatches = Vec::new();
    for (k, value) in graph_outputs(signature, outputs).iter().enumerate() {
        let base = file_name_for(&value.name);
        let candidates = if test_data_set {
            vec![dir.join(format!("output_{k}.pb"))]
        } else {
            vec![
                dir.join(format!("{base}.npy")),
                dir.join(format!("{base}.pb")),
                dir.join(format!("output_{k}.npy")),
            ]
        };
        let Some(path) = candidates.iter().find(|p| p.is_file()) else {
            let names = candidates
                .iter()
                .filter_map(|p| p.file_name())
                .map(|n| n.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" or ");
            return Err(CliError::failed(format!(
                "no expected value for output '{}' in {} (looked for {names})",
                value.name,
                dir.display()
            )));
        };
        let expected =
            crate::session::read_value(path, &value.ty, Some(&value.name))?.flatten(&value.name);
        let got = value.ty.collect(&value.name, outputs)?.flatten(&value.name);
        if got.len() != expected.len() {
            mismatches.push((
                value.name.clone(),
                format!(
                    "holds {} tensors, expected {} ({})",
                    got.len(),
                    expected.len(),
                    path.display()
                ),
            ));
            continue;
        }
        for ((name, g), (_, e)) in got.iter().zip(&expected) {
            if let Err(why) = backplane::compare::compare(g, e, rtol, atol) {
                mismatches.push((name.clone(), why.message));
            }
        }
    }
    Ok(mismatches)
}

/// Print an output: top-k per row for a [N, C] float output, else a summary of values.
fn print_output(name: &str, t: &Tensor, k: usize, labels: Option<&[i64]>) -> Result<(), CliError> {
    out!("output '{name}' {}", t.info());
    let values = t.to_f64_vec();
    let dims = t.shape().dims();
    if t.dtype().is_float() && dims.len() == 2 && dims[1] > 1 {
        let mut correct = 0;
        for (row, chunk) in values.chunks(dims[1].max(1)).enumerate() {
            let mut idx: Vec<usize> = (0..chunk.len()).collect();
            idx.sort_by(|&a, &b| chunk[b].total_cmp(&chunk[a]));
            let top = idx
                .iter()
                .take(k.max(1))
                .map(|&i| format!("{i} ({:.3})", chunk[i]))
                .collect::<Vec<_>>()
                .join(", ");
            let verdict = match labels.and_then(|l| l.get(row)) {
                Some(&l) => {
                    let ok = idx.first().map(|&i| i as i64) == Some(l);
                    correct += usize::from(ok);
                    format!("   label {l} {}", if ok { "correct" } else { "WRONG" })
                }
                None => String::new(),
            };
            out!(
                "  row {row}: top-{}: {top}{verdict}",
                k.max(1).min(chunk.len())
            );
        }
        if let Some(l) = labels {
            out!("  {correct}/{} predictions match the labels", l.len());
        }
    } else {
        let shown: Vec<String> = values.iter().take(8).map(|v| format!("{v:.6}")).collect();
        let more = if values.len() > 8 {
            format!(", ... ({} values)", values.len())
        } else {
            String::new()
        };
        out!("  [{}{more}]", shown.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::file_name_for;

    #[test]
    fn long_output_names_become_short_distinct_file_names() {
        assert_eq!(file_name_for("a/b:0"), "a_b_0");
        let a = format!("{}A", "x".repeat(300));
        let b = format!("{}B", "x".repeat(300));
        let (fa, fb) = (file_name_for(&a), file_name_for(&b));
        assert_eq!(fa.len(), 200);
        assert_ne!(fa, fb);
        assert_eq!(fa, file_name_for(&a));
        assert!(fa.starts_with(&"x".repeat(183)), "{fa}");
    }
}
