//! `run`, `bench` and `inspect` on a model whose shapes depend on data (NonZero,
//! NonMaxSuppression, TopK with a computed k, ...): served by a [`DynamicNetwork`], which
//! plans the part before the first such node, runs the node, and plans the rest for the
//! shapes it produced; `inspect` shows where the plan is cut and the static part before it.

use crate::bench::{ms, peak_memory_line, throughput_line, BenchArgs, Stats};
use crate::session::{configure, optimizer_options, CommonArgs, Imported, ModelFile};
use crate::shapes::{inputs_for, named, onnx_proto};
use crate::CliError;
use backplane::onnx::{OnnxError, OnnxValue};
use backplane::{DynamicNetwork, ImportOptions, Tensor};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many cut nodes the reports list by name (SSD's post-processing has 181).
const LISTED_CUTS: usize = 8;

/// What [`run_data_dependent`] hands back to `run`'s report.
pub struct DataDependentRun {
    /// The model's graph inputs and outputs.
    pub signature: backplane::onnx::ModelSignature,
    /// The graph outputs of the last execution.
    pub outputs: Vec<(String, Tensor)>,
    /// Each execution's time.
    pub times: Vec<Duration>,
    /// Inputs bound at import by the plan (small integer inputs).
    pub bound: Vec<String>,
    /// Layers per backend of the plan's static part.
    pub layer_counts: Vec<(backplane::BackendId, usize)>,
    /// A line saying where the plan split and the plan caches' counts.
    pub summary: String,
}

/// A network serving a model, its inputs and the model's graph inputs and outputs.
type Served<'r> = (
    DynamicNetwork<'r>,
    Vec<(String, Tensor)>,
    backplane::onnx::ModelSignature,
);

/// The network serving `file` with the CLI's backend choice, and its inputs (given with
/// `--input` or generated), with the model's signature.
fn serve<'r>(
    runtime: &'r backplane::Runtime,
    file: ModelFile,
    common: &CommonArgs,
) -> Result<Served<'r>, CliError> {
    let inputs = inputs_for(&file, common, &[Vec::new()])?
        .pop()
        .ok_or_else(|| CliError::failed("no inputs were prepared"))?;
    let optimizer = optimizer_options(&common.backends, &common.layer_backends)?;
    let ModelFile {
        path,
        format,
        signature,
    } = file;
    let net = DynamicNetwork::from_model(
        runtime,
        onnx_proto(format, &path)?,
        Some(backplane::onnx::model_base_dir(&path)),
        &ImportOptions::default(),
        optimizer,
    );
    Ok((net, inputs, signature))
}

/// "'nonzero' (NonZero), 'nms' (NonMaxSuppression)", at most [`LISTED_CUTS`] named.
fn cut_list(net: &DynamicNetwork<'_>) -> String {
    let cuts = net.cuts();
    let mut text = cuts
        .iter()
        .take(LISTED_CUTS)
        .map(|c| format!("'{}' ({})", c.label, c.op_type))
        .collect::<Vec<_>>()
        .join(", ");
    if cuts.len() > LISTED_CUTS {
        text.push_str(&format!(" and {} more", cuts.len() - LISTED_CUTS));
    }
    if text.is_empty() {
        text.push_str("none");
    }
    text
}

/// `run` on a model whose import needs the values of data. Inputs not given with `--input`
/// are generated (`--generate`, random by default).
pub fn run_data_dependent(
    model: &Path,
    common: &CommonArgs,
    iterations: usize,
) -> Result<DataDependentRun, CliError> {
    let file = ModelFile::open(model)?;
    let runtime = crate::backends::runtime()?;
    let (net, inputs, signature) = serve(&runtime, file, common)?;
    let given = named(&inputs);
    let mut times = Vec::with_capacity(iterations.min(1 << 16));
    let mut outputs = Vec::new();
    for _ in 0..iterations {
        let t = Instant::now();
        outputs = net.execute(&given)?;
        times.push(t.elapsed());
    }
    let (plan, _) = net.plan(&given)?;
    tracing::info!("runtime plan caches: {}", runtime.plan_cache_stats());
    let split = match &plan.split {
        Some(s) => format!("split at node '{}' ({})", s.label, s.op_type),
        None => "no split".to_string(),
    };
    Ok(DataDependentRun {
        signature,
        outputs,
        times,
        bound: plan.bound.clone(),
        layer_counts: plan
            .optimized
            .as_ref()
            .map(|o| o.layer_counts())
            .unwrap_or_default(),
        summary: format!(
            "data-dependent shapes: served by a DynamicNetwork ({split}); plan caches: {}; \
             split nodes: {}",
            net.total_stats(),
            net.total_node_stats()
        ),
    })
}

