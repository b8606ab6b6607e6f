//! GpuAcc's Transpose, Concat, Slice and Pad over other element types than f32 (i32, i64,
//! u8, bool, f16), against CpuRef exactly, on GpuAcc alone (a refusal fails the case): the
//! backend test kit's random families, then the cases where sub-word elements of different
//! inputs share a word (a Concat of bools and bytes with odd slabs) and constant fills of
//! each type.
//!
//! Needs a Vulkan adapter (a software one is accepted); without one the tests print why and
//! pass, unless `BACKPLANE_REQUIRE_GPU_ADAPTER=1` (CI) makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane::core::ops::{PadDesc, PadMode, SliceDesc};
use backplane::core::{DataType, Op};
use backplane_backend_tests::sweeps::{Rng, SweepCase, FAMILIES};
use common::{case, expect_pass, runtime};

/// Cases of the kit's family `name` from seeds `0..n`.
fn family(name: &str, n: u64) -> Vec<SweepCase> {
    let generate = FAMILIES
        .iter()
        .find(|(f, _)| *f == name)
        .map(|(_, g)| *g)
        .unwrap_or_else(|| panic!("the kit has no family {name}"));
    (0..n)
        .map(|seed| generate(&mut Rng::new(2000 + seed)).unwrap())
        .collect()
}

fn exact(op: Op, inputs: Vec<(backplane::Tensor, bool)>) -> SweepCase {
    SweepCase {
        rtol: 0.0,
        atol: 0.0,
        ..case(op, inputs)
    }
}

#[test]
fn the_kit_movement_families_pass_on_every_type() {
    let Some(rt) = runtime() else { return };
    let mut cases = Vec::new();
    for name in ["Transpose", "Concat", "Slice", "Pad"] {
        cases.extend(family(name, 24));
    }
    let types: std::collections::BTreeSet<String> = cases
        .iter()
        .map(|c| c.inputs[0].0.info().dtype.to_string())
        .collect();
    assert!(types.len() >= 4, "the families cover few types: {types:?}");
    expect_pass(&rt, cases);
}

#[test]
fn sub_word_concat_slabs_and_typed_pad_values_match_cpu_ref() {
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(5);
    let mut cases = Vec::new();
    for dtype in [DataType::Bool, DataType::U8, DataType::F16, DataType::I64] {
        let hi = if dtype == DataType::Bool { 2.0 } else { 100.0 };
        let mut x = |d: &[usize]| r.tensor(dtype, d, 0.0, hi).unwrap();
        // Slabs of 3, 1 and 5 elements: every word of the output mixes two inputs.
        cases.push(exact(
            Op::Concat { axis: 0 },
            vec![(x(&[3]), false), (x(&[1]), true), (x(&[5]), false)],
        ));
        cases.push(exact(
            Op::Concat { axis: 1 },
            vec![(x(&[3, 1, 2]), false), (x(&[3, 2, 2]), false)],
        ));
        cases.push(exact(
            Op::Transpose {
                perm: vec![2, 0, 1],
            },
            vec![(x(&[3, 5, 7]), false)],
        ));
        cases.push(exact(
            Op::Slice(SliceDesc {
                starts: vec![-1, 1],
                ends: vec![i64::MIN, 7],
                axes: vec![0, 1],
                steps: vec![-2, 3],
            }),
            vec![(x(&[5, 7]), false)],
        ));
        for mode in [
            PadMode::Constant,
            PadMode::Reflect,
            PadMode::Edge,
            PadMode::Wrap,
        ] {
            cases.push(exact(
                Op::Pad(PadDesc {
                    mode,
                    pads: vec![1, 2, 2, 1],
                    value: 1.0,
                }),
                vec![(x(&[3, 5]), false)],
            ));
        }
    }
    expect_pass(&rt, cases);
}
