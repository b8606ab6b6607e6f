//! `backplane run`: import, optimize, load, execute, report.

use crate::CliError;
use backplane::{BackendId, DataType, ImportOptions, OptimizerOptions, Tensor, TensorInfo};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Arguments of `backplane run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The ONNX model. Without it, the digits classifier shipped in the repo runs on its
    /// shipped samples.
    pub model: Option<PathBuf>,
    /// Backends in order of preference, comma-separated.
    #[arg(long, default_value = "CpuRef")]
    pub backends: String,
    /// An input tensor from a .npy file: NAME=FILE (repeat for several inputs).
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// The shape of an input with symbolic dimensions: NAME=1x3x224x224.
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shapes: Vec<String>,
    /// Run a layer (by name or op type) on a given backend first: NAME=BACKEND.
    #[arg(long = "layer-backend", value_name = "NAME=BACKEND")]
    pub layer_backends: Vec<String>,
    /// Number of timed executions; the median is reported.
    #[arg(long, default_value_t = 1)]
    pub iterations: usize,
    /// How many classes to show per row for classifier outputs.
    #[arg(long, default_value_t = 3)]
    pub top_k: usize,
    /// Write per-layer timings as Chrome-trace JSON and print the 10 slowest layers.
    #[arg(long, value_name = "FILE.json")]
    pub profile: Option<PathBuf>,
}

fn split_pair<'a>(arg: &'a str, flag: &str) -> Result<(&'a str, &'a str), CliError> {
    arg.split_once('=')
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .ok_or_else(|| CliError::usage(format!("{flag} expects NAME=VALUE, got '{arg}'")))
}

fn parse_dims(text: &str, flag: &str) -> Result<Vec<usize>, CliError> {
    text.split(['x', ','])
        .map(|d| {
            d.trim().parse::<usize>().map_err(|_| {
                CliError::usage(format!("{flag}: '{text}' is not a shape like 1x3x224x224"))
            })
        })
        .collect()
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

/// Run the command.
pub fn run(args: &RunArgs) -> Result<(), CliError> {
    let mut inputs: Vec<(String, Tensor)> = Vec::new();
    let mut labels = None;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => {
            let dir = shipped_model_dir();
            if args.inputs.is_empty() {
                let (batch, l) = shipped_samples(&dir)?;
                inputs.push(("input".to_string(), batch));
                labels = Some(l);
            }
            dir.join("model.onnx")
        }
    };
    for arg in &args.inputs {
        let (name, file) = split_pair(arg, "--input")?;
        let t = backplane::npy::read_file(Path::new(file))?;
        inputs.push((name.to_string(), t));
    }
    let mut options = ImportOptions::default();
    for (name, t) in &inputs {
        options
            .input_shapes
            .insert(name.clone(), t.shape().dims().to_vec());
    }
    for arg in &args.input_shapes {
        let (name, dims) = split_pair(arg, "--input-shape")?;
        options
            .input_shapes
            .insert(name.to_string(), parse_dims(dims, "--input-shape")?);
    }
    let backends = backplane::parse_backends(&args.backends)?;
    let mut opt_options = OptimizerOptions::new(backends);
    for arg in &args.layer_backends {
        let (layer, backend) = split_pair(arg, "--layer-backend")?;
        let id = BackendId::new(backend).map_err(CliError::usage)?;
        opt_options.layer_backends.push((layer.to_string(), id));
    }
    if args.iterations == 0 {
        return Err(CliError::usage("--iterations must be at least 1"));
    }

    let network = backplane::load_onnx(&model, &options)?;
    let runtime = backplane::RuntimeBuilder::new().build()?;
    let optimized = runtime.optimize(&network, &opt_options)?;
    println!("model: {}", model.display());
    let counts = optimized
        .layer_counts()
        .iter()
        .map(|(b, n)| format!("{b}: {n} layer{}", if *n == 1 { "" } else { "s" }))
        .collect::<Vec<_>>()
        .join(", ");
    println!("backends: {counts}");
    let id = runtime.load_network(optimized)?;

    let given: HashMap<&str, &Tensor> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let loaded = runtime
        .network(id)
        .map_err(|e| CliError::failed(e.to_string()))?;
    for &t in loaded.network().inputs() {
        let e = loaded.network().tensor(t);
        if !given.contains_key(e.name.as_str()) {
            return Err(CliError::usage(format!(
                "input '{}' ({}) was not given: pass --input {}=FILE.npy",
                e.name, e.info, e.name
            )));
        }
    }
    let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut times = Vec::with_capacity(args.iterations);
    let mut outputs = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..args.iterations {
        let start = Instant::now();
        if args.profile.is_some() {
            let (o, timings) = runtime.execute_profiled(id, &named)?;
            outputs = o;
            runs.push(timings);
        } else {
            outputs = runtime.execute(id, &named)?;
        }
        times.push(start.elapsed());
    }
    for (name, t) in &outputs {
        print_output(name, t, args.top_k, labels.as_deref());
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "latency: median {:.3} ms over {} iteration{} (min {:.3} ms, max {:.3} ms)",
        ms(times[times.len() / 2]),
        times.len(),
        if times.len() == 1 { "" } else { "s" },
        ms(times[0]),
        ms(times[times.len() - 1])
    );
    if let Some(path) = &args.profile {
        crate::profile::write_trace(path, &runs)?;
        crate::profile::print_top(&runs);
        println!("profile written to {}", path.display());
    }
    Ok(())
}

/// Print an output: top-k per row for a [N, C] float output, else a summary of values.
fn print_output(name: &str, t: &Tensor, k: usize, labels: Option<&[i64]>) {
    println!("output '{name}' {}", t.info());
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
            println!(
                "  row {row}: top-{}: {top}{verdict}",
                k.max(1).min(chunk.len())
            );
        }
        if let Some(l) = labels {
            println!("  {correct}/{} predictions match the labels", l.len());
        }
    } else {
        let shown: Vec<String> = values.iter().take(8).map(|v| format!("{v:.6}")).collect();
        let more = if values.len() > 8 {
            format!(", ... ({} values)", values.len())
        } else {
            String::new()
        };
        println!("  [{}{more}]", shown.join(", "));
    }
}
