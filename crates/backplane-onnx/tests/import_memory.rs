//! Weights once in memory while importing: a model file is decoded as it is read (the file's
//! bytes never sit whole beside the decoded model), and a specialized import that retries
//! keeps no second copy of the initializers (the retries reuse the tensors the first import
//! decoded, and nothing but the network holds them afterwards).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;

use backplane_onnx::{
    decode_model, decode_model_file, import_file, import_model_specialized, ImportOptions,
    OnnxError, SharedInitializers,
};
use std::sync::Arc;

/// Deterministic f32 values.
fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

/// x [1, k] · W [k, n] (+ a second weight in float_data), reshaped by the input `shape`,
/// which the import needs the value of: the first import asks for it, the second succeeds.
fn specialized_model(k: usize, n: usize) -> Model {
    Model::new(13)
        .input(input("x", &[1, k as i64]))
        .input(value_info("shape", INT64, Some(&[D::V(2)])))
        .init(tensor_f32_raw(
            "w",
            &[k as i64, n as i64],
            &values(k * n, 1),
        ))
        .init(tensor_f32("bias", &[n as i64], &values(n, 2)))
        .node(node("MatMul", &["x", "w"], &["xw"], vec![]))
        .node(node("Add", &["xw", "bias"], &["y0"], vec![]))
        .node(node("Reshape", &["y0", "shape"], &["y"], vec![]))
        .output("y")
}

fn constant(net: &backplane_core::Network, name: &str) -> Arc<backplane_core::Tensor> {
    let t = net
        .tensors()
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tensor {name}"));
    t.constant().cloned().expect("a constant")
}

#[test]
fn a_retried_import_has_the_weights_once_and_nothing_else_holds_them() {
    for (k, n) in [(1, 1), (7, 13), (64, 257)] {
        let shape = backplane_core::Tensor::from_vec(vec![2], vec![n as i64, 1]).unwrap();
        let given = [("shape".to_string(), shape)];
        let (net, bound) = import_model_specialized(
            specialized_model(k, n).proto(),
            None,
            &ImportOptions::default(),
            &given,
        )
        .unwrap();
        assert_eq!(bound, ["shape"]);
        let y = net.outputs()[0];
        assert_eq!(net.tensor(y).info.shape.dims(), &[n, 1]);
        let w = constant(&net, "w");
        let bias = constant(&net, "bias");
        assert_eq!(w.as_slice::<f32>().unwrap(), values(k * n, 1).as_slice());
        assert_eq!(bias.as_slice::<f32>().unwrap(), values(n, 2).as_slice());
        // The network's reference and ours: the import kept none (no cache, no copy).
        assert_eq!(
            Arc::strong_count(&w),
            2,
            "{k}x{n}: w held by the network only"
        );
        assert_eq!(
            Arc::strong_count(&bias),
            2,
            "{k}x{n}: bias held by the network only"
        );
    }
}

#[test]
fn a_caller_s_shared_initializers_serve_the_retry_and_keep_the_weights() {
    let shared = Arc::new(SharedInitializers::new());
    let options = ImportOptions {
        shared_initializers: Some(shared.clone()),
        ..ImportOptions::default()
    };
    let shape = backplane_core::Tensor::from_vec(vec![2], vec![5i64, 1]).unwrap();
    let given = [("shape".to_string(), shape)];
    let (first, _) =
        import_model_specialized(specialized_model(3, 5).proto(), None, &options, &given).unwrap();
    let (second, _) =
        import_model_specialized(specialized_model(3, 5).proto(), None, &options, &given).unwrap();
    assert_eq!(shared.len(), 2);
    let (a, b) = (constant(&first, "w"), constant(&second, "w"));
    assert!(Arc::ptr_eq(&a, &b), "one tensor for both imports");
}

/// `SharedInitializers::take_from` moves the weights into the set (raw and typed data alike)
/// and leaves the model their names, types and dimensions; the weightless model then imports
/// with the same tensors. An initializer of a type that is not a tensor type is left whole.
#[test]
fn taking_the_weights_leaves_a_model_that_imports_with_the_shared_tensors() {
    let shared = Arc::new(SharedInitializers::new());
    let options = ImportOptions {
        shared_initializers: Some(shared.clone()),
        ..ImportOptions::default()
    };
    let mut model = specialized_model(7, 13).proto();
    let mut odd = tensor_f32("unused_complex", &[1], &[0.5]);
    odd.data_type = Some(14); // COMPLEX64: not a tensor type of backplane
    model.graph.as_mut().unwrap().initializer.push(odd);
    shared.take_from(&mut model, None, &options).unwrap();
    assert_eq!(shared.len(), 2, "w and bias decoded, the complex one not");
    let inits = &model.graph.as_ref().unwrap().initializer;
    for t in inits
        .iter()
        .filter(|t| t.name.as_deref() != Some("unused_complex"))
    {
        assert!(
            t.raw_data.is_none() && t.float_data.is_empty(),
            "{:?} kept data",
            t.name
        );
        assert!(!t.dims.is_empty() && t.data_type.is_some());
    }
    let complex = inits
        .iter()
        .find(|t| t.name.as_deref() == Some("unused_complex"))
        .unwrap();
    assert_eq!(
        complex.float_data,
        [0.5],
        "an undecodable initializer is left whole"
    );
    let shape = backplane_core::Tensor::from_vec(vec![2], vec![13i64, 1]).unwrap();
    let given = [("shape".to_string(), shape)];
    let (net, _) = import_model_specialized(model, None, &options, &given).unwrap();
    let w = constant(&net, "w");
    assert_eq!(w.as_slice::<f32>().unwrap(), values(7 * 13, 1).as_slice());
    assert!(
        Arc::ptr_eq(&w, &shared.get("w").unwrap()),
        "the shared tensor"
    );
    assert_eq!(
        constant(&net, "bias").as_slice::<f32>().unwrap(),
        values(13, 2).as_slice()
    );
}

#[test]
fn a_model_file_decodes_as_it_is_read() {
    // 3 MB of weights: the file is read in several chunks, fields crossing chunk ends.
    let (k, n) = (1000, 769);
    let model = specialized_model(k, n).init(tensor_f32_raw("unused", &[3], &[1.0, 2.0, 3.0]));
    let bytes = model.bytes();
    let dir = std::env::temp_dir().join(format!("backplane-onnx-chunked-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.onnx");
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(
        decode_model_file(&path).unwrap(),
        decode_model(&bytes).unwrap()
    );

    // Imported from the file, the weights are intact.
    let options = ImportOptions::default().with_input_value(
        "shape",
        Arc::new(backplane_core::Tensor::from_vec(vec![2], vec![n as i64, 1]).unwrap()),
    );
    let net = import_file(&path, &options).unwrap();
    assert_eq!(
        constant(&net, "w").as_slice::<f32>().unwrap(),
        values(k * n, 1).as_slice()
    );

    // Cut inside the weights, past the first chunk: a decoding error naming the file.
    let cut = dir.join("cut.onnx");
    std::fs::write(&cut, &bytes[..(1 << 20) + 12345]).unwrap();
    let err = decode_model_file(&cut).unwrap_err();
    assert!(
        matches!(err, OnnxError::Decode { path: Some(_), .. }),
        "{err}"
    );
    // Empty.
    let empty = dir.join("empty.onnx");
    std::fs::write(&empty, b"").unwrap();
    let err = decode_model_file(&empty).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
