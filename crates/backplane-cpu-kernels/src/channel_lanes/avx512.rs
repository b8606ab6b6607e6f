use super::RowPass;
use crate::act::Activation;
use crate::gemm::avx512::Act512;
#[allow(clippy::wildcard_imports)]
use std::arch::x86_64::*;

/// Pixels `p0 .. p0 + P` of [`super::row`], V vectors of channels, step S (a constant,
/// so every broadcast's address is a constant offset: with a run-time step the
/// addresses took registers and the accumulators were spilled). Safety: as `row`
/// checks, for this tile.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn tile<const V: usize, const P: usize, const S: usize>(
    x: &[f32],
    p0: usize,
    taps: &[usize],
    w: &[f32],
    pass: RowPass<'_>,
    out: &mut [f32],
    npad: usize,
) {
    let z = _mm512_setzero_ps();
    let mut acc = [[z; V]; P];
    let op = out.as_mut_ptr();
    if pass.accumulate {
        for (p, a) in acc.iter_mut().enumerate() {
            for (v, r) in a.iter_mut().enumerate() {
                *r = _mm512_loadu_ps(op.add((v * npad + p0 + p) * 16));
            }
        }
    }
    let xp = x.as_ptr().add(p0 * S);
    let mut wp = w.as_ptr();
    for &t in taps {
        let xt = xp.add(t);
        let mut wv = [z; V];
        for (v, r) in wv.iter_mut().enumerate() {
            *r = _mm512_loadu_ps(wp.add(16 * v));
        }
        for (p, a) in acc.iter_mut().enumerate() {
            let xv = _mm512_set1_ps(*xt.add(p * S));
            for (o, &wr) in a.iter_mut().zip(&wv) {
                *o = _mm512_fmadd_ps(xv, wr, *o);
            }
        }
        wp = wp.add(16 * V);
    }
    let (bias, act) = pass.finish.unwrap_or((&[], Activation::None));
    let act = Act512::new(act);
    for v in 0..V {
        let b = match pass.finish {
            Some(_) => _mm512_loadu_ps(bias.as_ptr().add(16 * v)),
            None => z,
        };
        for (p, a) in acc.iter().enumerate() {
            let r = act.apply(_mm512_add_ps(a[v], b));
            _mm512_storeu_ps(op.add((v * npad + p0 + p) * 16), r);
        }
    }
}
