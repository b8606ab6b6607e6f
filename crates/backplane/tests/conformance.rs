//! ONNX conformance: every node test of the ONNX backend test suite (shipped in the `onnx`
//! 1.17.0 Python package under `onnx/backend/test/data/node`) runs through the importer and
//! each backend of [`BACKENDS`], and its outputs are compared with the expected ones.
//!
//! The suite is found through `BACKPLANE_ONNX_NODE_TESTS` (the `node` folder), or by asking
//! `.venv/bin/python` or `python3` where `onnx` is installed; without it the test says so and
//! passes (`scripts/test.sh` creates the virtual environment and sets the variable).
//!
//! For each backend, `testdata/conformance/<backend>.txt` lists the cases that pass: the test
//! fails when one of them stops passing and prints cases that newly pass. Regenerate the
//! files with `BACKPLANE_BLESS=1 cargo test -p backplane --test conformance`.
//! `BACKPLANE_CONFORMANCE_FILTER=<substring>` runs only the matching cases, and
//! `BACKPLANE_CONFORMANCE_VERBOSE=1` prints why each case failed.
//!
//! A case is *unsupported* when the importer reports an unsupported operator, attribute or
//! data type, or the optimizer finds no backend for a layer; it *fails* when anything else
//! goes wrong or an output differs. A case whose parameters depend on small integer inputs (a
//! shape, a count) is imported specialized on their values
//! ([`backplane::onnx::import_specialized`]); one whose shapes depend on the values of data
//! (NonZero of an input, a Reshape of a computed shape) runs through a
//! [`backplane::DynamicNetwork`], which plans the part before the first such node, runs the
//! node and plans the rest: no specialization on data. Cases with sequence or optional inputs
//! are still specialized on every value they need.
//!
//! The few cases whose shipped outputs contradict the operator specification are compared
//! with corrected outputs from `testdata/conformance/errata` (see its README).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::onnx::{InputStructure, OnnxError, OnnxValue};
use backplane::{BackendId, DataType, ImportOptions, OptimizerOptions, Runtime, Tensor};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Backends measured against the suite; each has its expected-results file. A new backend
/// joins this list (and gets its file with `BACKPLANE_BLESS=1`).
/// "CpuAcc" runs with CpuRef behind it: CpuAcc claims only what it runs fast, and every
/// layer it claims must pass.
const BACKENDS: &[&str] = &["CpuRef", "CpuAcc"];

/// The preference list a backend of [`BACKENDS`] is measured with.
fn preference(backend: &str) -> Vec<BackendId> {
    let names = match backend {
        "CpuAcc" => vec!["CpuAcc", "CpuRef"],
        other => vec![other],
    };
    names
        .into_iter()
        .map(|b| BackendId::new(b).unwrap())
        .collect()
}

/// Relative and absolute tolerance for float outputs, as the ONNX backend test uses.
const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-7;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Passed,
    Failed(String),
    Unsupported(String),
}

/// Where the node tests are, if anywhere.
fn node_tests_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("BACKPLANE_ONNX_NODE_TESTS") {
        let p = PathBuf::from(dir);
        return p.is_dir().then_some(p);
    }
    let venv = support::repo().join(".venv/bin/python");
    let pythons = [venv.to_string_lossy().into_owned(), "python3".to_string()];
    for py in pythons {
        let out = std::process::Command::new(&py)
            .args([
                "-c",
                "import onnx, os; print(os.path.dirname(onnx.__file__))",
            ])
            .output();
        if let Ok(out) = out {
            if out.status.success() {
                let root = String::from_utf8_lossy(&out.stdout).trim().to_string();
                let p = Path::new(&root).join("backend/test/data/node");
                if p.is_dir() {
                    return Some(p);
                }
            }
        }
    }
    None
}

