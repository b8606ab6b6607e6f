use crate::act::Activation;
use crate::gemm::avx512::Act512;
use crate::geo::Geo2;
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
pub(crate) unsafe fn planes<const MAX: bool>(
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

/// [`super::max_plane`]: on a plane without NaNs, each output row is the maximum of its
/// (up to three) input rows, lane by lane, then of the three columns of each window, from
/// that one combined row (five vector maxima per sixteen outputs rather than nine taps'
/// loads and NaN checks); a plane found to hold a NaN (or an infinity) is redone by
/// [`planes`], which tracks NaNs. Safety: as [`planes`].
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn max_planes(g: &Geo2, x: *const f32, y: *mut f32) {
    let width = g.w as isize;
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    // Even and odd lanes of a 32-float run: inputs 2j and 2j + 1 for outputs j (stride 2).
    let evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    let odds = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    // Lanes `i` of `b:a` from `i + n` on (`valignd`): the run shifted by `n` inputs.
    let shift1 = |b: __m512, a: __m512| {
        _mm512_castsi512_ps(_mm512_alignr_epi32::<1>(
            _mm512_castps_si512(b),
            _mm512_castps_si512(a),
        ))
    };
    let shift2 = |b: __m512, a: __m512| {
        _mm512_castsi512_ps(_mm512_alignr_epi32::<2>(
            _mm512_castps_si512(b),
            _mm512_castps_si512(a),
        ))
    };
    // Inputs one chunk of 16 outputs reads from its first column: 32 at stride 1, 48 at 2.
    let reach = 16 * g.sw as isize + 16;
    // Input rows checked for NaNs so far: each is checked just before its first use (so the
    // check brings it into the cache for the maxima).
    let mut checked = 0;
    for oy in 0..g.oh {
        let needed = (oy * g.sh + 3).saturating_sub(g.pt).min(g.h);
        if needed > checked {
            let from = x.wrapping_add(checked * g.w);
            // SAFETY: rows checked .. needed <= h of the plane `x` holds.
            if unsafe { has_nan(from, (needed - checked) * g.w) } {
                // SAFETY: this function's contract is `planes`', which redoes every output.
                return unsafe { planes::<true>(g, x, &[0.0; 9], 0.0, Activation::None, y) };
            }
            checked = needed;
        }
        let mut rows = [x; 3];
        let mut n = 0;
        for ky in 0..3 {
            let iy = (oy * g.sh + ky) as isize - g.pt as isize;
            if (0..g.h as isize).contains(&iy) {
                rows[n] = x.wrapping_offset(iy * width);
                n += 1;
            }
        }
        let rows = &rows[..n];
        // The maximum over the rows of the 16 inputs from column `start`, lanes `m` (−∞ in
        // the others: off the plane).
        let column_max = |start: isize, m: __mmask16| {
            // SAFETY: only the lanes `m` are read, those of columns in [0, w) of rows < h
            // (the callers' masks); the others are never accessed.
            let l =
                |r: *const f32| unsafe { _mm512_mask_loadu_ps(ninf, m, r.wrapping_offset(start)) };
            match rows {
                [a, b, c] => _mm512_max_ps(_mm512_max_ps(l(*a), l(*b)), l(*c)),
                [a, b] => _mm512_max_ps(l(*a), l(*b)),
                [a] => l(*a),
                _ => ninf,
            }
        };
        let out = y.wrapping_add(oy * g.ow);
        let mut ox = 0;
        while ox < g.ow {
            let start = (ox * g.sw) as isize - g.pl as isize;
            let inside = start >= 0 && start + reach <= width;
            let mask = |at: isize| if inside { 0xffff } else { lanes(at, 0, width) };
            let v = if g.sw == 1 {
                let a = column_max(start, mask(start));
                let b = column_max(start + 16, mask(start + 16));
                _mm512_max_ps(_mm512_max_ps(a, shift1(b, a)), shift2(b, a))
            } else {
                let a = column_max(start, mask(start));
                let b = column_max(start + 16, mask(start + 16));
                let c = column_max(start + 32, mask(start + 32));
                let even = _mm512_permutex2var_ps(a, evens, b);
                let odd = _mm512_permutex2var_ps(a, odds, b);
                // Inputs 2j + 2: the even lanes moved down one, input 32 last.
                let next = shift1(c, even);
                _mm512_max_ps(_mm512_max_ps(even, odd), next)
            };
            let m = if ox + 16 <= g.ow {
                0xffff
            } else {
                lanes(ox as isize, 0, g.ow as isize)
            };
            // SAFETY: the lanes of output columns < ow of row oy < oh, inside `y`.
            unsafe { _mm512_mask_storeu_ps(out.wrapping_add(ox), m, v) };
            ox += 16;
        }
    }
}

/// Whether the `len` floats from `x` hold a NaN (or an infinity: then the caller takes the
/// path that tracks NaNs, which is exact for every input). Safety: AVX-512F present; `x`
/// readable for `len` floats.
#[target_feature(enable = "avx512f")]
unsafe fn has_nan(x: *const f32, len: usize) -> bool {
    // x·0 is 0 for finite x and NaN for NaN and ±∞; the sums stay 0 until one is.
    let z = _mm512_setzero_ps();
    let (mut s0, mut s1) = (z, z);
    let mut i = 0;
    while i + 32 <= len {
        // SAFETY: inputs i .. i + 32 < len.
        let (a, b) = unsafe { (_mm512_loadu_ps(x.add(i)), _mm512_loadu_ps(x.add(i + 16))) };
        s0 = _mm512_fmadd_ps(a, z, s0);
        s1 = _mm512_fmadd_ps(b, z, s1);
        i += 32;
    }
    while i < len {
        let m = lanes(i as isize, 0, len as isize);
        // SAFETY: only the lanes below `len` are read (the mask).
        let v = unsafe { _mm512_maskz_loadu_ps(m, x.add(i)) };
        s0 = _mm512_fmadd_ps(v, z, s0);
        i += 16;
    }
    let s = _mm512_add_ps(s0, s1);
    _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(s, s) != 0
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
