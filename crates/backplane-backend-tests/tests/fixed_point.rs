//! The kit's fixed-point families (quantized chains under `Requantization::FixedPoint`,
//! LiteRT's builtin kernels' rule) on CpuRef and CpuAcc: every case passes (CpuAcc equal to
//! CpuRef byte for byte), CpuAcc runs them itself rather than refusing them, and the
//! families are drawn by the kit's default run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane::BackendId;
use backplane_backend_tests::quant_sweeps::{run_case, FAMILIES, SUITE};
use backplane_backend_tests::sweeps::Rng;
use backplane_backend_tests::{check, KitOptions, Outcome};

/// The fixed-point families, by the names the report lists them under.
const FIXED_POINT: &[&str] = &[
    "QConvFixedPoint",
    "QGemmFixedPoint",
    "QMatMulFixedPoint",
    "QBlockFixedPoint",
    "QSqueezeExciteFixedPoint",
    "QMulFixedPoint",
    "QMeanFixedPoint",
];

/// Whether CpuAcc hands the whole of `about`'s chain to CpuRef by design: a mean under the
/// fixed-point rule that CpuRef folds and CpuAcc's mean does not compute (over other axes
/// than H and W), or one whose activation keeps either from folding it.
fn handed_to_cpu_ref(about: &str) -> bool {
    about.contains("ReduceMean over C, H kept") || about.contains("kept → Relu")
}

/// `cases` cases of each fixed-point family from `first_seed` on `backend`: how many
/// passed; a refusal CpuAcc makes by design ([`handed_to_cpu_ref`]) is counted apart, every
/// other outcome is a failure listed in the panic.
fn all_pass(backend: &str, cases: u64, first_seed: u64) -> (usize, usize) {
    let runtime = backplane::RuntimeBuilder::new().build().unwrap();
    let id = BackendId::new(backend).unwrap();
    let (mut passed, mut handed) = (0, 0);
    let mut failures = Vec::new();
    for family in FIXED_POINT {
        let generate = FAMILIES
            .iter()
            .find(|(name, _)| name == family)
            .map(|(_, g)| *g)
            .unwrap_or_else(|| panic!("no family {family}"));
        for seed in first_seed..first_seed + cases {
            let case = generate(&mut Rng::new(seed)).unwrap();
            assert_eq!(case.family, *family);
            match run_case(&runtime, &id, &case) {
                Outcome::Passed => passed += 1,
                Outcome::Refused(_) if handed_to_cpu_ref(&case.about) => handed += 1,
                other => failures.push(format!(
                    "{backend} {family} seed {seed}: {}: {other:?}",
                    case.about
                )),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    (passed, handed)
}

#[test]
fn fixed_point_chains_pass_on_cpu_ref() {
    assert_eq!(all_pass("CpuRef", 30, 61_000), (30 * FIXED_POINT.len(), 0));
}

#[test]
fn fixed_point_chains_equal_cpu_ref_on_cpu_acc() {
    let (passed, handed) = all_pass("CpuAcc", 60, 62_000);
    assert_eq!(passed + handed, 60 * FIXED_POINT.len());
    // Most means are ones CpuAcc computes itself.
    assert!(handed < 15, "{handed} chains handed to CpuRef");
}

/// The multiplier regimes and forms the families promise are drawn: ties, tiny and large
/// multipliers, uint8, broadcasting products, the means CpuRef folds and the ones it does
/// not.
#[test]
fn the_families_draw_every_regime() {
    let mut seen = String::new();
    for family in FIXED_POINT {
        let generate = FAMILIES.iter().find(|(n, _)| n == family).unwrap().1;
        for seed in 0..200 {
            seen.push_str(&generate(&mut Rng::new(seed)).unwrap().about);
            seen.push('\n');
        }
    }
    for wanted in [
        "power-of-two multipliers (ties)",
        "tiny multipliers",
        "shift > 0",
        "typical multipliers",
        " u8 ",
        "per tensor",
        "per channel",
        "fixed-point requantization",
        "[1]",
        "ReduceMean over H, W kept",
        "ReduceMean over H, W dropped",
        "GlobalAveragePool",
        "→ 1×1 conv",
        "→ Relu",
    ] {
        assert!(seen.contains(wanted), "no case with {wanted:?}");
    }
}

/// The kit's default run draws the families on CpuAcc and they pass.
#[test]
fn the_default_run_draws_the_fixed_point_families() {
    let runtime = backplane::RuntimeBuilder::new().build().unwrap();
    let options = KitOptions {
        op_table: false,
        contract: false,
        sweep_cases: 4,
        ..KitOptions::default()
    };
    let report = check(&runtime, &BackendId::new("CpuAcc").unwrap(), &options);
    assert!(report.ok(), "{}", report.to_text());
    for family in FIXED_POINT {
        let t = &report.ops[&(SUITE.to_string(), family.to_string())];
        assert!(t.passed > 0, "{family}: {t:?}\n{}", report.to_text());
    }
}
