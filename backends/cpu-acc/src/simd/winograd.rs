//! The Winograd F(4×4, 3×3) transforms with AVX2+FMA intrinsics, eight tiles per vector
//! (`crate::winograd::LANES`): each window row of the eight tiles loaded as eight vectors
//! and transposed in registers (AVX2 gathers were slower: the microcode of this machine
//! makes them expensive), `Bᵀ d B` computed there, the output's `Aᵀ m A` with bias and activation transposed into
//! tile rows and stored. The safe bodies in `crate::winograd` compute the same (they are the
//! fallback, and the tests compare the two); compiled from plain arrays they spilled every
//! intermediate and spent most of their time on moves.

use crate::act::Activation;
use crate::window::Geo2;
use crate::winograd::{xi_stride, Block, Dest, OutEpilogue, Tiles, ALPHA, LANES, STRIP, TILE};

const _: () = assert!(LANES == 8 && TILE == 4 && ALPHA == 6 && STRIP == 32);

/// Where the output transform stores lane `l` of a group: row `i` of output channel `co`
/// starts at `co·co_step + base[l] + i·row_step`; `rows[l]` × `cols[l]` values are valid
/// (0 × 0 for lanes past the block's end).
struct LaneDest {
    base: [usize; LANES],
    rows: [usize; LANES],
    cols: [usize; LANES],
}

/// The activations the intrinsics apply; others take the safe path.
#[derive(Clone, Copy)]
enum Act {
    None,
    Relu,
    Clip(f32, f32),
    Leaky(f32),
}

fn act_of(a: Activation) -> Option<Act> {
    match a {
        Activation::None => Some(Act::None),
        Activation::Relu => Some(Act::Relu),
        Activation::Clip { min, max } => Some(Act::Clip(min, max)),
        Activation::LeakyRelu { alpha } => Some(Act::Leaky(alpha)),
        _ => None,
    }
}

/// The input transform of one block (see `crate::winograd::input_body`). Returns false,
/// doing nothing, without AVX2+FMA or when a window row (read as eight floats, two past the
/// window: the caller leaves [`WINDOW_SLACK`] floats after the padded input) or a V row
/// would fall outside the slices.
pub fn input(tiles: &Tiles, c: usize, blk: &Block, x: &[f32], v: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if !super::has_avx2_fma() || blk.count == 0 || c == 0 {
            return false;
        }
        let (plane, pw) = (tiles.padded_plane(), tiles.pitch);
        let groups = blk.count.div_ceil(LANES);
        let vs = xi_stride(c, blk.pitch);
        // Each lane's window origin in its image's padded planes (lanes past the end repeat
        // the last tile).
        let mut orgs = Vec::with_capacity(groups);
        let mut far = 0usize;
        for g in 0..groups {
            let o: [usize; LANES] = std::array::from_fn(|l| {
                let (b, oy, ox) = tiles.origin(blk.first + (g * LANES + l).min(blk.count - 1));
                b * c * plane + oy * pw + ox
            });
            far = far.max(o.iter().copied().max().unwrap_or(0));
            orgs.push(o);
        }
        // Each window row is read as eight floats (two past the window).
        let reads_end = far + 5 * pw + LANES + (c - 1) * plane;
        let writes_end = XI_LAST * vs + (c - 1) * blk.pitch + groups * LANES;
        if reads_end > x.len() || writes_end > v.len() || groups * LANES > blk.pitch {
            return false;
        }
        // SAFETY: AVX2 and FMA are present; every row read (eight floats from
        // ci·plane + org + i·pw, i < 6) ends at most at reads_end <= x.len(); every store of
        // lane vectors ends at most at writes_end <= v.len().
        unsafe {
            x86::input(
                x.as_ptr(),
                &orgs,
                plane,
                pw,
                c,
                blk.pitch,
                vs,
                v.as_mut_ptr(),
            )
        };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (tiles, c, blk, x, v);
        false
    }
}

/// Floats read past the last window row of the padded input (zeros the caller appends).
pub const WINDOW_SLACK: usize = LANES - ALPHA;

/// The last of the 36 transformed matrices.
const XI_LAST: usize = ALPHA * ALPHA - 1;

