//! The rows of the quantized binary layer ([`super::binary`]) as safe, autovectorizable
//! bodies compiled per tier by the kernel crate's `multiversion!`: 16 elements at a time
//! with AVX-512, eight with AVX2, one on the baseline.
//!
//! Each element takes exactly the f32 operations of the scalar rule (the unfolded chain's,
//! in its order): `(q - z) as f32 · s` per input, the operation, the quotient by the output
//! scale (a true division, not a product by the reciprocal), rounded half to even, the zero
//! point added, the integer saturated to the clamp. Vector lanes perform the same IEEE
//! operations as scalar code, so the bytes do not depend on the tier. A signed byte is
//! widened as its bits flipped at the top (`q ^ 0x80`, unsigned) less 128, which is the
//! same integer as `q as i8` and needs no per-element branch.

use backplane_core::ops::BinaryOp;

/// How one 8-bit operand dequantizes: `((q ^ flip) as i32 - zero) as f32 · scale`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deq {
    /// 0x80 for int8 (whose `zero` then holds the zero point plus 128), else 0.
    flip: u8,
    zero: i32,
    scale: f32,
}

impl Deq {
    /// The dequantization of a signed (int8) or unsigned byte on scale and zero point
    /// `(s, z)`; `None` when the shifted zero point does not fit an `i32`.
    pub(super) fn new(signed: bool, (scale, z): (f32, i32)) -> Option<Deq> {
        let (flip, zero) = if signed {
            (0x80, z.checked_add(128)?)
        } else {
            (0, z)
        };
        Some(Deq { flip, zero, scale })
    }

    /// The zero point (of the unflipped byte).
    fn zero_point(self) -> i32 {
        match self.flip {
            0 => self.zero,
            _ => self.zero.wrapping_sub(128),
        }
    }

    /// The dequantized value of byte `q`.
    #[inline(always)]
    pub(super) fn at(self, q: u8) -> f32 {
        (i32::from(q ^ self.flip) - self.zero) as f32 * self.scale
    }
}

/// How the real result becomes the output byte.
///
/// The clamp is taken on the quotient, before the rounding: rounding is monotone and keeps
/// integers, so `round(clamp(w, lo − z, hi − z)) + z = clamp(round(w) + z, lo, hi)` for
/// integer bounds, and the rounded value is already the output integer less `z`. The
/// quotient's clamp also stands for the rule's saturation at ±10⁶ (the two intervals are
/// intersected), and a zero point so far out that every output is one bound makes the
/// bounds that value and the zero point 0.
#[derive(Debug, Clone, Copy)]
pub(super) struct Req {
    scale: f32,
    /// The quotient a NaN stands for (`-z`: the integer 0 once `z` is added).
    nan: f32,
    /// The quotient's bounds: the clamp less the zero point, within ±10⁶.
    lo: f32,
    hi: f32,
    /// The zero point added to the rounded quotient (as an integer).
    zero: i32,
}

/// The rule's saturation of the quotient before it is rounded.
const SATURATE: i64 = 1_000_000;

impl Req {
    /// Output scale and zero point `(s, z)`, the result saturated to `clamp` (within the
    /// output type's range; its low byte is the output byte for int8 and uint8 alike).
    pub(super) fn new((scale, z): (f32, i32), clamp: (i32, i32)) -> Req {
        let (z64, lo, hi) = (i64::from(z), i64::from(clamp.0), i64::from(clamp.1));
        let (qlo, qhi) = ((lo - z64).max(-SATURATE), (hi - z64).min(SATURATE));
        // The rule adds `z` in f32 to a quotient within ±10⁶: a zero point past the clamp
        // by more than that leaves every output at one bound.
        let fixed = if hi - z64 < -SATURATE {
            Some(hi)
        } else if lo - z64 > SATURATE {
            Some(lo)
        } else {
            None
        };
        match fixed {
            Some(q) => Req {
                scale,
                nan: q as f32,
                lo: q as f32,
                hi: q as f32,
                zero: 0,
            },
            None => Req {
                scale,
                nan: (-z64).clamp(-SATURATE, SATURATE) as f32,
                lo: qlo as f32,
                hi: qhi as f32,
                zero: z,
            },
        }
    }

