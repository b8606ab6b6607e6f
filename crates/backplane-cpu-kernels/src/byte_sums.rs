//! Exact f64 sums of dequantized bytes: the quantized mean's sums (CpuAcc's `QLinearMean`),
//! vectorized, equal bit for bit to the reference's one-at-a-time f64 chain.
//!
//! The reference dequantizes each byte to the f32 `v(q) = ((q − z) as f32) · s` and adds
//! the values one at a time, in order, in f64. These kernels add them in vector lanes and
//! in another order, yet get the same f64 bits, because every one of those additions is
//! exact:
//!
//! * Let `u` be the unit in the last place of the f32 scale `|s|` (`2^(e − 23)` for a
//!   normal `s` of exponent `e`, `2^−149` for a subnormal one). For `q ≠ z` the exact
//!   product has magnitude `|q − z| · |s| ≥ |s|`, and rounding to f32 is monotone, so
//!   `|v(q)| ≥ |s|`: an f32 at least `|s|` has an exponent at least `e`, so it is an integer
//!   multiple of `u`. (For `q = z`, `v = 0`.) Each value is `V(q) · u`, `V(q)` an integer.
//! * Every partial sum of `n` values is then an integer multiple of `u` of magnitude at most
//!   `n · max|V|`. While `n · max|V| ≤ 2^53`, each one (and each lane's, and each sum of
//!   lanes) is representable in f64 (`u` is far above f64's smallest subnormal), so no
//!   addition rounds, and the sum is the exact `u · Σ V(q_i)` whatever the order.
//!
//! [`Dequant::exact_terms`] ([`ExactSums`] holds it) is that bound for one scale and zero point (with zero points in
//! the type's range, `|q − z| ≤ 255`, `max|V| < 2^32`: at least `2^21` terms); the kernels
//! refuse longer sums, and the caller keeps the in-order chain for them. The sign of a zero
//! sum may differ from the chain's (`+0` against `−0`); a mean of it quantizes the same.
//!
//! Each kernel is one safe body compiled for AVX-512F, for AVX2 and for the baseline (the
//! compiler vectorizes the conversions and the f64 adds); the `_on` entry points run the
//! build of a given tier, for tests.

use crate::isa::{isa_in_use, Isa};

/// How an 8-bit tensor's bytes dequantize: `((q − zero) as f32) · scale`, `q` the byte read
/// as i8 (`signed`) or u8.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dequant {
    /// The bytes are i8 (else u8).
    pub signed: bool,
    /// The zero point.
    pub zero: i32,
    /// The scale.
    pub scale: f32,
}

impl Dequant {
    /// The f32 value of byte `b`, as the reference's DequantizeLinear computes it (the zero
    /// point subtracted with wrap-around; [`Dequant::exact_terms`] is 0 when that could wrap).
    #[inline(always)]
    pub fn value(self, b: u8) -> f32 {
        let q = if self.signed {
            i32::from(b as i8)
        } else {
            i32::from(b)
        };
        q.wrapping_sub(self.zero) as f32 * self.scale
    }

    /// How many values a sum may hold and still be exact in f64 in any order (the module's
    /// argument): `2^53 / max|V|`, or `usize::MAX` when every value is zero. Zero (no sum is
    /// exact) when the zero point lies outside the type's range or a value is not finite.
    pub fn exact_terms(self) -> usize {
        let (lo, hi) = if self.signed { (-128, 127) } else { (0, 255) };
        if !(lo..=hi).contains(&self.zero) || !self.scale.is_finite() {
            return 0;
        }
        let largest = (0..=255u8)
            .map(|b| f64::from(self.value(b)).abs())
            .fold(0.0, f64::max);
        if !largest.is_finite() {
            return 0;
        }
        if largest == 0.0 {
            return usize::MAX;
        }
        // The exponent field of |s|; a subnormal scale's unit is that of exponent field 1.
        let field = ((self.scale.abs().to_bits() >> 23) & 0xff).max(1) as i64;
        // u = 2^(field − 127 − 23), a normal f64 (its exponent is at least −149).
        let unit = f64::from_bits(((field - 150 + 1023) as u64) << 52);
        let most = largest / unit;
        // Both are powers of two or integers below 2^33: the quotient is exact enough to
        // floor (a bound, rounded down).
        let terms = (9_007_199_254_740_992.0 / most).floor();
        if terms >= usize::MAX as f64 {
            usize::MAX
        } else {
            terms as usize
        }
    }
}

/// A dequantization with its [`Dequant::exact_terms`] bound computed once (when a layer is
/// planned, not per sum): what the kernels take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExactSums {
    d: Dequant,
    terms: usize,
}

impl ExactSums {
    /// `d` and its bound.
    pub fn new(d: Dequant) -> ExactSums {
        ExactSums {
            d,
            terms: d.exact_terms(),
        }
    }

    /// The dequantization.
    pub fn dequant(&self) -> Dequant {
        self.d
    }

    /// How many values a sum may hold and stay exact ([`Dequant::exact_terms`]).
    pub fn terms(&self) -> usize {
        self.terms
    }
}

