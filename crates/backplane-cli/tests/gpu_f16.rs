//! GpuAcc's f16 kernels through the command line: a small float16 network (Conv, Relu,
//! MatMul, Add, LayerNormalization, Softmax; f32 at its borders through Casts) runs with
//! `--backends GpuAcc,CpuAcc` and matches CpuRef running its f32 twin (the same weights, all
//! exact in f16, and the input rounded to f16 by the same Cast), within rtol 1e-2 /
//! atol 1e-3: f16's tolerance for a network whose seven layers each round once (CpuRef
//! computes Conv, MatMul and the normalizations in f32 only, so it runs the twin). `inspect`
//! shows every layer on GpuAcc; with `GpuAcc:f16=off` (what an adapter without
//! `SHADER_F16` answers) the f16 layers are refused with that reason.
//!
//! Needs a Vulkan adapter with `SHADER_F16` (lavapipe has it): without an adapter the tests
//! say so and pass unless `BACKPLANE_REQUIRE_GPU_ADAPTER=1`; without `SHADER_F16` the f16
//! run is skipped, loudly, unless `BACKPLANE_REQUIRE_GPU_F16=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane::onnx::proto::attribute_proto::AttributeType;
use backplane::onnx::proto::tensor_proto::DataType as T;
use backplane::onnx::proto::{AttributeProto, NodeProto};
use common::onnx::{f16_proto, f32_proto, node, shaped, value, write_model_with};
use common::{backplane, scratch, text};
use std::path::{Path, PathBuf};

const SOFTWARE: &str = common::GPU_SOFTWARE;

fn with_int(mut n: NodeProto, name: &str, v: i64) -> NodeProto {
    n.attribute.push(AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    });
    n
}

fn with_ints(mut n: NodeProto, name: &str, v: &[i64]) -> NodeProto {
    n.attribute.push(AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    });
    n
}

/// `n` values k/64 with k in -32..=32 from a fixed sequence (exact in f16), plus `offset`.
fn weights(n: usize, salt: u64, offset: f32) -> Vec<f32> {
    let mut s = salt.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let k = ((s >> 33) % 65) as i64 - 32;
            k as f32 / 64.0 + offset
        })
        .collect()
}

/// The test network in f16 (`half`) or its f32 twin: x f32 [1, 3, 5, 5] → Cast to f16 (the
/// twin casts back to f32) → Conv 8×3×3 (pads 1) + bias → Relu → Flatten → MatMul [200, 10]
/// → Add → LayerNormalization → Softmax (→ Cast to f32 in the f16 network) → y.
fn write_network(dir: &Path, half: bool) -> PathBuf {
    let init = |name: &str, dims: &[i64], values: &[f32]| {
        let mut t = if half {
            f16_proto(dims, values)
        } else {
            f32_proto(dims, values)
        };
        t.name = Some(name.into());
        t
    };
    let initializers = vec![
        init("w", &[8, 3, 3, 3], &weights(216, 1, 0.0)),
        init("b", &[8], &weights(8, 2, 0.0)),
        init("w2", &[200, 10], &weights(2000, 3, 0.0)),
        init("b2", &[10], &weights(10, 4, 0.0)),
        init("scale", &[10], &weights(10, 5, 1.0)),
        init("shift", &[10], &weights(10, 6, 0.0)),
    ];
    let mut nodes = vec![with_int(
        node("Cast", &["x"], &["xh"]),
        "to",
        T::Float16 as i64,
    )];
    let conv_in = if half {
        "xh"
    } else {
        nodes.push(with_int(
            node("Cast", &["xh"], &["xf"]),
            "to",
            T::Float as i64,
        ));
        "xf"
    };
    nodes.push(with_ints(
        node("Conv", &[conv_in, "w", "b"], &["c"]),
        "pads",
        &[1, 1, 1, 1],
    ));
    nodes.push(node("Relu", &["c"], &["r"]));
    nodes.push(node("Flatten", &["r"], &["f"]));
    nodes.push(node("MatMul", &["f", "w2"], &["m"]));
    nodes.push(node("Add", &["m", "b2"], &["a"]));
    nodes.push(node("LayerNormalization", &["a", "scale", "shift"], &["l"]));
    let last = if half { "s" } else { "y" };
    nodes.push(node("Softmax", &["l"], &[last]));
    if half {
        nodes.push(with_int(
            node("Cast", &["s"], &["y"]),
            "to",
            T::Float as i64,
        ));
    }
    write_model_with(
        dir,
        if half { "net_f16" } else { "net_f32" },
        nodes,
        vec![value("x", shaped(T::Float, &[1, 3, 5, 5]))],
        vec![value("y", shaped(T::Float, &[1, 10]))],
        initializers,
    )
}

