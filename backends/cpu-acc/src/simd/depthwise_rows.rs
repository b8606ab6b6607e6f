//! Depthwise 3×3 convolution of one plane read in place, sixteen outputs of a row per
//! vector (AVX-512): no copy of the input and no transposes.
//!
//! Each output row accumulates three input rows; each tap's sixteen inputs are one masked
//! load (stride 1) or two masked loads and an even-lane permute (stride 2). The masks drop
//! the inputs past the plane's edges (the zero padding) and masked-off lanes are never read,
//! so the border needs no case of its own. Up to four vectors of a row are computed together,
//! with one accumulator per kernel row, so twelve FMA chains are in flight.

use crate::act::Activation;
use crate::window::Geo2;

/// Whether [`plane`] computes this geometry: a 3×3 window, dilation 1, the same stride 1 or
/// 2 both ways, and AVX-512.
pub fn applies(g: &Geo2) -> bool {
    super::has_avx512()
        && g.kh == 3
        && g.kw == 3
        && g.dh == 1
        && g.dw == 1
        && g.sh == g.sw
        && (1..=2).contains(&g.sh)
}

/// `y = act(conv(x) + bias)` for one plane of a depthwise convolution: `x` holds the `h·w`
/// input plane, `w` its nine taps (row-major), `y` the `oh·ow` output plane. Only the
/// in-kernel activations are applied (see [`Activation::in_kernel`]). Returns false,
/// writing nothing, when [`applies`] does not hold or a slice is too short.
pub fn plane(g: &Geo2, x: &[f32], w: &[f32], bias: f32, act: Activation, y: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if applies(g)
        && g.oh > 0
        && g.ow > 0
        && x.len() >= g.h * g.w
        && w.len() >= 9
        && y.len() >= g.oh * g.ow
    {
        let taps: [f32; 9] = std::array::from_fn(|t| w[t]);
        // SAFETY: AVX-512F is present (`applies`). Every load is masked to the lanes whose
        // input row and column lie inside the h×w plane `x` holds (masked-off lanes are not
        // read, and their addresses are formed with wrapping arithmetic), and every store to
        // the lanes of output columns < ow of rows < oh, inside `y` (checked above).
        unsafe { avx512::planes::<false>(g, x.as_ptr(), &taps, bias, act, y.as_mut_ptr()) };
        return true;
    }
    let _ = (g, x, w, bias, act, y);
    false
}

