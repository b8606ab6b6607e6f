//! f16 sweeps: the random sweeps' float families (and LayerNormalization) with their f32
//! tensors stored as f16, on the backend under test alone. CpuRef computes most of these ops
//! in f32 only, so the reference is CpuRef's kernel on the very same values widened to f32
//! (exactly), its f32 results rounded once to f16: what a kernel that accumulates in f32 and
//! rounds each output once computes. A backend without f16 kernels refuses the cases, which
//! is not a failure.
//!
//! Tolerance ([`F16_RTOL`], [`F16_ATOL`]): two units in the last place of f16, since a
//! result computed in another order may round to the neighbour of the reference's.

use crate::report::{Outcome, Report};
use crate::sweeps::{network, Rng, SweepCase, FAMILIES};
use backplane::compare::{compare, Mismatch};
use backplane::core::Op;
use backplane::{BackendId, DataType, Runtime, Tensor, TensorInfo};

/// The suite's name in reports.
pub const SUITE: &str = "f16 sweeps";

/// Relative tolerance of an f16 result: 2^-9, two units in f16's last place (of 2^-10 to
/// 2^-11 of the value each).
pub const F16_RTOL: f64 = 2e-3;

/// Absolute tolerance of an f16 result, for values that cancel near zero.
pub const F16_ATOL: f64 = 1e-4;

/// The sweep families whose cases compute on floats, run in f16.
const HALF_FAMILIES: &[&str] = &[
    "Unary",
    "Binary",
    "Pow",
    "MatMul",
    "Gemm",
    "Conv",
    "Pool",
    "Softmax",
    "Reduce",
    "Resize",
    "Cast",
    "Transpose",
    "GroupedConv",
    "SmallMaxPool",
    "WinogradConv",
    "LaneGroupedConv",
    "SmallPlanePointwise",
    "FewRowsMatMul",
    "ProjectionGemm",
];

/// `t` stored as f16 (each value rounded once to nearest even) when it is f32, else as is.
pub fn to_f16(t: &Tensor) -> Result<Tensor, String> {
    if t.dtype() != DataType::F32 {
        return Ok(t.clone());
    }
    Tensor::from_f64_values(
        TensorInfo::new(DataType::F16, t.info().shape.dims().to_vec()),
        &t.to_f64_vec(),
    )
    .map_err(|e| e.to_string())
}

/// `t` widened to f32 (exact) when it is f16, else as is.
fn to_f32(t: &Tensor) -> Result<Tensor, String> {
    if t.dtype() != DataType::F16 {
        return Ok(t.clone());
    }
    Tensor::from_f64_values(
        TensorInfo::new(DataType::F32, t.info().shape.dims().to_vec()),
        &t.to_f64_vec(),
    )
    .map_err(|e| e.to_string())
}

/// The case with every f32 input stored as f16 and the f16 tolerance; `None` when it has no
/// f32 input.
pub fn half_case(case: &SweepCase) -> Result<Option<SweepCase>, String> {
    if !case.inputs.iter().any(|(t, _)| t.dtype() == DataType::F32) {
        return Ok(None);
    }
    let inputs = case
        .inputs
        .iter()
        .map(|(t, c)| Ok((to_f16(t)?, *c)))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Some(SweepCase {
        family: case.family,
        op: case.op.clone(),
        inputs,
        rtol: F16_RTOL,
        atol: F16_ATOL,
    }))
}

