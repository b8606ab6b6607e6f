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
/// doing nothing, without AVX2+FMA (or with them switched off) or when a window row (read as eight floats, two past the
/// window: the caller leaves [`WINDOW_SLACK`] floats after the padded input) or a V row
/// would fall outside the slices.
pub fn input(tiles: &Tiles, c: usize, blk: &Block, x: &[f32], v: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if !vectors() || blk.count == 0 || c == 0 {
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
        // V_ξ is packed GEMM panels of c × pitch floats (every panel_offset below that).
        let writes_end = XI_LAST * vs + c * blk.pitch;
        let panels = blk.count.div_ceil(super::NR) * super::NR;
        if reads_end > x.len() || writes_end > v.len() || panels != blk.pitch {
            return false;
        }
        // SAFETY: AVX2 and FMA are present (and AVX-512F/VL when `wide()`); every row read (eight floats from
        // ci·plane + org + i·pw, i < 6) ends at most at reads_end <= x.len(); every store of
        // lane vectors (at ξ·vs + panel_offset(c, count, ci, 8g): eight floats inside one
        // panel row, 8g being a multiple of 8 and panels NR = 32 wide) ends at most at
        // writes_end <= v.len().
        unsafe {
            let run = if wide() { x86::input_wide } else { x86::input };
            run(
                x.as_ptr(),
                &orgs,
                plane,
                pw,
                c,
                blk.count,
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

/// Whether the intrinsics run at all: AVX2 and FMA are present and not switched off
/// (`BACKPLANE_CPUACC_ISA=portable` keeps every kernel on its safe body).
#[cfg(target_arch = "x86_64")]
fn vectors() -> bool {
    super::avx2_in_use()
}

/// Whether the AVX-512VL builds of the transforms run (32 vector registers): the AVX-512
/// micro-kernel is in use (so not switched off) and the CPU has AVX-512VL.
#[cfg(target_arch = "x86_64")]
fn wide() -> bool {
    super::has_avx512() && std::arch::is_x86_feature_detected!("avx512vl")
}

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
        if !vectors() || blk.count == 0 || m == 0 {
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
        // SAFETY: AVX2 and FMA are present (and AVX-512F/VL when `wide()`); M reads end at most at
        // 35·ms + (m-1)·pitch + groups·8 <= mo.len(); every store of lane l writes at most
        // rows[l] rows of cols[l] floats from co·co_step + base[l], all of which end at most
        // at end + (m-1)·co_step <= y.len(); the bias holds m values when given.
        unsafe {
            let run = if wide() {
                x86::output_wide
            } else {
                x86::output
            };
            run(
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
    use crate::gemm::panel_offset;
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

    /// Row `i` of eight tiles' windows transformed along the row: `Bᵀ` applied to its six
    /// columns (one lane per tile). Safety: the eight floats from `xc + org[l] + i·pw` are
    /// readable for every lane l.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn window_row(
        xc: *const f32,
        org: &[usize; LANES],
        i: usize,
        pw: usize,
    ) -> [__m256; ALPHA] {
        // SAFETY (each load): eight floats of lane l's row i, readable by the caller's bound.
        let r = unsafe {
            [
                _mm256_loadu_ps(xc.add(org[0] + i * pw)),
                _mm256_loadu_ps(xc.add(org[1] + i * pw)),
                _mm256_loadu_ps(xc.add(org[2] + i * pw)),
                _mm256_loadu_ps(xc.add(org[3] + i * pw)),
                _mm256_loadu_ps(xc.add(org[4] + i * pw)),
                _mm256_loadu_ps(xc.add(org[5] + i * pw)),
                _mm256_loadu_ps(xc.add(org[6] + i * pw)),
                _mm256_loadu_ps(xc.add(org[7] + i * pw)),
            ]
        };
        bt(transpose_8x6(r))
    }

    /// Column `j` of a lane group's 36 M values (matrix ξ = 6i + j for i < 6) with `Aᵀ`
    /// applied. Safety: `src + ξ·ms .. + 8` readable for those ξ.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn m_column(src: *const f32, j: usize, ms: usize) -> [__m256; TILE] {
        // SAFETY (each load): eight floats of matrix 6i + j, readable by the caller's bound.
        let col = unsafe {
            [
                _mm256_loadu_ps(src.add(j * ms)),
                _mm256_loadu_ps(src.add((ALPHA + j) * ms)),
                _mm256_loadu_ps(src.add((2 * ALPHA + j) * ms)),
                _mm256_loadu_ps(src.add((3 * ALPHA + j) * ms)),
                _mm256_loadu_ps(src.add((4 * ALPHA + j) * ms)),
                _mm256_loadu_ps(src.add((5 * ALPHA + j) * ms)),
            ]
        };
        at(col)
    }

    /// See `super::input`; inlined into [`input`] and [`input_wide`], which enable the
    /// instructions. Safety: AVX2 and FMA present; for every channel ci < c, group g
    /// and lane l, the eight floats from `x + ci·plane + orgs[g][l] + i·pw` (i < 6) are
    /// readable; for every ξ < 36, `v + ξ·vs + panel_offset(c, count, ci, 8g) .. + 8` is
    /// writable.
    #[inline(always)]
    #[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
    unsafe fn input_body(
        x: *const f32,
        orgs: &[[usize; LANES]],
        plane: usize,
        pw: usize,
        c: usize,
        count: usize,
        vs: usize,
        v: *mut f32,
    ) {
        for ci in 0..c {
            let xc = x.wrapping_add(ci * plane);
            for (g, org) in orgs.iter().enumerate() {
                // Rows first: each window row of the eight tiles loaded (one vector per tile),
                // transposed into one vector per column, transformed along the row.
                // Six explicit rows: a zeroed array filled in a loop cost a `memset` call per
                // group, and closures (`from_fn`) are not inlined into this function.
                // SAFETY (each call): rows i < 6 of the eight windows are readable by the
                // caller's bound.
                let rows = unsafe {
                    [
                        window_row(xc, org, 0, pw),
                        window_row(xc, org, 1, pw),
                        window_row(xc, org, 2, pw),
                        window_row(xc, org, 3, pw),
                        window_row(xc, org, 4, pw),
                        window_row(xc, org, 5, pw),
                    ]
                };
                // Then columns: matrix ξ = 6k + j gets row k of Bᵀ applied to column j.
                let dst = v.wrapping_add(panel_offset(c, count, ci, g * LANES));
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

    /// See `super::output`; inlined into [`output`] and [`output_wide`], which enable the
    /// instructions. Safety: AVX2 and FMA present; `mo + ξ·ms + co·pitch + g·8 .. + 8`
    /// readable for ξ < 36, co < m and every group g of `lanes`; `y + co·co_step +
    /// base[l] + i·row_step .. + cols[l]` writable for i < rows[l]; `bias` (if any) holds m
    /// values.
    #[inline(always)]
    #[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
    unsafe fn output_body(
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
                // SAFETY (each call): the 36 matrices' eight floats of this group are
                // readable by the caller's bound.
                let c = unsafe {
                    [
                        m_column(src, 0, ms),
                        m_column(src, 1, ms),
                        m_column(src, 2, ms),
                        m_column(src, 3, ms),
                        m_column(src, 4, ms),
                        m_column(src, 5, ms),
                    ]
                };
                let row = |k: usize| [c[0][k], c[1][k], c[2][k], c[3][k], c[4][k], c[5][k]];
                let rows = [row(0), row(1), row(2), row(3)];
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

    /// One `unsafe fn` per `name => features` that runs `body` with those features
    /// enabled (the body is `#[inline(always)]`, so each is its own build of it). Safety of
    /// each: the body's, and the features present.
    macro_rules! builds {
        ($body:ident $params:tt $args:tt { $($(#[$doc:meta])* $name:ident => $features:literal,)* }) => {
            $(
                $(#[$doc])*
                #[target_feature(enable = $features)]
                #[allow(clippy::too_many_arguments)]
                pub(super) unsafe fn $name $params {
                    // SAFETY: the caller keeps the body's contract; the features are on.
                    unsafe { $body $args }
                }
            )*
        };
    }

    builds!(input_body(
        x: *const f32, orgs: &[[usize; LANES]], plane: usize, pw: usize, c: usize,
        count: usize, vs: usize, v: *mut f32
    ) (x, orgs, plane, pw, c, count, vs, v) {
        /// `input_body` with AVX2 and FMA.
        input => "avx2,fma",
        /// `input_body` with AVX-512VL too: the same 256-bit code with 32 vector registers
        /// instead of 16 (the transforms' intermediates then mostly stay in registers: a
        /// quarter less time measured).
        input_wide => "avx512f,avx512vl,avx2,fma",
    });

    builds!(output_body(
        mo: *const f32, ms: usize, pitch: usize, m: usize, bias: Option<&[f32]>, act: Act,
        lanes: &[LaneDest], co_step: usize, row_step: usize, y: *mut f32
    ) (mo, ms, pitch, m, bias, act, lanes, co_step, row_step, y) {
        /// `output_body` with AVX2 and FMA.
        output => "avx2,fma",
        /// `output_body` with AVX-512VL too (32 vector registers).
        output_wide => "avx512f,avx512vl,avx2,fma",
    });
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 + seed * 104729) % 113) as f32 / 13.0 - 4.0)
            .collect()
    }

    /// The AVX2 and AVX-512VL builds of the transforms are the same code with more
    /// registers: their results agree bit for bit.
    #[test]
    fn wide_and_avx2_builds_agree() {
        if !(super::super::has_avx2_fma() && wide()) {
            return;
        }
        let (plane, pw, c, count) = (200, 14, 3, 16);
        let x = values(c * plane + LANES, 1);
        let orgs = vec![
            [0, 4, 8, 12, 28, 32, 36, 40],
            [56, 60, 64, 68, 84, 88, 92, 96],
        ];
        let vs = c * 32 + 16;
        // (Columns 16..32 of each panel row are not written by either.)
        let (mut a, mut b) = (vec![0f32; 36 * vs], vec![0f32; 36 * vs]);
        // SAFETY: AVX2, FMA and AVX-512F/VL are present (checked); the largest read ends at
        // 2·200 + 96 + 5·14 + 8 < x.len(); V's panels (3 × 32 floats) fit in vs.
        unsafe {
            x86::input(x.as_ptr(), &orgs, plane, pw, c, count, vs, a.as_mut_ptr());
            x86::input_wide(x.as_ptr(), &orgs, plane, pw, c, count, vs, b.as_mut_ptr());
        }
        for xi in 0..36 {
            let used = xi * vs..xi * vs + c * 32;
            assert_eq!(a[used.clone()], b[used], "V_{xi}");
        }

        let (m, pitch) = (3, 32);
        let ms = m * pitch + 16;
        let mo = values(36 * ms, 2);
        let lanes: Vec<LaneDest> = (0..2)
            .map(|g| LaneDest {
                base: std::array::from_fn(|l| (g * LANES + l) * 4 * 20),
                rows: [4, 4, 4, 3, 4, 4, 2, 4],
                cols: [4, 1, 4, 4, 4, 3, 4, 4],
            })
            .collect();
        let bias = [0.5, -0.25, 1.0];
        for act in [Act::None, Act::Relu, Act::Clip(-1.0, 1.5), Act::Leaky(0.1)] {
            let size = 2 * 20 * 16 * 4 + m * 2000;
            let (mut ya, mut yb) = (vec![7f32; size], vec![7f32; size]);
            // SAFETY: as above; lane l of group g writes rows of 20 floats from
            // co·2000 + (8g + l)·80, inside `size`.
            unsafe {
                x86::output(
                    mo.as_ptr(),
                    ms,
                    pitch,
                    m,
                    Some(&bias),
                    act,
                    &lanes,
                    2000,
                    20,
                    ya.as_mut_ptr(),
                );
                x86::output_wide(
                    mo.as_ptr(),
                    ms,
                    pitch,
                    m,
                    Some(&bias),
                    act,
                    &lanes,
                    2000,
                    20,
                    yb.as_mut_ptr(),
                );
            }
            assert_eq!(ya, yb);
            assert!(ya.iter().any(|&v| v != 7.0));
        }
    }
}
