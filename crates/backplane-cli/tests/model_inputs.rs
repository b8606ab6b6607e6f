//! `backplane run` and `inspect` on models that need more than tensors of fixed shape: inputs
//! whose values decide shapes (specialization), sequence and optional inputs and outputs in
//! the ONNX test data format, and models the importer cannot take (exit code 4). The models
//! are built here with the ONNX protobuf types and written to a scratch folder.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::onnx::{
    f32_proto, i64_proto, node, optional_type, sequence_type, shaped, tensor_type, value,
    write_model, write_pb,
};
use common::{backplane, scratch, text};

use backplane::onnx::proto::tensor_proto::DataType as T;
use backplane::onnx::proto::{OptionalProto, SequenceProto};
use prost::Message;

fn arg(name: &str, path: &str) -> String {
    format!("{name}={path}")
}

#[test]
fn run_binds_inputs_the_model_needs_at_import_and_says_so() {
    let dir = scratch("specialize");
    let model = write_model(
        &dir,
        "reshape",
        vec![node("Reshape", &["x", "shape"], &["y"])],
        vec![
            value("x", shaped(T::Float, &[6])),
            value("shape", shaped(T::Int64, &[2])),
        ],
        vec![value("y", tensor_type(T::Float))],
    );
    let model = model.to_str().unwrap();
    let x = write_pb(
        &dir.join("x.pb"),
        &f32_proto(&[6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
    );
    let shape = write_pb(&dir.join("shape.pb"), &i64_proto(&[2], &[3, 2]));
    let (xa, sa) = (arg("x", &x), arg("shape", &shape));
    let o = backplane(&["run", model, "--input", &xa, "--input", &sa]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("specialized on the values of input: shape"),
        "{out}"
    );
    assert!(out.contains("output 'y' f32[3x2]"), "{out}");

    // The same in JSON, and the outputs compared with an expected .pb by position.
    let expected = dir.join("expected");
    std::fs::create_dir_all(&expected).unwrap();
    write_pb(
        &expected.join("output_0.pb"),
        &f32_proto(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
    );
    let exp = expected.to_str().unwrap();
    let o = backplane(&[
        "run",
        model,
        "--input",
        &xa,
        "--input",
        &sa,
        "--json",
        "--compare",
        exp,
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["bound_inputs"][0], "shape");
    assert_eq!(doc["compare"]["matched"], true);

    // inspect takes the same files.
    let o = backplane(&["inspect", model, "--input", &xa, "--input", &sa]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("specialized on the values of input: shape"),
        "{out}"
    );
    assert!(out.contains("output 'y' f32[3x2]"), "{out}");

    // Without the value, the error says which input to give.
    let o = backplane(&["run", model, "--input", &xa]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("--input shape=FILE"), "{err}");

    // The same input given twice is a usage error, not a confusing lookup failure.
    let o = backplane(&["run", model, "--input", &xa, "--input", &xa]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("given twice"), "{err}");
}

#[test]
fn sequence_inputs_and_outputs_travel_as_pb_files() {
    let dir = scratch("sequences");
    // y = Concat(seq, axis 0); parts = SplitToSequence(x) (sizes 1: keepdims), so both a
    // sequence input and a sequence output.
    let mut concat = node("ConcatFromSequence", &["seq"], &["y"]);
    concat
        .attribute
        .push(backplane::onnx::proto::AttributeProto {
            name: Some("axis".into()),
            r#type: Some(backplane::onnx::proto::attribute_proto::AttributeType::Int as i32),
            i: Some(0),
            ..Default::default()
        });
    let model = write_model(
        &dir,
        "seq",
        vec![concat, node("SplitToSequence", &["x"], &["parts"])],
        vec![
            value("seq", sequence_type(tensor_type(T::Float))),
            value("x", tensor_type(T::Float)),
        ],
        vec![
            value("y", tensor_type(T::Float)),
            value("parts", sequence_type(tensor_type(T::Float))),
        ],
    );
    let model = model.to_str().unwrap();
    let seq = write_pb(
        &dir.join("seq.pb"),
        &SequenceProto {
            elem_type: Some(1),
            tensor_values: vec![f32_proto(&[1], &[1.0]), f32_proto(&[2], &[2.0, 3.0])],
            ..Default::default()
        },
    );
    let x = write_pb(&dir.join("x.pb"), &f32_proto(&[3], &[7.0, 8.0, 9.0]));
    let (sa, xa) = (arg("seq", &seq), arg("x", &x));
    let outdir = dir.join("out");
    let o = backplane(&[
        "run",
        model,
        "--input",
        &sa,
        "--input",
        &xa,
        "--output-dir",
        outdir.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("output 'y' f32[3]"), "{out}");
    assert!(out.contains("output 'parts[2]' f32[1]"), "{out}");
    // The sequence output comes back as a SequenceProto holding three tensors.
    let back = SequenceProto::decode(&*std::fs::read(outdir.join("parts.pb")).unwrap()).unwrap();
    assert_eq!(back.tensor_values.len(), 3);
    assert!(outdir.join("y.npy").is_file());

    // --compare reads sequence files; a sequence of another length is a mismatch (exit 3).
    let expected = dir.join("expected");
    std::fs::create_dir_all(&expected).unwrap();
    write_pb(
        &expected.join("output_0.pb"),
        &f32_proto(&[3], &[1.0, 2.0, 3.0]),
    );
    let parts = |n: usize| SequenceProto {
        elem_type: Some(1),
        tensor_values: [7.0f32, 8.0, 9.0][..n]
            .iter()
            .map(|v| f32_proto(&[1], &[*v]))
            .collect(),
        ..Default::default()
    };
    write_pb(&expected.join("output_1.pb"), &parts(3));
    let exp = expected.to_str().unwrap();
    common::assert_outputs_match(
        &[
            "run",
            model,
            "--input",
            &sa,
            "--input",
            &xa,
            "--compare",
            exp,
        ],
        "outputs from ONNX test data sets",
    );
    write_pb(&expected.join("output_1.pb"), &parts(2));
    let o = backplane(&[
        "run",
        model,
        "--input",
        &sa,
        "--input",
        &xa,
        "--compare",
        exp,
    ]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("holds 3 tensors, expected 2"), "{err}");

    // A .npy file cannot hold a sequence: said plainly.
    let o = backplane(&[
        "run",
        model,
        "--input",
        "seq=testdata/e2e/input_x.npy",
        "--input",
        &xa,
    ]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("SequenceProto"), "{err}");
}

#[test]
fn optional_inputs_and_outputs_travel_as_pb_files() {
    let dir = scratch("optionals");
    // has = OptionalHasElement(opt); y = Optional(x) as an optional output.
    let model = write_model(
        &dir,
        "opt",
        vec![
            node("OptionalHasElement", &["opt"], &["has"]),
            node("Optional", &["x"], &["y"]),
        ],
        vec![
            value("opt", optional_type(tensor_type(T::Float))),
            value("x", tensor_type(T::Float)),
        ],
        vec![
            value("has", tensor_type(T::Bool)),
            value("y", optional_type(tensor_type(T::Float))),
        ],
    );
    let model = model.to_str().unwrap();
    let x = write_pb(&dir.join("x.pb"), &f32_proto(&[2], &[4.0, 5.0]));
    let xa = arg("x", &x);
    for (present, want) in [(true, "1.0"), (false, "0.0")] {
        let opt = OptionalProto {
            elem_type: Some(1),
            tensor_value: present.then(|| f32_proto(&[1], &[3.0])),
            ..Default::default()
        };
        let opt = write_pb(&dir.join(format!("opt_{present}.pb")), &opt);
        let outdir = dir.join(format!("out_{present}"));
        let oa = arg("opt", &opt);
        let o = backplane(&[
            "run",
            model,
            "--input",
            &oa,
            "--input",
            &xa,
            "--json",
            "--output-dir",
            outdir.to_str().unwrap(),
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
        let has = doc["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "has")
            .unwrap();
        assert_eq!(has["values"][0].to_string(), want, "{out}");
        let y = OptionalProto::decode(&*std::fs::read(outdir.join("y.pb")).unwrap()).unwrap();
        assert_eq!(y.tensor_value.unwrap().dims, vec![2]);
    }
}

#[test]
fn a_model_the_importer_cannot_take_exits_with_code_4() {
    let dir = scratch("unsupported");
    let model = write_model(
        &dir,
        "unknown_op",
        vec![node("NoSuchOperator", &["x"], &["y"])],
        vec![value("x", tensor_type(T::Float))],
        vec![value("y", tensor_type(T::Float))],
    );
    let x = write_pb(&dir.join("x.pb"), &f32_proto(&[1], &[1.0]));
    let o = backplane(&["run", model.to_str().unwrap(), "--input", &arg("x", &x)]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("NoSuchOperator"), "{err}");
}

#[test]
fn the_default_backends_are_cpu_acc_then_cpu_ref() {
    let o = backplane(&["run"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let line = out.lines().find(|l| l.starts_with("backends:")).unwrap();
    assert!(line.starts_with("backends: CpuAcc:"), "{line}");
    assert!(out.contains("5/5 predictions match the labels"), "{out}");
    // CpuRef alone on request.
    let o = backplane(&["run", "--backends", "CpuRef"]);
    let (out, _) = text(&o);
    assert!(out.contains("backends: CpuRef: 10 layers"), "{out}");
}