/// `bench` on a model whose import needs the values of data: the first execution (which
/// builds the plans) is reported alone, then the warm-up and the timed executions, the
/// nodes the plans were cut at, and the plan and split-node caches' counts.
pub fn bench_data_dependent(args: &BenchArgs) -> Result<(), CliError> {
    let common = &args.model.common;
    if args.profile.is_some() {
        return Err(CliError::usage(
            "--profile times one static network; this model has data-dependent shapes \
             (served by a DynamicNetwork)",
        ));
    }
    configure(common);
    let file = ModelFile::open_with(&args.model.model, common.int8_requant())?;
    let runtime = crate::backends::runtime()?;
    let (net, inputs, _) = serve(&runtime, file, common)?;
    let net = match args.node_cache {
        Some(n) => net.with_node_cache(n),
        None => net,
    };
    let given = named(&inputs);
    let started = Instant::now();
    net.execute(&given)?;
    let first = started.elapsed();
    let planned = (net.total_stats(), net.total_node_stats());
    for _ in 0..args.warmup {
        net.execute(&given)?;
    }
    let started = Instant::now();
    let mut times = Vec::with_capacity(args.iterations.min(1 << 16));
    for _ in 0..args.iterations {
        let t = Instant::now();
        net.execute(&given)?;
        times.push(t.elapsed());
        if args.time.is_some_and(|b| started.elapsed() >= b) {
            break;
        }
    }
    let total = started.elapsed();
    let counts = (net.total_stats(), net.total_node_stats());
    let totals = runtime.plan_cache_stats();
    let Some(stats) = Stats::of(&mut times) else {
        return Err(CliError::failed("no execution was timed"));
    };
    let (plan, _) = net.plan(&given)?;
    out!("model: {}", args.model.model.display());
    out!(
        "data-dependent shapes: served by a DynamicNetwork; plans cut at {} node{}: {}",
        net.cuts().len(),
        if net.cuts().len() == 1 { "" } else { "s" },
        cut_list(&net)
    );
    if let Some(line) = crate::session::bound_summary(&plan.bound) {
        out!("{line}");
    }
    out!(
        "backends (before the first cut): {}",
        plan.optimized
            .as_ref()
            .map(|o| crate::session::backend_summary(&o.layer_counts()))
            .unwrap_or_else(|| "nothing is computed before it".into())
    );
    out!(
        "first execution (builds the plans): {:.3} ms; plan caches: {}; split nodes: {}",
        ms(first),
        planned.0,
        planned.1
    );
    out!("{stats}");
    out!("{}", throughput_line(stats.count, total));
    out!("plan caches: {}", counts.0);
    out!("split nodes: {}", counts.1);
    out!("runtime plan caches: {totals}");
    if let Some(line) = peak_memory_line() {
        out!("{line}");
    }
    Ok(())
}

/// For `inspect`: import an ONNX model binding only the small integer inputs given (shapes,
/// counts). A model whose import needs the values of data is described by where its plan is
/// cut: the lines to print, and the static part before the first cut (imported; `None` when
/// nothing is computed before it). A needed integer input that was not given is an error
/// naming it, as before.
pub fn import_for_inspect(
    proto: backplane::onnx::proto::ModelProto,
    path: &Path,
    given: &[(String, OnnxValue)],
    input_shapes: &[(String, Vec<usize>)],
) -> Result<(Option<Imported>, Vec<String>), CliError> {
    let (mut options, mut values) = ImportOptions::default()
        .with_evaluator(Arc::new(backplane::cpu_ref::CpuRefEvaluator))
        .with_input_values_shaped(given);
    values.retain(|(_, t)| backplane::staged::binds_at_import(t));
    for (name, dims) in input_shapes {
        options.input_shapes.insert(name.clone(), dims.clone());
    }
    let base_dir = backplane::onnx::model_base_dir(path);
    let declared = backplane::onnx::inspect_model(&proto)?;
    let import = |model| {
        backplane::onnx::import_model_specialized(model, Some(&base_dir), &options, &values)
    };
    let (inputs, nodes) = match import(proto.clone()) {
        Ok((network, bound)) => return Ok((Some(Imported { network, bound }), Vec::new())),
        Err(OnnxError::NeedsInputValues { inputs, nodes }) => (inputs, nodes),
        Err(e) => return Err(e.into()),
    };
    // A parameter input (an integer one) must be given: the plans are keyed by its value.
    let missing: Vec<&String> = inputs
        .iter()
        .filter(|i| {
            !given.iter().any(|(n, _)| n == *i)
                && declared
                    .iter()
                    .any(|d| &d.name == *i && d.dtype.is_integer())
        })
        .collect();
    if !missing.is_empty() {
        return Err(CliError::failed(format!(
            "{}\nbackplane inspect binds such inputs from their files: pass {}",
            OnnxError::NeedsInputValues {
                inputs: inputs.clone(),
                nodes
            },
            missing
                .iter()
                .map(|i| format!("--input {i}=FILE"))
                .collect::<Vec<_>>()
                .join(" ")
        )));
    }
    let needing: Vec<(String, String)> = nodes
        .iter()
        .map(|n| (n.node.clone(), n.op_type.clone()))
        .collect();
    let given_names: Vec<String> = declared.iter().map(|d| d.name.clone()).collect();
    let cut = backplane::staged::first_cut(&proto, &needing, &given_names)?;
    let mut lines = vec![format!(
        "data-dependent shapes: `run` and `bench` serve this model through a DynamicNetwork. \
         {} need{} run-time values to decide shapes or parameters; the plan is cut at \
         the first, node '{}' ({}): the part before it is planned once, the node runs on its \
         inputs' values, and the rest is planned for the shapes it produces (and cut again at \
         the next such node):",
        if nodes.len() == 1 {
            "1 node".to_string()
        } else {
            format!("{} nodes", nodes.len())
        },
        if nodes.len() == 1 { "s" } else { "" },
        cut.label,
        cut.op_type
    )];
    for n in nodes.iter().take(LISTED_CUTS) {
        lines.push(format!(
            "  cut: node '{}' ({}): {}",
            n.node, n.op_type, n.reason
        ));
    }
    if nodes.len() > LISTED_CUTS {
        lines.push(format!("  ... and {} more", nodes.len() - LISTED_CUTS));
    }
    let Some(prefix) = cut.prefix else {
        lines.push("nothing is computed before the first cut".into());
        return Ok((None, lines));
    };
    lines.push("the static part before the first cut:".into());
    let (network, bound) = import(prefix)?;
    Ok((Some(Imported { network, bound }), lines))
}
