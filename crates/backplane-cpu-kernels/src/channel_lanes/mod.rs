//! One output row of a convolution with the output channels in vector lanes: each input
//! value is broadcast and multiplied into 16 or 32 output channels at once, for 24, 14 or 7
//! pixels in registers (AVX-512), or into 16 channels as two 8-lane halves for 6 pixels
//! (AVX2: the 24-pixel tiles of one vector in four steps).
//!
//! This is the GEMM tile turned around: the weights are the vectors (loaded whole, aligned to
//! nothing but contiguous, from a block that stays in L1) and the input is the broadcast
//! operand, read straight from a zero-padded copy of the input at any stride, so nothing is
//! packed per execution and no load straddles an unaligned run. The pixels come out
//! channels-last (`[vector][pixel][lane]`); the caller transposes them into the planes.

use crate::act::Activation;

/// Pixels per tile for rows of `np` pixels with `vectors` (1 or 2) vectors of output
/// channels: 24 pixels of one vector, 14 of two (28 accumulators: rows of 14, 28, 56 and 112
/// pixels fill whole tiles), or 7 of two for rows of at most 7 (a 7×7 plane would waste half
/// of a 14-pixel tile).
pub fn tile_pixels(np: usize, vectors: usize) -> usize {
    match vectors {
        2 if np <= 7 => 7,
        2 => 14,
        _ => 24,
    }
}

/// The pixels [`row`] computes for rows of `np` (whole tiles): the caller's input must reach
/// that far, and its output hold that many.
pub fn reach(np: usize, vectors: usize) -> usize {
    let p = tile_pixels(np, vectors);
    np.div_ceil(p) * p
}

/// How one pass of [`row`] starts and ends: passes over successive blocks of taps (input
/// channels) add into the same row, and only the last adds the bias and the activation.
#[derive(Debug, Clone, Copy)]
pub struct RowPass<'a> {
    /// Add to the sums `out` holds (from the previous block) rather than overwrite them.
    pub accumulate: bool,
    /// For the last pass: the bias (`16·vectors` values) and the activation (in-kernel
    /// ones only, see [`Activation::in_kernel`]).
    pub finish: Option<(&'a [f32], Activation)>,
}

/// One output row, pixels `0..np`, for one block of `16·vectors` output channels:
/// `out[(v·npad + p)·16 + l] (+)= Σ_t w[t·16·vectors + 16v + l] · x[p·step + taps[t]]`, then
/// with `pass.finish` the bias and activation, where `npad` = [`reach`]`(np, vectors)`; every
/// pixel below `npad` is written (those past `np` from whatever input lies there). Returns
/// false, computing nothing, without AVX-512 or AVX2 ([`supports`]), with `vectors` or
/// `step` not 1 or 2 (`vectors` not 1 with AVX2 alone), or when a slice is too short for
/// that.
#[allow(clippy::too_many_arguments)]
pub fn row(
    x: &[f32],
    step: usize,
    taps: &[usize],
    w: &[f32],
    vectors: usize,
    pass: RowPass<'_>,
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
        let ok = supports(vectors)
            && (1..=2).contains(&step)
            && np > 0
            && last_read.is_some_and(|r| r < x.len())
            && taps.len().checked_mul(width).is_some_and(|n| n <= w.len())
            && pass.finish.is_none_or(|(bias, _)| bias.len() >= width)
            && out.len() >= vectors * npad * 16;
        if !ok {
            return false;
        }
        if !crate::isa::has_avx512() {
            // SAFETY: AVX2 and FMA are present and `vectors` is 1 (`supports`, checked).
            // Tile `p0` (a multiple of 6 below npad, a multiple of 24) reads
            // x[(p0 + p)·step + t] for p < 6 and t in `taps`, all at most `last_read` <
            // x.len(); w[i] for i < taps.len()·16 <= w.len(); bias[..16]; and reads and
            // writes out[(p0 + p)·16 + l] for p0 + p < npad, l < 16, inside `out` (checked
            // above).
            unsafe {
                for p0 in (0..npad).step_by(AVX2_PIXELS) {
                    if step == 1 {
                        avx2::tile::<AVX2_PIXELS, 1>(x, p0, taps, w, pass, out);
                    } else {
                        avx2::tile::<AVX2_PIXELS, 2>(x, p0, taps, w, pass, out);
                    }
                }
            }
            return true;
        }
        // SAFETY: AVX-512F is present (checked). Tile `p0` reads x[(p0 + p)·step + t] for
        // p < its pixels and t in `taps`, all at most `last_read` < x.len(); w[i] for
        // i < taps.len()·width <= w.len(); bias[..width]; and reads and writes
        // out[(v·npad + p0 + p)·16 + l] for v < vectors, p0 + p < npad, l < 16, inside `out`
        // (checked above).
        unsafe {
            macro_rules! tiles {
                ($v:literal, $p:literal, $s:literal) => {
                    for p0 in (0..npad).step_by($p) {
                        avx512::tile::<$v, $p, $s>(x, p0, taps, w, pass, out, npad);
                    }
                };
            }
            match (tile_pixels(np, vectors), step) {
                (7, 1) => tiles!(2, 7, 1),
                (7, _) => tiles!(2, 7, 2),
                (14, 1) => tiles!(2, 14, 1),
                (14, _) => tiles!(2, 14, 2),
                (_, 1) => tiles!(1, 24, 1),
                _ => tiles!(1, 24, 2),
            }
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (x, step, taps, w, vectors, pass, np, out);
        false
    }
}

