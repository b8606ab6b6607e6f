//! Vector-matrix products against packed B panels: a single row of A, one FMA per weight.

use crate::gemm::NR;

crate::multiversion! {
    /// `acc[j] += Σ_l x[l]·panel[l·NR + j]`: one packed B panel times a vector (see
    /// `crate::gemm`).
    pub fn gemv_panel(x: &[f32], panel: &[f32], acc: &mut [f32; NR]) => gemv_panel_body;
}

/// [`gemv_panel`]'s body: two K steps at a time into two sets of accumulators, so the FMA
/// chains are half as long.
#[inline(always)]
fn gemv_panel_body(x: &[f32], panel: &[f32], acc: &mut [f32; NR]) {
    let mut odd = [0f32; NR];
    let mut pairs = x.chunks_exact(2).zip(panel.chunks_exact(2 * NR));
    for (xs, rows) in &mut pairs {
        let (r0, r1) = rows.split_at(NR);
        for j in 0..NR {
            acc[j] = r0[j].mul_add(xs[0], acc[j]);
            odd[j] = r1[j].mul_add(xs[1], odd[j]);
        }
    }
    if x.len() % 2 == 1 {
        let l = x.len() - 1;
        if let Some(r) = panel.get(l * NR..(l + 1) * NR) {
            for j in 0..NR {
                acc[j] = r[j].mul_add(x[l], acc[j]);
            }
        }
    }
    for j in 0..NR {
        acc[j] += odd[j];
    }
}