    /// The rounded quotient of `v` clamped to the output's range less the zero point, as
    /// `w + 1.5·2²³` (exact; its mantissa's low bits hold the integer plus 2²²).
    #[inline(always)]
    fn shifted(self, v: f32) -> f32 {
        let w = v / self.scale;
        // A NaN is tested once, so that the bounds below are plain comparisons (one max or
        // min a vector).
        let w = if w.is_nan() { self.nan } else { w };
        let w = if w > self.lo { w } else { self.lo };
        let w = if w < self.hi { w } else { self.hi };
        w + MAGIC
    }

    /// The output byte of `v`: the scalar rule's `(q as i32).clamp(lo, hi)` (a NaN as 0),
    /// computed in f32 on integer values (exact below 2²⁴), then the integer's low byte
    /// taken from the bits of the rounded quotient plus the zero point. A saturating
    /// `as i32` would compile to one scalar conversion per lane.
    #[inline(always)]
    pub(super) fn at(self, v: f32) -> u8 {
        (self.shifted(v).to_bits() as i32).wrapping_add(self.zero) as u8
    }

    /// The output integer of `v` less the zero point, as an f32 (what the next layer of a
    /// composed chain dequantizes: `(q − z) · s`).
    #[inline(always)]
    fn centered(self, v: f32) -> f32 {
        self.shifted(v) - MAGIC
    }
}

/// 1.5·2²³: added to an f32 of magnitude below 2²², rounds it to an integer, half to even
/// under the default rounding mode (the mantissa's low bits then hold the integer plus 2²²;
/// taking it away again leaves the integer).
pub(super) const MAGIC: f32 = 12_582_912.0;

/// A row's parameters: the operation, both dequantizations and the requantization.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowKernel {
    /// The operation.
    pub op: BinaryOp,
    /// The first input's dequantization.
    pub a: Deq,
    /// The second input's (unused with a constant operand).
    pub b: Deq,
    /// The output's requantization.
    pub y: Req,
    /// With a constant operand: it is the operation's first operand.
    pub const_first: bool,
}

/// One f32 operation, monomorphized into each loop.
trait F2 {
    fn f(x: f32, z: f32) -> f32;
}

macro_rules! op2 {
    ($name:ident, |$x:ident, $z:ident| $e:expr) => {
        struct $name;
        impl F2 for $name {
            #[inline(always)]
            fn f($x: f32, $z: f32) -> f32 {
                $e
            }
        }
    };
}
op2!(AddF, |x, z| x + z);
op2!(SubF, |x, z| x - z);
op2!(MulF, |x, z| x * z);
op2!(MaxF, |x, z| x.max(z));
op2!(MinF, |x, z| x.min(z));
op2!(RSubF, |x, z| z - x);
op2!(RAddF, |x, z| z + x);
op2!(RMulF, |x, z| z * x);
op2!(RMaxF, |x, z| z.max(x));
op2!(RMinF, |x, z| z.min(x));

/// Two 8-bit operands: `a` and `b` each hold the row's values or one value repeated.
#[inline(always)]
fn bytes_with<O: F2>(k: &RowKernel, a: &[u8], b: &[u8], y: &mut [u8]) {
    let (da, db, r) = (k.a, k.b, k.y);
    match (a, b) {
        ([qa], [qb]) if y.len() > 1 => y.fill(r.at(O::f(da.at(*qa), db.at(*qb)))),
        ([qa], _) if y.len() > 1 => {
            let va = da.at(*qa);
            for (o, &qb) in y.iter_mut().zip(b) {
                *o = r.at(O::f(va, db.at(qb)));
            }
        }
        (_, [qb]) if y.len() > 1 => {
            let vb = db.at(*qb);
            for (o, &qa) in y.iter_mut().zip(a) {
                *o = r.at(O::f(da.at(qa), vb));
            }
        }
        _ => {
            for ((o, &qa), &qb) in y.iter_mut().zip(a).zip(b) {
                *o = r.at(O::f(da.at(qa), db.at(qb)));
            }
        }
    }
}

