//! `run --input-shapes` and `bench --input-shapes`: one loaded model across several input
//! shapes, through a [`DynamicNetwork`] (one plan per shape set from its cache), reporting per
//! shape and the plan cache's counts.

use crate::bench::{ms, peak_memory_line, progress_bar, throughput_line, BenchArgs, Stats};
use crate::session::{
    backend_summary, configure, generate, optimizer_options, parse_dims, read_inputs, split_pair,
    CommonArgs, ModelFile, ModelFormat,
};
use crate::CliError;
use backplane::onnx::{Dim, OnnxValue};
use backplane::{DynamicNetwork, ImportOptions, Tensor, TensorInfo};
use std::path::Path;
use std::time::{Duration, Instant};

/// One `--input-shapes` value: the shape of each named input.
pub type ShapeSet = Vec<(String, Vec<usize>)>;

/// Parse every `--input-shapes NAME=DIMS[;NAME=DIMS...]`.
pub fn parse_shape_sets(args: &[String]) -> Result<Vec<ShapeSet>, CliError> {
    args.iter()
        .map(|set| {
            set.split(';')
                .filter(|part| !part.trim().is_empty())
                .map(|part| {
                    let (name, dims) = split_pair(part.trim(), "--input-shapes")?;
                    Ok((name.to_string(), parse_dims(dims, "--input-shapes")?))
                })
                .collect::<Result<ShapeSet, CliError>>()
        })
        .collect()
}