struct Case {
    name: String,
    op: String,
    model: Vec<u8>,
    /// The network's inputs: sequence and optional inputs flattened into their tensors.
    inputs: Vec<(String, Tensor)>,
    /// The structure of each sequence or optional input.
    structures: Vec<(String, InputStructure)>,
    /// The names of the graph inputs that are tensors.
    tensor_inputs: BTreeSet<String>,
    /// The expected outputs, flattened like the inputs.
    outputs: Vec<(String, Tensor)>,
}

/// How a graph input or output is stored in the test data.
#[derive(Clone, Copy)]
enum Kind {
    Tensor,
    Sequence,
    Optional,
}

/// The op a case tests: the op of a one-node graph, else the test name's stem.
fn op_label(model: &backplane::onnx::proto::ModelProto, name: &str) -> String {
    let nodes = model
        .graph
        .as_ref()
        .map(|g| g.node.as_slice())
        .unwrap_or(&[]);
    if nodes.len() == 1 {
        return nodes[0].op_type.clone().unwrap_or_default();
    }
    let stem = name.trim_start_matches("test_");
    format!("({})", stem.split('_').next().unwrap_or(stem))
}

/// Load a case; `Err` is an outcome (its data cannot be read).
fn load_case(dir: &Path) -> Result<Case, (String, String, Outcome)> {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let model = std::fs::read(dir.join("model.onnx")).unwrap_or_default();
    let proto = backplane::onnx::decode_model(&model);
    let op = match &proto {
        Ok(m) => op_label(m, &name),
        Err(_) => "(undecodable)".to_string(),
    };
    let fail = |o: Outcome| (name.clone(), op.clone(), o);
    let proto = proto.map_err(|e| fail(Outcome::Failed(format!("model: {e}"))))?;
    let graph = proto.graph.as_ref().unwrap();
    // Tensors, sequences and optionals; backplane has no maps or sparse tensors.
    let mut kinds = BTreeMap::new();
    for v in graph.input.iter().chain(&graph.output) {
        use backplane::onnx::proto::type_proto::Value as T;
        let kind = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(T::TensorType(_)) => Kind::Tensor,
            Some(T::SequenceType(_)) => Kind::Sequence,
            Some(T::OptionalType(_)) => Kind::Optional,
            _ => {
                return Err(fail(Outcome::Unsupported(format!(
                    "'{}' is a map or a sparse tensor",
                    v.name.as_deref().unwrap_or("")
                ))))
            }
        };
        kinds.insert(v.name.clone().unwrap_or_default(), kind);
    }
    let inits: BTreeSet<&str> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .collect();
    let input_names: Vec<String> = graph
        .input
        .iter()
        .filter_map(|v| v.name.clone())
        .filter(|n| !inits.contains(n.as_str()))
        .collect();
    let output_names: Vec<String> = graph.output.iter().filter_map(|v| v.name.clone()).collect();
    let data = dir.join("test_data_set_0");
    // Cases whose shipped outputs contradict the specification are compared with corrected
    // outputs kept in the repository (see errata_dir).
    let errata = errata_dir().join(&name);
    let read = |prefix: &str, names: &[String]| -> Result<Vec<(String, OnnxValue)>, Outcome> {
        let mut v = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let corrected = errata.join(format!("{prefix}_{i}.pb"));
            let data = if corrected.is_file() { &errata } else { &data };
            let bytes = std::fs::read(data.join(format!("{prefix}_{i}.pb")))
                .map_err(|e| Outcome::Failed(format!("{prefix}_{i}.pb: {e}")))?;
            let value = match kinds.get(n).copied().unwrap_or(Kind::Tensor) {
                Kind::Tensor => backplane::onnx::decode_tensor(&bytes).map(OnnxValue::Tensor),
                Kind::Sequence => backplane::onnx::decode_sequence(&bytes),
                Kind::Optional => backplane::onnx::decode_optional(&bytes),
            };
            let value = value.map_err(|e| match e {
                OnnxError::UnsupportedDataType { .. } => {
                    Outcome::Unsupported(format!("test data: {e}"))
                }
                e => Outcome::Failed(format!("{prefix}_{i}.pb: {e}")),
            })?;
            v.push((n.clone(), value));
        }
        Ok(v)
    };
    let inputs = read("input", &input_names).map_err(fail)?;
    let outputs = read("output", &output_names).map_err(fail)?;
    let structures = inputs
        .iter()
        .filter(|(_, v)| !matches!(v, OnnxValue::Tensor(_)))
        .map(|(n, v)| (n.clone(), v.structure()))
        .collect();
    let tensor_inputs = inputs
        .iter()
        .filter(|(_, v)| matches!(v, OnnxValue::Tensor(_)))
        .map(|(n, _)| n.clone())
        .collect();
    let flatten = |values: Vec<(String, OnnxValue)>| -> Vec<(String, Tensor)> {
        values.iter().flat_map(|(n, v)| v.flatten(n)).collect()
    };
    Ok(Case {
        name,
        op,
        model,
        inputs: flatten(inputs),
        structures,
        tensor_inputs,
        outputs: flatten(outputs),
    })
}

