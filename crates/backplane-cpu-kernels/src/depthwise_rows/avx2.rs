//! The AVX2 kernel (see the module's documentation).
use crate::act::Activation;
use crate::gemm::avx2::Act256;
use crate::geo::Geo2;
use std::arch::x86_64::*;

/// Floats of one padded input row: the left padding, the row, and the right padding out
/// to the last float that the last (possibly partial) vector of eight outputs reads,
/// `(8·⌈ow/8⌉ − 8)·s + 2 + 8·s` (stride 1: three runs of 8 at the last vector's start;
/// stride 2: two runs of 16 from it and from two columns on).
pub(crate) fn row_len(g: &Geo2) -> usize {
    (g.ow.div_ceil(8) * 8 * g.sw + 2).max(g.pl + g.w)
}

/// [`super::plane`] (MAX false) or [`super::max_plane`] (MAX true: `w`, `bias` and `act`
/// unused). Safety: AVX2 and FMA present; `g` a 3×3 window, dilation 1, strides both 1
/// or both 2, oh and ow at least 1; `x` at least h·w floats, `y` at least oh·ow; `rows`
/// exactly 3·[`row_len`] floats, each the padding value (0, or −∞ for MAX) outside the
/// row copies this function writes at column `pl` of each third.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn planes<const MAX: bool>(
    g: &Geo2,
    x: &[f32],
    w: &[f32; 9],
    bias: f32,
    act: Activation,
    y: &mut [f32],
    rows: &mut [f32],
) {
    if g.sw == 1 {
        // SAFETY: as this function's.
        unsafe { rows_of::<MAX, false>(g, x, w, bias, act, y, rows) }
    } else {
        // SAFETY: as this function's.
        unsafe { rows_of::<MAX, true>(g, x, w, bias, act, y, rows) }
    }
}

/// [`planes`] for stride 1 (S2 false) or 2 (S2 true). Safety: as [`planes`].
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_of<const MAX: bool, const S2: bool>(
    g: &Geo2,
    x: &[f32],
    w: &[f32; 9],
    bias: f32,
    act: Activation,
    y: &mut [f32],
    rows: &mut [f32],
) {
    let len = row_len(g);
    let k = Kernel {
        taps: std::array::from_fn(|t| _mm256_set1_ps(w[t])),
        bias: _mm256_set1_ps(bias),
        act: Act256::new(act),
    };
    // Which input row each third of `rows` holds: input row iy goes to third iy % 3, so
    // the (up to) three rows of one output row never share a third.
    let mut held = [usize::MAX; 3];
    for oy in 0..g.oh {
        // Where the output row's input rows start in `rows`, copied in if not already
        // held; None above or below the plane (zero padding: the kernel row adds
        // nothing).
        let mut third = [None; 3];
        for (ky, t) in third.iter_mut().enumerate() {
            let iy = (oy * g.sh + ky) as isize - g.pt as isize;
            if iy < 0 || iy >= g.h as isize {
                continue;
            }
            let iy = iy as usize;
            let at = iy % 3;
            if held[at] != iy {
                let dst = &mut rows[at * len + g.pl..at * len + g.pl + g.w];
                let src = &x[iy * g.w..(iy + 1) * g.w];
                dst.copy_from_slice(src);
                held[at] = iy;
            }
            *t = Some(at * len);
        }
        let base = rows.as_ptr();
        let mut src = [None; 3];
        for ky in 0..3 {
            src[ky] = third[ky].map(|start| base.wrapping_add(start));
        }
        let out = &mut y[oy * g.ow..(oy + 1) * g.ow];
        // Vectors of eight outputs in groups of up to four (eight measured no faster, and
        // spill the accumulators).
        let mut ox0 = 0;
        let mut left = g.ow.div_ceil(8);
        while left > 0 {
            // SAFETY: the group's vectors are among the ⌈ow/8⌉ that `row_len` covers.
            let n = unsafe {
                match left {
                    4.. => k.group::<4, MAX, S2>(&src, ox0, out),
                    2 | 3 => k.group::<2, MAX, S2>(&src, ox0, out),
                    _ => k.group::<1, MAX, S2>(&src, ox0, out),
                }
            };
            ox0 += 8 * n;
            left -= n;
        }
    }
}

