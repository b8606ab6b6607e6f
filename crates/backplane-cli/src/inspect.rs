//! `backplane inspect`: what a model contains and how the optimizer placed it.

use crate::session::{bound_summary, import, optimize, parse_input_shapes, read_inputs, ModelFile};
use crate::CliError;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Arguments of `backplane inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// Backends in order of preference, comma-separated.
    #[arg(long, default_value = backplane::DEFAULT_BACKENDS)]
    pub backends: String,
    /// An input's value from a .npy or .pb file: NAME=FILE. Its shape binds the input's
    /// symbolic dimensions, and a model that needs the value at import (a Reshape's shape
    /// given as an input) is inspected specialized on it.
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// The shape of an input with symbolic dimensions: NAME=1x3x224x224.
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shapes: Vec<String>,
    /// Run a layer (by name or op type) on a given backend first: NAME=BACKEND.
    #[arg(long = "layer-backend", value_name = "NAME=BACKEND")]
    pub layer_backends: Vec<String>,
    /// Draw the partitioned graph to an SVG file (one colour per backend).
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<PathBuf>,
    /// Pass option KEY=VALUE to backend BACKEND (repeatable), e.g.
    /// GpuAcc:allow_software=true.
    #[arg(long = "backend-option", value_name = "BACKEND:KEY=VALUE", value_parser = crate::backends::parse_backend_option)]
    pub backend_options: Vec<(String, String, String)>,
    /// Refuse (after the report) a model whose execution needs more working memory than
    /// this, in bytes or with a K, M, G or T suffix; default: the memory available now.
    #[arg(long = "max-memory", value_name = "BYTES", value_parser = crate::session::parse_bytes)]
    pub max_memory: Option<usize>,
    #[command(flatten)]
    pub dynamic: crate::backends::DynamicArgs,
}

/// The model's inputs and outputs with their symbolic shapes (`[batch, seq, 96]`): what one
/// loaded model accepts, before `--input-shape` picks a concrete shape.
fn symbolic_lines(signature: &backplane::core::symbolic::SymbolicSignature) -> Vec<String> {
    let shape = |s: &Option<Vec<backplane::core::symbolic::DimExpr>>| {
        s.as_ref().map_or_else(
            || "unknown until run (not inferred symbolically)".to_string(),
            |s| backplane::core::symbolic::display_shape(s),
        )
    };
    let mut lines = Vec::new();
    for (name, s) in &signature.inputs {
        lines.push(format!("symbolic input  '{name}' {}", shape(s)));
    }
    for (name, s) in &signature.outputs {
        lines.push(format!("symbolic output '{name}' {}", shape(s)));
    }
    lines
}

/// Run the command.
pub fn inspect(args: &InspectArgs) -> Result<(), CliError> {
    crate::backends::choose(&args.dynamic);
    crate::backends::set_backend_options(&args.backend_options);
    // Symbolic dims without a value default to 1 here, so a model can be looked at without
    // knowing its batch size; say so.
    let model = ModelFile::open(&args.model)?;
    let given = read_inputs(&args.inputs, &args.model, &model.signature)?;
    let mut shapes = parse_input_shapes(&args.input_shapes)?;
    let declared = match model.format {
        crate::session::ModelFormat::Onnx(ref proto) => backplane::onnx::inspect_model(proto)?,
        // TFLite models have static shapes: nothing symbolic to fill in.
        crate::session::ModelFormat::Tflite(_) => Vec::new(),
    };
    for input in &declared {
        let known = shapes.iter().any(|(n, _)| n == &input.name)
            || given.iter().any(|(n, _)| n == &input.name);
        if !input.symbolic_dims().is_empty() && !known {
            let dims: Vec<usize> = input
                .dims
                .iter()
                .map(|d| match d {
                    backplane::onnx::Dim::Fixed(v) => *v,
                    backplane::onnx::Dim::Symbolic(_) => 1,
                })
                .collect();
            out!(
                "note: input '{}' has symbolic dims {:?}; inspecting with 1 for each (set --input-shape)",
                input.name,
                input.symbolic_dims()
            );
            shapes.push((input.name.clone(), dims));
        }
    }
    // An ONNX model binds only small integer inputs (shapes, counts); one whose shapes
    // depend on data is shown as `run` serves it: where its plan is cut, and the static part
    // before the first cut.
    let symbolic = match &model.format {
        crate::session::ModelFormat::Onnx(proto) => {
            symbolic_lines(&backplane::onnx::symbolic_signature(proto))
        }
        crate::session::ModelFormat::Tflite(_) => Vec::new(),
    };
    let (imported, cut_lines) = match model.format {
        crate::session::ModelFormat::Onnx(proto) => {
            crate::data_dependent::import_for_inspect(*proto, &model.path, &given, &shapes)?
        }
        format => (
            Some(import(format, &model.path, &given, &shapes)?),
            Vec::new(),
        ),
    };
    let Some(imported) = imported else {
        out!("model: {}", args.model.display());
        for line in symbolic.iter().chain(&cut_lines) {
            out!("{line}");
        }
        return Ok(());
    };
    let network = &imported.network;
    // The optimizer runs without a budget so that the plan is shown; the budget is checked
    // once it is.
    crate::backends::set_limits(None, None, Some(usize::MAX));
    let budget = args
        .max_memory
        .or_else(backplane::runtime::available_memory);
    let runtime = crate::backends::runtime()?;
    let optimized = optimize(&runtime, network, &args.backends, &args.layer_backends)?;
    out!("model: {}", args.model.display());
    for line in symbolic.iter().chain(&cut_lines) {
        out!("{line}");
    }
    if let Some(line) = bound_summary(&imported.bound) {
        out!("{line}");
    }
    for &t in network.inputs() {
        let e = network.tensor(t);
        out!("input  '{}' {}", e.name, e.info);
    }
    for &t in network.outputs() {
        let e = network.tensor(t);
        out!("output '{}' {}", e.name, e.info);
    }
    let mut histogram: BTreeMap<&str, usize> = BTreeMap::new();
    for l in network.layers() {
        *histogram.entry(l.op.name()).or_default() += 1;
    }
    out!(
        "ops ({} layers): {}",
        network.layers().len(),
        histogram
            .iter()
            .map(|(op, n)| format!("{op} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out!(
        "\nlayers after optimization ({}):",
        optimized.network().layers().len()
    );
    // Long networks print hundreds of thousands of lines: built in memory and written once
    // rather than one write per line.
    let mut text = String::new();
    print_placement(&optimized, "  ", &mut text);
    out!("{}", text.trim_end_matches('\n'));
    let report = optimized.report();
    if !report.refusals.is_empty() {
        out!("\nrefusals (backend that declined a layer before another took it):");
        for (layer, backend, why) in &report.refusals {
            out!("  {layer}: {backend}: {why}");
        }
    }
    if !report.rejected.is_empty() {
        out!("\nrejected optimizations (invalid answers; those layers were left as they were):");
        for r in &report.rejected {
            out!(
                "  {}: {}: {}",
                r.backend,
                abridged(&r.layers, ", "),
                r.reason
            );
        }
    }
    if !report.substitutions.is_empty() {
        out!("\nfusions and substitutions:");
        for s in &report.substitutions {
            out!(
                "  {}: {} -> {}",
                s.backend,
                abridged(&s.replaced, " + "),
                abridged(&s.replacement, ", ")
            );
        }
    }
    let plan = optimized.tensor_strategy();
    out!("\ntensor memory (edge: from -> to, strategy):");
    let mut text = String::new();
    for e in &plan.edges {
        let from = e.producer.as_deref().unwrap_or("(input)");
        let to = e.consumer.as_deref().unwrap_or("(output)");
        let _ = writeln!(
            text,
            "  {:<24} {from} -> {to}: {} ({} -> {}, {} bytes)",
            e.tensor, e.strategy, e.from, e.to, e.bytes
        );
    }
    if !text.is_empty() {
        out!("{}", text.trim_end_matches('\n'));
    }
    let memory = optimized.memory_plan();
    out!(
        "copies per execution: {} ({} bytes), of which layout permutes: {}; imports without copy: {}; \
         mapped reads (outputs the host maps in another memory): {}",
        plan.copies + plan.permutes,
        plan.bytes_copied,
        plan.permutes,
        plan.imports,
        plan.mapped_reads
    );
    out!(
        "host arena: {} bytes planned for {} bytes of tensors (largest live set {} bytes, ratio {:.2})",
        memory.arena_bytes,
        memory.tensor_bytes,
        memory.lower_bound,
        if memory.lower_bound == 0 { 1.0 } else { memory.arena_bytes as f64 / memory.lower_bound as f64 }
    );
    out!(
        "working memory per execution: {} bytes (host arena and other memories, control-flow bodies included); memory budget: {}",
        optimized.working_bytes(),
        budget.map_or_else(|| "none known".to_string(), |b| format!("{b} bytes"))
    );
    out!(
        "\nbackends: {}",
        crate::session::backend_summary(&optimized.layer_counts())
    );
    if let Some(path) = &args.svg {
        std::fs::write(path, crate::svg::render(&optimized))
            .map_err(|e| CliError::failed(format!("{}: {e}", path.display())))?;
        out!("graph drawn to {}", path.display());
    }
    // Over the budget: the report above stands, and the command fails as `run` would.
    let verdict = budget.map_or(Ok(()), |b| optimized.check_memory_budget(b));
    // The process ends right after: freeing the graphs one allocation at a time took a
    // tenth of the time of inspecting a 200,000-layer chain, so they are left to the exit.
    std::mem::forget(optimized);
    std::mem::forget(imported);
    verdict.map_err(CliError::from)
}

/// Each layer with its op, backend and outputs, one line each into `text`; control-flow
/// bodies indented below their layer, with their own partition.
fn print_placement(optimized: &backplane::OptimizedNetwork, indent: &str, text: &mut String) {
    let opt_net = optimized.network();
    let width = opt_net
        .layers()
        .iter()
        .map(|l| l.name.len())
        .max()
        .unwrap_or(0);
    for (i, (layer, backend)) in opt_net
        .layers()
        .iter()
        .zip(optimized.assignment())
        .enumerate()
    {
        let out = layer
            .outputs
            .iter()
            .map(|t| opt_net.tensor(*t).info.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            text,
            "{indent}{:<width$}  {:<18} {:<8} -> {out}",
            layer.name,
            layer.op.name(),
            backend.as_str()
        );
        let Some((_, bodies)) = optimized.subgraphs().iter().find(|(l, _)| *l == i) else {
            continue;
        };
        let names: &[&str] = match layer.op.name() {
            "If" => &["then branch", "else branch"],
            _ => &["body"],
        };
        for (k, body) in bodies.iter().enumerate() {
            let _ = writeln!(
                text,
                "{indent}  {} of '{}' ({} layers; {}):",
                names.get(k).copied().unwrap_or("subgraph"),
                layer.name,
                body.network().layers().len(),
                crate::session::backend_summary(&body.layer_counts())
            );
            print_placement(body, &format!("{indent}    "), text);
        }
    }
}

/// `names` joined by `sep`, or for more than [`LISTED`] of them the first three and the last
/// two around a count (a channels-last region replaces a whole network body).
fn abridged(names: &[String], sep: &str) -> String {
    if names.len() <= LISTED {
        return names.join(sep);
    }
    let n = names.len();
    format!(
        "{}{sep}… ({} more){sep}{}",
        names[..3].join(sep),
        n - 5,
        names[n - 2..].join(sep)
    )
}

/// Names a substitution line lists in full.
const LISTED: usize = 12;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lists_are_abridged_around_a_count() {
        let names: Vec<String> = (0..20).map(|i| format!("l{i}")).collect();
        assert_eq!(abridged(&names[..3], " + "), "l0 + l1 + l2");
        assert_eq!(abridged(&names[..12], ", ").matches(", ").count(), 11);
        assert_eq!(
            abridged(&names, " + "),
            "l0 + l1 + l2 + … (15 more) + l18 + l19"
        );
    }
}