/// "input_ids=1x7" or "a=1x3;b=2".
pub fn describe(set: &ShapeSet) -> String {
    set.iter()
        .map(|(n, d)| {
            let dims: Vec<String> = d.iter().map(usize::to_string).collect();
            format!("{n}={}", dims.join("x"))
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// The ONNX model behind `--input-shapes` (TFLite models have static shapes), moved out of
/// the opened file rather than copied.
pub fn onnx_proto(
    format: ModelFormat,
    path: &Path,
) -> Result<backplane::onnx::proto::ModelProto, CliError> {
    match format {
        ModelFormat::Onnx(proto) => Ok(*proto),
        ModelFormat::Tflite(_) => Err(CliError::usage(format!(
            "--input-shapes: {} is a TFLite model, whose shapes are static",
            path.display()
        ))),
    }
}

/// The inputs of each shape set: a tensor given with `--input` as it is, the others generated
/// (`--generate`, random by default) with the set's shape, or the declared one when it is
/// fixed.
pub fn inputs_for(
    model: &ModelFile,
    common: &CommonArgs,
    sets: &[ShapeSet],
) -> Result<Vec<Vec<(String, Tensor)>>, CliError> {
    let declared = backplane::onnx::inspect_file(&model.path)?;
    let given = read_inputs(&common.inputs, &model.path, &model.signature)?;
    let kind = common.generate.as_deref().unwrap_or("random");
    sets.iter()
        .map(|set| {
            for (name, _) in set {
                if !declared.iter().any(|d| &d.name == name) {
                    return Err(CliError::usage(format!(
                        "--input-shapes: '{name}' is not an input of {}",
                        model.path.display()
                    )));
                }
            }
            declared
                .iter()
                .enumerate()
                .map(|(i, input)| {
                    if let Some((_, value)) = given.iter().find(|(n, _)| n == &input.name) {
                        return match value {
                            OnnxValue::Tensor(t) => Ok((input.name.clone(), t.clone())),
                            _ => Err(CliError::usage(format!(
                                "--input-shapes takes tensor inputs only; '{}' is not one",
                                input.name
                            ))),
                        };
                    }
                    let dims = match set.iter().find(|(n, _)| n == &input.name) {
                        Some((_, dims)) => dims.clone(),
                        None => fixed_dims(&input.dims).ok_or_else(|| {
                            CliError::usage(format!(
                                "input '{}' has symbolic dimensions; give its shape in every \
                                 --input-shapes, or its value with --input",
                                input.name
                            ))
                        })?,
                    };
                    let info = TensorInfo::new(input.dtype, dims);
                    let seed = common.seed.wrapping_add(i as u64);
                    Ok((input.name.clone(), generate(&info, kind, seed)?))
                })
                .collect()
        })
        .collect()
}

/// The declared dimensions when all are numbers.
fn fixed_dims(dims: &[Dim]) -> Option<Vec<usize>> {
    dims.iter()
        .map(|d| match d {
            Dim::Fixed(v) => Some(*v),
            Dim::Symbolic(_) => None,
        })
        .collect()
}

pub fn named(inputs: &[(String, Tensor)]) -> Vec<(&str, &Tensor)> {
    inputs.iter().map(|(n, t)| (n.as_str(), t)).collect()
}

/// `run` with `--input-shapes`: each set executed `iterations` times in turn on one network;
/// prints each set's outputs (name, shape, mean), its median latency and the cache's counts.
pub fn run_shapes(
    model: &Path,
    common: &CommonArgs,
    shape_sets: &[String],
    iterations: usize,
) -> Result<(), CliError> {
    configure(common);
    let sets = parse_shape_sets(shape_sets)?;
    let model = ModelFile::open(model)?;
    let inputs = inputs_for(&model, common, &sets)?;
    let runtime = crate::backends::runtime()?;
    let optimizer = optimizer_options(&common.backends, &common.layer_backends)?;
    let net = DynamicNetwork::from_model(
        &runtime,
        onnx_proto(model.format, &model.path)?,
        Some(backplane::onnx::model_base_dir(&model.path)),
        &ImportOptions::default(),
        optimizer,
    )
    .with_capacity(sets.len().max(1));
    out!("model: {}", model.path.display());
    for (set, given) in sets.iter().zip(&inputs) {
        let mut times = Vec::with_capacity(iterations.min(1 << 16));
        let mut outputs = Vec::new();
        for _ in 0..iterations {
            let t = Instant::now();
            outputs = net.execute(&named(given))?;
            times.push(t.elapsed());
        }
        out!("shape {}:", describe(set));
        for (name, t) in &outputs {
            let values = t.to_f64_vec();
            let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
            out!(
                "  {name}: {} {:?}, mean {mean:.6}",
                t.dtype(),
                t.shape().dims()
            );
        }
        if let Some(s) = Stats::of(&mut times) {
            out!(
                "  latency: median {:.3} ms over {} executions",
                ms(s.median),
                s.count
            );
        }
    }
    out!("plan cache: {}", net.stats());
    tracing::info!("runtime plan caches: {}", runtime.plan_cache_stats());
    Ok(())
}

/// `bench` with `--input-shapes`: each set's plan is built first (a cache miss each), then
/// the warm-up and timed executions cycle through the sets in order, `--iterations` timed
/// executions per set.
pub fn bench_shapes(args: &BenchArgs) -> Result<(), CliError> {
    let common = &args.model.common;
    if args.profile.is_some() {
        return Err(CliError::usage(
            "--profile times one shape; it cannot be combined with --input-shapes",
        ));
    }
    configure(common);
    let sets = parse_shape_sets(&args.shape_sets)?;
    let model = ModelFile::open_with(&args.model.model, common.int8_requant())?;
    let inputs = inputs_for(&model, common, &sets)?;
    // CpuAcc kept at hand to report how many constant operands its plans packed and shared.
    let acc = backplane::cpu_acc::CpuAccBackend::new();
    let runtime = crate::backends::runtime_with_cpu_acc(&acc)?;
    let optimizer = optimizer_options(&common.backends, &common.layer_backends)?;
    let capacity = args.plan_cache.unwrap_or(sets.len().max(1));
    let net = DynamicNetwork::from_model(
        &runtime,
        onnx_proto(model.format, &model.path)?,
        Some(backplane::onnx::model_base_dir(&model.path)),
        &ImportOptions::default(),
        optimizer,
    )
    .with_capacity(capacity)
    .with_replay(!args.no_replay);
    let mut plans = Vec::with_capacity(sets.len());
    for set in &inputs {
        let started = Instant::now();
        let (plan, hit) = net.plan(&named(set))?;
        plans.push((plan, started.elapsed(), hit));
    }
    // Every set warms up `--warmup` times, and all of them together for `--warmup-time`.
    let warm_start = Instant::now();
    let mut warm = 0usize;
    while warm < args.warmup.saturating_mul(sets.len())
        || (warm_start.elapsed() < args.warmup_time && (warm as u64) < crate::run::MAX_ITERATIONS)
    {
        net.execute(&named(&inputs[warm % sets.len()]))?;
        warm += 1;
    }
    let warm_time = warm_start.elapsed();
    // `--iterations` executions per set, cycling through the sets; `--time` stops them all.
    let rounds = args.iterations;
    let bar = progress_bar(args.quiet, rounds.saturating_mul(sets.len()));
    let started = Instant::now();
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); sets.len()];
    'rounds: for _ in 0..rounds {
        for (k, set) in inputs.iter().enumerate() {
            let t = Instant::now();
            net.execute(&named(set))?;
            times[k].push(t.elapsed());
            bar.inc(1);
            if args.time.is_some_and(|b| started.elapsed() >= b) {
                break 'rounds;
            }
        }
    }
    bar.finish_and_clear();
    let total = started.elapsed();
    out!("model: {}", model.path.display());
    if warm > 0 {
        out!(
            "warm-up: {warm} executions in {:.2} s (cycling the shape sets)",
            warm_time.as_secs_f64()
        );
    }
    for (k, set) in sets.iter().enumerate() {
        let (plan, built, hit) = &plans[k];
        out!("shape {}:", describe(set));
        let backends = plan
            .optimized
            .as_ref()
            .map(|o| backend_summary(&o.layer_counts()))
            .unwrap_or_else(|| "none before the split".into());
        if *hit {
            out!("  plan from the cache (a hit: an earlier set's plan); backends: {backends}");
        } else {
            out!(
                "  plan built in {:.1} ms ({}{}); backends: {backends}",
                ms(*built),
                plan.timings,
                if plan.reshaped {
                    "; optimization replayed"
                } else {
                    ""
                },
            );
        }
        if !plan.symbols.is_empty() {
            out!("  symbols: {}", plan.symbols);
        }
        if let Some(split) = &plan.split {
            out!(
                "  split at node '{}' ({}): its output shapes need run-time values",
                split.label,
                split.op_type
            );
        }
        if let Some(line) = crate::session::bound_summary(&plan.bound) {
            out!("  {line}");
        }
        match Stats::of(&mut times[k]) {
            Some(s) => out!("  {s}"),
            None => out!("  not timed (--time ran out before this set's turn)"),
        }
    }
    out!("plan cache: {}", net.stats());
    if let Some(answers) = net.support_answers() {
        out!(
            "support queries: {} asked, {} replayed ({} answers kept for every shape)",
            answers.asked(),
            answers.replayed(),
            answers.len()
        );
    }
    let stats = net.stats();
    out!(
        "plan structure: {} plan{} reshaped (an earlier plan's optimization replayed); {} of {} \
         optimizer runs had an earlier plan's structure (not replayed), {} of them its \
         decisions",
        stats.plans_reshaped,
        if stats.plans_reshaped == 1 { "" } else { "s" },
        stats.same_structure,
        stats.optimizer_runs,
        stats.same_decisions
    );
    let packing = acc.packing_stats();
    out!(
        "weights packed {}, reused {} (CpuAcc's packed constant operands: each packed once, \
         shared by every plan that prepares it alike)",
        packing.packed,
        packing.reused
    );
    out!("runtime plan caches: {}", runtime.plan_cache_stats());
    let count: usize = times.iter().map(Vec::len).sum();
    out!("{}", throughput_line(count, total));
    if let Some(line) = peak_memory_line() {
        out!("{line}");
    }
    Ok(())
}
