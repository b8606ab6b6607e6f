//! Sweep families for the transformers' projections that the generic families never reach:
//! a product of few rows (1 to 197: a sequence, or one token) against a constant B of more
//! than 128K weights (odd widths, 509 to 2053 columns, and 532: a last panel of 20; depths of
//! one to three K blocks), as MatMul (with or without a batch of one in front) and as Gemm
//! with a bias (GPT-2's Conv1D, BERT's Linear with `transB`).

use super::{Rng, SweepCase};
use backplane::core::ops::GemmDesc;
use backplane::core::Op;
use backplane::DataType;

/// Rows of A: one token, a few, a sequence of 64, ViT's 197 patches.
const ROWS: [usize; 6] = [1, 13, 17, 64, 97, 197];
/// (K, N) with K·N above 2^17: B larger than L2, odd widths and depths; (600, 532) has three
/// K blocks and a last panel of 20 columns (the 24-wide tile), with few rows walked panel by
/// panel (A in L2).
const DEPTH_WIDTH: [(usize, usize); 6] = [
    (131, 1031),
    (263, 509),
    (257, 521),
    (64, 2053),
    (768, 173),
    (600, 532),
];

/// MatMul of A ([m, k] or [1, m, k]) and a B of [k, n], mostly constant.
pub(super) fn few_rows_matmul(r: &mut Rng) -> Result<SweepCase, String> {
    let m = r.pick(&ROWS);
    let (k, n) = r.pick(&DEPTH_WIDTH);
    let ad = if r.below(2) == 0 {
        vec![m, k]
    } else {
        vec![1, m, k]
    };
    let a = r.tensor(DataType::F32, &ad, -1.0, 1.0)?;
    let b = r.tensor(DataType::F32, &[k, n], -1.0, 1.0)?;
    Ok(SweepCase {
        family: "FewRowsMatMul",
        op: Op::MatMul,
        inputs: vec![(a, false), (b, r.below(4) != 0)],
        rtol: 1e-4,
        atol: 1e-4 * (k as f64).sqrt(),
    })
}

/// Gemm of A [m, k] and a constant B ([k, n], or [n, k] with `transB`) plus a bias of [n].
pub(super) fn projection_gemm(r: &mut Rng) -> Result<SweepCase, String> {
    let m = r.pick(&ROWS);
    let (k, n) = r.pick(&DEPTH_WIDTH);
    let tb = r.below(2) == 0;
    let a = r.tensor(DataType::F32, &[m, k], -1.0, 1.0)?;
    let b = r.tensor(DataType::F32, &if tb { [n, k] } else { [k, n] }, -1.0, 1.0)?;
    let c = r.tensor(DataType::F32, &[n], -1.0, 1.0)?;
    Ok(SweepCase {
        family: "ProjectionGemm",
        op: Op::Gemm(GemmDesc {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: tb,
        }),
        inputs: vec![(a, false), (b, true), (c, true)],
        rtol: 1e-4,
        atol: 1e-4 * (k as f64).sqrt(),
    })
}