/// The tier of the build to run for a caller asking for `isa`: the best one present and no
/// higher.
fn pick(isa: Isa) -> Isa {
    [Isa::Avx512, Isa::Avx2, Isa::Portable]
        .into_iter()
        .find(|&t| rank(t) <= rank(isa) && t.available())
        .unwrap_or(Isa::Portable)
}

fn rank(isa: Isa) -> u8 {
    match isa {
        Isa::Portable => 0,
        Isa::Avx2 => 1,
        Isa::Avx512 => 2,
    }
}

/// The sums of the columns of `x`, a row-major matrix of `sums.len()` columns (a
/// channels-last image's pixels, channels across): `sums[c] = Σ_rows v(x[row][c])` in f64,
/// equal to the in-order chain. Returns `false` (writing nothing) when `x` is not whole rows,
/// `sums` is empty, or there are more rows than [`Dequant::exact_terms`].
pub fn column_sums(e: &ExactSums, x: &[u8], sums: &mut [f64]) -> bool {
    column_sums_on(isa_in_use(), e, x, sums)
}

/// [`column_sums`] compiled for tier `isa` (or the best present below it).
pub fn column_sums_on(isa: Isa, e: &ExactSums, x: &[u8], sums: &mut [f64]) -> bool {
    let (c, d) = (sums.len(), e.d);
    if c == 0 || !x.len().is_multiple_of(c) || x.len() / c > e.terms {
        return false;
    }
    match pick(isa) {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            // SAFETY: `pick` chose the tier only where the CPU has AVX-512F, AVX2 and FMA.
            unsafe { columns_avx512(d, x, sums) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: `pick` chose the tier only where the CPU has AVX2 and FMA.
            unsafe { columns_avx2(d, x, sums) }
        }
        _ => columns(d, x, sums),
    }
    true
}

/// The sum `Σ v(x[i])` in f64 of a run of bytes (a channels-first image's plane), equal to
/// the in-order chain; `None` when the run is longer than [`Dequant::exact_terms`].
pub fn sum(e: &ExactSums, x: &[u8]) -> Option<f64> {
    sum_on(isa_in_use(), e, x)
}