/// Pixels of an AVX2 tile: 6 (twelve accumulators), dividing every tile width [`reach`]
/// pads to for one vector (24).
const AVX2_PIXELS: usize = 6;

const _: () = assert!(24 % AVX2_PIXELS == 0);

/// Whether [`row`] runs `vectors` vectors of 16 output channels on this CPU: 1 or 2 with
/// AVX-512, 1 with AVX2 and FMA (two 8-lane halves); never on the portable tier.
pub fn supports(vectors: usize) -> bool {
    if crate::isa::has_avx512() {
        (1..=2).contains(&vectors)
    } else {
        vectors == 1 && crate::isa::avx2_in_use()
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pixel of rows of 1 to 40 pixels (around each tile width), strides 1 and 2, one
    /// and two vectors, in one
    /// pass and in two (the second adding to the first's sums), against plain loops; a
    /// short input, weights, bias or output, stride 3 or three vectors is refused.
    #[test]
    fn rows_match_plain_loops() {
        if !supports(1) {
            return;
        }
        let taps = [0usize, 1, 2, 7, 9, 50];
        let x: Vec<f32> = (0..400)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        let act = Activation::Clip {
            min: -3.0,
            max: 5.0,
        };
        for vectors in [1, 2].into_iter().filter(|&v| supports(v)) {
            let width = 16 * vectors;
            let w: Vec<f32> = (0..taps.len() * width)
                .map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0)
                .collect();
            let bias: Vec<f32> = (0..width).map(|l| l as f32 / 4.0 - 2.0).collect();
            let last = RowPass {
                accumulate: false,
                finish: Some((&bias, act)),
            };
            for step in 1..=2 {
                for np in [1, 5, 7, 8, 12, 14, 15, 24, 25, 28, 40] {
                    let npad = reach(np, vectors);
                    let mut one = vec![f32::NAN; vectors * npad * 16];
                    assert!(row(&x, step, &taps, &w, vectors, last, np, &mut one));
                    // Taps 0..2, then 2.. added to them.
                    let mut two = vec![f32::NAN; vectors * npad * 16];
                    let first = RowPass {
                        accumulate: false,
                        finish: None,
                    };
                    assert!(row(&x, step, &taps[..2], &w, vectors, first, np, &mut two));
                    let then = RowPass {
                        accumulate: true,
                        ..last
                    };
                    let w2 = &w[2 * width..];
                    assert!(row(&x, step, &taps[2..], w2, vectors, then, np, &mut two));
                    for v in 0..vectors {
                        for p in 0..np {
                            for l in 0..16 {
                                let mut s = bias[16 * v + l];
                                for (t, &off) in taps.iter().enumerate() {
                                    s += w[t * width + 16 * v + l] * x[p * step + off];
                                }
                                let want = s.clamp(-3.0, 5.0);
                                for (how, got) in [("one", &one), ("two", &two)] {
                                    let got = got[(v * npad + p) * 16 + l];
                                    assert!(
                                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                                        "{how} v{v} step {step} np {np} p{p} l{l}: {got} vs {want}"
                                    );
                                }
                            }
                        }
                    }
                    let mut short = vec![0f32; vectors * npad * 16 - 1];
                    assert!(!row(&x, step, &taps, &w, vectors, last, np, &mut short));
                    let xs = &x[..(npad - 1) * step + 50];
                    assert!(!row(xs, step, &taps, &w, vectors, last, np, &mut one));
                    let ws = &w[..w.len() - 1];
                    assert!(!row(&x, step, &taps, ws, vectors, last, np, &mut one));
                    let short_bias = RowPass {
                        accumulate: false,
                        finish: Some((&bias[1..], act)),
                    };
                    assert!(!row(&x, step, &taps, &w, vectors, short_bias, np, &mut one));
                    assert!(!row(&x, 3, &taps, &w, vectors, last, np, &mut one));
                    assert!(!row(&x, step, &taps, &w, 3, last, np, &mut one));
                }
            }
        }
        // AVX2 alone runs one vector only.
        if !crate::isa::has_avx512() {
            let w = vec![0.5f32; taps.len() * 32];
            let mut out = vec![0f32; 2 * reach(14, 2) * 16];
            let pass = RowPass {
                accumulate: false,
                finish: None,
            };
            assert!(!supports(2));
            assert!(!row(&x, 1, &taps, &w, 2, pass, 14, &mut out));
        }
    }
}
