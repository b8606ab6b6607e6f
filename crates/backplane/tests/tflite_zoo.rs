//! The TFLite models users bring (scripts/gen_tflite_zoo.py): trained models from the
//! mediapipe wheel and Keras applications in float32 and int8, on CpuRef alone and on CpuAcc
//! with CpuRef behind it, against the LiteRT interpreter's outputs: f32 within rtol 1e-4
//! (atol 1e-5), or within twice LiteRT's own spread, or (a faster backend) at most twice as
//! far from CpuRef as LiteRT is ([`agreement`]); integers at most one quantum off (the count
//! of elements off is printed).
//! The small cases are committed (testdata/tflite/zoo); the rest are built on demand.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::{BackendId, DataType, OptimizerOptions, Runtime, Tensor};
use std::path::Path;
use support::{read_npys, repo, tflite_cases};

const BACKENDS: [&[&str]; 2] = [&["CpuRef"], &["CpuAcc", "CpuRef"]];

/// Import (int8 layers requantized as the kernels LiteRT runs the model on), optimize, load
/// and run the case on `backends`; an error as text.
fn run(rt: &Runtime, dir: &Path, backends: &[&str]) -> Result<Vec<Tensor>, String> {
    let options = backplane::tflite::ImportOptions {
        int8_requant: backplane::tflite::Int8Requant::Litert,
        ..Default::default()
    };
    let network = backplane::load_tflite_with(&dir.join("model.tflite"), &options)
        .map_err(|e| format!("import: {e}"))?;
    let prefs = backends
        .iter()
        .map(|b| BackendId::new(*b).unwrap())
        .collect();
    let opt = rt
        .optimize(&network, &OptimizerOptions::new(prefs))
        .map_err(|e| format!("optimize: {e}"))?;
    let id = rt.load_network(opt).map_err(|e| format!("load: {e}"))?;
    let inputs = read_npys(dir, "input");
    let names: Vec<String> = network
        .inputs()
        .iter()
        .map(|&t| network.tensor(t).name.clone())
        .collect();
    assert_eq!(names.len(), inputs.len(), "{}", dir.display());
    let named: Vec<(&str, &Tensor)> = names.iter().map(|n| n.as_str()).zip(&inputs).collect();
    let out = rt.execute(id, &named).map_err(|e| format!("execute: {e}"));
    rt.unload_network(id).ok();
    Ok(out?.into_iter().map(|(_, t)| t).collect())
}

/// How far a run's outputs are from LiteRT's.
#[derive(Debug, Default)]
struct Agreement {
    /// The largest |got - want| of the f32 outputs.
    max_abs: f64,
    /// The largest |got - want| / (atol + rtol·|want|) of the f32 outputs: at most 1 passes.
    worst_ratio: f64,
    /// Whether every f32 output is within the tolerance, or within twice LiteRT's own spread.
    float_ok: bool,
    /// The largest |got - want| / LiteRT's spread of an f32 output outside the tolerance.
    spread_ratio: f64,
    /// For an f32 output outside the tolerance and the spread: |got - CpuRef| / |LiteRT -
    /// CpuRef| (largest differences), when CpuRef's run is the yardstick.
    accuracy_ratio: f64,
    /// Integer elements off, and the largest difference in quanta.
    int_off: usize,
    int_max: f64,
    int_elements: usize,
    f32_elements: usize,
}

impl Agreement {
    fn passes(&self) -> bool {
        self.float_ok && self.int_max <= 1.0
    }
}

const RTOL: f64 = 1e-4;
const ATOL: f64 = 1e-5;

/// LiteRT's own spread per output (`litert_spread.txt`, written by gen_tflite_zoo.py): the
/// largest difference between its default kernels (XNNPACK) and its reference kernels on
/// the case's input. Where an output cancels large terms, LiteRT disagrees with itself by
/// more than rtol 1e-4; a difference within twice its spread is accepted there.
fn spreads(dir: &Path) -> Vec<f64> {
    std::fs::read_to_string(dir.join("litert_spread.txt"))
        .map(|s| s.lines().map(|l| l.trim().parse().unwrap()).collect())
        .unwrap_or_default()
}