/// The output transform of one block (see `crate::winograd::output_body`). Returns false,
/// doing nothing, without AVX2+FMA, for an activation other than none, Relu, Clip and
/// LeakyRelu, or when a read or write would fall outside the slices.
pub fn output(
    geo: &Geo2,
    tiles: &Tiles,
    blk: &Block,
    ep: &OutEpilogue<'_>,
    mo: &[f32],
    dest: &mut Dest<'_>,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let Some(act) = act_of(ep.act) else {
            return false;
        };
        let m = ep.m;
        if !super::has_avx2_fma() || blk.count == 0 || m == 0 {
            return false;
        }
        if ep.bias.is_some_and(|b| b.len() < m) {
            return false;
        }
        let groups = blk.count.div_ceil(LANES);
        let ms = xi_stride(m, blk.pitch);
        if XI_LAST * ms + (m - 1) * blk.pitch + groups * LANES > mo.len()
            || groups * LANES > blk.pitch
        {
            return false;
        }
        let out_plane = geo.oh * geo.ow;
        let strips = matches!(dest, Dest::Strips(_));
        let (co_step, row_step) = if strips {
            (groups * TILE * STRIP, STRIP)
        } else {
            (out_plane, geo.ow)
        };
        let mut lanes = Vec::with_capacity(groups);
        let mut end = 0usize;
        for g in 0..groups {
            let mut d = LaneDest {
                base: [0; LANES],
                rows: [0; LANES],
                cols: [0; LANES],
            };
            for l in 0..LANES {
                let local = g * LANES + l;
                if local >= blk.count {
                    continue;
                }
                if strips {
                    // A block's strips: every lane's 4×4 values, side by side.
                    d.base[l] = g * TILE * STRIP + l * TILE;
                    (d.rows[l], d.cols[l]) = (TILE, TILE);
                } else {
                    let (b, oy, ox) = tiles.origin(blk.first + local);
                    d.base[l] = (b * m) * out_plane + oy * geo.ow + ox;
                    d.rows[l] = TILE.min(geo.oh.saturating_sub(oy));
                    d.cols[l] = TILE.min(geo.ow.saturating_sub(ox));
                }
                if d.rows[l] > 0 && d.cols[l] > 0 {
                    end = end.max(d.base[l] + (d.rows[l] - 1) * row_step + d.cols[l]);
                }
            }
            lanes.push(d);
        }
        let y: &mut [f32] = match dest {
            Dest::Output(y) => y,
            Dest::Strips(buf) => buf,
        };
        if end + (m - 1) * co_step > y.len() {
            return false;
        }
        // SAFETY: AVX2 and FMA are present; M reads end at most at
        // 35·ms + (m-1)·pitch + groups·8 <= mo.len(); every store of lane l writes at most
        // rows[l] rows of cols[l] floats from co·co_step + base[l], all of which end at most
        // at end + (m-1)·co_step <= y.len(); the bias holds m values when given.
        unsafe {
            x86::output(
                mo.as_ptr(),
                ms,
                blk.pitch,
                m,
                ep.bias,
                act,
                &lanes,
                co_step,
                row_step,
                y.as_mut_ptr(),
            )
        };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (geo, tiles, blk, ep, mo, dest);
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Act, LaneDest, ALPHA, LANES, TILE};
    use std::arch::x86_64::*;

    /// `Bᵀ d` for six lane vectors.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn bt(d: [__m256; ALPHA]) -> [__m256; ALPHA] {
        let (four, five, two) = (
            _mm256_set1_ps(4.0),
            _mm256_set1_ps(5.0),
            _mm256_set1_ps(2.0),
        );
        [
            _mm256_fmadd_ps(four, d[0], _mm256_fnmadd_ps(five, d[2], d[4])),
            _mm256_fnmadd_ps(four, _mm256_add_ps(d[1], d[2]), _mm256_add_ps(d[3], d[4])),
            _mm256_fmadd_ps(four, _mm256_sub_ps(d[1], d[2]), _mm256_sub_ps(d[4], d[3])),
            _mm256_fmadd_ps(two, _mm256_sub_ps(d[3], d[1]), _mm256_sub_ps(d[4], d[2])),
            _mm256_fmadd_ps(two, _mm256_sub_ps(d[1], d[3]), _mm256_sub_ps(d[4], d[2])),
            _mm256_fmadd_ps(four, d[1], _mm256_fnmadd_ps(five, d[3], d[5])),
        ]
    }

    /// `Aᵀ m` for six lane vectors.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn at(m: [__m256; ALPHA]) -> [__m256; TILE] {
        let (s12, d12) = (_mm256_add_ps(m[1], m[2]), _mm256_sub_ps(m[1], m[2]));
        let (s34, d34) = (_mm256_add_ps(m[3], m[4]), _mm256_sub_ps(m[3], m[4]));
        [
            _mm256_add_ps(_mm256_add_ps(m[0], s12), s34),
            _mm256_fmadd_ps(_mm256_set1_ps(2.0), d34, d12),
            _mm256_fmadd_ps(_mm256_set1_ps(4.0), s34, s12),
            _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0), d34, d12), m[5]),
        ]
    }

    /// Eight rows of eight floats transposed: `out[j][l] = rows[l][j]`, for j < 6 only.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn transpose_8x6(r: [__m256; LANES]) -> [__m256; ALPHA] {
        let t: [__m256; 8] = std::array::from_fn(|q| {
            let (a, b) = (r[2 * (q / 2)], r[2 * (q / 2) + 1]);
            if q % 2 == 0 {
                _mm256_unpacklo_ps(a, b)
            } else {
                _mm256_unpackhi_ps(a, b)
            }
        });
        // u[h·4 + p]: columns p, p + 4 of rows 4h..4h+4 (p = 0..3 in 128-bit halves).
        let u = [
            _mm256_shuffle_ps::<0x44>(t[0], t[2]),
            _mm256_shuffle_ps::<0xee>(t[0], t[2]),
            _mm256_shuffle_ps::<0x44>(t[1], t[3]),
            _mm256_shuffle_ps::<0xee>(t[1], t[3]),
            _mm256_shuffle_ps::<0x44>(t[4], t[6]),
            _mm256_shuffle_ps::<0xee>(t[4], t[6]),
            _mm256_shuffle_ps::<0x44>(t[5], t[7]),
            _mm256_shuffle_ps::<0xee>(t[5], t[7]),
        ];
        [
            _mm256_permute2f128_ps::<0x20>(u[0], u[4]),
            _mm256_permute2f128_ps::<0x20>(u[1], u[5]),
            _mm256_permute2f128_ps::<0x20>(u[2], u[6]),
            _mm256_permute2f128_ps::<0x20>(u[3], u[7]),
            _mm256_permute2f128_ps::<0x31>(u[0], u[4]),
            _mm256_permute2f128_ps::<0x31>(u[1], u[5]),
        ]
    }

    /// See `super::input`. Safety: AVX2 and FMA present; for every channel ci < c, group g
    /// and lane l, the eight floats from `x + ci·plane + orgs[g][l] + i·pw` (i < 6) are
    /// readable; for every ξ < 36, `v + ξ·vs + ci·pitch + g·8 .. + 8` is writable.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
    pub(super) unsafe fn input(
        x: *const f32,
        orgs: &[[usize; LANES]],
        plane: usize,
        pw: usize,
        c: usize,
        pitch: usize,
        vs: usize,
        v: *mut f32,
    ) {
        for ci in 0..c {
            let xc = x.wrapping_add(ci * plane);
            for (g, org) in orgs.iter().enumerate() {
                // Rows first: each window row of the eight tiles loaded (one vector per tile),
                // transposed into one vector per column, transformed along the row.
                let mut rows = [[_mm256_setzero_ps(); ALPHA]; ALPHA];
                for i in 0..ALPHA {
                    let r: [__m256; LANES] = std::array::from_fn(|l| {
                        // SAFETY: eight floats from ci·plane + org[l] + i·pw: readable by
                        // the caller's bound.
                        unsafe { _mm256_loadu_ps(xc.add(org[l] + i * pw)) }
                    });
                    rows[i] = bt(transpose_8x6(r));
                }
                // Then columns: matrix ξ = 6k + j gets row k of Bᵀ applied to column j.
                let dst = v.wrapping_add(ci * pitch + g * LANES);
                for j in 0..ALPHA {
                    let col: [__m256; ALPHA] = std::array::from_fn(|i| rows[i][j]);
                    for (k, r) in bt(col).into_iter().enumerate() {
                        // SAFETY: ξ = 6k + j < 36: writable by the caller's bound.
                        unsafe { _mm256_storeu_ps(dst.add((k * ALPHA + j) * vs), r) };
                    }
                }
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn activate(act: Act, x: __m256) -> __m256 {
        let zero = _mm256_setzero_ps();
        match act {
            Act::None => x,
            // max returns its second operand when either is NaN: NaN stays NaN.
            Act::Relu => _mm256_max_ps(zero, x),
            Act::Clip(lo, hi) => {
                _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), x))
            }
            Act::Leaky(alpha) => {
                let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(x, zero);
                _mm256_blendv_ps(x, _mm256_mul_ps(_mm256_set1_ps(alpha), x), neg)
            }
        }
    }

    /// See `super::output`. Safety: AVX2 and FMA present; `mo + ξ·ms + co·pitch + g·8 .. + 8`
    /// readable for ξ < 36, co < m and every group g of `lanes`; `y + co·co_step +
    /// base[l] + i·row_step .. + cols[l]` writable for i < rows[l]; `bias` (if any) holds m
    /// values.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
    pub(super) unsafe fn output(
        mo: *const f32,
        ms: usize,
        pitch: usize,
        m: usize,
        bias: Option<&[f32]>,
        act: Act,
        lanes: &[LaneDest],
        co_step: usize,
        row_step: usize,
        y: *mut f32,
    ) {
        for co in 0..m {
            let b = _mm256_set1_ps(bias.and_then(|b| b.get(co)).copied().unwrap_or(0.0));
            for (g, dest) in lanes.iter().enumerate() {
                let src = mo.wrapping_add(co * pitch + g * LANES);
                let mut rows = [[_mm256_setzero_ps(); ALPHA]; TILE];
                for j in 0..ALPHA {
                    let col: [__m256; ALPHA] = std::array::from_fn(|i| {
                        // SAFETY: ξ = 6i + j < 36: readable by the caller's bound.
                        unsafe { _mm256_loadu_ps(src.add((i * ALPHA + j) * ms)) }
                    });
                    for (k, r) in at(col).into_iter().enumerate() {
                        rows[k][j] = r;
                    }
                }
                let yc = y.wrapping_add(co * co_step);
                for (i, row) in rows.into_iter().enumerate() {
                    let r = at(row).map(|v| activate(act, _mm256_add_ps(v, b)));
                    // Transpose the four column vectors into eight tile rows of four.
                    let (a0, a1) = (
                        _mm256_unpacklo_ps(r[0], r[1]),
                        _mm256_unpackhi_ps(r[0], r[1]),
                    );
                    let (a2, a3) = (
                        _mm256_unpacklo_ps(r[2], r[3]),
                        _mm256_unpackhi_ps(r[2], r[3]),
                    );
                    let t = [
                        _mm256_shuffle_ps::<0x44>(a0, a2),
                        _mm256_shuffle_ps::<0xee>(a0, a2),
                        _mm256_shuffle_ps::<0x44>(a1, a3),
                        _mm256_shuffle_ps::<0xee>(a1, a3),
                    ];
                    for l in 0..LANES {
                        if i >= dest.rows[l] {
                            continue;
                        }
                        // Lane l's row: the low (l < 4) or high half of t[l % 4].
                        let q = if l < 4 {
                            _mm256_castps256_ps128(t[l % 4])
                        } else {
                            _mm256_extractf128_ps::<1>(t[l % 4])
                        };
                        let at = yc.wrapping_add(dest.base[l] + i * row_step);
                        if dest.cols[l] == TILE {
                            // SAFETY: four floats of row i of lane l: writable by the
                            // caller's bound.
                            unsafe { _mm_storeu_ps(at, q) };
                        } else {
                            let mut part = [0f32; TILE];
                            // SAFETY: `part` is four floats.
                            unsafe { _mm_storeu_ps(part.as_mut_ptr(), q) };
                            for (k, val) in part.iter().enumerate().take(dest.cols[l]) {
                                // SAFETY: column k < cols[l] of row i: writable by the
                                // caller's bound.
                                unsafe { *at.add(k) = *val };
                            }
                        }
                    }
                }
            }
        }
    }
}
