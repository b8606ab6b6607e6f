//! GpuAcc through the door users use: `backplane backends` names its adapter, `run` on the
//! shipped digits model matches CpuRef, and `inspect` shows the device factory, the border
//! copies and that tensors between two GPU layers stay on the device. A software adapter
//! (lavapipe) is allowed with `--backend-option GpuAcc:allow_software=true`; on a machine
//! with no Vulkan adapter at all the tests say so and pass, unless
//! `BACKPLANE_REQUIRE_GPU_ADAPTER=1` (CI) makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{backplane, scratch, text};

const SOFTWARE: &str = common::GPU_SOFTWARE;

#[test]
fn backends_lists_gpu_acc_with_its_adapter_or_the_reason() {
    // Without allow_software a machine with only lavapipe has no acceptable adapter, and says
    // why; the listing itself never fails.
    let o = backplane(&["backends"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("GpuAcc"))
        .unwrap_or_default();
    assert!(line.contains("Adapter="), "{out}");
    let Some(line) = common::gpu_line() else {
        return;
    };
    assert!(
        line.contains("Adapter=") && !line.contains("no GPU adapter"),
        "{line}"
    );
}

#[test]
fn run_on_gpu_acc_matches_cpu_ref_on_the_digits_model() {
    if common::gpu_line().is_none() {
        return;
    }
    let dir = scratch("gpu-digits");
    let o = backplane(&[
        "run",
        "--backends",
        "CpuRef",
        "--output-dir",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    let o = backplane(&[
        "run",
        "--backends",
        "GpuAcc,CpuAcc",
        "--backend-option",
        SOFTWARE,
        "--compare",
        dir.to_str().unwrap(),
        "--rtol",
        "1e-4",
        "--atol",
        "1e-5",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("every output matches"), "{out}");
    assert!(
        out.contains("GpuAcc"),
        "the split should name GpuAcc: {out}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `--backend-option GpuAcc:tiles=...` forces each layout of the products and convolutions;
/// every one matches CpuRef on the digits model, and a value that is no layout is an error
/// naming the accepted ones.
#[test]
fn every_tiles_layout_matches_cpu_ref_on_the_digits_model() {
    if common::gpu_line().is_none() {
        return;
    }
    let dir = scratch("gpu-tiles");
    let o = backplane(&[
        "run",
        "--backends",
        "CpuRef",
        "--output-dir",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    for tiles in ["auto", "direct", "16", "64", "splitk"] {
        let option = format!("GpuAcc:tiles={tiles}");
        let o = backplane(&[
            "run",
            "--backends",
            "GpuAcc,CpuAcc",
            "--backend-option",
            SOFTWARE,
            "--backend-option",
            &option,
            "--compare",
            dir.to_str().unwrap(),
            "--rtol",
            "1e-4",
            "--atol",
            "1e-5",
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "tiles={tiles}: {out}\n{err}");
        assert!(out.contains("every output matches"), "tiles={tiles}: {out}");
    }
    let o = backplane(&[
        "run",
        "--backends",
        "GpuAcc,CpuAcc",
        "--backend-option",
        SOFTWARE,
        "--backend-option",
        "GpuAcc:tiles=32",
    ]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "tiles=32 should be refused: {out}");
    assert!(
        err.contains("expected auto, direct, 16, 64 or splitk"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `inspect` with GpuAcc first: the edges of the tensor-memory table, and the summary line.
fn inspect_edges(extra: &[&str]) -> (Vec<String>, String) {
    let mut args = vec![
        "inspect",
        "models/digits/model.onnx",
        "--backends",
        "GpuAcc,CpuAcc",
        "--backend-option",
        SOFTWARE,
    ];
    args.extend_from_slice(extra);
    let o = backplane(&args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("GpuAcc:"), "GpuAcc should run layers: {out}");
    let edges: Vec<String> = out
        .lines()
        .skip_while(|l| !l.starts_with("tensor memory"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(String::from)
        .collect();
    assert!(!edges.is_empty(), "{out}");
    // Tensors in device memory are read in place by GPU layers only.
    let device: Vec<&String> = edges
        .iter()
        .filter(|l| l.contains("(Backplane/GpuAcc/Device ->"))
        .collect();
    assert!(!device.is_empty(), "no tensor stays on the device: {out}");
    for e in &device {
        assert!(
            e.contains(": direct (Backplane/GpuAcc/Device -> Backplane/GpuAcc/Device"),
            "a device tensor leaves the device: {e}"
        );
    }
    (edges, out)
}

#[test]
fn inspect_shows_device_memory_and_one_copy_per_border() {
    if common::gpu_line().is_none() {
        return;
    }
    // All of the digits model on the GPU: nothing is copied; the host reads the output by
    // mapping the staging memory it was written to.
    let (edges, out) = inspect_edges(&[]);
    assert!(out.contains("copies per execution: 0 (0 bytes)"), "{out}");
    assert!(
        out.contains("mapped reads (outputs the host maps in another memory): 1"),
        "{out}"
    );
    assert!(
        edges
            .iter()
            .any(|e| e.contains("-> (output): mapped read (Backplane/GpuAcc/Staging")),
        "{out}"
    );
    // One layer in the middle on CpuAcc: exactly one copy (staging to host) at the border
    // into it, its own output imported back; the rest stays on the device.
    let (edges, out) = inspect_edges(&["--layer-backend", "relu1=CpuAcc"]);
    let copies: Vec<&String> = edges.iter().filter(|l| l.contains(": copy (")).collect();
    assert_eq!(copies.len(), 1, "{out}");
    assert!(
        copies[0].contains("(Backplane/GpuAcc/Staging -> Backplane/Host/Cpu, 4096 bytes)"),
        "{out}"
    );
    assert!(
        out.contains("copies per execution: 1 (4096 bytes)"),
        "{out}"
    );
    assert!(out.contains("CpuAcc: 1 layer"), "{out}");
}

#[test]
fn backend_test_runs_the_kit_on_gpu_acc() {
    if common::gpu_line().is_none() {
        return;
    }
    let o = backplane(&[
        "backend-test",
        "GpuAcc",
        "--backend-option",
        SOFTWARE,
        "--sweeps",
        "3",
        "--no-contract",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("op table"), "{out}");
}

#[test]
fn run_profile_shows_gpu_layers_and_how_they_were_timed() {
    if common::gpu_line().is_none() {
        return;
    }
    let dir = scratch("gpu-profile");
    let trace = dir.join("trace.json");
    let o = backplane(&[
        "run",
        "--backends",
        "GpuAcc,CpuAcc",
        "--backend-option",
        SOFTWARE,
        "--profile",
        trace.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    // --profile makes GpuAcc time each layer, by timestamp queries where the adapter has
    // them (lavapipe does), else by a submit and wait per layer, and says which; with
    // timestamps it prints a table of the GPU times after the host-time table.
    assert!(
        out.contains("each GPU layer is submitted and waited for on its own")
            || out.contains("GPU ms per layer of the last execution"),
        "{out}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let gpu_events: Vec<&serde_json::Value> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["args"]["backend"] == "GpuAcc")
        .collect();
    assert!(!gpu_events.is_empty(), "no GpuAcc layer in the trace");
    assert!(gpu_events.iter().all(|e| e["dur"].as_f64().is_some()));
    let note = doc["otherData"]["GpuAcc"].as_str().unwrap_or_default();
    assert!(note.contains("timestamp queries"), "{note}");
    if note.contains("GPU ms per layer of the last execution: ") {
        // Every GPU layer of the trace has its GPU time in the note.
        for e in &gpu_events {
            let name = e["name"].as_str().unwrap_or_default();
            assert!(note.contains(&format!("{name}=")), "{name} untimed: {note}");
        }
        // And the printed profile has a table of the GPU times, slowest first, each row a
        // GPU layer of the trace with its milliseconds.
        let table: Vec<&str> = out
            .lines()
            .skip_while(|l| !l.starts_with("top GpuAcc layers by GPU time"))
            .skip(1)
            .take_while(|l| l.ends_with(" (GPU)"))
            .collect();
        assert!(!table.is_empty(), "no GPU time table:\n{out}");
        let ms: Vec<f64> = table
            .iter()
            .map(|row| {
                let name = row.split("ms  ").nth(1).unwrap().trim_end_matches(" (GPU)");
                assert!(gpu_events.iter().any(|e| e["name"] == name), "{row}");
                row.split(" ms")
                    .next()
                    .unwrap()
                    .split_whitespace()
                    .last()
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        assert!(
            ms.windows(2).all(|w| w[0] >= w[1]),
            "not slowest first: {table:?}"
        );
    } else {
        assert!(note.contains("host-side timing of the submit"), "{doc}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bert_tiny_runs_on_gpu_acc_and_matches_cpu_ref() {
    if common::gpu_line().is_none() {
        return;
    }
    let dir = scratch("gpu-bert-tiny");
    let model = "testdata/dynamic/bert_tiny.onnx";
    let common = ["--input-shape", "input_ids=1x16", "--generate", "ones"];
    let mut args = vec!["run", model, "--backends", "CpuRef", "--output-dir"];
    args.push(dir.to_str().unwrap());
    args.extend_from_slice(&common);
    let o = backplane(&args);
    assert!(o.status.success(), "{:?}", text(&o));
    let mut args = vec![
        "run",
        model,
        "--backends",
        "GpuAcc,CpuAcc",
        "--backend-option",
        SOFTWARE,
        "--compare",
        dir.to_str().unwrap(),
        "--rtol",
        "1e-4",
        "--atol",
        "1e-5",
    ];
    args.extend_from_slice(&common);
    let o = backplane(&args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("every output matches"), "{out}");
    // The whole transformer runs on the GPU, its i64 token Gather included: no layer falls
    // back to a host backend.
    let split = out
        .lines()
        .find(|l| l.starts_with("backends:"))
        .unwrap_or_default();
    let gpu_layers: usize = split
        .split("GpuAcc: ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(gpu_layers >= 40, "{split}");
    assert!(
        !split.contains("CpuAcc") && !split.contains("CpuRef"),
        "a layer fell back to the host: {split}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Gather indices that arrive at run time are checked on the device: through `backplane run`,
/// an index outside the gathered axis is an error naming the layer (as on CpuRef), and valid
/// ones give CpuRef's rows.
#[test]
fn run_reports_a_gather_index_out_of_range_on_gpu_acc() {
    use backplane::onnx::proto::tensor_proto::DataType as T;
    use common::onnx::{f32_proto, i64_proto, node, shaped, value, write_model, write_pb};
    if common::gpu_line().is_none() {
        return;
    }
    let dir = scratch("gpu-gather");
    let model = write_model(
        &dir,
        "gather",
        vec![node("Gather", &["x", "idx"], &["y"])],
        vec![
            value("x", shaped(T::Float, &[4, 3])),
            value("idx", shaped(T::Int64, &[2])),
        ],
        vec![value("y", shaped(T::Float, &[2, 3]))],
    );
    let model = model.to_str().unwrap();
    let rows: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let x = write_pb(&dir.join("x.pb"), &f32_proto(&[4, 3], &rows));
    let run = |idx: &[i64]| {
        let i = write_pb(&dir.join("idx.pb"), &i64_proto(&[2], idx));
        backplane(&[
            "run",
            model,
            "--backends",
            "GpuAcc,CpuAcc",
            "--backend-option",
            SOFTWARE,
            "--input",
            &format!("x={x}"),
            "--input",
            &format!("idx={i}"),
            "--json",
        ])
    };
    let o = run(&[3, 0]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        doc["outputs"][0]["values"],
        serde_json::json!([9.0, 10.0, 11.0, 0.0, 1.0, 2.0]),
        "rows 3 then 0: {out}"
    );
    assert!(
        doc["backends"].to_string().contains("GpuAcc"),
        "the Gather should run on GpuAcc: {out}"
    );
    let o = run(&[1, 7]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "an index past the axis ran: {out}");
    assert!(
        err.contains("Gather_y") && err.contains("outside"),
        "the error should name the layer and say why: {err}"
    );
}
