//! CpuAcc's work split at 1, 2, 3, 5 and 16 threads (more threads than cores is fine for
//! correctness), checked against CpuRef by the kit's sweep families whose layers are large
//! and oddly shaped enough to be shared out unevenly: concatenations of odd run lengths,
//! convolutions with few outputs on planes of 1 to 95 column panels, products of few rows
//! against a large B, and the generic Concat, Conv, Gemm and MatMul families. Exact families
//! (Concat) must match to the bit. Nothing here is timed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane::{BackendId, Runtime, RuntimeOptions};
use backplane_backend_tests::sweeps::{run_case, Rng, FAMILIES};
use backplane_backend_tests::Outcome;

/// CpuAcc alone (behind the builtin backend) with `threads` threads.
fn runtime(threads: usize) -> Runtime {
    let mut options = RuntimeOptions::default();
    options
        .backend_options
        .entry(BackendId::new("CpuAcc").unwrap())
        .or_default()
        .values
        .insert("threads".into(), threads.to_string());
    Runtime::new(backplane::builtin_registry(), options).unwrap()
}

const SPLIT_FAMILIES: [(&str, usize); 7] = [
    ("LargeConcat", 10),
    ("FewOutputConv", 10),
    ("Concat", 6),
    ("Conv", 6),
    ("Gemm", 6),
    ("FewRowsMatMul", 4),
    ("ProjectionGemm", 4),
];

#[test]
fn cpu_acc_splits_match_cpu_ref_at_every_thread_count() {
    let backend = BackendId::new("CpuAcc").unwrap();
    let mut passed = 0;
    let mut failures = Vec::new();
    for threads in [1usize, 2, 3, 5, 16] {
        let rt = runtime(threads);
        for (family, cases) in SPLIT_FAMILIES {
            let generate = FAMILIES
                .iter()
                .find(|(name, _)| *name == family)
                .map(|(_, g)| *g)
                .unwrap_or_else(|| panic!("no family {family}"));
            for i in 0..cases {
                let seed = 27_004 + i as u64;
                let case = generate(&mut Rng::new(seed)).unwrap();
                match run_case(&rt, &backend, &case) {
                    Outcome::Passed => passed += 1,
                    Outcome::Refused(why) => failures.push(format!(
                        "{family} seed {seed} at {threads} threads refused: {why}"
                    )),
                    other => failures.push(format!(
                        "{family} seed {seed} at {threads} threads: {other:?}"
                    )),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let per_count: usize = SPLIT_FAMILIES.iter().map(|(_, c)| c).sum();
    assert_eq!(passed, 5 * per_count);
}
