//! Sweep families for the float GEMM's tiles at sizes the other families do not reach: row
//! counts that mix six- and five-row tiles (the in-place tiles share the next half-panel's
//! prefetch between the six-row ones) and that pass the few-rows limit of 256 (the row
//! split), depths of one K block, one past it and three (the few-rows walk by panels and by
//! K blocks), prime widths; and Gemm with either operand transposed, alpha and beta, and a
//! bias of every broadcast shape.

use super::{Rng, SweepCase};
use backplane::core::ops::GemmDesc;
use backplane::core::Op;
use backplane::DataType;

/// Rows: one, a five-row and a six-row tile, seven (two uneven tiles), primes, ViT's 197
/// and 263 (past the few-rows limit).
const ROWS: [usize; 8] = [1, 5, 6, 7, 31, 61, 197, 263];
/// Depths: one, a K block, one past it, three K blocks and one past them.
const DEPTHS: [usize; 5] = [1, 256, 257, 768, 769];
/// Widths: three, one 16-column half, a prime near a panel's multiple, and wide primes.
const WIDTHS: [usize; 5] = [3, 16, 97, 509, 1031];
/// Most multiply-adds of one case (CpuRef computes them too).
const MAX_MACS: usize = 40_000_000;

/// Pick (m, k, n) with at most [`MAX_MACS`] multiply-adds, shrinking N then K.
fn shape(r: &mut Rng) -> (usize, usize, usize) {
    let (m, mut k, mut n) = (r.pick(&ROWS), r.pick(&DEPTHS), r.pick(&WIDTHS));
    while m * k * n > MAX_MACS && n > WIDTHS[0] {
        n = WIDTHS[WIDTHS.iter().position(|&w| w == n).unwrap_or(1) - 1];
    }
    while m * k * n > MAX_MACS && k > 1 {
        k = DEPTHS[DEPTHS.iter().position(|&d| d == k).unwrap_or(1) - 1];
    }
    (m, k, n)
}

/// MatMul of A ([m, k], or [1, m, k]) and a B of [k, n], mostly constant (packed at load).
pub(super) fn tile_rows_matmul(r: &mut Rng) -> Result<SweepCase, String> {
    let (m, k, n) = shape(r);
    let ad = match r.below(2) {
        0 => vec![m, k],
        _ => vec![1, m, k],
    };
    let a = r.tensor(DataType::F32, &ad, -1.0, 1.0)?;
    let b = r.tensor(DataType::F32, &[k, n], -1.0, 1.0)?;
    Ok(SweepCase {
        family: "TileRowsMatMul",
        op: Op::MatMul,
        inputs: vec![(a, false), (b, r.below(4) != 0)],
        rtol: 1e-4,
        atol: 1e-4 * (k as f64).sqrt(),
    })
}

/// Gemm of A ([m, k], or [k, m] with `transA`) and B ([k, n], or [n, k] with `transB`), with
/// alpha, beta and C of [n], [1, n], [m, 1] or [m, n]; B and C constant or not.
pub(super) fn large_gemm(r: &mut Rng) -> Result<SweepCase, String> {
    let (m, k, n) = shape(r);
    let (a, b, c, ta, tb) = super::gemm_operands(r, m, k, n)?;
    let (alpha, beta) = r.pick(&[(1.0, 1.0), (0.5, -1.5), (1.0, 0.0)]);
    Ok(SweepCase {
        family: "LargeGemm",
        op: Op::Gemm(GemmDesc {
            alpha,
            beta,
            trans_a: ta,
            trans_b: tb,
        }),
        inputs: vec![(a, false), (b, r.below(4) != 0), (c, r.below(2) == 0)],
        rtol: 1e-4,
        atol: 1e-4 * (k as f64).sqrt(),
    })
}