/// `y` = the 3×3 max pooling of one plane (`x`: `h·w`, `y`: `oh·ow`; padding never wins,
/// and a NaN in a window makes its output NaN, as CpuRef's). Returns false, writing nothing,
/// when [`applies`] does not hold or a slice is too short.
pub fn max_plane(g: &Geo2, x: &[f32], y: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if applies(g) && g.oh > 0 && g.ow > 0 && x.len() >= g.h * g.w && y.len() >= g.oh * g.ow {
        // SAFETY: as in `plane`: AVX-512F is present, loads are masked to the plane and
        // stores to the output plane (checked above).
        unsafe {
            avx512::planes::<true>(
                g,
                x.as_ptr(),
                &[0.0; 9],
                0.0,
                Activation::None,
                y.as_mut_ptr(),
            )
        };
        return true;
    }
    let _ = (g, x, y);
    false
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use crate::act::Activation;
    use crate::simd::avx512::Act512;
    use crate::window::Geo2;
    use std::arch::x86_64::*;

    /// The lanes `j < 16` with `lo <= start + j < hi`, for a run of inputs starting at
    /// column `start` of a row of `[lo, hi)` valid columns.
    #[inline]
    fn lanes(start: isize, lo: isize, hi: isize) -> __mmask16 {
        let from = (lo - start).clamp(0, 16);
        let to = (hi - start).clamp(0, 16);
        if to <= from {
            return 0;
        }
        let upto = |n: isize| -> u32 {
            if n >= 16 {
                0xffff
            } else {
                (1u32 << n) - 1
            }
        };
        (upto(to) & !upto(from)) as __mmask16
    }

    /// [`super::plane`] (MAX false) or [`super::max_plane`] (MAX true: `w`, `bias` and `act`
    /// unused). Safety: AVX-512F present; `x` readable for `g.h·g.w` floats, `y` writable
    /// for `g.oh·g.ow`; `g` as [`super::applies`] requires.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn planes<const MAX: bool>(
        g: &Geo2,
        x: *const f32,
        w: &[f32; 9],
        bias: f32,
        act: Activation,
        y: *mut f32,
    ) {
        let mut ox = 0;
        while ox < g.ow {
            let chunks = (g.ow - ox).div_ceil(16).min(4);
            // SAFETY: as this function's (the chunks cover columns ox .. ox + 16·chunks,
            // stores masked to columns < ow).
            unsafe {
                match chunks {
                    1 => columns::<1, MAX>(g, x, w, bias, act, y, ox),
                    2 => columns::<2, MAX>(g, x, w, bias, act, y, ox),
                    3 => columns::<3, MAX>(g, x, w, bias, act, y, ox),
                    _ => columns::<4, MAX>(g, x, w, bias, act, y, ox),
                }
            }
            ox += 16 * chunks;
        }
    }

    /// Output columns `ox0 .. ox0 + 16·N` (those below `ow`) of every row: the weighted sum
    /// of each window, or with MAX its maximum (padding lanes read as −∞, NaNs tracked in a
    /// mask since the vector max drops them). Safety: as [`planes`].
    #[target_feature(enable = "avx512f")]
    unsafe fn columns<const N: usize, const MAX: bool>(
        g: &Geo2,
        x: *const f32,
        w: &[f32; 9],
        bias: f32,
        act: Activation,
        y: *mut f32,
        ox0: usize,
    ) {
        let s = g.sw as isize;
        let width = g.w as isize;
        // masks[kx][c][half]: the valid lanes of the run each tap reads for chunk c (stride
        // 2 reads 32 inputs, two halves, for 16 outputs).
        let mut masks = [[[0 as __mmask16; 2]; N]; 3];
        let mut starts = [[0isize; N]; 3];
        for (kx, (mk, st)) in masks.iter_mut().zip(starts.iter_mut()).enumerate() {
            for c in 0..N {
                let start = ((ox0 + 16 * c) as isize) * s + kx as isize - g.pl as isize;
                st[c] = start;
                mk[c][0] = lanes(start, 0, width);
                mk[c][1] = lanes(start + 16, 0, width);
            }
        }
        let mut out_masks = [0 as __mmask16; N];
        for (c, m) in out_masks.iter_mut().enumerate() {
            *m = lanes((ox0 + 16 * c) as isize, 0, g.ow as isize);
        }
        let taps: [__m512; 9] = std::array::from_fn(|t| _mm512_set1_ps(w[t]));
        let b = _mm512_set1_ps(bias);
        let z = _mm512_setzero_ps();
        // Even lanes of a 32-float run: inputs 2j for outputs j (stride 2).
        let evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        let act = Act512::new(act);
        // What the masked-off lanes of a load hold: zero for sums, −∞ for the maximum.
        let fill = if MAX {
            _mm512_set1_ps(f32::NEG_INFINITY)
        } else {
            z
        };
        for oy in 0..g.oh {
            let mut acc = [[fill; N]; 3];
            let mut nan = [0 as __mmask16; N];
            for (ky, acc_row) in acc.iter_mut().enumerate() {
                let iy = (oy * g.sh + ky) as isize - g.pt as isize;
                if iy < 0 || iy >= g.h as isize {
                    continue;
                }
                let row = x.wrapping_offset(iy * width);
                for kx in 0..3 {
                    let tap = taps[ky * 3 + kx];
                    for c in 0..N {
                        let at = row.wrapping_offset(starts[kx][c]);
                        let [m0, m1] = masks[kx][c];
                        // SAFETY: only lanes whose column lies in [0, w) of row iy < h are
                        // read (the masks); the others are never accessed.
                        let v = unsafe {
                            if g.sw == 1 {
                                _mm512_mask_loadu_ps(fill, m0, at)
                            } else {
                                let a = _mm512_mask_loadu_ps(fill, m0, at);
                                let b = _mm512_mask_loadu_ps(fill, m1, at.wrapping_add(16));
                                _mm512_permutex2var_ps(a, evens, b)
                            }
                        };
                        if MAX {
                            nan[c] |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
                            acc_row[c] = _mm512_max_ps(v, acc_row[c]);
                        } else {
                            acc_row[c] = _mm512_fmadd_ps(tap, v, acc_row[c]);
                        }
                    }
                }
            }
            let out = y.wrapping_add(oy * g.ow + ox0);
            for c in 0..N {
                let v = if MAX {
                    let v = _mm512_max_ps(_mm512_max_ps(acc[0][c], acc[1][c]), acc[2][c]);
                    _mm512_mask_mov_ps(v, nan[c], _mm512_set1_ps(f32::NAN))
                } else {
                    let v = _mm512_add_ps(_mm512_add_ps(acc[0][c], acc[1][c]), acc[2][c]);
                    act.apply(_mm512_add_ps(v, b))
                };
                // SAFETY: the lanes of output columns < ow of row oy < oh, inside `y`.
                unsafe { _mm512_mask_storeu_ps(out.wrapping_add(16 * c), out_masks[c], v) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::depthwise::tests::{naive, naive_max};

    /// Every stride, pads from 0 to 2 on each side, and widths around the vector and the
    /// four-vector group (each tap's masks at both edges), against the plain loops, for the
    /// weighted sum and the maximum (with a NaN, which must reach exactly the windows that
    /// hold it); the outputs past the plane are left alone; a short input is refused.
    #[test]
    fn planes_match_the_plain_loops() {
        let mut tested = 0;
        for s in [1, 2] {
            for (h, w) in [
                (1, 1),
                (3, 16),
                (5, 17),
                (2, 31),
                (4, 32),
                (3, 33),
                (6, 63),
                (2, 64),
                (3, 65),
                (2, 113),
            ] {
                for (pt, pl, pb, pr) in [(1, 1, 1, 1), (0, 0, 0, 0), (2, 1, 0, 2), (0, 2, 1, 0)] {
                    let (hp, wp) = (h + pt + pb, w + pl + pr);
                    if hp < 3 || wp < 3 {
                        continue;
                    }
                    let g = Geo2 {
                        h,
                        w,
                        kh: 3,
                        kw: 3,
                        sh: s,
                        sw: s,
                        dh: 1,
                        dw: 1,
                        pt,
                        pl,
                        oh: (hp - 3) / s + 1,
                        ow: (wp - 3) / s + 1,
                    };
                    let x: Vec<f32> = (0..h * w)
                        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
                        .collect();
                    let wt: Vec<f32> = (0..9).map(|t| (t as f32 - 4.0) / 3.0).collect();
                    let mut y = vec![f32::NAN; g.oh * g.ow + 5];
                    let act = Activation::Clip {
                        min: -4.0,
                        max: 4.0,
                    };
                    if !plane(&g, &x, &wt, 0.25, act, &mut y) {
                        assert!(!applies(&g), "refused an applicable plane");
                        continue;
                    }
                    let want = naive(&g, &x, &wt, 0.25);
                    for (i, (&got, &want)) in y.iter().zip(&want).enumerate() {
                        let want = act.apply_simple(want);
                        assert!(
                            (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                            "s{s} {h}x{w} pads {:?} output {i}: {got} vs {want}",
                            (pt, pl, pb, pr)
                        );
                    }
                    assert!(
                        y[g.oh * g.ow..].iter().all(|v| v.is_nan()),
                        "wrote past the plane"
                    );
                    assert!(!plane(&g, &x[..h * w - 1], &wt, 0.25, act, &mut y));
                    // The maximum, with a NaN on the plane's last row (its windows only).
                    let mut xn = x.clone();
                    xn[(h - 1) * w] = f32::NAN;
                    let mut ym = vec![0f32; g.oh * g.ow + 5];
                    assert!(max_plane(&g, &xn, &mut ym));
                    for (i, (&got, want)) in ym.iter().zip(naive_max(&g, &xn)).enumerate() {
                        assert!(
                            got == want || (got.is_nan() && want.is_nan()),
                            "max s{s} {h}x{w} pads {:?} output {i}: {got} vs {want}",
                            (pt, pl, pb, pr)
                        );
                    }
                    assert!(ym[g.oh * g.ow..].iter().all(|&v| v == 0.0), "wrote past");
                    assert!(!max_plane(&g, &xn[..h * w - 1], &mut ym));
                    tested += 1;
                }
            }
        }
        assert!(tested > 0 || !super::super::has_avx512());
    }
}
