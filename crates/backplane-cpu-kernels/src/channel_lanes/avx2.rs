use super::RowPass;
use crate::act::Activation;
use crate::gemm::avx2::Act256;
#[allow(clippy::wildcard_imports)]
use std::arch::x86_64::*;

/// Pixels `p0 .. p0 + P` of [`super::row`] for one vector of 16 output channels, held as
/// two 8-lane halves (2·P accumulators: six pixels fill twelve of the sixteen registers,
/// leaving two for the weights and one for the broadcast input), step S (a constant, as in
/// the AVX-512 tile). Safety: as `row` checks, for this tile, with AVX2 and FMA present.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn tile<const P: usize, const S: usize>(
    x: &[f32],
    p0: usize,
    taps: &[usize],
    w: &[f32],
    pass: RowPass<'_>,
    out: &mut [f32],
) {
    let z = _mm256_setzero_ps();
    let mut acc = [(z, z); P];
    let op = out.as_mut_ptr().add(p0 * 16);
    if pass.accumulate {
        for (p, a) in acc.iter_mut().enumerate() {
            *a = (
                _mm256_loadu_ps(op.add(p * 16)),
                _mm256_loadu_ps(op.add(p * 16 + 8)),
            );
        }
    }
    let xp = x.as_ptr().add(p0 * S);
    let mut wp = w.as_ptr();
    for &t in taps {
        let xt = xp.add(t);
        let (w0, w1) = (_mm256_loadu_ps(wp), _mm256_loadu_ps(wp.add(8)));
        for (p, (a0, a1)) in acc.iter_mut().enumerate() {
            let xv = _mm256_broadcast_ss(&*xt.add(p * S));
            *a0 = _mm256_fmadd_ps(xv, w0, *a0);
            *a1 = _mm256_fmadd_ps(xv, w1, *a1);
        }
        wp = wp.add(16);
    }
    let (b0, b1, act) = match pass.finish {
        Some((bias, act)) => (
            _mm256_loadu_ps(bias.as_ptr()),
            _mm256_loadu_ps(bias.as_ptr().add(8)),
            act,
        ),
        None => (z, z, Activation::None),
    };
    let act = Act256::new(act);
    for (p, (a0, a1)) in acc.iter().enumerate() {
        _mm256_storeu_ps(op.add(p * 16), act.apply(_mm256_add_ps(*a0, b0)));
        _mm256_storeu_ps(op.add(p * 16 + 8), act.apply(_mm256_add_ps(*a1, b1)));
    }
}