#[test]
fn an_f16_network_on_gpu_acc_matches_cpu_ref_on_its_f32_twin() {
    let Some(line) = common::gpu_line() else {
        return;
    };
    assert!(
        line.contains("F16="),
        "backends should say whether f16 runs: {line}"
    );
    if !line.contains("F16=yes") {
        if std::env::var("BACKPLANE_REQUIRE_GPU_F16").as_deref() == Ok("1") {
            panic!("BACKPLANE_REQUIRE_GPU_F16=1 but GpuAcc has no f16 kernels: {line}");
        }
        println!("SKIPPED (LOUDLY): GpuAcc's adapter has no f16 kernels, the f16 network is not run on it: {line}");
        return;
    }
    let dir = scratch("gpu-f16");
    let twin = write_network(&dir, false);
    let half = write_network(&dir, true);
    let want = dir.join("want");
    let o = backplane(&[
        "run",
        twin.to_str().unwrap(),
        "--backends",
        "CpuRef",
        "--generate",
        "random",
        "--output-dir",
        want.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    let o = backplane(&[
        "run",
        half.to_str().unwrap(),
        "--backends",
        "GpuAcc,CpuAcc",
        "--backend-option",
        SOFTWARE,
        "--generate",
        "random",
        "--compare",
        want.to_str().unwrap(),
        "--rtol",
        "1e-2",
        "--atol",
        "1e-3",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    println!("{out}");
    assert!(out.contains("every output matches"), "{out}");
    // The f16 network is not the f32 one: the comparison can fail. Its outputs differ from
    // the twin's by f16 rounding, which a tolerance of f32's would not accept.
    let o = backplane(&[
        "run",
        half.to_str().unwrap(),
        "--backends",
        "GpuAcc,CpuAcc",
        "--backend-option",
        SOFTWARE,
        "--generate",
        "random",
        "--compare",
        want.to_str().unwrap(),
        "--rtol",
        "1e-7",
        "--atol",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(3), "{:?}", text(&o));

    let o = backplane(&[
        "inspect",
        half.to_str().unwrap(),
        "--backends",
        "GpuAcc,CpuAcc",
        "--backend-option",
        SOFTWARE,
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    println!("{out}");
    for op in ["Conv", "MatMul", "LayerNormalization", "Softmax", "Cast"] {
        let placed = out
            .lines()
            .filter(|l| l.contains(op))
            .any(|l| l.contains("GpuAcc"));
        assert!(placed, "{op} should run on GpuAcc:\n{out}");
    }
    let placement = out
        .lines()
        .find(|l| l.starts_with("backends:"))
        .unwrap_or_default();
    assert!(
        placement.contains("GpuAcc") && !placement.contains("CpuAcc"),
        "every layer should run on GpuAcc:\n{out}"
    );
    // The activation and bias epilogues run fused, in f16 too.
    assert!(out.contains("GpuAcc: Conv_c + Relu_r"), "{out}");
    assert!(out.contains("GpuAcc: MatMul_m + Add_a"), "{out}");
}

#[test]
fn with_f16_kernels_off_the_f16_layers_are_refused_with_the_reason() {
    if common::gpu_line().is_none() {
        return;
    }
    let dir = scratch("gpu-f16-off");
    let half = write_network(&dir, true);
    let o = backplane(&[
        "backends",
        "--backend-option",
        SOFTWARE,
        "--backend-option",
        "GpuAcc:f16=off",
    ]);
    let (out, _) = text(&o);
    assert!(
        out.contains("F16=no (f16 kernels are off (backend option f16=off))"),
        "{out}"
    );
    let o = backplane(&[
        "run",
        half.to_str().unwrap(),
        "--backends",
        "GpuAcc,CpuAcc",
        "--backend-option",
        SOFTWARE,
        "--backend-option",
        "GpuAcc:f16=off",
        "--generate",
        "random",
    ]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "no backend should run f16 Conv: {out}");
    assert!(
        err.contains("Conv on f16 tensors needs GpuAcc's f16 kernels") && err.contains("f16=off"),
        "the refusal should name f16 and the option: {err}"
    );
}