/// Compare per dtype: floats within tolerance (NaN equals NaN), everything else exactly.
fn compare(got: &Tensor, want: &Tensor) -> Result<(), String> {
    let (rtol, atol) = match want.dtype() {
        DataType::F32 | DataType::F64 => (RTOL, ATOL),
        // f16 keeps 11 significant bits: the same relative tolerance, and an absolute one
        // of the order of its resolution near zero.
        DataType::F16 => (RTOL, 1e-4),
        _ => (0.0, 0.0),
    };
    support::compare(got, want, rtol, atol)
}

fn run_case(runtime: &Runtime, case: &Case, backend: &str) -> Outcome {
    let mut options = ImportOptions::default()
        .with_evaluator(std::sync::Arc::new(backplane::cpu_ref::CpuRefEvaluator));
    for (name, structure) in &case.structures {
        options = options.with_input_structure(name.clone(), structure.clone());
    }
    // Symbolic dimensions take the test data's sizes (networks have static shapes).
    for (name, t) in &case.inputs {
        if case.tensor_inputs.contains(name) {
            options = options.with_input_shape(name.clone(), t.shape().dims().to_vec());
        }
    }
    // Only small integer inputs are bound (see above); with sequence or optional inputs, all.
    let bindable: Vec<(String, Tensor)> = case
        .inputs
        .iter()
        .filter(|(_, t)| !case.structures.is_empty() || backplane::staged::binds_at_import(t))
        .cloned()
        .collect();
    let (network, bound) =
        match backplane::onnx::import_specialized(&case.model, None, &options, &bindable) {
            Ok(v) => v,
            Err(OnnxError::NeedsInputValues { .. }) if case.structures.is_empty() => {
                return run_dynamic(runtime, case, backend, &options)
            }
            Err(e @ (OnnxError::UnsupportedOps(_) | OnnxError::UnsupportedDataType { .. })) => {
                return Outcome::Unsupported(format!("import: {e}"))
            }
            Err(e) => return Outcome::Failed(format!("import: {e}")),
        };
    let ids = preference(backend);
    let optimized = match runtime.optimize(&network, &OptimizerOptions::new(ids)) {
        Ok(o) => o,
        Err(e) => return Outcome::Unsupported(format!("optimize: {e}")),
    };
    let id = match runtime.load_network(optimized) {
        Ok(id) => id,
        Err(e) => return Outcome::Failed(format!("load: {e}")),
    };
    let feed: Vec<(&str, &Tensor)> = case
        .inputs
        .iter()
        .filter(|(n, _)| !bound.contains(n))
        .map(|(n, t)| (n.as_str(), t))
        .collect();
    let result = runtime.execute(id, &feed);
    let _ = runtime.unload_network(id);
    match result {
        Ok(outs) => check_outputs(case, &outs),
        Err(e) => Outcome::Failed(format!("execute: {e}")),
    }
}