/// The largest |a - b| over two tensors' elements, in f64.
fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    a.to_f64_vec()
        .iter()
        .zip(b.to_f64_vec())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// Compare with LiteRT's outputs (types and shapes must agree). `yardstick`: CpuRef's
/// outputs of the same case, for the accuracy rule of a faster backend's f32 outputs.
///
/// The accuracy rule: CpuRef sums every convolution and product in f64 and rounds each
/// layer's result once, so it is the closest to the exact network of all the runs. Where a
/// faster backend's output is outside both the tolerance and twice LiteRT's spread, it still
/// passes if it is at most twice as far from CpuRef as LiteRT's default kernels are: as
/// accurate as LiteRT, measured against the most accurate run, in a different summation
/// order that the network amplifies.
fn agreement(
    dir: &Path,
    got: &[Tensor],
    yardstick: Option<&[Tensor]>,
) -> Result<Agreement, String> {
    let want = read_npys(dir, "output");
    if got.len() != want.len() {
        return Err(format!("{} outputs, LiteRT {}", got.len(), want.len()));
    }
    let spread = spreads(dir);
    let mut a = Agreement {
        float_ok: true,
        ..Agreement::default()
    };
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        if g.info().dtype != w.info().dtype || g.shape() != w.shape() {
            return Err(format!(
                "output {k} is {} {:?}, LiteRT's {} {:?}",
                g.info().dtype,
                g.shape().dims(),
                w.info().dtype,
                w.shape().dims()
            ));
        }
        let float = w.dtype() == DataType::F32;
        if float {
            a.f32_elements += w.shape().elements();
        } else {
            a.int_elements += w.shape().elements();
        }
        let (mut max_abs, mut ratio) = (0.0f64, 0.0f64);
        for (x, y) in g.to_f64_vec().iter().zip(w.to_f64_vec()) {
            let d = (x - y).abs();
            if !d.is_finite() && x.to_bits() != y.to_bits() {
                return Err(format!("output {k}: {x} where LiteRT has {y}"));
            }
            if float {
                max_abs = max_abs.max(d);
                ratio = ratio.max(d / (ATOL + RTOL * y.abs()));
            } else {
                a.int_off += usize::from(d > 0.0);
                a.int_max = a.int_max.max(d);
            }
        }
        a.max_abs = a.max_abs.max(max_abs);
        a.worst_ratio = a.worst_ratio.max(ratio);
        if ratio > 1.0 {
            let s = spread.get(k).copied().unwrap_or(0.0);
            a.spread_ratio = a
                .spread_ratio
                .max(if s > 0.0 { max_abs / s } else { f64::INFINITY });
            if max_abs > 2.0 * s {
                let accurate = yardstick.and_then(|r| r.get(k)).is_some_and(|r| {
                    let (ours, litert) = (max_diff(g, r), max_diff(w, r));
                    let q = if litert > 0.0 {
                        ours / litert
                    } else {
                        f64::INFINITY
                    };
                    a.accuracy_ratio = a.accuracy_ratio.max(q);
                    ours <= 2.0 * litert
                });
                a.float_ok &= accurate;
            }
        }
    }
    Ok(a)
}

/// One row of the comparison per backend list: the agreement, or why it did not run.
/// CpuRef runs first; its outputs, if they agree with LiteRT, are the yardstick of the
/// accuracy rule for the lists after it.
fn check_case(rt: &Runtime, dir: &Path) -> Vec<(String, Result<Agreement, String>)> {
    let mut yardstick: Option<Vec<Tensor>> = None;
    let mut rows = Vec::new();
    for (i, b) in BACKENDS.iter().enumerate() {
        let r = run(rt, dir, b).and_then(|got| {
            let a = agreement(dir, &got, yardstick.as_deref());
            if i == 0 && a.as_ref().is_ok_and(Agreement::passes) {
                yardstick = Some(got);
            }
            a
        });
        rows.push((b.join(","), r));
    }
    rows
}