/// An 8-bit operand `a` and f32 constants `c` (the operation's second operand as `O`
/// writes it): each holds the row's values or one value repeated.
#[inline(always)]
fn consts_with<O: F2>(k: &RowKernel, a: &[u8], c: &[f32], y: &mut [u8]) {
    let (da, r) = (k.a, k.y);
    match (a, c) {
        (_, [kc]) if y.len() > 1 => {
            for (o, &qa) in y.iter_mut().zip(a) {
                *o = r.at(O::f(da.at(qa), *kc));
            }
        }
        ([qa], _) if y.len() > 1 => {
            let va = da.at(*qa);
            for (o, &kc) in y.iter_mut().zip(c) {
                *o = r.at(O::f(va, kc));
            }
        }
        _ => {
            for ((o, &qa), &kc) in y.iter_mut().zip(a).zip(c) {
                *o = r.at(O::f(da.at(qa), kc));
            }
        }
    }
}

/// [`consts_with`] on the row `y` in place: `y` holds the row's 8-bit operand (a row, not
/// one value repeated), `c` the constants (the row's, or one repeated).
#[inline(always)]
fn consts_in_place<O: F2>(k: &RowKernel, c: &[f32], y: &mut [u8]) {
    let (da, r) = (k.a, k.y);
    match c {
        [kc] => {
            for o in y.iter_mut() {
                *o = r.at(O::f(da.at(*o), *kc));
            }
        }
        _ => {
            for (o, &kc) in y.iter_mut().zip(c) {
                *o = r.at(O::f(da.at(*o), kc));
            }
        }
    }
}

/// [`const_row_in_place`]'s body.
#[inline(always)]
fn const_row_in_place_body(k: &RowKernel, c: &[f32], y: &mut [u8]) {
    match (k.op, k.const_first) {
        (BinaryOp::Add, false) => consts_in_place::<AddF>(k, c, y),
        (BinaryOp::Add, true) => consts_in_place::<RAddF>(k, c, y),
        (BinaryOp::Sub, false) => consts_in_place::<SubF>(k, c, y),
        (BinaryOp::Sub, true) => consts_in_place::<RSubF>(k, c, y),
        (BinaryOp::Mul, false) => consts_in_place::<MulF>(k, c, y),
        (BinaryOp::Mul, true) => consts_in_place::<RMulF>(k, c, y),
        (BinaryOp::Max, false) => consts_in_place::<MaxF>(k, c, y),
        (BinaryOp::Max, true) => consts_in_place::<RMaxF>(k, c, y),
        (BinaryOp::Min, false) => consts_in_place::<MinF>(k, c, y),
        (BinaryOp::Min, true) => consts_in_place::<RMinF>(k, c, y),
        // Not folded (`foldable`).
        (BinaryOp::Div | BinaryOp::Pow, _) => {}
    }
}

/// [`binary_row`]'s body.
#[inline(always)]
fn binary_row_body(k: &RowKernel, a: &[u8], b: &[u8], y: &mut [u8]) {
    match k.op {
        BinaryOp::Add => bytes_with::<AddF>(k, a, b, y),
        BinaryOp::Sub => bytes_with::<SubF>(k, a, b, y),
        BinaryOp::Mul => bytes_with::<MulF>(k, a, b, y),
        BinaryOp::Max => bytes_with::<MaxF>(k, a, b, y),
        BinaryOp::Min => bytes_with::<MinF>(k, a, b, y),
        // Not folded (`foldable`).
        BinaryOp::Div | BinaryOp::Pow => {}
    }
}