/// Cases served through the dynamic path (data-dependent shapes), counted for the report.
static DYNAMIC_CASES: AtomicUsize = AtomicUsize::new(0);

/// A case whose shapes depend on the values of data, through a `DynamicNetwork`.
fn run_dynamic(runtime: &Runtime, case: &Case, backend: &str, options: &ImportOptions) -> Outcome {
    DYNAMIC_CASES.fetch_add(1, Ordering::Relaxed);
    let model = match backplane::onnx::decode_model(&case.model) {
        Ok(m) => m,
        Err(e) => return Outcome::Failed(format!("decode: {e}")),
    };
    let net = backplane::DynamicNetwork::from_model(
        runtime,
        model,
        None,
        options,
        OptimizerOptions::new(preference(backend)),
    );
    let feed: Vec<(&str, &Tensor)> = case
        .inputs
        .iter()
        .filter(|(n, _)| case.tensor_inputs.contains(n))
        .map(|(n, t)| (n.as_str(), t))
        .collect();
    match net.execute(&feed) {
        Ok(outs) => check_outputs(case, &outs),
        Err(backplane::Error::Onnx(
            e @ (OnnxError::UnsupportedOps(_) | OnnxError::UnsupportedDataType { .. }),
        )) => Outcome::Unsupported(format!("dynamic import: {e}")),
        Err(e) => Outcome::Failed(format!("dynamic: {e}")),
    }
}

/// Compare a case's outputs with the expected ones.
fn check_outputs(case: &Case, outs: &[(String, Tensor)]) -> Outcome {
    if outs.len() != case.outputs.len() {
        return Outcome::Failed(format!(
            "{} outputs, expected {}",
            outs.len(),
            case.outputs.len()
        ));
    }
    for ((name, got), (_, want)) in outs.iter().zip(&case.outputs) {
        if let Err(e) = compare(got, want) {
            return Outcome::Failed(format!("output '{name}': {e}"));
        }
    }
    Outcome::Passed
}

/// Run every case on `backend`, in parallel; (name, op, outcome) sorted by name.
fn run_all(runtime: &Runtime, dirs: &[PathBuf], backend: &str) -> Vec<(String, String, Outcome)> {
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(dirs.len()));
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 8));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(dir) = dirs.get(i) else { break };
                let r = match load_case(dir) {
                    Err(r) => r,
                    Ok(case) => {
                        let outcome =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                run_case(runtime, &case, backend)
                            }))
                            .unwrap_or_else(|_| Outcome::Failed("panicked".to_string()));
                        (case.name, case.op, outcome)
                    }
                };
                results.lock().unwrap().push(r);
            });
        }
    });
    let mut v = results.into_inner().unwrap();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Corrected expected outputs (`<case>/output_<i>.pb`) for the cases of onnx 1.17.0 whose
/// shipped outputs contradict the operator specification; made and explained by
/// `scripts/gen_conformance_errata.py` (QLinearMatMul int8 saturation, AveragePool with
/// ceil_mode and count_include_pad).
fn errata_dir() -> PathBuf {
    support::repo().join("testdata/conformance/errata")
}

fn expected_file(backend: &str) -> PathBuf {
    support::repo()
        .join("testdata/conformance")
        .join(format!("{backend}.txt"))
}