fn describe(r: &Result<Agreement, String>) -> String {
    match r {
        Ok(a) => {
            let mut parts = Vec::new();
            if a.int_elements > 0 {
                parts.push(format!(
                    "{} of {} integer elements off (at most {} quanta)",
                    a.int_off, a.int_elements, a.int_max
                ));
            }
            if a.f32_elements > 0 {
                parts.push(format!(
                    "f32 max |diff| {:.2e} ({:.3} of the tolerance)",
                    a.max_abs, a.worst_ratio
                ));
                if a.spread_ratio > 0.0 {
                    parts.push(format!("{:.2} of LiteRT's own spread", a.spread_ratio));
                }
                if a.accuracy_ratio > 0.0 {
                    parts.push(format!(
                        "{:.2} of LiteRT's distance to CpuRef",
                        a.accuracy_ratio
                    ));
                }
            }
            parts.join("; ")
        }
        Err(e) => e.lines().map(str::trim).collect::<Vec<_>>().join(" "),
    }
}

/// The accuracy rule passes an output at most twice as far from CpuRef as LiteRT's, and
/// fails one further away, where the tolerance and LiteRT's spread both fail it; without
/// CpuRef's run there is no rule to pass by.
#[test]
fn accuracy_rule_measures_both_runs_against_cpu_ref() {
    let dir = std::env::temp_dir().join(format!("bp_zoo_rule_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let t = |v: f32| Tensor::from_vec(vec![1usize, 2], vec![1.0f32, v]).unwrap();
    // LiteRT is 0.01 from CpuRef, and disagrees with itself by 0.001.
    backplane::npy::write_file(&dir.join("output_0.npy"), &t(1.01)).unwrap();
    std::fs::write(dir.join("litert_spread.txt"), "0.001\n").unwrap();
    let cpu_ref = [t(1.0)];
    // 0.025 from LiteRT, 0.015 from CpuRef: 1.5 times LiteRT's distance.
    let near = agreement(&dir, &[t(0.985)], Some(&cpu_ref)).unwrap();
    // 0.04 from LiteRT, 0.03 from CpuRef: 3 times.
    let far = agreement(&dir, &[t(0.97)], Some(&cpu_ref)).unwrap();
    let alone = agreement(&dir, &[t(0.985)], None).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert!(near.passes(), "{near:?}");
    assert!((near.accuracy_ratio - 1.5).abs() < 1e-3, "{near:?}");
    assert!(!far.passes(), "{far:?}");
    assert!(!alone.passes(), "{alone:?}");
}

/// The committed cases (small trained mediapipe models and Keras heads) match LiteRT.
#[test]
fn committed_zoo_models_match_litert_on_cpu_ref_and_cpu_acc() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let dirs = tflite_cases(&repo().join("testdata/tflite/zoo"));
    assert!(
        dirs.iter().any(|d| d.to_string_lossy().contains("mp_")),
        "expected a trained mediapipe model among {dirs:?}"
    );
    assert!(
        dirs.len() >= 3,
        "expected the committed zoo cases, found {dirs:?}"
    );
    for dir in dirs {
        let case = dir.file_name().unwrap().to_string_lossy().into_owned();
        for (backends, r) in check_case(&rt, &dir) {
            println!("{case} on {backends}: {}", describe(&r));
            let a = r.unwrap_or_else(|e| panic!("{case} on {backends}: {e}"));
            assert!(a.passes(), "{case} on {backends}: {}", describe(&Ok(a)));
        }
    }
}

/// Trained models store their weights in f16 behind a DEQUANTIZE: the importer folds them
/// into f32 constants, so the convolutions read constant weights and no DEQUANTIZE remains.
#[test]
fn f16_weights_behind_dequantize_become_constants() {
    let path = repo().join("testdata/tflite/zoo/mp_face_detection_short_range/model.tflite");
    let network = backplane::load_tflite(&path).unwrap();
    let ops: Vec<&str> = network.layers().iter().map(|l| l.op.name()).collect();
    assert!(ops.contains(&"Conv"), "{ops:?}");
    assert!(
        !ops.contains(&"DequantizeLinear") && !ops.contains(&"Cast"),
        "{ops:?}"
    );
    assert!(
        network
            .layers()
            .iter()
            .filter(|l| l.op.name() == "Conv")
            .all(|l| network.tensor(l.inputs[1]).constant().is_some()),
        "every convolution's weights are constants"
    );
}

/// Keras's squeeze-excite reshape computes its target from SHAPE (a constant: shapes are
/// static) through STRIDED_SLICE and PACK: the facade's import computes that arithmetic with
/// CpuRef, so no Slice, Unsqueeze or Concat runs at every execution and each Reshape has a
/// constant target; without an evaluator the layers stay (and both imports agree).
#[test]
fn shape_arithmetic_on_constants_is_computed_at_import() {
    for case in ["efficientnet_b0_head_f32", "efficientnet_b0_head_int8"] {
        let path = repo().join(format!("testdata/tflite/zoo/{case}/model.tflite"));
        let folded = backplane::load_tflite(&path).unwrap();
        let plain = backplane::tflite::import_file(&path, &Default::default()).unwrap();
        let count = |net: &backplane::Network, names: &[&str]| {
            net.layers()
                .iter()
                .filter(|l| names.contains(&l.op.name()))
                .count()
        };
        let arithmetic = ["Slice", "Unsqueeze", "Concat"];
        assert!(count(&plain, &arithmetic) > 0, "{case}: nothing to fold");
        assert_eq!(count(&folded, &arithmetic), 0, "{case}");
        assert!(folded
            .layers()
            .iter()
            .filter(|l| l.op.name() == "Reshape")
            .all(|l| l
                .inputs
                .iter()
                .skip(1)
                .all(|&t| folded.tensor(t).constant().is_some())));
        assert!(folded.layers().len() < plain.layers().len(), "{case}");
    }
}

/// Every model `scripts/gen_tflite_zoo.py` builds, from the folder named by
/// `BACKPLANE_TFLITE_ZOO`; prints one line per model and backend list (the docs' table)
/// and fails if any model that LiteRT runs does not import, run and match:
/// `BACKPLANE_TFLITE_ZOO=/tmp/tflite_zoo cargo test --release -p backplane --test tflite_zoo -- --ignored --nocapture`.
/// `BACKPLANE_TFLITE_ZOO_ONLY=a,b` checks only the named cases.
#[test]
#[ignore = "needs the models of scripts/gen_tflite_zoo.py"]
fn built_zoo_models_match_litert() {
    let Ok(root) = std::env::var("BACKPLANE_TFLITE_ZOO") else {
        panic!("set BACKPLANE_TFLITE_ZOO to the output folder of gen_tflite_zoo.py");
    };
    let only = std::env::var("BACKPLANE_TFLITE_ZOO_ONLY").unwrap_or_default();
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let mut failed = Vec::new();
    let dirs = tflite_cases(Path::new(&root));
    assert!(!dirs.is_empty());
    for dir in dirs {
        let case = dir.file_name().unwrap().to_string_lossy().into_owned();
        if !only.is_empty() && !only.split(',').any(|c| c == case) {
            continue;
        }
        if !dir.join("output_0.npy").is_file() {
            // LiteRT cannot run it (litert_error.txt): nothing to compare; report the import.
            let r = backplane::load_model(&dir.join("model.tflite"), &Default::default());
            let what = match r {
                Ok(_) => "imports".to_string(),
                Err(e) => format!("import: {}", e.to_string().replace('\n', " ")),
            };
            println!("{case}: no LiteRT reference; {what}");
            continue;
        }
        for (backends, r) in check_case(&rt, &dir) {
            println!("{case} on {backends}: {}", describe(&r));
            if !r.as_ref().is_ok_and(Agreement::passes) {
                failed.push(format!("{case} on {backends}"));
            }
        }
    }
    assert!(failed.is_empty(), "{} failed: {failed:?}", failed.len());
}