/// [`const_row`]'s body.
#[inline(always)]
fn const_row_body(k: &RowKernel, a: &[u8], c: &[f32], y: &mut [u8]) {
    match (k.op, k.const_first) {
        (BinaryOp::Add, false) => consts_with::<AddF>(k, a, c, y),
        (BinaryOp::Add, true) => consts_with::<RAddF>(k, a, c, y),
        (BinaryOp::Sub, false) => consts_with::<SubF>(k, a, c, y),
        (BinaryOp::Sub, true) => consts_with::<RSubF>(k, a, c, y),
        (BinaryOp::Mul, false) => consts_with::<MulF>(k, a, c, y),
        (BinaryOp::Mul, true) => consts_with::<RMulF>(k, a, c, y),
        (BinaryOp::Max, false) => consts_with::<MaxF>(k, a, c, y),
        (BinaryOp::Max, true) => consts_with::<RMaxF>(k, a, c, y),
        (BinaryOp::Min, false) => consts_with::<MinF>(k, a, c, y),
        (BinaryOp::Min, true) => consts_with::<RMinF>(k, a, c, y),
        // Not folded (`foldable`).
        (BinaryOp::Div | BinaryOp::Pow, _) => {}
    }
}

/// Two layers of a composed chain, each an addition or a multiplication by a constant row
/// (a batch norm's multiply and add), computed in one pass: the first layer's rounded
/// output stays an f32 integer (its value less its zero point) for the second to
/// dequantize, instead of a byte stored and read again. Both layers keep their exact f32
/// operations, so the bytes are the two passes' bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pair {
    first: RowKernel,
    second: RowKernel,
    /// The first layer's output zero point less the second's input zero point (the
    /// integer the second layer's dequantization adds to the first's centered output).
    shift: f32,
}

impl Pair {
    /// The pair of layers `first` then `second` (its input: the first's output, signed as
    /// `linked` says both are), when both add or multiply by a constant; `None` otherwise.
    pub(super) fn new(first: RowKernel, second: RowKernel, linked: bool) -> Option<Pair> {
        let fits = |k: &RowKernel| matches!(k.op, BinaryOp::Add | BinaryOp::Mul);
        let shift = first.y.zero.checked_sub(second.a.zero_point())?;
        // The shifted integer stays exact in f32 (the centered output is within ±10⁶).
        (linked && fits(&first) && fits(&second) && shift.unsigned_abs() < 1 << 20).then_some(
            Pair {
                first,
                second,
                shift: shift as f32,
            },
        )
    }

    /// The first layer's output less its zero point (an integer, as f32) for input byte `q`
    /// and constant `c`, as the layer computes it.
    pub(super) fn first_at(&self, q: u8, c: f32) -> f32 {
        let v = self.first.a.at(q);
        let v = match self.first.op {
            BinaryOp::Mul => v * c,
            _ => v + c,
        };
        self.first.y.centered(v)
    }

    /// The second layer's output less its zero point (an integer, as f32) for the first's
    /// centered output `r` and constant `d`, as the layer computes it.
    pub(super) fn second_at(&self, r: f32, d: f32) -> f32 {
        let x = (r + self.shift) * self.second.a.scale;
        let v = match self.second.op {
            BinaryOp::Mul => x * d,
            _ => x + d,
        };
        self.second.y.centered(v)
    }

    /// Each layer's real-valued line through its constants `c` and `d`, as (slope,
    /// offset) of its quotient: the first in terms of the byte with its top bit flipped
    /// for int8 (`(q ^ flip)`, 0-255), the second of the first's centered output.
    pub(super) fn lines(&self, c: f32, d: f32) -> [(f64, f64); 2] {
        let (a, r1) = (self.first.a, self.first.y);
        let (sa, z) = (f64::from(a.scale), f64::from(a.zero));
        let s1 = f64::from(r1.scale);
        let first = match self.first.op {
            BinaryOp::Mul => {
                let k = sa * f64::from(c) / s1;
                (k, -z * k)
            }
            _ => (sa / s1, (f64::from(c) - z * sa) / s1),
        };
        let (sb, s2) = (
            f64::from(self.second.a.scale),
            f64::from(self.second.y.scale),
        );
        let shift = f64::from(self.shift);
        let second = match self.second.op {
            BinaryOp::Mul => {
                let k = sb * f64::from(d) / s2;
                (k, shift * k)
            }
            _ => (sb / s2, (shift * sb + f64::from(d)) / s2),
        };
        [first, second]
    }

