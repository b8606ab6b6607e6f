//! Depthwise 3×3 convolution of one plane read a row at a time, eight (AVX2) or sixteen
//! (AVX-512) outputs of a row per vector: no copy of the plane and no transposes.
//!
//! Each output row accumulates three input rows. AVX-512 reads the plane in place: each
//! tap's sixteen inputs are one masked load at stride 1, or two masked loads and an even-lane
//! permute at stride 2; the masks drop the inputs past the plane's edges (the zero padding),
//! masked-off lanes are never read, and up to four vectors of a row are computed together
//! with one accumulator per kernel row, so twelve FMA chains are in flight. AVX2 has no
//! masked load that is sure not to touch its masked-off lanes, so it copies each input row
//! once into a buffer of three rows that holds the padding around it (zero, or −∞ for the
//! maximum), and every load is a whole vector from there; at stride 2 the three taps of a
//! kernel row take the even and odd lanes of two runs (`shufps`), in an order of their own
//! that one permute puts right before the store.

use crate::act::Activation;
use crate::simd::Isa;
use crate::window::Geo2;

/// Whether [`plane`] computes this geometry: a 3×3 window, dilation 1, the same stride 1 or
/// 2 both ways, and AVX-512 or AVX2 (not turned off by `BACKPLANE_CPUACC_ISA=portable`).
pub fn applies(g: &Geo2) -> bool {
    best_isa().is_some() && window_fits(g)
}

/// A 3×3 window, dilation 1, the same stride 1 or 2 both ways: what the kernels compute.
fn window_fits(g: &Geo2) -> bool {
    g.kh == 3 && g.kw == 3 && g.dh == 1 && g.dw == 1 && g.sh == g.sw && (1..=2).contains(&g.sh)
}

/// The vector family [`plane`] runs on this machine, if any.
fn best_isa() -> Option<Isa> {
    super::avx2_in_use().then(super::isa_in_use)
}

/// Whether the rows path is worth taking for this geometry (it [`applies`], and the rows
/// are wide enough to fill the vectors): output rows of at least 14 with sixteen lanes, of
/// at least 16 with eight. Narrower planes take the channels-last path (see `depthwise`).
/// Measured with `conv_bench` (one thread, MobileNetV2's shapes, Zen 3, AVX2) against the
/// per-plane path: stride 2 1.2–1.7× faster (112×112 and 56×56 planes), stride 1 1.0–1.3×;
/// 3×3 max pooling of 64 planes 112×112 stride 2 4×; against the channels-last path (with
/// AVX2 transposes), 14-wide rows 1.25–1.3× slower, 28-wide 1.1× faster.
pub fn worth(g: &Geo2) -> bool {
    applies(g)
        && match best_isa() {
            Some(Isa::Avx512) => g.ow >= 14,
            _ => g.ow >= 16,
        }
}

/// `y = act(conv(x) + bias)` for one plane of a depthwise convolution: `x` holds the `h·w`
/// input plane, `w` its nine taps (row-major), `y` the `oh·ow` output plane; `rows` is
/// scratch that the AVX2 kernel grows to three padded input rows (kept between planes, so it
/// is allocated once). Only the in-kernel activations are applied (see
/// [`Activation::in_kernel`]). Returns false, writing nothing, when [`applies`] does not hold
/// or a slice is too short.
#[allow(clippy::too_many_arguments)]
pub fn plane(
    g: &Geo2,
    x: &[f32],
    w: &[f32],
    bias: f32,
    act: Activation,
    y: &mut [f32],
    rows: &mut Vec<f32>,
) -> bool {
    best_isa().is_some_and(|isa| run::<false>(isa, g, x, w, bias, act, y, rows))
}

/// `y` = the 3×3 max pooling of one plane (`x`: `h·w`, `y`: `oh·ow`; padding never wins,
/// and a NaN in a window makes its output NaN, as CpuRef's); `rows` as for [`plane`].
/// Returns false, writing nothing, when [`applies`] does not hold or a slice is too short.
pub fn max_plane(g: &Geo2, x: &[f32], y: &mut [f32], rows: &mut Vec<f32>) -> bool {
    let none = Activation::None;
    best_isa().is_some_and(|isa| run::<true>(isa, g, x, &[0.0; 9], 0.0, none, y, rows))
}