/// What every vector of outputs of one plane shares: the taps, the bias and the
/// activation, in registers.
struct Kernel {
    taps: [__m256; 9],
    bias: __m256,
    act: Act256,
}

impl Kernel {
    /// The N vectors of eight outputs from column `ox0` of one output row (those below
    /// `out.len()`, the row's width, are stored), from the padded input rows `src`;
    /// returns N. Safety: AVX2 and FMA present; each `src` row readable for
    /// (ox0 + 8·N)·s + 2 floats.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn group<const N: usize, const MAX: bool, const S2: bool>(
        &self,
        src: &[Option<*const f32>; 3],
        ox0: usize,
        out: &mut [f32],
    ) -> usize {
        let fill = if MAX {
            _mm256_set1_ps(f32::NEG_INFINITY)
        } else {
            _mm256_setzero_ps()
        };
        // The maximum so far, or one partial sum per kernel row (three short FMA
        // chains instead of one of nine).
        let mut acc = [fill; N];
        let mut part = [[_mm256_setzero_ps(); N]; 3];
        let mut nan = [_mm256_setzero_ps(); N];
        // (Plain index loops: iterating these arrays by value makes the compiler copy
        // them through memory.)
        for ky in 0..3 {
            let Some(row) = src[ky] else { continue };
            let (t0, t1, t2) = (
                self.taps[ky * 3],
                self.taps[ky * 3 + 1],
                self.taps[ky * 3 + 2],
            );
            for c in 0..N {
                // The three taps' eight inputs each (stride 2: in the lane order
                // 0, 1, 4, 5, 2, 3, 6, 7 of `shufps`).
                // SAFETY: the runs start at column (ox0 + 8c)·s and end before
                // (ox0 + 8c + 8)·s + 2, readable (the caller's contract).
                let (v0, v1, v2) = unsafe {
                    if S2 {
                        let p = row.add(2 * (ox0 + 8 * c));
                        let (lo, hi) = (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)));
                        let lo2 = _mm256_loadu_ps(p.add(2));
                        let hi2 = _mm256_loadu_ps(p.add(10));
                        (
                            _mm256_shuffle_ps::<0x88>(lo, hi),
                            _mm256_shuffle_ps::<0xDD>(lo, hi),
                            _mm256_shuffle_ps::<0x88>(lo2, hi2),
                        )
                    } else {
                        let p = row.add(ox0 + 8 * c);
                        (
                            _mm256_loadu_ps(p),
                            _mm256_loadu_ps(p.add(1)),
                            _mm256_loadu_ps(p.add(2)),
                        )
                    }
                };
                if MAX {
                    // max returns its second operand when one is NaN: NaNs are tracked
                    // apart.
                    let unord = |v| _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v);
                    let n = _mm256_or_ps(_mm256_or_ps(unord(v0), unord(v1)), unord(v2));
                    nan[c] = _mm256_or_ps(nan[c], n);
                    acc[c] = _mm256_max_ps(v2, _mm256_max_ps(v1, _mm256_max_ps(v0, acc[c])));
                } else {
                    let a = _mm256_mul_ps(t0, v0);
                    part[ky][c] = _mm256_fmadd_ps(t2, v2, _mm256_fmadd_ps(t1, v1, a));
                }
            }
        }
        for c in 0..N {
            let mut v = if MAX {
                _mm256_blendv_ps(acc[c], _mm256_set1_ps(f32::NAN), nan[c])
            } else {
                let rows = _mm256_add_ps(_mm256_add_ps(part[0][c], part[1][c]), part[2][c]);
                self.act.apply(_mm256_add_ps(rows, self.bias))
            };
            if S2 {
                // Lanes 0, 1, 4, 5, 2, 3, 6, 7 back in order (pairs 0, 2, 1, 3).
                v = _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(v)));
            }
            let at = ox0 + 8 * c;
            let n = out.len().saturating_sub(at).min(8);
            if n == 8 {
                // SAFETY: columns at .. at + 8 <= out.len().
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(at), v) };
            } else {
                let mut last = [0f32; 8];
                // SAFETY: `last` holds eight floats.
                unsafe { _mm256_storeu_ps(last.as_mut_ptr(), v) };
                out[at..at + n].copy_from_slice(&last[..n]);
            }
        }
        N
    }
}
