//! CpuAcc's convolution paths for first layers, strided projections and atrous layers (the
//! output channels in vector lanes on one thread, the direct tiles on more; strided
//! pointwise convolutions; one GEMM per tap over the outputs it reads the input for),
//! checked against CpuRef by the kit's `FirstLayerConv`, `StridedPointwise` and
//! `AtrousConv` families at 1 and 2 threads. Nothing here is timed.
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

const CONV_FAMILIES: [(&str, usize); 3] = [
    ("FirstLayerConv", 40),
    ("StridedPointwise", 30),
    ("AtrousConv", 40),
];

#[test]
fn first_layers_and_strided_projections_match_cpu_ref() {
    let backend = BackendId::new("CpuAcc").unwrap();
    let mut passed = 0;
    let mut failures = Vec::new();
    for threads in [1usize, 2] {
        let rt = runtime(threads);
        for (family, cases) in CONV_FAMILIES {
            let generate = FAMILIES
                .iter()
                .find(|(name, _)| *name == family)
                .map(|(_, g)| *g)
                .unwrap_or_else(|| panic!("no family {family}"));
            for i in 0..cases {
                let seed = 40_000 + i as u64;
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
    let per_count: usize = CONV_FAMILIES.iter().map(|(_, c)| c).sum();
    assert_eq!(passed, 2 * per_count);
}
