//! The CLI's huge-page malloc (it executes itself again with `glibc.malloc.hugetlb=1` added
//! to `GLIBC_TUNABLES`): the re-executed process runs the same command with the same
//! arguments, says so at debug level, and gives bit for bit the outputs of a process that
//! was not re-executed (`BACKPLANE_HUGE_PAGES=0`, or the user's own setting of the tunable).
//! The model: a MatMul + Add of a transformer projection's shape, 768 × 1031 weights
//! (3.2 MB: a buffer past malloc's huge-page size).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane::onnx::proto::tensor_proto::DataType as T;
use common::onnx::{f32_proto, node, shaped, value, write_model_with};
use common::{scratch, text};
use std::process::{Command, Output};

const K: usize = 768;
const N: usize = 1031;

/// The CLI with `env` set (and the variables the test controls removed first).
fn backplane_with(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_backplane"));
    for k in [
        "GLIBC_TUNABLES",
        "BACKPLANE_HUGE_PAGES",
        "BACKPLANE_HUGE_PAGES_SET",
        "BACKPLANE_LOG",
    ] {
        c.env_remove(k);
    }
    c.envs(env.iter().copied()).args(args).output().unwrap()
}

#[test]
fn re_executed_runs_match_plain_ones_bit_for_bit() {
    let dir = scratch("huge-pages");
    let values = |n: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 % 2003) as f32 / 1001.5 - 1.0) * scale)
            .collect()
    };
    let mut w = f32_proto(&[K as i64, N as i64], &values(K * N, 0.05));
    w.name = Some("w".into());
    let mut b = f32_proto(&[N as i64], &values(N, 1.0));
    b.name = Some("b".into());
    let model = write_model_with(
        &dir,
        "proj",
        vec![
            node("MatMul", &["x", "w"], &["xw"]),
            node("Add", &["xw", "b"], &["y"]),
        ],
        vec![value("x", shaped(T::Float, &[197, K as i64]))],
        vec![value("y", shaped(T::Float, &[197, N as i64]))],
        vec![w, b],
    );
    let model = model.to_str().unwrap();
    let run = ["run", model, "--generate", "random", "--seed", "3", "-vv"];
    let said = "malloc: transparent huge pages requested (GLIBC_TUNABLES=";

    // Default: re-executed, and says so.
    let first = dir.join("first");
    let first = first.to_str().unwrap();
    let o = backplane_with(&[], &[&run[..], &["--output-dir", first]].concat());
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        err.contains(&format!("{said}glibc.malloc.hugetlb=1)")),
        "{err}"
    );

    // Not re-executed: switched off, or the user's own tunable; the outputs are identical.
    let other = "glibc.malloc.hugetlb=0";
    for env in [
        vec![("BACKPLANE_HUGE_PAGES", "0")],
        vec![("GLIBC_TUNABLES", other)],
    ] {
        let args = [
            &run[..],
            &["--compare", first, "--rtol", "0", "--atol", "0"],
        ]
        .concat();
        let o = backplane_with(&env, &args);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{env:?}: {out}\n{err}");
        assert!(
            out.contains("compare: every output matches"),
            "{env:?}: {out}"
        );
        assert!(!err.contains(said), "{env:?}: {err}");
    }

    // Other tunables of the user's are kept beside the added one.
    let o = backplane_with(&[("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")], &run);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        err.contains(&format!(
            "{said}glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1)"
        )),
        "{err}"
    );
}