    /// The constants of the straight-line form ([`super::binary_affine`]) but the slopes
    /// and offsets: the first input's flip, each layer's quotient bounds, the output zero
    /// point.
    pub(super) fn frame(&self) -> (u8, [(f32, f32); 2], i32) {
        let (r1, r2) = (self.first.y, self.second.y);
        (self.first.a.flip, [(r1.lo, r1.hi), (r2.lo, r2.hi)], r2.zero)
    }
}

/// [`pair_row`]'s body for the two operations.
#[inline(always)]
fn pair_with<O: F2, P: F2>(p: &Pair, a: &[u8], c: &[f32], d: &[f32], y: &mut [u8]) {
    let (da, r1, s2, r2, shift) = (p.first.a, p.first.y, p.second.a.scale, p.second.y, p.shift);
    for (((o, &q), &kc), &kd) in y.iter_mut().zip(a).zip(c).zip(d) {
        // The second layer's `(q1 − z) · s`, with `q1 − z` the first's centered output
        // plus the zero points' difference (integers, exact).
        let x = (r1.centered(O::f(da.at(q), kc)) + shift) * s2;
        *o = r2.at(P::f(x, kd));
    }
}

/// [`pair_row`]'s body. Addition and multiplication commute exactly, so the constant's
/// side does not matter.
#[inline(always)]
fn pair_row_body(p: &Pair, a: &[u8], c: &[f32], d: &[f32], y: &mut [u8]) {
    match (p.first.op, p.second.op) {
        (BinaryOp::Mul, BinaryOp::Add) => pair_with::<MulF, AddF>(p, a, c, d, y),
        (BinaryOp::Mul, BinaryOp::Mul) => pair_with::<MulF, MulF>(p, a, c, d, y),
        (BinaryOp::Add, BinaryOp::Add) => pair_with::<AddF, AddF>(p, a, c, d, y),
        (BinaryOp::Add, BinaryOp::Mul) => pair_with::<AddF, MulF>(p, a, c, d, y),
        // Not made (`Pair::new`).
        _ => {}
    }
}

backplane_cpu_kernels::multiversion! {
    /// One output row of a [`Pair`]: input bytes `a`, the first layer's constants `c` and
    /// the second's `d` (each the row's values), output `y`.
    pub(super) fn pair_row(p: &Pair, a: &[u8], c: &[f32], d: &[f32], y: &mut [u8]) => pair_row_body;
}

/// Where a block of whole output rows reads its two 8-bit operands ([`binary_rows`]): the
/// elements per row, each input's step along a row (1, or 0 for one value repeated) and its
/// step from one row to the next.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowBlock {
    /// Elements per row.
    pub len: usize,
    /// Each input's step along a row.
    pub inner: [usize; 2],
    /// Each input's step between rows.
    pub outer: [usize; 2],
}

impl RowBlock {
    /// The elements an input with steps `inner` and `outer` spans over `rows` rows.
    pub(super) fn span(&self, input: usize, rows: usize) -> usize {
        match rows {
            0 => 0,
            _ => (rows - 1) * self.outer[input] + (self.len.max(1) - 1) * self.inner[input] + 1,
        }
    }
}

/// The bytes a repeated short row is laid out to in [`binary_rows_body`].
const TILE: usize = 1024;

