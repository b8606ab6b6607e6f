//! Hostile models and inputs end in a typed error, never an abort, a panic or a hang: huge
//! folded constants, shapes that contradict the declared ones, files that are not regular,
//! and what ONNX Runtime refuses as outside the specification.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_onnx::{import_file, ImportOptions, OnnxError};
use common::*;

#[test]
fn a_constant_of_shape_too_large_to_allocate_is_an_error() {
    // 2^58 f32 values: past the tensor limit when there is one...
    let model = || {
        Model::new(13)
            .init(ints("shape", &[1 << 58]))
            .node(node("ConstantOfShape", &["shape"], &["y"], vec![]))
            .output("y")
    };
    let err = model().import().unwrap_err();
    assert!(matches!(err, OnnxError::TensorTooLarge { .. }), "{err:?}");
    // ...and, with no limit, an allocation that fails as an error rather than aborting.
    let err = model()
        .import_with(&ImportOptions::default().with_max_tensor_bytes(usize::MAX))
        .unwrap_err();
    assert!(err.to_string().contains("out of memory"), "{err}");
}

fn digits_like() -> Model {
    Model::new(13)
        .input(value_info(
            "x",
            FLOAT,
            Some(&[D::P("batch"), D::V(1), D::V(8), D::V(8)]),
        ))
        .node(node("Relu", &["x"], &["y"], vec![]))
        .output("y")
}

#[test]
fn a_shape_contradicting_a_static_dim_is_refused() {
    let err = digits_like()
        .import_with(&ImportOptions::default().with_input_shape("x", vec![1, 1, 8, 9]))
        .unwrap_err();
    match &err {
        OnnxError::InputShapeMismatch { input, given, .. } => {
            assert_eq!(input, "x");
            assert_eq!(given, &[1, 1, 8, 9]);
        }
        other => panic!("{other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("[batch, 1, 8, 8]"), "{message}");
    assert!(
        message.contains("dimension 3 is declared as 8"),
        "{message}"
    );
    // Another rank is refused too.
    let err = digits_like()
        .import_with(&ImportOptions::default().with_input_shape("x", vec![1, 64]))
        .unwrap_err();
    assert!(matches!(err, OnnxError::InputShapeMismatch { .. }), "{err}");
}

#[test]
fn symbolic_dims_still_take_the_given_shape() {
    let net = digits_like()
        .import_with(&ImportOptions::default().with_input_shape("x", vec![5, 1, 8, 8]))
        .unwrap();
    assert_eq!(dims(&net, "y"), vec![5, 1, 8, 8]);
}

#[cfg(unix)]
#[test]
fn a_model_file_that_is_a_fifo_is_refused_without_blocking() {
    let dir = std::env::temp_dir().join(format!("backplane-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("model.onnx");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("mkfifo is not available: skipped");
        return;
    }
    // With no writer, opening a FIFO blocks for ever: the import must not try.
    let err = import_file(&fifo, &ImportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("FIFO"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn device_and_directory_files_are_refused() {
    if std::path::Path::new("/dev/zero").exists() {
        let err =
            import_file(std::path::Path::new("/dev/zero"), &ImportOptions::default()).unwrap_err();
        assert!(err.to_string().contains("a device"), "{err}");
    }
    let err = import_file(&std::env::temp_dir(), &ImportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("a directory"), "{err}");
}

#[test]
fn average_pool_with_pads_as_large_as_the_kernel_is_refused() {
    let err = Model::new(13)
        .input(input("x", &[1, 1, 4, 4]))
        .node(node(
            "AveragePool",
            &["x"],
            &["y"],
            vec![
                a_ints("kernel_shape", &[2, 2]),
                a_ints("pads", &[2, 0, 0, 0]),
            ],
        ))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("smaller than the kernel"), "{err}");
}

#[test]
fn range_with_a_nan_limit_is_refused() {
    let err = Model::new(13)
        .init(floats("start", &[0.0]))
        .init(floats("limit", &[f32::NAN]))
        .init(floats("delta", &[1.0]))
        .node(node("Range", &["start", "limit", "delta"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("finite"), "{err}");
}

#[test]
fn relu_with_an_extra_output_is_refused() {
    let err = Model::new(13)
        .input(input("x", &[2]))
        .node(node("Relu", &["x"], &["y", "z"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(err, OnnxError::InvalidModel(_)), "{err:?}");
    assert!(err.to_string().contains("no output #1 ('z')"), "{err}");
}
