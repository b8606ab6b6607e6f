//! End to end: real ONNX files through the importer, optimizer, runtime and CpuRef.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::{npy, BackendId, ImportOptions, OptimizerOptions, Runtime, Tensor};
use support::repo;

fn runtime() -> Runtime {
    backplane::RuntimeBuilder::new().build().unwrap()
}

fn load(rt: &Runtime, model: &str, options: &ImportOptions) -> backplane::NetworkId {
    let network = backplane::load_onnx(&repo().join(model), options).unwrap();
    let opt = rt
        .optimize(
            &network,
            &OptimizerOptions::new(vec![BackendId::new("CpuRef").unwrap()]),
        )
        .unwrap();
    rt.load_network(opt).unwrap()
}

#[test]
fn convnet_matches_onnx_runtime() {
    let rt = runtime();
    let id = load(&rt, "testdata/e2e/convnet.onnx", &ImportOptions::default());
    let loaded = rt.network(id).unwrap();
    let ops: Vec<&str> = loaded
        .network()
        .layers()
        .iter()
        .map(|l| l.op.name())
        .collect();
    for op in [
        "Conv",
        "BatchNormalization",
        "Relu",
        "MaxPool",
        "AveragePool",
        "Gemm",
        "MatMul",
        "Softmax",
        "Reshape",
    ] {
        assert!(ops.contains(&op), "{op} missing from {ops:?}");
    }
    for folded in ["Shape", "Gather", "Concat", "Unsqueeze"] {
        assert!(
            !ops.contains(&folded),
            "{folded} should have been folded away: {ops:?}"
        );
    }
    let x = npy::read_file(&repo().join("testdata/e2e/input_x.npy")).unwrap();
    let outputs = rt.execute(id, &[("x", &x)]).unwrap();
    assert_eq!(outputs.len(), 2);
    for (name, got) in &outputs {
        let want =
            npy::read_file(&repo().join(format!("testdata/e2e/expected_{name}.npy"))).unwrap();
        support::compare(got, &want, 1e-4, 1e-5).unwrap_or_else(|e| panic!("output {name}: {e}"));
    }
}

#[test]
fn digits_classifier_reaches_the_trained_accuracy() {
    let metrics: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("models/digits/metrics.json")).unwrap(),
    )
    .unwrap();
    let expected = metrics["test_accuracy"].as_f64().unwrap();
    let images = npy::read_file(&repo().join("models/digits/test_set.npy")).unwrap();
    let labels = npy::read_file(&repo().join("models/digits/test_labels.npy")).unwrap();
    let n = labels.shape().dims()[0];
    let mut options = ImportOptions::default();
    options.dim_values.insert("batch".into(), n);
    let rt = runtime();
    let id = load(&rt, "models/digits/model.onnx", &options);
    let out = rt.execute(id, &[("input", &images)]).unwrap();
    let probs = out[0].1.as_slice::<f32>().unwrap();
    let labels = labels.as_slice::<i64>().unwrap();
    let correct = probs
        .chunks(10)
        .zip(labels)
        .filter(|(row, &l)| {
            let best = (0..10).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
            best as i64 == l
        })
        .count();
    let accuracy = correct as f64 / n as f64;
    println!("digits: {correct}/{n} = {accuracy:.4} (training script reported {expected:.4})");
    assert!(
        (accuracy - expected).abs() <= 1.0 / n as f64 + 1e-9,
        "accuracy {accuracy} vs {expected}"
    );
    assert!(accuracy > 0.95);
}

#[test]
fn digits_samples_match_onnx_runtime_probabilities() {
    let rt = runtime();
    let mut options = ImportOptions::default();
    options.dim_values.insert("batch".into(), 1);
    let id = load(&rt, "models/digits/model.onnx", &options);
    for k in 0..5 {
        let x =
            npy::read_file(&repo().join(format!("models/digits/samples/digit_{k}.npy"))).unwrap();
        let want = npy::read_file(&repo().join(format!("models/digits/samples/expected_{k}.npy")))
            .unwrap();
        let out = rt.execute(id, &[("input", &x)]).unwrap();
        support::compare(&out[0].1, &want, 1e-4, 1e-6)
            .unwrap_or_else(|e| panic!("sample {k}: {e}"));
    }
}

/// The default preference puts CpuAcc first and CpuRef behind it, and both are registered:
/// the digits model runs on CpuAcc with the same probabilities as ONNX Runtime.
#[test]
fn default_preference_is_cpu_acc_then_cpu_ref() {
    let ids = backplane::default_backends();
    assert_eq!(
        ids.iter().map(BackendId::as_str).collect::<Vec<_>>(),
        ["CpuAcc", "CpuRef"]
    );
    let rt = runtime();
    let options = ImportOptions::default().with_dim("batch", 1);
    let network = backplane::load_onnx(&repo().join("models/digits/model.onnx"), &options).unwrap();
    let optimized = rt
        .optimize(&network, &backplane::default_optimizer_options())
        .unwrap();
    let counts = optimized.layer_counts();
    assert_eq!(counts[0].0.as_str(), "CpuAcc", "{counts:?}");
    let id = rt.load_network(optimized).unwrap();
    let x = npy::read_file(&repo().join("models/digits/samples/digit_3.npy")).unwrap();
    let want = npy::read_file(&repo().join("models/digits/samples/expected_3.npy")).unwrap();
    let out = rt.execute(id, &[("input", &x)]).unwrap();
    support::compare(&out[0].1, &want, 1e-4, 1e-6).unwrap();
}

#[test]
fn bad_inputs_and_models_get_clear_typed_errors() {
    use backplane::RuntimeError;
    let rt = runtime();
    let mut options = ImportOptions::default();
    options.dim_values.insert("batch".into(), 1);
    let id = load(&rt, "models/digits/model.onnx", &options);
    let good = npy::read_file(&repo().join("models/digits/samples/digit_0.npy")).unwrap();

    let err = rt.execute(id, &[]).unwrap_err();
    assert!(matches!(err, RuntimeError::MissingInput { .. }), "{err}");
    assert!(err.to_string().contains("'input'"), "{err}");

    let wrong_shape = Tensor::from_vec(vec![1, 1, 4, 16], vec![0.0f32; 64]).unwrap();
    let err = rt.execute(id, &[("input", &wrong_shape)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "input 'input' must be f32[1x1x8x8], got f32[1x1x4x16]"
    );

    let wrong_type = Tensor::from_vec(vec![1, 1, 8, 8], vec![0i64; 64]).unwrap();
    let err = rt.execute(id, &[("input", &wrong_type)]).unwrap_err();
    assert!(matches!(err, RuntimeError::InputMismatch { .. }), "{err}");
    assert!(
        rt.execute(id, &[("input", &good)]).is_ok(),
        "the network keeps working"
    );

    // A truncated model file.
    let bytes = std::fs::read(repo().join("models/digits/model.onnx")).unwrap();
    let dir = std::env::temp_dir().join(format!("backplane-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let truncated = dir.join("truncated.onnx");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let err = backplane::load_onnx(&truncated, &options).unwrap_err();
    assert!(
        matches!(
            err,
            backplane::Error::Onnx(backplane::onnx::OnnxError::Decode { .. })
        ),
        "{err}"
    );

    // A missing file names the path.
    let err = backplane::load_onnx(&dir.join("absent.onnx"), &options).unwrap_err();
    assert!(err.to_string().contains("absent.onnx"), "{err}");

    // A symbolic dimension without a value says how to give one.
    let err = backplane::load_onnx(
        &repo().join("models/digits/model.onnx"),
        &ImportOptions::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("batch"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
