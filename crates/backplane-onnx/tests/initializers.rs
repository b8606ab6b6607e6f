//! Initializers: typed fields, raw data, external data files.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_core::{DataType, Network};
use backplane_onnx::proto::tensor_proto::{DataLocation, DataType as T};
use backplane_onnx::proto::{StringStringEntryProto, TensorProto};
use backplane_onnx::{import_bytes, import_file, ImportOptions, OnnxError};
use common::*;
use std::path::PathBuf;

/// Import a model where `w` (shape `[n]`) is multiplied into a runtime input of `dtype`.
fn import_with_weight(w: TensorProto, dtype: i32, n: i64) -> Result<Network, OnnxError> {
    Model::new(13)
        .input(value_info("x", dtype, Some(&[D::V(n)])))
        .init(w)
        .node(node("Mul", &["x", "w"], &["y"], vec![]))
        .output("y")
        .import()
}

fn weight(net: &Network) -> &backplane_core::Tensor {
    net.tensor(net.find_tensor("w").unwrap())
        .constant()
        .unwrap()
}

fn typed(dtype: T, dims: &[i64]) -> TensorProto {
    TensorProto {
        name: Some("w".into()),
        dims: dims.to_vec(),
        data_type: Some(dtype as i32),
        ..Default::default()
    }
}