/// Run an f16 case (inputs stored as f16) on `backend` alone against CpuRef's kernel on the
/// same values widened to f32, its results rounded to each output's type.
pub fn run_half_case(runtime: &Runtime, backend: &BackendId, case: &SweepCase) -> Outcome {
    let widened: Result<Vec<Tensor>, String> = case.inputs.iter().map(|(t, _)| to_f32(t)).collect();
    let widened = match widened {
        Ok(w) => w,
        Err(e) => return Outcome::Skipped(e),
    };
    let refs: Vec<&Tensor> = widened.iter().collect();
    let want = match backplane::cpu_ref::evaluate(&case.op, &refs) {
        Ok(w) => w,
        Err(e) => return Outcome::Skipped(format!("CpuRef: {e}")),
    };
    let (net, feed) = match network(case) {
        Ok(v) => v,
        Err(e) => return Outcome::Skipped(e),
    };
    let got = match crate::exec::run_network(runtime, &net, std::slice::from_ref(backend), &feed) {
        crate::exec::Run::Refused(why) => return Outcome::Refused(why),
        crate::exec::Run::Ran { outputs, .. } => match outputs {
            Ok(got) => got,
            Err(why) => return Outcome::Failed { why, worst: None },
        },
    };
    if got.len() != want.len() {
        return Outcome::Failed {
            why: format!("{} outputs, expected {}", got.len(), want.len()),
            worst: None,
        };
    }
    for ((_, g), w) in got.iter().zip(&want) {
        let w = if g.dtype() == DataType::F16 && w.dtype() == DataType::F32 {
            match to_f16(w) {
                Ok(w) => w,
                Err(e) => return Outcome::Skipped(e),
            }
        } else {
            w.clone()
        };
        if let Err(Mismatch { message, worst, .. }) = compare(g, &w, case.rtol, case.atol) {
            return Outcome::Failed {
                why: message,
                worst: Some(worst),
            };
        }
    }
    Outcome::Passed
}

/// A LayerNormalization case over the last one or two axes, scale and bias one per element.
pub fn layer_norm(r: &mut Rng) -> Result<SweepCase, String> {
    let rows = r.pick(&[1usize, 2, 3, 7]);
    let len = r.pick(&[1usize, 5, 17, 64, 129]);
    let two = r.below(2) == 1;
    let (x_dims, row): (Vec<usize>, Vec<usize>) = if two {
        (vec![rows, 3, len], vec![3, len])
    } else {
        (vec![rows, len], vec![len])
    };
    let axis = if two { -2 } else { -1 };
    let x = r.tensor(DataType::F32, &x_dims, -2.0, 2.0)?;
    let scale = r.tensor(DataType::F32, &row, 0.5, 1.5)?;
    let bias = r.tensor(DataType::F32, &row, -0.5, 0.5)?;
    let constant = r.below(2) == 1;
    Ok(SweepCase {
        family: "LayerNorm",
        op: Op::LayerNormalization {
            axis,
            epsilon: 1e-5,
        },
        inputs: vec![(x, false), (scale, constant), (bias, constant)],
        rtol: 1e-4,
        atol: 1e-5,
    })
}

/// Run `cases` f16 cases of each float family on `backend` alone, from `seed`, into `report`
/// (the f32 sweeps' generators from the same case seeds, their f32 tensors stored as f16).
pub fn run(runtime: &Runtime, backend: &BackendId, seed: u64, cases: usize, report: &mut Report) {
    type Gen = fn(&mut Rng) -> Result<SweepCase, String>;
    let mut families: Vec<(usize, &str, Gen)> = FAMILIES
        .iter()
        .enumerate()
        .filter(|(_, (name, _))| HALF_FAMILIES.contains(name))
        .map(|(k, (name, g))| (k, *name, *g))
        .collect();
    families.push((FAMILIES.len(), "LayerNorm", layer_norm));
    for (fi, family, generate) in families {
        for i in 0..cases {
            let case_seed = seed
                .wrapping_mul(1_000_003)
                .wrapping_add((fi * 100_000 + i) as u64);
            let name = format!("{family} #{i} (--seed {seed}; case seed {case_seed}, f16)");
            let case = generate(&mut Rng::new(case_seed)).and_then(|c| half_case(&c));
            let outcome = match case {
                Ok(Some(case)) => run_half_case(runtime, backend, &case),
                Ok(None) => continue,
                Err(e) => Outcome::Skipped(e),
            };
            report.record(SUITE, family, &name, outcome);
        }
    }
}
