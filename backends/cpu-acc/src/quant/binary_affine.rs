//! A composed pair of per-channel layers (a batch norm's multiply then add by constants,
//! [`Pair`]) as two straight lines: each layer's quotient by its output scale is, up to
//! the f32 roundings of the chain, `slope · x + offset` with per-position constants, so
//! one fused multiply-add, a clamp and a rounding per layer replace the dequantization,
//! the operation and the division (about half the vector operations).
//!
//! The roundings can move a quotient across a half-integer, so the lines are not taken on
//! trust: at plan time each position's line is checked against the layer's own arithmetic
//! on every value its input can hold (the 256 bytes for the first layer, the first's
//! outputs for the second), and nudged by a few units in the last place where one value
//! differs. A position that no nudge fixes leaves the whole layer on [`Pair`]'s exact
//! path. The bytes are therefore the chain's, by exhaustion.

use super::binary_rows::{Pair, MAGIC};

/// The most positions (constants) a layer's lines are fitted for: each costs a few
/// hundred scalar evaluations at plan time.
const MAX_POSITIONS: usize = 1 << 16;

/// Slope and offset nudges tried, in units in the last place (of the slope, and of the
/// larger of the offset and the line's reach over 256 inputs).
const SLOPE_NUDGES: [i32; 5] = [0, 1, -1, 2, -2];
const OFFSET_NUDGES: [i32; 13] = [0, 1, -1, 2, -2, 3, -3, 4, -4, 8, -8, 16, -16];

/// The two lines at every position of the constants, and what they share.
#[derive(Debug, Clone)]
pub(super) struct Affine {
    /// Slopes and offsets of the first layer, then of the second, per position.
    pub lines: [Vec<f32>; 4],
    /// The shared constants of [`affine_row`].
    pub frame: Frame,
}

/// What every position shares: the first input's flip, each layer's quotient bounds
/// (the clamp less the zero point) and the output zero point.
#[derive(Debug, Clone, Copy)]
pub(super) struct Frame {
    flip: u8,
    bounds: [(f32, f32); 2],
    zero: i32,
}

/// A quotient clamped to `(lo, hi)` and rounded half to even (exact: |bounds| ≤ 10⁶).
#[inline(always)]
fn settle(t: f32, (lo, hi): (f32, f32)) -> f32 {
    let t = if t > lo { t } else { lo };
    let t = if t < hi { t } else { hi };
    (t + MAGIC) - MAGIC
}

impl Affine {
    /// The lines of `pair` over constants `c` and `d` (one per position, as many of each),
    /// `None` when a position has none that gives the pair's outputs on every input (or
    /// there are too many positions to check, or they cannot be allocated).
    pub(super) fn fit(pair: &Pair, c: &[f32], d: &[f32]) -> Option<Affine> {
        if c.len() != d.len() || c.len() > MAX_POSITIONS {
            return None;
        }
        let (flip, bounds, zero) = pair.frame();
        let mut lines: [Vec<f32>; 4] = Default::default();
        for l in &mut lines {
            l.try_reserve_exact(c.len()).ok()?;
        }
        let xs: [f32; 256] = std::array::from_fn(|q| f32::from(q as u8));
        for (&kc, &kd) in c.iter().zip(d) {
            let [(m1, b1), (m2, b2)] = pair.lines(kc, kd);
            // The first layer on every byte (indexed by the flipped byte, as the line
            // reads it).
            let want1: [f32; 256] = std::array::from_fn(|x| pair.first_at(x as u8 ^ flip, kc));
            let (p1, q1) = fit_line(&xs, &want1, (m1, b1), bounds[0])?;
            // The second on each value the first gives.
            let mut rs: Vec<f32> = want1.to_vec();
            rs.sort_by(f32::total_cmp);
            rs.dedup();
            let want2: Vec<f32> = rs.iter().map(|&r| pair.second_at(r, kd)).collect();
            let (p2, q2) = fit_line(&rs, &want2, (m2, b2), bounds[1])?;
            for (l, v) in lines.iter_mut().zip([p1, q1, p2, q2]) {
                l.push(v);
            }
        }
        Some(Affine {
            lines,
            frame: Frame { flip, bounds, zero },
        })
    }
}

/// A slope and offset in f32 near `(m, b)` whose settled line gives `want` at every `x`.
fn fit_line(
    xs: &[f32],
    want: &[f32],
    (m, b): (f64, f64),
    bounds: (f32, f32),
) -> Option<(f32, f32)> {
    let (m0, b0) = (m as f32, b as f32);
    if !m0.is_finite() || !b0.is_finite() {
        return None;
    }
    let reach = b0.abs().max(m0.abs() * 256.0).max(f32::MIN_POSITIVE);
    let unit = reach * f32::EPSILON;
    for sm in SLOPE_NUDGES {
        let p = m0 + sm as f32 * m0.abs() * f32::EPSILON;
        for sb in OFFSET_NUDGES {
            let q = b0 + sb as f32 * unit;
            let fits = xs
                .iter()
                .zip(want)
                .all(|(&x, &w)| settle(x.mul_add(p, q), bounds) == w);
            if fits {
                return Some((p, q));
            }
        }
    }
    None
}