fn read_expected(backend: &str) -> BTreeSet<String> {
    std::fs::read_to_string(expected_file(backend))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[test]
fn onnx_node_tests() {
    let Some(root) = node_tests_dir() else {
        eprintln!(
            "conformance: skipped: the ONNX node tests were not found (set \
             BACKPLANE_ONNX_NODE_TESTS to onnx/backend/test/data/node of onnx 1.17.0, or run \
             scripts/test.sh, which installs it in .venv)"
        );
        return;
    };
    let filter = std::env::var("BACKPLANE_CONFORMANCE_FILTER").unwrap_or_default();
    let verbose = std::env::var_os("BACKPLANE_CONFORMANCE_VERBOSE").is_some();
    let bless = std::env::var_os("BACKPLANE_BLESS").is_some();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("model.onnx").is_file())
        .filter(|p| p.to_string_lossy().contains(&filter))
        .collect();
    dirs.sort();
    let runtime = backplane::RuntimeBuilder::new().build().unwrap();
    let mut problems = Vec::new();
    let mut summary = Vec::new();
    for backend in BACKENDS {
        let results = run_all(&runtime, &dirs, backend);
        // Per op: passed, failed, unsupported.
        let mut per_op: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
        for (name, op, outcome) in &results {
            let e = per_op.entry(op.as_str()).or_default();
            match outcome {
                Outcome::Passed => e[0] += 1,
                Outcome::Failed(why) => {
                    e[1] += 1;
                    if verbose {
                        println!("{backend} FAIL {name}: {why}");
                    }
                }
                Outcome::Unsupported(why) => {
                    e[2] += 1;
                    if verbose {
                        println!("{backend} UNSUPPORTED {name}: {}", first_line(why));
                    }
                }
            }
        }
        println!("\n{backend}: per op (passed / failed / unsupported)");
        for (op, [p, f, u]) in &per_op {
            println!("  {op:<32} {p:>4} {f:>4} {u:>4}");
        }
        let passed: BTreeSet<String> = results
            .iter()
            .filter(|r| r.2 == Outcome::Passed)
            .map(|r| r.0.clone())
            .collect();
        let ran: BTreeSet<&str> = results.iter().map(|r| r.0.as_str()).collect();
        let expected = read_expected(backend);
        let regressed: Vec<&String> = expected
            .iter()
            .filter(|n| ran.contains(n.as_str()) && !passed.contains(*n))
            .collect();
        let new: Vec<&String> = passed.iter().filter(|n| !expected.contains(*n)).collect();
        if bless && filter.is_empty() {
            let mut text = format!(
                "# ONNX node tests (onnx 1.17.0) that pass on {backend}; one case per line.\n\
                 # Regenerate: BACKPLANE_BLESS=1 cargo test -p backplane --test conformance\n"
            );
            for n in &passed {
                text.push_str(n);
                text.push('\n');
            }
            let path = expected_file(backend);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            println!(
                "{backend}: wrote {} passing cases to {}",
                passed.len(),
                path.display()
            );
        } else {
            if !new.is_empty() {
                println!(
                    "\n{backend}: {} cases pass that {} does not list (add them: \
                     BACKPLANE_BLESS=1 cargo test -p backplane --test conformance):",
                    new.len(),
                    expected_file(backend).display()
                );
                for n in &new {
                    println!("  {n}");
                }
            }
            for n in &regressed {
                let why = results
                    .iter()
                    .find(|r| &&r.0 == n)
                    .map(|r| format!("{:?}", r.2))
                    .unwrap_or_default();
                problems.push(format!("{backend}: {n} no longer passes: {why}"));
            }
        }
        let [p, f, u] = per_op.values().fold([0; 3], |acc, v| {
            [acc[0] + v[0], acc[1] + v[1], acc[2] + v[2]]
        });
        summary.push(format!(
            "conformance: {p} passed, {f} failed, {u} unsupported ({}); {} cases through the \
             dynamic path (data-dependent shapes)",
            preference(backend)
                .iter()
                .map(|b| b.as_str())
                .collect::<Vec<_>>()
                .join(" then "),
            DYNAMIC_CASES.swap(0, Ordering::Relaxed)
        ));
    }
    for p in &problems {
        println!("REGRESSION {p}");
    }
    for s in &summary {
        println!("{s}");
    }
    assert!(
        problems.is_empty(),
        "{} listed cases no longer pass:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

fn first_line(s: &str) -> String {
    s.lines().collect::<Vec<_>>().join(" | ")
}
