//! One output row of a convolution with the output channels in vector lanes (AVX-512): each
//! input value is broadcast and multiplied into 16 or 32 output channels at once, for 24 or
//! 12 pixels in registers.
//!
//! This is the GEMM tile turned around: the weights are the vectors (loaded whole, aligned to
//! nothing but contiguous, from a block that stays in L1) and the input is the broadcast
//! operand, read straight from a zero-padded copy of the input at any stride, so nothing is
//! packed per execution and no load straddles an unaligned run. The pixels come out
//! channels-last (`[vector][pixel][lane]`); the caller transposes them into the planes.

use crate::act::Activation;

/// Pixels per tile with `vectors` (1 or 2) vectors of output channels: 24 accumulators.
pub fn tile_pixels(vectors: usize) -> usize {
    if vectors == 2 {
        12
    } else {
        24
    }
}

/// The most pixels of one row [`row`] reads past `np` (it computes whole tiles): the caller's
/// input must reach that far.
pub fn reach(np: usize, vectors: usize) -> usize {
    np.div_ceil(tile_pixels(vectors)) * tile_pixels(vectors)
}

/// One output row, pixels `0..np`, for one block of `16·vectors` output channels:
/// `out[(v·npad + p)·16 + l] = act(bias[16v + l] + Σ_t w[t·16·vectors + 16v + l] ·
/// x[p·step + taps[t]])` with `npad` = [`reach`]`(np, vectors)`; every pixel below `npad` is
/// written (those past `np` from whatever input lies there). Only the in-kernel activations
/// are applied (see [`Activation::in_kernel`]). Returns false, computing nothing, without
/// AVX-512, with `vectors` or `step` not 1 or 2, or when a slice is too short for that.
#[allow(clippy::too_many_arguments)]
pub fn row(
    x: &[f32],
    step: usize,
    taps: &[usize],
    w: &[f32],
    vectors: usize,
    bias: &[f32],
    act: Activation,
    np: usize,
    out: &mut [f32],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let width = 16 * vectors;
        let npad = reach(np, vectors);
        let last_read = taps
            .iter()
            .max()
            .and_then(|&t| npad.checked_sub(1)?.checked_mul(step)?.checked_add(t));
        let ok = super::has_avx512()
            && (1..=2).contains(&vectors)
            && (1..=2).contains(&step)
            && np > 0
            && last_read.is_some_and(|r| r < x.len())
            && taps.len().checked_mul(width).is_some_and(|n| n <= w.len())
            && bias.len() >= width
            && out.len() >= vectors * npad * 16;
        if !ok {
            return false;
        }
        // SAFETY: AVX-512F is present (checked). Tile `p0` reads x[(p0 + p)·step + t] for
        // p < its pixels and t in `taps`, all at most `last_read` < x.len(); w[i] for
        // i < taps.len()·width <= w.len(); bias[..width]; and writes out[(v·npad + p0 + p)·16
        // + l] for v < vectors, p0 + p < npad, l < 16, inside `out` (checked above).
        unsafe {
            macro_rules! tiles {
                ($v:literal, $p:literal, $s:literal) => {
                    for p0 in (0..npad).step_by($p) {
                        avx512::tile::<$v, $p, $s>(x, p0, taps, w, bias, act, out, npad);
                    }
                };
            }
            match (vectors, step) {
                (2, 1) => tiles!(2, 12, 1),
                (2, _) => tiles!(2, 12, 2),
                (_, 1) => tiles!(1, 24, 1),
                _ => tiles!(1, 24, 2),
            }
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (x, step, taps, w, vectors, bias, act, np, out);
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use crate::act::Activation;
    use crate::simd::avx512::Act512;
    #[allow(clippy::wildcard_imports)]
    use std::arch::x86_64::*;

    /// Pixels `p0 .. p0 + P` of [`super::row`], V vectors of channels, step S (a constant,
    /// so every broadcast's address is a constant offset: with a run-time step the
    /// addresses took registers and the accumulators were spilled). Safety: as `row`
    /// checks, for this tile.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile<const V: usize, const P: usize, const S: usize>(
        x: &[f32],
        p0: usize,
        taps: &[usize],
        w: &[f32],
        bias: &[f32],
        act: Activation,
        out: &mut [f32],
        npad: usize,
    ) {
        let z = _mm512_setzero_ps();
        let mut acc = [[z; V]; P];
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
        let act = Act512::new(act);
        let op = out.as_mut_ptr();
        for v in 0..V {
            let b = _mm512_loadu_ps(bias.as_ptr().add(16 * v));
            for (p, a) in acc.iter().enumerate() {
                let mut r = _mm512_add_ps(a[v], b);
                r = act.apply(r);
                _mm512_storeu_ps(op.add((v * npad + p0 + p) * 16), r);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pixel of rows of 1 to 40 pixels, strides 1 and 2, one and two vectors, against
    /// plain loops; a short input, weights or output, stride 3 or three vectors is refused.
    #[test]
    fn rows_match_plain_loops() {
        if !crate::simd::has_avx512() {
            return;
        }
        let taps = [0usize, 1, 2, 7, 9, 50];
        let x: Vec<f32> = (0..400)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        for vectors in [1, 2] {
            let width = 16 * vectors;
            let w: Vec<f32> = (0..taps.len() * width)
                .map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0)
                .collect();
            let bias: Vec<f32> = (0..width).map(|l| l as f32 / 4.0 - 2.0).collect();
            for step in 1..=2 {
                for np in [1, 5, 12, 13, 24, 25, 40] {
                    let npad = reach(np, vectors);
                    let mut out = vec![f32::NAN; vectors * npad * 16];
                    let act = Activation::Clip {
                        min: -3.0,
                        max: 5.0,
                    };
                    assert!(row(&x, step, &taps, &w, vectors, &bias, act, np, &mut out));
                    for v in 0..vectors {
                        for p in 0..np {
                            for l in 0..16 {
                                let mut s = bias[16 * v + l];
                                for (t, &off) in taps.iter().enumerate() {
                                    s += w[t * width + 16 * v + l] * x[p * step + off];
                                }
                                let want = s.clamp(-3.0, 5.0);
                                let got = out[(v * npad + p) * 16 + l];
                                assert!(
                                    (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                                    "v{v} step {step} np {np} p{p} l{l}: {got} vs {want}"
                                );
                            }
                        }
                    }
                    let mut short = vec![0f32; vectors * npad * 16 - 1];
                    assert!(!row(
                        &x, step, &taps, &w, vectors, &bias, act, np, &mut short
                    ));
                    let xs = &x[..(npad - 1) * step + 50];
                    assert!(!row(xs, step, &taps, &w, vectors, &bias, act, np, &mut out));
                    let ws = &w[..w.len() - 1];
                    assert!(!row(&x, step, &taps, ws, vectors, &bias, act, np, &mut out));
                    assert!(!row(&x, 3, &taps, &w, vectors, &bias, act, np, &mut out));
                    assert!(!row(&x, step, &taps, &w, 3, &bias, act, np, &mut out));
                }
            }
        }
    }
}
