//! The ONNX backend node tests (the `onnx` Python package's `backend/test/data/node`, one
//! folder per case with `model.onnx` and `test_data_set_0/{input,output}_K.pb`): each case is
//! imported (specialized on its inputs where the model needs their values), run with the
//! backend under test first and CpuRef behind it, and compared with the expected outputs at
//! the ONNX backend test's tolerances. Only cases in which the backend runs a layer count.

use crate::exec::{run_network, Run};
use crate::report::{Outcome, Report};
use backplane::compare::{compare, Mismatch};
use backplane::onnx::{ModelSignature, OnnxError};
use backplane::{BackendId, DataType, ImportOptions, Runtime, Tensor};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The suite's name in reports.
pub const SUITE: &str = "onnx node tests";

/// Cases of onnx 1.17.0 whose shipped data contradict the operator specification; without a
/// folder of corrected data (`testdata/conformance/errata` in the backplane repository) they
/// are not run.
pub const ERRATA: &[&str] = &[
    "test_adam_multiple",
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
    "test_cast_BFLOAT16_to_FLOAT",
    "test_cast_FLOAT_to_BFLOAT16",
    "test_castlike_BFLOAT16_to_FLOAT",
    "test_castlike_BFLOAT16_to_FLOAT_expanded",
    "test_castlike_FLOAT_to_BFLOAT16",
    "test_castlike_FLOAT_to_BFLOAT16_expanded",
    "test_dft_inverse",
    "test_dft_inverse_opset19",
    "test_qlinearmatmul_2D_int8_float16",
    "test_qlinearmatmul_2D_int8_float32",
    "test_qlinearmatmul_3D_int8_float16",
    "test_qlinearmatmul_3D_int8_float32",
    "test_roialign_mode_max",
];

/// Where the node tests and the corrected data are.
#[derive(Debug, Clone)]
pub struct NodeTests {
    /// The `node` folder.
    pub dir: PathBuf,
    /// A folder with corrected `input_K.pb` / `output_K.pb` per case named in [`ERRATA`].
    pub errata: Option<PathBuf>,
    /// Run only cases whose name contains this.
    pub filter: String,
}

/// Run every case on `backend` (CpuRef behind it) into `report`.
pub fn run(runtime: &Runtime, backend: &BackendId, tests: &NodeTests, report: &mut Report) {
    let mut dirs: Vec<PathBuf> = match std::fs::read_dir(&tests.dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("model.onnx").is_file())
            .filter(|p| p.to_string_lossy().contains(&tests.filter))
            .collect(),
        Err(e) => {
            report
                .skipped_suites
                .push((SUITE.into(), format!("{}: {e}", tests.dir.display())));
            return;
        }
    };
    dirs.sort();
    let cpu_ref = BackendId::new("CpuRef").ok();
    let preference: Vec<BackendId> = std::iter::once(backend.clone())
        .chain(cpu_ref.filter(|r| r != backend))
        .collect();
    for dir in dirs {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (op, outcome) = run_case(runtime, &dir, &name, tests, &preference);
        report.record(SUITE, &op, &name, outcome);
    }
}

/// The op a case tests: the op of a one-node graph, else the test name's stem.
fn op_label(model: &backplane::onnx::proto::ModelProto, name: &str) -> String {
    let nodes = model
        .graph
        .as_ref()
        .map(|g| g.node.as_slice())
        .unwrap_or(&[]);
    if let [node] = nodes {
        return node.op_type.clone().unwrap_or_default();
    }
    let stem = name.trim_start_matches("test_");
    format!("({})", stem.split('_').next().unwrap_or(stem))
}

fn run_case(
    runtime: &Runtime,
    dir: &Path,
    name: &str,
    tests: &NodeTests,
    preference: &[BackendId],
) -> (String, Outcome) {
    let model = match backplane::onnx::decode_model_file(&dir.join("model.onnx")) {
        Ok(m) => m,
        Err(e) => return ("?".into(), Outcome::Skipped(e.to_string())),
    };
    let op = op_label(&model, name);
    let errata = if ERRATA.contains(&name) {
        match &tests.errata {
            Some(e) => Some(e.join(name)),
            None => return (op, Outcome::Skipped("known erratum".into())),
        }
    } else {
        None
    };
    let signature = ModelSignature::of(&model);
    let data = dir.join("test_data_set_0");
    let read = |prefix: &str, k: usize, ty: &backplane::onnx::ValueType| {
        let file = format!("{prefix}_{k}.pb");
        let path = errata
            .as_ref()
            .map(|e| e.join(&file))
            .filter(|p| p.is_file())
            .unwrap_or_else(|| data.join(&file));
        std::fs::read(&path)
            .map_err(|e| format!("{}: {e}", path.display()))
            .and_then(|b| ty.decode(&b).map_err(|e| e.to_string()))
    };
    let mut inputs = Vec::new();
    for (k, v) in signature.inputs.iter().enumerate() {
        match read("input", k, &v.ty) {
            Ok(value) => inputs.push((v.name.clone(), value)),
            Err(e) => return (op, Outcome::Skipped(e)),
        }
    }
    let mut expected = Vec::new();
    for (k, v) in signature.outputs.iter().enumerate() {
        match read("output", k, &v.ty) {
            Ok(value) => expected.extend(value.flatten(&v.name)),
            Err(e) => return (op, Outcome::Skipped(e)),
        }
    }
    let (options, flat) = ImportOptions::default()
        .with_evaluator(Arc::new(backplane::cpu_ref::CpuRefEvaluator))
        .with_input_values_shaped(&inputs);
    let base = dir.to_path_buf();
    let (network, bound) =
        match backplane::onnx::import_model_specialized(model, Some(&base), &options, &flat) {
            Ok(v) => v,
            // The importer is not the backend under test.
            Err(e @ (OnnxError::UnsupportedOps(_) | OnnxError::UnsupportedDataType { .. })) => {
                return (op, Outcome::Skipped(e.to_string()))
            }
            Err(e) => return (op, Outcome::Skipped(format!("import: {e}"))),
        };
    let feed: Vec<(String, Tensor)> = flat
        .into_iter()
        .filter(|(n, _)| !bound.contains(n))
        .collect();
    let outcome = match run_network(runtime, &network, preference, &feed) {
        Run::Refused(why) => Outcome::Refused(why),
        Run::Ran { outputs, .. } => match outputs {
            Err(why) => Outcome::Failed { why, worst: None },
            Ok(got) => compare_node_outputs(&got, &expected),
        },
    };
    (op, outcome)
}

/// Compare by name with the node tests' tolerances (rtol 1e-3, atol 1e-7; f16 atol 1e-4).
fn compare_node_outputs(got: &[(String, Tensor)], want: &[(String, Tensor)]) -> Outcome {
    if got.len() != want.len() {
        return Outcome::Failed {
            why: format!("{} outputs, expected {}", got.len(), want.len()),
            worst: None,
        };
    }
    for (name, w) in want {
        let Some((_, g)) = got.iter().find(|(n, _)| n == name) else {
            return Outcome::Failed {
                why: format!("no output '{name}'"),
                worst: None,
            };
        };
        let atol = if w.dtype() == DataType::F16 {
            1e-4
        } else {
            1e-7
        };
        if let Err(Mismatch {
            message: why,
            worst,
            ..
        }) = compare(g, w, 1e-3, atol)
        {
            return Outcome::Failed {
                why: format!("output '{name}': {why}"),
                worst: Some(worst),
            };
        }
    }
    Outcome::Passed
}
