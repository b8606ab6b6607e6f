//! CpuAcc's float GEMM through the command line: one-layer MatMul + Add models of a
//! transformer projection's shape (768 deep: three K blocks; 1031 wide: a prime, so the
//! last panel is partial) at row counts that take each few-rows walk and the row split —
//! 64 (A in L2: panels outermost), 197 (ViT's patches: K blocks outermost, a mix of six- and
//! five-row tiles) and 263 (past the few-rows limit) — run with `--backends CpuAcc,CpuRef` at
//! one and two threads and compared (`run --compare`) with CpuRef alone on the same random
//! input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane::onnx::proto::tensor_proto::DataType as T;
use common::onnx::{f32_proto, node, shaped, value, write_model_with};
use common::{assert_outputs_match, backplane, scratch, text};

const K: usize = 768;
const N: usize = 1031;

/// Deterministic values in [-1, 1).
fn values(n: usize, salt: u64) -> Vec<f32> {
    let mut s = salt.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(7);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn projections_on_cpu_acc_match_cpu_ref_at_one_and_two_threads() {
    let dir = scratch("gemm-projections");
    for rows in [64usize, 197, 263] {
        let mut w = f32_proto(&[K as i64, N as i64], &values(K * N, 1));
        w.name = Some("w".into());
        let mut b = f32_proto(&[N as i64], &values(N, 2));
        b.name = Some("b".into());
        let name = format!("proj{rows}");
        let model = write_model_with(
            &dir,
            &name,
            vec![
                node("MatMul", &["x", "w"], &["xw"]),
                node("Add", &["xw", "b"], &["y"]),
            ],
            vec![value("x", shaped(T::Float, &[rows as i64, K as i64]))],
            vec![value("y", shaped(T::Float, &[rows as i64, N as i64]))],
            vec![w, b],
        );
        let model = model.to_str().unwrap();
        let reference = dir.join(format!("ref{rows}"));
        let reference = reference.to_str().unwrap();
        let common = ["--generate", "random", "--seed", "5"];
        let mut args = vec![
            "run",
            model,
            "--backends",
            "CpuRef",
            "--output-dir",
            reference,
        ];
        args.extend(common);
        let o = backplane(&args);
        assert!(o.status.success(), "{:?}", text(&o));
        for threads in ["1", "2"] {
            let mut args = vec![
                "run",
                model,
                "--backends",
                "CpuAcc,CpuRef",
                "--threads",
                threads,
                "--compare",
                reference,
                "--rtol",
                "1e-4",
                "--atol",
                "3e-3",
            ];
            args.extend(common);
            assert_outputs_match(&args, &format!("rows {rows}, {threads} threads"));
        }
        let o = backplane(&["inspect", model]);
        let (out, _) = text(&o);
        // One fused layer (MatMul with its bias), on CpuAcc.
        assert!(o.status.success(), "{out}");
        let fused = |l: &str| l.contains("FusedMatMul") && l.contains("CpuAcc");
        assert!(out.lines().any(fused), "{out}");
        assert!(!out.contains("CpuRef"), "{out}");
    }
}
