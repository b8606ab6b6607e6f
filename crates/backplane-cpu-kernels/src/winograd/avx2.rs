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
unsafe fn window_row(xc: *const f32, org: &[usize; LANES], i: usize, pw: usize) -> [__m256; ALPHA] {
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
/// instructions, for the channels `rows.0..rows.1` of `c` (V's rows of those channels
/// only). Safety: AVX2 and FMA present; for every channel ci of `rows`, group g
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
    rows: (usize, usize),
    count: usize,
    vs: usize,
    v: *mut f32,
) {
    for ci in rows.0..rows.1.min(c) {
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
            pub(crate) unsafe fn $name $params {
                // SAFETY: the caller keeps the body's contract; the features are on.
                unsafe { $body $args }
            }
        )*
    };
}

builds!(input_body(
    x: *const f32, orgs: &[[usize; LANES]], plane: usize, pw: usize, c: usize,
    rows: (usize, usize), count: usize, vs: usize, v: *mut f32
) (x, orgs, plane, pw, c, rows, count, vs, v) {
    /// `input_body` with AVX2 and FMA.
    input => "avx2,fma",
    /// `input_body` with AVX-512VL too: the same 256-bit code with 32 vector registers
    /// instead of 16 (the transforms' intermediates then mostly stay in registers).
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