/// [`binary_rows`]'s body: [`binary_row_body`] on each row, so that short rows (a
/// squeeze-excite gate's channels, repeated at every pixel) pay one call per block.
#[inline(always)]
fn binary_rows_body(k: &RowKernel, block: RowBlock, a: &[u8], b: &[u8], y: &mut [u8]) {
    if block.len == 0 {
        return;
    }
    let len = block.len;
    // One input advancing row after row, the other repeating one short row: the repeated
    // row is laid end to end in a run of whole copies, and the rows go through in runs
    // that long (the vector loops then run full width instead of a row's remainder).
    let repeats = TILE / len;
    if block.inner == [1, 1] && repeats >= 2 {
        let tiled = match block.outer {
            [o, 0] if o == len => Some((1, b)),
            [0, o] if o == len => Some((0, a)),
            _ => None,
        };
        if let Some((rep, row)) = tiled {
            let Some(row) = row.get(..len) else {
                return;
            };
            let mut tile = [0u8; TILE];
            for t in tile.chunks_exact_mut(len).take(repeats) {
                t.copy_from_slice(row);
            }
            let run = repeats * len;
            let whole = if rep == 1 { a } else { b };
            for (yr, wr) in y.chunks_mut(run).zip(whole.chunks(run)) {
                let tr = &tile[..yr.len()];
                match rep {
                    1 => binary_row_body(k, wr, tr, yr),
                    _ => binary_row_body(k, tr, wr, yr),
                }
            }
            return;
        }
    }
    for (r, yr) in y.chunks_exact_mut(block.len).enumerate() {
        let (at, bt) = (r * block.outer[0], r * block.outer[1]);
        let ra = a.get(at..at + block.span(0, 1));
        let rb = b.get(bt..bt + block.span(1, 1));
        // The caller passes operands spanning every row; a short one ends the block.
        let (Some(ra), Some(rb)) = (ra, rb) else {
            return;
        };
        binary_row_body(k, ra, rb, yr);
    }
}

backplane_cpu_kernels::multiversion! {
    /// Whole output rows of two 8-bit operands (`y` holds them, `block` says where each
    /// row's operands start): [`binary_row`] on each, in one call.
    pub(super) fn binary_rows(k: &RowKernel, block: RowBlock, a: &[u8], b: &[u8], y: &mut [u8]) => binary_rows_body;
}

backplane_cpu_kernels::multiversion! {
    /// One output row of two 8-bit operands, each the row's values or one value repeated.
    pub(super) fn binary_row(k: &RowKernel, a: &[u8], b: &[u8], y: &mut [u8]) => binary_row_body;
}

backplane_cpu_kernels::multiversion! {
    /// One output row of an 8-bit operand and f32 constants, each the row's values or one
    /// value repeated.
    pub(super) fn const_row(k: &RowKernel, a: &[u8], c: &[f32], y: &mut [u8]) => const_row_body;
}