/// [`affine_row`]'s body.
#[inline(always)]
fn affine_row_body(
    f: &Frame,
    a: &[u8],
    p1: &[f32],
    q1: &[f32],
    p2: &[f32],
    q2: &[f32],
    y: &mut [u8],
) {
    let n = y.len();
    let (Some(a), Some(p1), Some(q1), Some(p2), Some(q2)) = (
        a.get(..n),
        p1.get(..n),
        q1.get(..n),
        p2.get(..n),
        q2.get(..n),
    ) else {
        return;
    };
    let (flip, [b1, (lo, hi)], zero) = (f.flip, f.bounds, f.zero);
    for i in 0..n {
        let x = f32::from(a[i] ^ flip);
        let r = settle(x.mul_add(p1[i], q1[i]), b1);
        let t = r.mul_add(p2[i], q2[i]);
        let t = if t > lo { t } else { lo };
        let t = if t < hi { t } else { hi };
        y[i] = ((t + MAGIC).to_bits() as i32).wrapping_add(zero) as u8;
    }
}

backplane_cpu_kernels::multiversion! {
    /// One output row of a pair by its lines ([`Affine`]): input bytes `a`, the first
    /// layer's slopes `p1` and offsets `q1`, the second's `p2` and `q2` (the row's
    /// positions), output `y`.
    pub(super) fn affine_row(f: &Frame, a: &[u8], p1: &[f32], q1: &[f32], p2: &[f32], q2: &[f32], y: &mut [u8]) => affine_row_body;
}

#[cfg(test)]
mod tests {
    use super::super::binary_rows::{
        const_row, const_row_in_place, pair_row, Deq, Pair, Req, RowKernel,
    };
    use super::*;
    use backplane_core::ops::BinaryOp;

    fn kernel(
        op: BinaryOp,
        signed: bool,
        a: (f32, i32),
        y: (f32, i32),
        clamp: (i32, i32),
    ) -> RowKernel {
        let deq = Deq::new(signed, a).unwrap_or_else(|| unreachable!());
        RowKernel {
            op,
            a: deq,
            b: deq,
            y: Req::new(y, clamp),
            const_first: false,
        }
    }

    #[test]
    fn lines_give_the_pairs_bytes_on_every_input() {
        let mut s = 77u32;
        let mut unit = || {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            f64::from(s >> 8) / f64::from(1u32 << 24) * 2.0 - 1.0
        };
        let bytes: Vec<u8> = (0..=255).collect();
        let (mut fitted, mut total) = (0, 0);
        for (case, (op1, op2)) in [
            (BinaryOp::Mul, BinaryOp::Add),
            (BinaryOp::Add, BinaryOp::Mul),
            (BinaryOp::Mul, BinaryOp::Mul),
            (BinaryOp::Add, BinaryOp::Add),
        ]
        .into_iter()
        .cycle()
        .take(16)
        .enumerate()
        {
            // int8 or uint8 in, between and out; zero points at the ends and inside; a
            // Relu's clamp or the type's range.
            let (si, sm, so) = (case % 2 == 0, case % 3 == 0, case % 5 < 2);
            let range = |s: bool| if s { (-128, 127) } else { (0, 255) };
            let z = |s: bool, k: usize| [[0, 255, 131], [-128, 127, 3]][usize::from(s)][k % 3];
            let xq = ([0.04, 0.013, 0.2][case % 3], z(si, case));
            let mq = ([0.05, 0.11, 0.021][case % 3], z(sm, case + 1));
            let yq = ([0.03, 0.07, 0.009][case % 3], z(so, case + 2));
            let clamp = match case % 4 {
                0 => (yq.1.max(range(so).0), range(so).1),
                _ => range(so),
            };
            let first = kernel(op1, si, xq, mq, range(sm));
            let second = kernel(op2, sm, mq, yq, clamp);
            let pair = Pair::new(first, second, true).unwrap_or_else(|| unreachable!());
            let n = 61;
            let c: Vec<f32> = (0..n).map(|_| (unit() * 2.5) as f32).collect();
            let d: Vec<f32> = (0..n).map(|_| (unit() * 1.5) as f32).collect();
            // The fused pair gives the two layers' bytes, one after the other.
            for k in 0..n {
                let (cs, ds) = (vec![c[k]; 256], vec![d[k]; 256]);
                let (mut want, mut got) = (vec![0u8; 256], vec![0u8; 256]);
                const_row(&first, &bytes, &cs, &mut want);
                const_row_in_place(&second, &ds, &mut want);
                pair_row(&pair, &bytes, &cs, &ds, &mut got);
                assert_eq!(got, want, "case {case} position {k}: pair");
            }
            total += 1;
            let Some(af) = Affine::fit(&pair, &c, &d) else {
                continue;
            };
            fitted += 1;
            for k in 0..n {
                let (cs, ds) = (vec![c[k]; 256], vec![d[k]; 256]);
                let line = |l: &Vec<f32>| vec![l[k]; 256];
                let [p1, q1, p2, q2] = &af.lines;
                let (mut want, mut got) = (vec![0u8; 256], vec![0u8; 256]);
                pair_row(&pair, &bytes, &cs, &ds, &mut want);
                affine_row(
                    &af.frame,
                    &bytes,
                    &line(p1),
                    &line(q1),
                    &line(p2),
                    &line(q2),
                    &mut got,
                );
                assert_eq!(got, want, "case {case} position {k}");
            }
        }
        // The nudges fix nearly every position: most layers fit.
        eprintln!("lines fitted for {fitted} of {total} layers");
        assert!(fitted * 4 >= total * 3, "{fitted} of {total} fitted");
    }
}