/// [`plane`] (MAX false) or [`max_plane`] (MAX true) with the kernel of `isa` (AVX-512 or
/// AVX2), which must be available; the geometry is checked here, the ISA by the caller.
#[allow(clippy::too_many_arguments)]
fn run<const MAX: bool>(
    isa: Isa,
    g: &Geo2,
    x: &[f32],
    w: &[f32],
    bias: f32,
    act: Activation,
    y: &mut [f32],
    rows: &mut Vec<f32>,
) -> bool {
    let shape_ok = window_fits(g)
        && g.oh > 0
        && g.ow > 0
        && x.len() >= g.h * g.w
        && w.len() >= 9
        && y.len() >= g.oh * g.ow;
    if !shape_ok || !isa.available() {
        return false;
    }
    let taps: [f32; 9] = std::array::from_fn(|t| w[t]);
    #[cfg(target_arch = "x86_64")]
    match isa {
        Isa::Avx512 => {
            // SAFETY: AVX-512F is present (checked). Every load is masked to the lanes whose
            // input row and column lie inside the h×w plane `x` holds (masked-off lanes are
            // not read, and their addresses are formed with wrapping arithmetic), and every
            // store to the lanes of output columns < ow of rows < oh, inside `y` (checked
            // above).
            unsafe { avx512::planes::<MAX>(g, x.as_ptr(), &taps, bias, act, y.as_mut_ptr()) };
            return true;
        }
        Isa::Avx2 => {
            let len = avx2::row_len(g);
            rows.clear();
            rows.resize(3 * len, if MAX { f32::NEG_INFINITY } else { 0.0 });
            // SAFETY: AVX2 and FMA are present (checked). `rows` holds three rows of
            // `row_len(g)` floats, as the kernel requires; `x` holds h·w inputs and `y`
            // oh·ow outputs (checked above).
            unsafe { avx2::planes::<MAX>(g, x, &taps, bias, act, y, rows) };
            return true;
        }
        Isa::Portable => {}
    }
    let _ = (taps, bias, act, y, rows);
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

/// The AVX2 kernel (see the module's documentation).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use crate::act::Activation;
    use crate::simd::avx2::Act256;
    use crate::window::Geo2;
    use std::arch::x86_64::*;

    /// Floats of one padded input row: the left padding, the row, and the right padding out
    /// to the last float that the last (possibly partial) vector of eight outputs reads,
    /// `(8·⌈ow/8⌉ − 8)·s + 2 + 8·s` (stride 1: three runs of 8 at the last vector's start;
    /// stride 2: two runs of 16 from it and from two columns on).
    pub(super) fn row_len(g: &Geo2) -> usize {
        (g.ow.div_ceil(8) * 8 * g.sw + 2).max(g.pl + g.w)
    }

    /// [`super::plane`] (MAX false) or [`super::max_plane`] (MAX true: `w`, `bias` and `act`
    /// unused). Safety: AVX2 and FMA present; `g` a 3×3 window, dilation 1, strides both 1
    /// or both 2, oh and ow at least 1; `x` at least h·w floats, `y` at least oh·ow; `rows`
    /// exactly 3·[`row_len`] floats, each the padding value (0, or −∞ for MAX) outside the
    /// row copies this function writes at column `pl` of each third.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn planes<const MAX: bool>(
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::depthwise::tests::{geo, naive, naive_max};

    /// Both kernels (where this CPU runs them), every stride, pads from 0 to 2 on each side,
    /// and widths around the vectors and the four-vector group (each tap's masks and the
    /// padded rows' edges), against the plain loops, for the weighted sum and the maximum
    /// (with a NaN, which must reach exactly the windows that hold it); the outputs past the
    /// plane are left alone; a short input is refused. The rows scratch is shared by every
    /// case, so each plane must not depend on what an earlier one left there.
    #[test]
    fn planes_match_the_plain_loops() {
        let mut tested = 0;
        let isas = [Isa::Avx512, Isa::Avx2]
            .into_iter()
            .filter(|i| i.available());
        let mut rows = Vec::new();
        for (isa, s) in isas.flat_map(|i| [(i, 1), (i, 2)]) {
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
                (7, 7),
                (14, 14),
                (5, 9),
                (4, 8),
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
                    assert!(
                        run::<false>(isa, &g, &x, &wt, 0.25, act, &mut y, &mut rows),
                        "refused an applicable plane"
                    );
                    let want = naive(&g, &x, &wt, 0.25);
                    for (i, (&got, &want)) in y.iter().zip(&want).enumerate() {
                        let want = act.apply_simple(want);
                        assert!(
                            (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                            "{isa:?} s{s} {h}x{w} pads {:?} output {i}: {got} vs {want}",
                            (pt, pl, pb, pr)
                        );
                    }
                    assert!(
                        y[g.oh * g.ow..].iter().all(|v| v.is_nan()),
                        "wrote past the plane"
                    );
                    let short = &x[..h * w - 1];
                    assert!(!run::<false>(
                        isa, &g, short, &wt, 0.25, act, &mut y, &mut rows
                    ));
                    // The maximum, with a NaN on the plane's last row (its windows only).
                    let mut xn = x.clone();
                    xn[(h - 1) * w] = f32::NAN;
                    let mut ym = vec![0f32; g.oh * g.ow + 5];
                    let none = Activation::None;
                    assert!(run::<true>(
                        isa, &g, &xn, &wt, 0.0, none, &mut ym, &mut rows
                    ));
                    for (i, (&got, want)) in ym.iter().zip(naive_max(&g, &xn)).enumerate() {
                        assert!(
                            got == want || (got.is_nan() && want.is_nan()),
                            "{isa:?} max s{s} {h}x{w} pads {:?} output {i}: {got} vs {want}",
                            (pt, pl, pb, pr)
                        );
                    }
                    assert!(ym[g.oh * g.ow..].iter().all(|&v| v == 0.0), "wrote past");
                    let short = &xn[..h * w - 1];
                    assert!(!run::<true>(
                        isa, &g, short, &wt, 0.0, none, &mut ym, &mut rows
                    ));
                    tested += 1;
                }
            }
        }
        assert!(tested > 0 || best_isa().is_none());
        // The public entry points take this machine's best kernel, and refuse other windows.
        if best_isa().is_some() {
            let g = geo(5, 9, 3, 1, 1, [1, 1, 1, 1]);
            let x: Vec<f32> = (0..45).map(|i| i as f32 - 20.0).collect();
            let wt = [0.5f32; 9];
            let mut y = vec![0f32; 45];
            assert!(plane(&g, &x, &wt, 1.0, Activation::Relu, &mut y, &mut rows));
            for (got, want) in y.iter().zip(naive(&g, &x, &wt, 1.0)) {
                assert!((got - want.max(0.0)).abs() <= 1e-4, "{got} vs {want}");
            }
            assert!(max_plane(&g, &x, &mut y, &mut rows));
            assert_eq!(y, naive_max(&g, &x));
            let wide = Geo2 { kw: 5, ow: 7, ..g };
            assert!(!plane(
                &wide,
                &x,
                &wt,
                1.0,
                Activation::Relu,
                &mut y,
                &mut rows
            ));
        }
    }
}