backplane_cpu_kernels::multiversion! {
    /// One row of a composed chain's later layer, in place: `y` holds the previous layer's
    /// output row, `c` the constants (the row's or one repeated).
    pub(super) fn const_row_in_place(k: &RowKernel, c: &[f32], y: &mut [u8]) => const_row_in_place_body;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chain's rule, written plainly: widen, dequantize, operate, quantize.
    fn chain(
        op: BinaryOp,
        signed: [bool; 3],
        p: [(f32, i32); 3],
        clamp: (i32, i32),
        q: [u8; 2],
    ) -> u8 {
        let w = |s: bool, b: u8| if s { i32::from(b as i8) } else { i32::from(b) };
        let x = (w(signed[0], q[0]) - p[0].1) as f32 * p[0].0;
        let z = (w(signed[1], q[1]) - p[1].1) as f32 * p[1].0;
        let v = match op {
            BinaryOp::Add => x + z,
            BinaryOp::Sub => x - z,
            BinaryOp::Mul => x * z,
            BinaryOp::Max => x.max(z),
            BinaryOp::Min => x.min(z),
            BinaryOp::Div | BinaryOp::Pow => f32::NAN,
        };
        let r = f64::from((v / p[2].0).round_ties_even()) + f64::from(p[2].1);
        let r = r.clamp(f64::from(clamp.0), f64::from(clamp.1)) as i32;
        if signed[2] {
            (r as i8) as u8
        } else {
            r as u8
        }
    }

    const OPS: [BinaryOp; 5] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Max,
        BinaryOp::Min,
    ];

    /// Scale and zero point of a, b and y, and the clamp.
    type Setting = ([(f32, i32); 3], (i32, i32));

    /// Scales, zero points and clamps per signedness: extreme zero points, tiny and large
    /// scales, a fused Relu's clamp.
    fn settings(signed: [bool; 3]) -> Vec<Setting> {
        let z = |s: bool, k: usize| match (s, k) {
            (true, 0) => -128,
            (true, 1) => 127,
            (true, _) => 3,
            (false, 0) => 0,
            (false, 1) => 255,
            (false, _) => 131,
        };
        let range = if signed[2] { (-128, 127) } else { (0, 255) };
        (0..3)
            .map(|k| {
                let p = [
                    ([0.0173, 1e-5, 0.5][k], z(signed[0], k)),
                    ([0.0219, 3e-5, 0.25][k], z(signed[1], (k + 1) % 3)),
                    ([0.031, 7e-6, 1.7][k], z(signed[2], (k + 2) % 3)),
                ];
                let clamp = if k == 2 {
                    (p[2].1.max(range.0), range.1)
                } else {
                    range
                };
                (p, clamp)
            })
            .collect()
    }

    #[test]
    fn requantization_of_extreme_values_follows_the_scalar_rule() {
        // NaN as the integer 0, infinities and huge values saturated, halves to even, on
        // zero points at the ends of both types and a Relu's clamp.
        let values = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e30,
            -1e30,
            0.0,
            -0.0,
            0.5,
            -0.5,
            2.5,
            -2.5,
            127.5,
            -128.5,
            1e6,
            -4_194_303.5,
        ];
        for zero in [-128, 0, 3, 127, 255] {
            for (lo, hi) in [(-128, 127), (0, 255), (3, 127)] {
                for scale in [1.0f32, 0.37, 1e-30] {
                    let r = Req::new((scale, zero), (lo, hi));
                    for v in values {
                        let w = v / scale;
                        let q = if w.is_nan() {
                            0
                        } else {
                            let q = f64::from(w).round_ties_even() + f64::from(zero);
                            q.clamp(-1e9, 1e9) as i32
                        };
                        let want = q.clamp(lo, hi) as u8;
                        assert_eq!(r.at(v), want, "{v} / {scale} + {zero} in [{lo}, {hi}]");
                    }
                }
            }
        }
    }

    #[test]
    fn zero_points_far_out_follow_the_scalar_rule() {
        // The rule as it stood: the quotient saturated at ±10⁶, rounded, the zero point
        // added in f32, then clamped (a NaN as the quotient -z).
        let rule = |v: f32, scale: f32, zero: i32, (lo, hi): (i32, i32)| {
            let w = v / scale;
            let w = if w.is_nan() { -(zero as f32) } else { w };
            let q = (w.clamp(-1e6, 1e6) + MAGIC) - MAGIC + zero as f32;
            (q as i32).clamp(lo, hi) as u8
        };
        let values = [
            f32::NAN,
            f32::INFINITY,
            -1e30,
            -3.5,
            0.0,
            2.5,
            7e5,
            1.2e6,
            -9.9e5,
        ];
        for zero in [
            -2_000_000,
            -1_000_129,
            -1_000_128,
            -999_999,
            -300,
            400,
            999_873,
            1_000_255,
            1_000_256,
            1 << 21,
            i32::MAX,
            i32::MIN,
        ] {
            for clamp in [(-128, 127), (0, 255), (3, 100)] {
                let r = Req::new((1.0, zero), clamp);
                for v in values {
                    assert_eq!(
                        r.at(v),
                        rule(v, 1.0, zero, clamp),
                        "{v} + {zero} in {clamp:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_byte_pair_equals_the_chain() {
        let signs = [
            [false, false, false],
            [true, true, true],
            [true, false, true],
            [false, true, false],
        ];
        // Every pair once, a then b.
        let a: Vec<u8> = (0..65536u32).map(|i| (i >> 8) as u8).collect();
        let b: Vec<u8> = (0..65536u32).map(|i| i as u8).collect();
        for signed in signs {
            for (p, clamp) in settings(signed) {
                for op in OPS {
                    let k = RowKernel {
                        op,
                        a: Deq::new(signed[0], p[0]).unwrap_or_else(|| unreachable!()),
                        b: Deq::new(signed[1], p[1]).unwrap_or_else(|| unreachable!()),
                        y: Req::new(p[2], clamp),
                        const_first: false,
                    };
                    let want: Vec<u8> = a
                        .iter()
                        .zip(&b)
                        .map(|(&x, &z)| chain(op, signed, p, clamp, [x, z]))
                        .collect();
                    let mut got = vec![0u8; a.len()];
                    binary_row(&k, &a, &b, &mut got);
                    assert!(got == want, "{op:?} {signed:?} {p:?} (best tier)");
                    got.fill(0);
                    binary_row_body(&k, &a, &b, &mut got);
                    assert!(got == want, "{op:?} {signed:?} {p:?} (baseline)");
                    // One operand repeated over rows of odd lengths.
                    for len in [1, 2, 17, 257] {
                        for q in [0u8, 1, 127, 128, 255] {
                            let row = &b[..len];
                            let mut y = vec![0u8; len];
                            binary_row(&k, &[q], row, &mut y);
                            let w: Vec<u8> = row
                                .iter()
                                .map(|&z| chain(op, signed, p, clamp, [q, z]))
                                .collect();
                            assert_eq!(y, w, "{op:?} a={q} len {len}");
                            binary_row(&k, row, &[q], &mut y);
                            let w: Vec<u8> = row
                                .iter()
                                .map(|&x| chain(op, signed, p, clamp, [x, q]))
                                .collect();
                            assert_eq!(y, w, "{op:?} b={q} len {len}");
                            binary_row(&k, &[q], &[row[len - 1]], &mut y);
                            let one = chain(op, signed, p, clamp, [q, row[len - 1]]);
                            assert!(y.iter().all(|&v| v == one), "{op:?} both repeated");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn constant_rows_equal_the_chain() {
        let a: Vec<u8> = (0..=255u8).cycle().take(256 * 7 + 3).collect();
        let consts: Vec<f32> = (0..a.len()).map(|i| (i as f32 - 900.0) * 0.0137).collect();
        for signed in [
            [false, false, false],
            [true, false, true],
            [true, false, false],
        ] {
            for (p, clamp) in settings(signed) {
                for op in OPS {
                    for first in [false, true] {
                        let k = RowKernel {
                            op,
                            a: Deq::new(signed[0], p[0]).unwrap_or_else(|| unreachable!()),
                            b: Deq::new(false, (1.0, 0)).unwrap_or_else(|| unreachable!()),
                            y: Req::new(p[2], clamp),
                            const_first: first,
                        };
                        let one = |q: u8, c: f32| {
                            let w = if signed[0] {
                                i32::from(q as i8)
                            } else {
                                i32::from(q)
                            };
                            let x = (w - p[0].1) as f32 * p[0].0;
                            let v = match (op, first) {
                                (BinaryOp::Add, _) => x + c,
                                (BinaryOp::Sub, false) => x - c,
                                (BinaryOp::Sub, true) => c - x,
                                (BinaryOp::Mul, _) => x * c,
                                (BinaryOp::Max, _) => x.max(c),
                                _ => x.min(c),
                            };
                            let r = f64::from((v / p[2].0).round_ties_even()) + f64::from(p[2].1);
                            let r = r.clamp(f64::from(clamp.0), f64::from(clamp.1)) as i32;
                            r as u8
                        };
                        let mut y = vec![0u8; a.len()];
                        const_row(&k, &a, &consts, &mut y);
                        let w: Vec<u8> = a.iter().zip(&consts).map(|(&q, &c)| one(q, c)).collect();
                        assert!(y == w, "{op:?} {signed:?} first {first}");
                        const_row(&k, &a, &consts[5..6], &mut y);
                        let w: Vec<u8> = a.iter().map(|&q| one(q, consts[5])).collect();
                        assert!(y == w, "{op:?} {signed:?} first {first}, one constant");
                        let mut y = vec![0u8; 257];
                        const_row(&k, &a[9..10], &consts[..257], &mut y);
                        let w: Vec<u8> = consts[..257].iter().map(|&c| one(a[9], c)).collect();
                        assert!(y == w, "{op:?} {signed:?} first {first}, one byte");
                    }
                }
            }
        }
    }
}
