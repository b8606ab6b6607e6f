//! CpuAcc against CpuRef at several thread counts, through the kit's sweep families (more
//! threads than cores is fine for correctness). Nothing here is timed.
//!
//! - The work split at 1, 2, 3, 5 and 16 threads: families whose layers are large and oddly
//!   shaped enough to be shared out unevenly (concatenations of odd run lengths, convolutions
//!   with few outputs on planes of 1 to 95 column panels, products of few rows against a
//!   large B, and the generic Concat, Conv, Gemm and MatMul families). Exact families
//!   (Concat) must match to the bit.
//! - The convolution paths for first layers, strided projections and atrous layers at 1 and
//!   2 threads (the output channels in vector lanes, the direct tiles, strided pointwise
//!   convolutions, one GEMM per tap over the outputs it reads the input for).
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

/// Run `cases` cases of each family (seeds from `first_seed`) at each thread count; every
/// case must pass (a refusal fails too).
fn all_pass(families: &[(&str, usize)], thread_counts: &[usize], first_seed: u64) {
    let backend = BackendId::new("CpuAcc").unwrap();
    let mut passed = 0;
    let mut failures = Vec::new();
    for &threads in thread_counts {
        let rt = runtime(threads);
        for &(family, cases) in families {
            let generate = FAMILIES
                .iter()
                .find(|(name, _)| *name == family)
                .map(|(_, g)| *g)
                .unwrap_or_else(|| panic!("no family {family}"));
            for i in 0..cases {
                let seed = first_seed + i as u64;
                let case = generate(&mut Rng::new(seed)).unwrap();
                match run_case(&rt, &backend, &case) {
                    Outcome::Passed => passed += 1,
                    other => failures.push(format!(
                        "{family} seed {seed} at {threads} threads: {other:?}"
                    )),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let per_count: usize = families.iter().map(|(_, c)| c).sum();
    assert_eq!(passed, thread_counts.len() * per_count);
}

#[test]
fn cpu_acc_splits_match_cpu_ref_at_every_thread_count() {
    let families = [
        ("LargeConcat", 10),
        ("FewOutputConv", 10),
        ("Concat", 6),
        ("Conv", 6),
        ("Gemm", 6),
        ("FewRowsMatMul", 4),
        ("ProjectionGemm", 4),
    ];
    all_pass(&families, &[1, 2, 3, 5, 16], 27_004);
}

#[test]
fn first_layers_strided_projections_and_atrous_convs_match_cpu_ref() {
    let families = [
        ("FirstLayerConv", 40),
        ("StridedPointwise", 30),
        ("AtrousConv", 40),
    ];
    all_pass(&families, &[1, 2], 40_000);
}
