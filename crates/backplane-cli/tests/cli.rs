//! The `backplane` binary, driven as a user would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{backplane, repo, scratch, text};

use std::path::PathBuf;
use std::process::Command;

#[test]
fn run_without_a_model_classifies_the_shipped_samples() {
    let o = backplane(&["run", "--iterations", "3"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("models/digits/model.onnx"), "{out}");
    assert!(out.contains("backends: CpuAcc:"), "{out}");
    assert!(out.contains("5/5 predictions match the labels"), "{out}");
    assert!(
        out.contains("latency: median") && out.contains("over 3 iterations"),
        "{out}"
    );
}

#[test]
fn run_a_model_with_an_npy_input() {
    let o = backplane(&[
        "run",
        "testdata/e2e/convnet.onnx",
        "--input",
        "x=testdata/e2e/input_x.npy",
        "--backends",
        "CpuRef",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("output 'probs' f32[1x"), "{out}");
}

#[test]
fn symbolic_dims_come_from_input_shape_or_the_input_file() {
    let o = backplane(&[
        "run",
        "models/digits/model.onnx",
        "--input",
        "input=models/digits/samples/digit_2.npy",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("row 0: top-3: 2 ("), "{out}");
}

#[test]
fn backends_lists_cpuref_with_version_and_capabilities() {
    let o = backplane(&["backends"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("CpuRef"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("static") && line.contains("1.0"), "{line}");
}

#[test]
fn errors_name_what_is_wrong_and_exit_non_zero() {
    let o = backplane(&["run", "no/such/model.onnx"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("no/such/model.onnx"), "{err}");

    let o = backplane(&["run", "--backends", "NoSuchBackend"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("'NoSuchBackend' is not registered"), "{err}");

    let o = backplane(&["run", "testdata/e2e/convnet.onnx"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("--input x="), "{err}");

    let o = backplane(&["run", "--input", "oops"]);
    assert_eq!(o.status.code(), Some(2));

    let o = backplane(&[
        "run",
        "models/digits/model.onnx",
        "--input",
        "input=README.md",
    ]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("README.md") && err.contains("not a .npy file"),
        "{err}"
    );
}

#[test]
fn compare_against_onnx_runtime_outputs_and_catch_a_mismatch() {
    let dir = scratch("compare");
    // ONNX Runtime's outputs, stored beside the model, named as --compare expects.
    for name in ["logits", "probs"] {
        std::fs::copy(
            repo().join(format!("testdata/e2e/expected_{name}.npy")),
            dir.join(format!("{name}.npy")),
        )
        .unwrap();
    }
    let args = [
        "run",
        "testdata/e2e/convnet.onnx",
        "--input",
        "x=testdata/e2e/input_x.npy",
        "--compare",
    ];
    common::assert_outputs_match(
        &[&args[..], &[dir.to_str().unwrap()]].concat(),
        "convnet against ONNX Runtime's outputs",
    );

    // Swap the two expected files: shapes differ, so both outputs mismatch (exit code 3).
    std::fs::copy(
        repo().join("testdata/e2e/expected_probs.npy"),
        dir.join("logits.npy"),
    )
    .unwrap();
    std::fs::copy(
        repo().join("testdata/e2e/input_x.npy"),
        dir.join("probs.npy"),
    )
    .unwrap();
    let o = backplane(&[&args[..], &[dir.to_str().unwrap()]].concat());
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("output 'probs'") && err.contains("expected f32[1x3x16x16]"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn output_dir_writes_npy_files_that_compare_equal() {
    let dir = scratch("outdir");
    let o = backplane(&["run", "--output-dir", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{:?}", text(&o));
    let probs = backplane::npy::read_file(&dir.join("probabilities.npy")).unwrap();
    assert_eq!(probs.shape().dims(), &[5, 10]);
    let o = backplane(&[
        "run",
        "--compare",
        dir.to_str().unwrap(),
        "--rtol",
        "0",
        "--atol",
        "0",
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn json_output_is_machine_readable() {
    let o = backplane(&["run", "--json", "--iterations", "2"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["backends"][0]["backend"], "CpuAcc");
    assert_eq!(doc["outputs"][0]["name"], "probabilities");
    assert_eq!(doc["outputs"][0]["shape"], serde_json::json!([5, 10]));
    assert_eq!(doc["outputs"][0]["values"].as_array().unwrap().len(), 50);
    assert_eq!(doc["latency_ms"]["iterations"], 2);
}

#[test]
fn generated_inputs_are_reproducible() {
    let run = |seed: &str| {
        let o = backplane(&[
            "run",
            "testdata/e2e/convnet.onnx",
            "--generate",
            "random",
            "--seed",
            seed,
            "--json",
        ]);
        assert!(o.status.success(), "{:?}", text(&o));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        doc["outputs"][1]["values"].clone()
    };
    assert_eq!(run("7"), run("7"));
    assert_ne!(run("7"), run("8"));
}

#[test]
fn verbose_flags_and_backplane_log_show_decisions_on_stderr() {
    let o = backplane(&["-v", "run"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("loaded on [CpuAcc]"), "{err}");
    assert!(!err.contains("assigned to"), "debug lines need -vv: {err}");
    assert!(!out.contains("INFO"), "logs go to stderr only");

    let o = Command::new(env!("CARGO_BIN_EXE_backplane"))
        .arg("run")
        .env("BACKPLANE_LOG", "debug")
        .current_dir(repo())
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(
        err.contains("assigned to CpuAcc") && err.contains("conv1"),
        "{err}"
    );
    assert!(
        !err.contains('\u{1b}'),
        "no colour codes when stderr is not a terminal"
    );
}

/// The Rust example dynamic backend (CpuRef as `CpuRefDyn`). `cargo test --workspace` builds
/// it into this target's deps directory (it is a dev-dependency of backplane-runtime); when
/// only this package's tests were built, it is built here into a separate target directory,
/// because the cargo running these tests holds the lock on the main one.
fn rust_plugin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let so = deps.join("libbackplane_cpuref_dyn.so");
    if so.is_file() {
        return so;
    }
    let target = deps.join("../../cli-test-plugins");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "dynamic-backend-rust", "--target-dir"])
        .arg(&target)
        .current_dir(repo())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "building the Rust example dynamic backend failed"
    );
    let so = target.join("debug/libbackplane_cpuref_dyn.so");
    assert!(so.is_file(), "{} was not built", so.display());
    so
}

/// A directory with the Rust example (as `Backplane_CpuRefDyn_backend.so`), the C example
/// (as `Acme_ElementwiseC_backend.so`) and two files that are not backends.
fn plugin_dir(tag: &str) -> common::Scratch {
    let dir = scratch(tag);
    std::fs::copy(rust_plugin(), dir.join("Backplane_CpuRefDyn_backend.so")).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc)
        .args([
            "-std=c11",
            "-O2",
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            "-I",
        ])
        .arg(repo().join("include"))
        .arg("-o")
        .arg(dir.join("Acme_ElementwiseC_backend.so"))
        .arg(repo().join("examples/dynamic-backend-c/elementwise_backend.c"))
        .status()
        .unwrap();
    assert!(status.success(), "compiling the C example backend failed");
    std::fs::write(dir.join("Acme_Broken_backend.so"), "not a shared object").unwrap();
    std::fs::write(dir.join("notes.txt"), "hello").unwrap();
    dir
}

#[test]
fn backends_shows_dynamic_backends_their_files_and_why_files_were_skipped() {
    let dir = plugin_dir("backends-dynamic");
    let o = backplane(&["backends", "--dynamic-backends-path", dir.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let line = |id: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(id))
            .unwrap_or_else(|| panic!("no {id} in:\n{out}"))
            .to_string()
    };
    let rust = line("CpuRefDyn");
    assert!(rust.contains("dynamic"), "{rust}");
    assert!(rust.contains("Backplane_CpuRefDyn_backend.so"), "{rust}");
    let c = line("ElementwiseC");
    assert!(
        c.contains("1.0.0") && c.contains("dynamic") && c.contains("LoadedNetworks=0"),
        "{c}"
    );
    assert!(line("CpuRef").contains("static"));
    assert!(out.contains("dynamic backends: searched"), "{out}");
    let skipped = out
        .lines()
        .find(|l| l.contains("Acme_Broken_backend.so:"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        skipped.contains("cannot open it as a shared object"),
        "{skipped}"
    );
    let skipped = out.lines().find(|l| l.contains("notes.txt:")).unwrap();
    assert!(
        skipped.contains("does not match <vendor>_<name>_backend.so"),
        "{skipped}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_with_the_rust_dynamic_backend_gives_the_static_cpuref_output() {
    let dir = plugin_dir("run-dynamic");
    let path = dir.to_str().unwrap();
    let json = |args: &[&str]| {
        let o = backplane(args);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{args:?}: {out}\n{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let dynamic = json(&[
        "run",
        "--json",
        "--backends",
        "CpuRefDyn",
        "--dynamic-backends-path",
        path,
    ]);
    let reference = json(&[
        "run",
        "--json",
        "--backends",
        "CpuRef",
        "--no-dynamic-backends",
    ]);
    assert_eq!(dynamic["backends"][0]["backend"], "CpuRefDyn");
    assert_eq!(dynamic["backends"][0]["layers"], 10);
    assert_eq!(
        dynamic["outputs"], reference["outputs"],
        "identical outputs"
    );
    // Split between the C backend (the Relu layers) and CpuRef: the same output.
    let split = json(&[
        "run",
        "--json",
        "--backends",
        "ElementwiseC,CpuRef",
        "--dynamic-backends-path",
        path,
    ]);
    let on_c = split["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["backend"] == "ElementwiseC")
        .unwrap_or_else(|| panic!("{split}"));
    assert_eq!(on_c["layers"], 2);
    assert_eq!(split["outputs"], reference["outputs"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A network output left in a plugin's own memory is read by the host through `map`:
/// `inspect` calls that edge a mapped read, not "direct", and counts it.
#[test]
fn inspect_reports_outputs_the_host_reads_by_mapping_plugin_memory() {
    let dir = plugin_dir("inspect-mapped");
    let model = repo().join("models/digits/model.onnx");
    let inspect = |options: &[&str]| {
        let mut args = vec![
            "inspect",
            model.to_str().unwrap(),
            "--backends",
            "CpuRefDyn",
            "--dynamic-backends-path",
            dir.to_str().unwrap(),
        ];
        args.extend_from_slice(options);
        let o = backplane(&args);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        out
    };
    let output_edge = |out: &str| {
        out.lines()
            .find(|l| l.contains("-> (output):"))
            .unwrap_or_else(|| panic!("no output edge in:\n{out}"))
            .to_string()
    };
    // In its device memory, the output is mapped by the host to be read.
    let device = inspect(&["--backend-option", "CpuRefDyn:memory=device"]);
    let edge = output_edge(&device);
    assert!(
        edge.contains("mapped read (Backplane/CpuRefDyn/Device -> Backplane/Host/Cpu"),
        "{edge}"
    );
    assert!(
        device.contains("mapped reads (outputs the host maps in another memory): 1"),
        "{device}"
    );
    // In host memory (the default), the same edge is direct and nothing is mapped.
    let host = inspect(&[]);
    let edge = output_edge(&host);
    assert!(
        edge.contains(": direct (Backplane/Host/Cpu -> Backplane/Host/Cpu"),
        "{edge}"
    );
    assert!(
        host.contains("mapped reads (outputs the host maps in another memory): 0"),
        "{host}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dynamic_backend_flags_disable_and_validate() {
    let dir = plugin_dir("flags-dynamic");
    let path = dir.to_str().unwrap();
    // Disabled: the dynamic backend is unknown, and the error lists what is registered.
    let o = backplane(&["run", "--backends", "CpuRefDyn", "--no-dynamic-backends"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("'CpuRefDyn' is not registered"), "{err}");
    // Both flags at once is a usage error.
    let o = backplane(&[
        "backends",
        "--no-dynamic-backends",
        "--dynamic-backends-path",
        path,
    ]);
    assert_eq!(o.status.code(), Some(2));
    // A directory that does not exist: a warning, and the static backends still work.
    let o = backplane(&[
        "backends",
        "--dynamic-backends-path",
        "/backplane/no/such/dir",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("warning: the dynamic backends path is not valid"),
        "{out}"
    );
    assert!(
        out.contains("dynamic backends: no directory searched"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Inputs and expected outputs straight from an ONNX test data set (TensorProto .pb files).
#[test]
fn onnx_test_data_sets_work_as_inputs_and_expectations() {
    let dir = scratch("pb");
    // Write x and the expected outputs as TensorProto files with the onnx crate's types.
    let write_pb = |t: &backplane::Tensor, path: &std::path::Path| {
        use prost::Message;
        let proto = backplane::onnx::proto::TensorProto {
            dims: t.shape().dims().iter().map(|&d| d as i64).collect(),
            data_type: Some(1),
            raw_data: Some(t.bytes().to_vec()),
            ..Default::default()
        };
        std::fs::write(path, proto.encode_to_vec()).unwrap();
    };
    let x = backplane::npy::read_file(&repo().join("testdata/e2e/input_x.npy")).unwrap();
    write_pb(&x, &dir.join("input_0.pb"));
    for (k, name) in ["logits", "probs"].iter().enumerate() {
        let t =
            backplane::npy::read_file(&repo().join(format!("testdata/e2e/expected_{name}.npy")))
                .unwrap();
        write_pb(&t, &dir.join(format!("output_{k}.pb")));
    }
    let input = format!("x={}", dir.join("input_0.pb").display());
    common::assert_outputs_match(
        &[
            "run",
            "testdata/e2e/convnet.onnx",
            "--input",
            &input,
            "--compare",
            dir.to_str().unwrap(),
        ],
        "an ONNX test data set as inputs and expectations",
    );
    std::fs::write(dir.join("bad.pb"), b"\xff\xff\xff").unwrap();
    let bad = format!("x={}", dir.join("bad.pb").display());
    let o = backplane(&["run", "testdata/e2e/convnet.onnx", "--input", &bad]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).1.contains("not a TensorProto file"),
        "{:?}",
        text(&o)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_reader_that_closes_stdout_early_ends_the_command_quietly() {
    // `backplane run | head -1`: the reader goes away before the first line is written (the
    // pipe's read end is dropped right after the spawn; the command runs 50 executions before
    // it prints anything), so every write fails with a broken pipe.
    for args in [
        &["run", "--iterations", "50"][..],
        &["inspect", "models/digits/model.onnx"][..],
        &["backends"][..],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_backplane"))
            .args(args)
            .current_dir(repo())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{args:?}: {:?}\n{err}", o.status);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
    }
}

/// The kit's fixed-point families (LiteRT's builtin requantization) are listed by
/// `backend-test` and pass on both CPU backends, CpuAcc at its AVX2 and portable tiers too.
#[test]
fn backend_test_runs_the_fixed_point_families() {
    let families = [
        "QConvFixedPoint",
        "QGemmFixedPoint",
        "QMatMulFixedPoint",
        "QBlockFixedPoint",
        "QSqueezeExciteFixedPoint",
        "QMulFixedPoint",
        "QMeanFixedPoint",
    ];
    // CpuAcc at each tier a CI machine may have too (the tier is chosen once per process).
    for (backend, isa) in [
        ("CpuRef", None),
        ("CpuAcc", None),
        ("CpuAcc", Some("CpuAcc:isa=avx2")),
        ("CpuAcc", Some("CpuAcc:isa=portable")),
    ] {
        let mut args = vec![
            "backend-test",
            backend,
            "--sweeps",
            "3",
            "--no-op-table",
            "--no-contract",
        ];
        args.extend(isa.map(|o| ["--backend-option", o]).into_iter().flatten());
        let o = backplane(&args);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        for family in families {
            // op, claimed, passed, failed, refused
            let row: Vec<&str> = out
                .lines()
                .map(str::split_whitespace)
                .map(Iterator::collect)
                .find(|row: &Vec<&str>| row.first() == Some(&family))
                .unwrap_or_else(|| panic!("{backend} {isa:?}: no row for {family}:\n{out}"));
            let passed: usize = row[2].parse().unwrap();
            assert!(
                passed > 0 && row[3] == "0",
                "{backend} {isa:?} {family}: {row:?}"
            );
        }
    }
}

#[test]
fn backend_test_checks_built_in_and_loaded_backends() {
    let o = backplane(&["backend-test", "CpuAcc", "--sweeps", "5"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("random sweeps") && out.contains("op table"),
        "{out}"
    );
    let last = out.lines().last().unwrap();
    assert!(
        last.starts_with("backend-test CpuAcc: ") && last.ends_with(", 0 failed"),
        "{last}"
    );

    // A loaded backend, with the report as JSON too.
    let dir = plugin_dir("backend-test");
    let json = dir.join("report.json");
    let o = backplane(&[
        "backend-test",
        "ElementwiseC",
        "--dynamic-backends-path",
        dir.to_str().unwrap(),
        "--sweeps",
        "5",
        "--json",
        json.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["backend"], "ElementwiseC");
    assert_eq!(doc["failed"], 0);
    assert!(doc["passed"].as_u64().unwrap() > 10, "{doc}");

    // Backend options reach the backend under test, and the balance checks ran.
    let o = backplane(&[
        "backend-test",
        "CpuAcc",
        "--sweeps",
        "2",
        "--no-op-table",
        "--backend-option",
        "CpuAcc:threads=1",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("memory and handles balanced"), "{out}");

    // With -v, each plugin file is named before it is opened (a crash names its file).
    let o = backplane(&[
        "-v",
        "backends",
        "--dynamic-backends-path",
        dir.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        err.contains("loading dynamic backend file")
            && err.contains("Acme_ElementwiseC_backend.so"),
        "{err}"
    );

    // A backend nobody registered: a usage error that lists what is registered.
    let o = backplane(&["backend-test", "NoSuchBackend"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("registered: ") && err.contains("CpuRef"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `run --output-dir` writes an output whose name is longer than a file name may be (TFLite's
/// fused tensor names can be) under a shortened name, and `--compare` finds it there.
#[test]
fn outputs_with_names_past_the_file_name_limit_are_written_and_compared() {
    use prost::Message;
    let dir = scratch("long-names");
    let bytes = std::fs::read(repo().join("testdata/e2e/convnet.onnx")).unwrap();
    let mut model = backplane::onnx::proto::ModelProto::decode(&bytes[..]).unwrap();
    let long = format!("logits_{}", "fused/".repeat(60));
    let graph = model.graph.as_mut().unwrap();
    for node in &mut graph.node {
        for out in node.output.iter_mut().chain(node.input.iter_mut()) {
            if out == "logits" {
                *out = long.clone();
            }
        }
    }
    for out in &mut graph.output {
        if out.name.as_deref() == Some("logits") {
            out.name = Some(long.clone());
        }
    }
    let path = dir.join("long.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let out_dir = dir.join("out");
    let (model_arg, out_arg) = (path.to_str().unwrap(), out_dir.to_str().unwrap());
    let o = backplane(&[
        "run",
        model_arg,
        "--input",
        "x=testdata/e2e/input_x.npy",
        "--output-dir",
        out_arg,
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| n.len() <= 255), "{names:?}");
    common::assert_outputs_match(
        &[
            "run",
            model_arg,
            "--input",
            "x=testdata/e2e/input_x.npy",
            "--compare",
            out_arg,
            "--rtol",
            "0",
            "--atol",
            "0",
        ],
        "long output name",
    );
}