/// [`sum`] compiled for tier `isa` (or the best present below it).
pub fn sum_on(isa: Isa, e: &ExactSums, x: &[u8]) -> Option<f64> {
    let d = e.d;
    if x.len() > e.terms {
        return None;
    }
    Some(match pick(isa) {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            // SAFETY: `pick` chose the tier only where the CPU has AVX-512F, AVX2 and FMA.
            unsafe { plane_avx512(d, x) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: `pick` chose the tier only where the CPU has AVX2 and FMA.
            unsafe { plane_avx2(d, x) }
        }
        _ => plane(d, x),
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn columns_avx512(d: Dequant, x: &[u8], sums: &mut [f64]) {
    columns(d, x, sums)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn columns_avx2(d: Dequant, x: &[u8], sums: &mut [f64]) {
    columns(d, x, sums)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn plane_avx512(d: Dequant, x: &[u8]) -> f64 {
    plane(d, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn plane_avx2(d: Dequant, x: &[u8]) -> f64 {
    plane(d, x)
}

/// Columns summed per block of this many, the block's sums held in registers over the rows.
const BLOCK: usize = 32;

#[inline(always)]
fn columns(d: Dequant, x: &[u8], sums: &mut [f64]) {
    if d.signed {
        columns_of::<true>(d.zero, d.scale, x, sums)
    } else {
        columns_of::<false>(d.zero, d.scale, x, sums)
    }
}

#[inline(always)]
fn plane(d: Dequant, x: &[u8]) -> f64 {
    if d.signed {
        plane_of::<true>(d.zero, d.scale, x)
    } else {
        plane_of::<false>(d.zero, d.scale, x)
    }
}

/// One byte's value widened to f64 (as [`Dequant::value`], the type a constant).
#[inline(always)]
fn value<const SIGNED: bool>(b: u8, z: i32, s: f32) -> f64 {
    let q = if SIGNED {
        i32::from(b as i8)
    } else {
        i32::from(b)
    };
    f64::from(q.wrapping_sub(z) as f32 * s)
}

#[inline(always)]
fn columns_of<const SIGNED: bool>(z: i32, s: f32, x: &[u8], sums: &mut [f64]) {
    let c = sums.len();
    let mut c0 = 0;
    while c0 + BLOCK <= c {
        let mut acc = [0.0f64; BLOCK];
        for row in x.chunks_exact(c) {
            let Some(Ok(r)) = row.get(c0..c0 + BLOCK).map(<&[u8; BLOCK]>::try_from) else {
                continue;
            };
            for (a, &b) in acc.iter_mut().zip(r) {
                *a += value::<SIGNED>(b, z, s);
            }
        }
        if let Some(o) = sums.get_mut(c0..c0 + BLOCK) {
            o.copy_from_slice(&acc);
        }
        c0 += BLOCK;
    }
    let Some(tail) = sums.get_mut(c0..) else {
        return;
    };
    tail.fill(0.0);
    for row in x.chunks_exact(c) {
        for (a, &b) in tail.iter_mut().zip(row.get(c0..).unwrap_or(&[])) {
            *a += value::<SIGNED>(b, z, s);
        }
    }
}

#[inline(always)]
fn plane_of<const SIGNED: bool>(z: i32, s: f32, x: &[u8]) -> f64 {
    let mut acc = [0.0f64; BLOCK];
    let mut runs = x.chunks_exact(BLOCK);
    for r in &mut runs {
        for (a, &b) in acc.iter_mut().zip(r) {
            *a += value::<SIGNED>(b, z, s);
        }
    }
    let rest = runs
        .remainder()
        .iter()
        .fold(0.0, |t, &b| t + value::<SIGNED>(b, z, s));
    acc.iter().sum::<f64>() + rest
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's chain: one value at a time, in order, in f64.
    fn chain(d: Dequant, x: impl Iterator<Item = u8>) -> f64 {
        x.fold(0.0, |t, b| t + f64::from(d.value(b)))
    }

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut s = seed;
        (0..n)
            .map(|i| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                // Runs of the extreme bytes, where the sums grow fastest.
                match i % 11 {
                    0 => 0,
                    1 => 255,
                    2 => 127,
                    3 => 128,
                    _ => (s >> 24) as u8,
                }
            })
            .collect()
    }

    /// Scales with full mantissas, powers of two, huge and subnormal; zero points at both
    /// ends of each type's range.
    fn cases() -> Vec<Dequant> {
        let scales = [
            0.023_529_412f32,
            1e-6,
            0.1,
            50.0,
            0.003_921_569,
            0.5,
            1e30,
            1e-40,
            1.0 + f32::EPSILON,
            -0.7,
            0.0,
        ];
        let mut v = Vec::new();
        for scale in scales {
            for (signed, zero) in [
                (true, -128),
                (true, 127),
                (true, 3),
                (false, 0),
                (false, 255),
            ] {
                v.push(Dequant {
                    signed,
                    zero,
                    scale,
                });
            }
        }
        v
    }

    #[test]
    fn column_sums_equal_the_in_order_chain_on_every_tier() {
        for isa in [Isa::Avx512, Isa::Avx2, Isa::Portable] {
            for d in cases() {
                for (rows, cols) in [(1, 1), (49, 3), (221, 17), (49, 257), (1, 1152), (13, 32)] {
                    let x = bytes(rows * cols, rows as u32 * 7 + cols as u32);
                    let mut got = vec![f64::NAN; cols];
                    assert!(
                        column_sums_on(isa, &ExactSums::new(d), &x, &mut got),
                        "{isa:?} {d:?}"
                    );
                    for (c, &g) in got.iter().enumerate() {
                        let want = chain(d, x.iter().skip(c).step_by(cols).copied());
                        assert!(
                            g == want || (g.is_nan() && want.is_nan()),
                            "{isa:?} {d:?} {rows}×{cols} column {c}: {g} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn plane_sums_equal_the_in_order_chain_on_every_tier() {
        for isa in [Isa::Avx512, Isa::Avx2, Isa::Portable] {
            for d in cases() {
                for n in [0usize, 1, 31, 32, 33, 49, 221, 12544, 100_003] {
                    let x = bytes(n, n as u32);
                    let got = sum_on(isa, &ExactSums::new(d), &x);
                    assert_eq!(got, Some(chain(d, x.iter().copied())), "{isa:?} {d:?} {n}");
                }
            }
        }
    }

    #[test]
    fn the_bound_refuses_what_could_round() {
        let d = Dequant {
            signed: false,
            zero: 0,
            scale: 0.023_529_412,
        };
        let terms = d.exact_terms();
        // |q − z| ≤ 255 keeps each V below 2^32: at least 2^21 terms, and at most 2^22.
        assert!((1 << 21..1 << 22).contains(&terms), "{terms}");
        // Out-of-range zero points and non-finite scales have no exact bound.
        for bad in [
            Dequant { zero: 256, ..d },
            Dequant { zero: -1, ..d },
            Dequant {
                scale: f32::INFINITY,
                ..d
            },
            Dequant {
                scale: f32::NAN,
                ..d
            },
            Dequant {
                scale: f32::MAX,
                ..d
            },
        ] {
            assert_eq!(bad.exact_terms(), 0, "{bad:?}");
            assert_eq!(sum_on(Isa::Portable, &ExactSums::new(bad), &[1]), None);
            assert!(!column_sums_on(
                Isa::Portable,
                &ExactSums::new(bad),
                &[1],
                &mut [0.0]
            ));
        }
        assert_eq!(Dequant { scale: 0.0, ..d }.exact_terms(), usize::MAX);
        // Shapes that are not whole rows are refused.
        let e = ExactSums::new(d);
        assert_eq!(e.terms(), terms);
        assert!(!column_sums(&e, &[1, 2, 3], &mut [0.0; 2]));
        assert!(!column_sums(&e, &[1, 2], &mut []));
        // Past the bound, a sum is refused; at it, kept.
        let long = vec![255u8; terms + 1];
        assert_eq!(sum(&e, &long), None);
        assert_eq!(
            sum(&e, &long[..terms]),
            Some(chain(d, long[..terms].iter().copied()))
        );
    }
}