#[test]
fn typed_fields_follow_the_packing_rules() {
    let mut w = typed(T::Float, &[3]);
    w.float_data = vec![1.0, -2.5, 3.0];
    let net = import_with_weight(w, T::Float as i32, 3).unwrap();
    assert_eq!(weight(&net).as_slice::<f32>().unwrap(), &[1.0, -2.5, 3.0]);

    // f16: the 16 bits of each value in the low half of an int32.
    let mut w = typed(T::Float16, &[2]);
    w.int32_data = vec![0x3c00, 0xbc00];
    let net = import_with_weight(w, T::Float16 as i32, 2).unwrap();
    assert_eq!(weight(&net).dtype(), DataType::F16);
    assert_eq!(weight(&net).to_f64_vec(), vec![1.0, -1.0]);

    let mut w = typed(T::Int8, &[3]);
    w.int32_data = vec![-128, 0, 127];
    let net = import_with_weight(w, T::Int8 as i32, 3).unwrap();
    assert_eq!(weight(&net).as_slice::<i8>().unwrap(), &[-128, 0, 127]);

    let mut w = typed(T::Uint8, &[2]);
    w.int32_data = vec![255, 1];
    let net = import_with_weight(w, T::Uint8 as i32, 2).unwrap();
    assert_eq!(weight(&net).as_slice::<u8>().unwrap(), &[255, 1]);

    let mut w = typed(T::Int32, &[2]);
    w.int32_data = vec![-7, 70000];
    let net = import_with_weight(w, T::Int32 as i32, 2).unwrap();
    assert_eq!(weight(&net).as_slice::<i32>().unwrap(), &[-7, 70000]);

    let mut w = typed(T::Int64, &[2]);
    w.int64_data = vec![i64::MIN, 5];
    let net = import_with_weight(w, T::Int64 as i32, 2).unwrap();
    assert_eq!(weight(&net).as_slice::<i64>().unwrap(), &[i64::MIN, 5]);

    // raw_data, little-endian.
    let net =
        import_with_weight(tensor_f32_raw("w", &[2], &[0.5, 8.0]), T::Float as i32, 2).unwrap();
    assert_eq!(weight(&net).as_slice::<f32>().unwrap(), &[0.5, 8.0]);

    // bool: one byte (or int32) per element, normalized to 0/1.
    let mut w = typed(T::Bool, &[3]);
    w.raw_data = Some(vec![1, 0, 2]);
    let net = Model::new(13)
        .input(input("x", &[3]))
        .init(w)
        .node(node(
            "Cast",
            &["w"],
            &["wf"],
            vec![a_int("to", FLOAT as i64)],
        ))
        .node(node("Mul", &["x", "wf"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(weight(&net).bytes(), &[1, 0, 1]);

    // Wrong counts are invalid.
    let mut w = typed(T::Float, &[3]);
    w.float_data = vec![1.0];
    assert!(matches!(
        import_with_weight(w, T::Float as i32, 3),
        Err(OnnxError::InvalidModel(_))
    ));
    let mut w = typed(T::Float, &[3]);
    w.raw_data = Some(vec![0; 11]);
    assert!(matches!(
        import_with_weight(w, T::Float as i32, 3),
        Err(OnnxError::InvalidModel(_))
    ));
}

#[test]
fn double_constants_are_parameters_and_data() {
    // DOUBLE scales for Upsample are read as parameters.
    let mut sc = typed(T::Double, &[4]);
    sc.name = Some("sc".into());
    sc.double_data = vec![1.0, 1.0, 2.0, 2.0];
    let net = Model::new(9)
        .input(input("x", &[1, 1, 2, 2]))
        .init(sc)
        .node(node("Upsample", &["x", "sc"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(dims(&net, "y"), vec![1, 1, 4, 4]);
    // As data they are f64 tensors.
    let mut w = typed(T::Double, &[2]);
    w.double_data = vec![1.0, 2.0];
    let net = import_with_weight(w, T::Double as i32, 2).unwrap();
    assert_eq!(weight(&net).as_slice::<f64>().unwrap(), &[1.0, 2.0]);
}

#[test]
fn initializers_listed_as_inputs_are_constants() {
    let net = Model::new(13)
        .input(input("x", &[2]))
        .input(input("w", &[2]))
        .init(floats("w", &[1.0, 2.0]))
        .node(node("Add", &["x", "w"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(net.inputs().len(), 1);
    assert!(weight(&net).as_slice::<f32>().is_ok());
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "backplane-onnx-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn external(location: &str, offset: Option<u64>, length: Option<u64>, n: i64) -> TensorProto {
    let mut kv = vec![StringStringEntryProto {
        key: Some("location".into()),
        value: Some(location.into()),
    }];
    if let Some(o) = offset {
        kv.push(StringStringEntryProto {
            key: Some("offset".into()),
            value: Some(o.to_string()),
        });
    }
    if let Some(l) = length {
        kv.push(StringStringEntryProto {
            key: Some("length".into()),
            value: Some(l.to_string()),
        });
    }
    TensorProto {
        name: Some("w".into()),
        dims: vec![n],
        data_type: Some(FLOAT),
        data_location: Some(DataLocation::External as i32),
        external_data: kv,
        ..Default::default()
    }
}

fn ext_model(w: TensorProto) -> Vec<u8> {
    Model::new(13)
        .input(input("x", &[3]))
        .init(w)
        .node(node("Add", &["x", "w"], &["y"], vec![]))
        .output("y")
        .bytes()
}

#[test]
fn external_data_beside_the_model() {
    let dir = TempDir::new("ext");
    let mut blob = vec![0xAAu8; 16];
    for v in [1.0f32, 2.0, 3.0] {
        blob.extend(v.to_le_bytes());
    }
    std::fs::create_dir_all(dir.0.join("data")).unwrap();
    std::fs::write(dir.0.join("data/weights.bin"), &blob).unwrap();
    let model = dir.0.join("model.onnx");

    std::fs::write(
        &model,
        ext_model(external("data/weights.bin", Some(16), Some(12), 3)),
    )
    .unwrap();
    let net = import_file(&model, &ImportOptions::default()).unwrap();
    assert_eq!(weight(&net).as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0]);

    // No length: read what the shape needs. "./" is fine.
    std::fs::write(
        &model,
        ext_model(external("./data/weights.bin", Some(16), None, 3)),
    )
    .unwrap();
    let net = import_file(&model, &ImportOptions::default()).unwrap();
    assert_eq!(weight(&net).as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0]);

    // import_bytes with a base directory.
    let bytes = ext_model(external("data/weights.bin", Some(16), None, 3));
    let net = import_bytes(&bytes, Some(&dir.0), &ImportOptions::default()).unwrap();
    assert_eq!(weight(&net).as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0]);
    // ... and without one.
    let err = import_bytes(&bytes, None, &ImportOptions::default()).unwrap_err();
    assert!(matches!(err, OnnxError::ExternalData { .. }), "{err}");

    let check_err = |w: TensorProto, want: &str| {
        std::fs::write(&model, ext_model(w)).unwrap();
        let err = import_file(&model, &ImportOptions::default()).unwrap_err();
        assert!(err.to_string().contains(want), "want '{want}' in: {err}");
        err
    };
    // Escapes from the model's folder are rejected.
    let err = check_err(
        external("../weights.bin", None, None, 3),
        "'..' are rejected",
    );
    assert!(matches!(err, OnnxError::ExternalData { .. }));
    let abs = dir.0.join("data/weights.bin");
    check_err(
        external(abs.to_str().unwrap(), Some(16), None, 3),
        "absolute paths",
    );
    check_err(
        external("data/../data/weights.bin", Some(16), None, 3),
        "'..' are rejected",
    );
    // Wrong sizes.
    check_err(
        external("data/weights.bin", Some(16), Some(8), 3),
        "length is 8 bytes",
    );
    check_err(
        external("data/weights.bin", Some(20), None, 3),
        "only 28 bytes",
    );
    check_err(
        external("data/weights.bin", Some(u64::MAX), None, 3),
        "overflows",
    );
    // Missing file.
    let err = check_err(external("data/nope.bin", None, None, 3), "nope.bin");
    assert!(matches!(err, OnnxError::Io { .. }));

    #[cfg(unix)]
    {
        // A link that leads outside the folder is rejected too.
        let outside = TempDir::new("ext-outside");
        std::fs::write(outside.0.join("secret.bin"), [0u8; 12]).unwrap();
        std::os::unix::fs::symlink(outside.0.join("secret.bin"), dir.0.join("link.bin")).unwrap();
        check_err(
            external("link.bin", None, None, 3),
            "outside the model's folder",
        );
    }
}

#[test]
fn an_external_data_file_that_is_a_fifo_is_refused_without_blocking() {
    let dir = TempDir::new("ext-fifo");
    std::fs::create_dir_all(dir.0.join("data")).unwrap();
    let fifo = dir.0.join("data/weights.bin");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("mkfifo is not available: skipped");
        return;
    }
    let model = dir.0.join("model.onnx");
    std::fs::write(
        &model,
        ext_model(external("data/weights.bin", None, None, 3)),
    )
    .unwrap();
    // With no writer, opening the FIFO would block for ever: the import must refuse it first.
    let err = import_file(&model, &ImportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("a FIFO"), "{err}");
    assert!(err.to_string().contains("weights.bin"), "{err}");
}
