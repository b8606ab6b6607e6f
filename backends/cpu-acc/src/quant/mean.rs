//! The quantized mean over the pixels (custom `QLinearMean`, made by [`super::fold`] from
//! `DequantizeLinear → ReduceMean over H and W | GlobalAveragePool → QuantizeLinear`, per
//! tensor on 8-bit types): a squeeze-excite block's squeeze, or a classifier's pooling, on the
//! 8-bit tensor, NCHW or channels-last (inside a region, [`super::region`]).
//!
//! Each output is what CpuRef's chain computes: the dequantized values `(q - z) · s` in f32,
//! summed in f64 in pixel order (row by row; the same order in both layouts), divided by the
//! pixel count in f64 and rounded to f32, then quantized (the quotient by the output scale in
//! f32, rounded half to even, the zero point added, saturated). So it equals CpuRef bit for
//! bit. XNNPACK's int8 MEAN uses a fixed-point multiplier instead and may differ by a
//! quantum.
//!
//! The sums run vectorized ([`backplane_cpu_kernels::byte_sums`]: channels in lanes
//! channels-last, lanes along the plane channels-first) in another order than the chain's,
//! yet give its f64 bits: every value is an integer multiple of the scale's last-place unit
//! below `2^32` of them, so up to [`Dequant::exact_terms`] pixels (at least `2^21` for zero
//! points in range) no addition rounds. Longer planes, or unusable parameters, keep the
//! in-order chain over a table of the 256 values.
//!
//! The output holds `N · C` values in `(n, c)` order: `[N, C]`, `[N, C, 1, 1]` or, in a
//! region, `[N, 1, 1, C]`: the same bytes.
//!
//! The 2-D pools are [`super::pool`]'s.

use super::{is_8bit, payload_of, range, widen, QLINEAR_MEAN};
use crate::io::Io;
use crate::plan::{done, Plan};
use crate::scratch;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::CustomOp;
use backplane_core::quant::{FixedPointMean, Requantization};
use backplane_core::{DataType, TensorInfo, TensorView, TensorViewMut};
use backplane_cpu_kernels::byte_sums::{self, Dequant, ExactSums};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;

/// What a folded mean computes (its custom op's payload).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QMeanDesc {
    /// Scale and zero point of the input.
    pub x: (f32, i32),
    /// Scale and zero point of the output.
    pub y: (f32, i32),
    /// The input is `[N, H, W, C]` (else `[N, C, H, W]`).
    pub nhwc: bool,
    /// `FixedPoint`: LiteRT's builtin MEAN rule ([`FixedMean`], CpuRef's
    /// `QMeanFixedPoint`) instead of the f32 chain's.
    pub requant: Requantization,
}

/// LiteRT's builtin int8 MEAN ([`FixedPointMean`], as CpuRef's `QMeanFixedPoint`), clamped
/// to the output type's range.
#[derive(Debug, Clone, Copy, PartialEq)]
struct FixedMean {
    rule: FixedPointMean,
    /// The output type's range.
    lo: i32,
    hi: i32,
}

impl FixedMean {
    /// The constants of a mean of `n` pixels.
    fn new(x: (f32, i32), y: (f32, i32), n: usize, (lo, hi): (i32, i32)) -> Self {
        FixedMean {
            rule: FixedPointMean::new(x, y, n),
            lo,
            hi,
        }
    }

    /// [`FixedMean::value`] as an output byte (an i8's two's complement where `signed`).
    fn byte(&self, sum: f64, ch: usize, c: usize, signed: bool) -> u8 {
        let q = self.value(sum, ch, c);
        if signed {
            (q as i8) as u8
        } else {
            q as u8
        }
    }

    /// Channel `ch` of `c`'s output value from its sum.
    fn value(&self, sum: f64, ch: usize, c: usize) -> i32 {
        let s = sum.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i64;
        self.rule.value(s, ch, c).clamp(self.lo, self.hi)
    }
}

impl QMeanDesc {
    /// The custom op, with output `y`.
    pub(crate) fn to_op(&self, y: TensorInfo) -> CustomOp {
        super::custom_op(QLINEAR_MEAN, self, y)
    }

    /// The description [`QMeanDesc::to_op`] put in the custom op.
    pub(crate) fn decode(c: &CustomOp) -> std::result::Result<QMeanDesc, String> {
        payload_of(c, QLINEAR_MEAN)
    }
}

/// The one input and the output of layer `layer` (a `what`), both 8-bit.
fn one_8bit_input<'a>(
    layer: &'a LayerDesc,
    what: &str,
) -> std::result::Result<(&'a TensorInfo, &'a TensorInfo), String> {
    let [x] = layer.inputs.as_slice() else {
        return Err(format!("{what} takes one input"));
    };
    let y = layer.outputs.first().ok_or("no output")?;
    if !is_8bit(x.dtype) || !is_8bit(y.dtype) {
        return Err(format!("{what}: {} to {}, not 8-bit", x.dtype, y.dtype));
    }
    Ok((x, y))
}

/// The plan of a folded mean: a 4-D 8-bit input, an 8-bit output of `N · C` values.
pub(super) fn plan<'a>(
    c: &'a CustomOp,
    layer: &'a LayerDesc,
) -> std::result::Result<Plan<'a>, String> {
    let d = QMeanDesc::decode(c)?;
    let (x, y) = one_8bit_input(layer, QLINEAR_MEAN)?;
    let &[n, d1, d2, d3] = x.shape.dims() else {
        return Err(format!("{QLINEAR_MEAN}: input {} is not 4-D", x.shape));
    };
    let (c, pixels) = if d.nhwc { (d3, d1 * d2) } else { (d1, d2 * d3) };
    if y.shape.elements() != n * c {
        return Err(format!(
            "{QLINEAR_MEAN}: output {} for input {}",
            y.shape, x.shape
        ));
    }
    let signed = x.dtype == DataType::I8;
    let values: Vec<f64> = (0..=255u8)
        .map(|b| f64::from((widen(signed, b) - d.x.1) as f32 * d.x.0))
        .collect();
    let k = QMean {
        values,
        exact: ExactSums::new(Dequant {
            signed,
            zero: d.x.1,
            scale: d.x.0,
        }),
        c,
        pixels,
        nhwc: d.nhwc,
        y: d.y,
        y_dt: y.dtype,
        fixed: (d.requant == Requantization::FixedPoint)
            .then(|| FixedMean::new(d.x, d.y, pixels, range(y.dtype))),
        raw: ExactSums::new(Dequant {
            signed,
            zero: 0,
            scale: 1.0,
        }),
        x_signed: signed,
    };
    Ok(Plan::new(move |io, th| done(Running { io, k, th })))
}

/// The mean's arithmetic.
struct QMean {
    /// The dequantized value of each input byte (the in-order chain's).
    values: Vec<f64>,
    /// The same values' parameters and exact-sum bound (the vectorized sums').
    exact: ExactSums,
    c: usize,
    pixels: usize,
    nhwc: bool,
    y: (f32, i32),
    y_dt: DataType,
    /// LiteRT's builtin rule, when the layer follows it.
    fixed: Option<FixedMean>,
    /// The bytes as integers (zero point 0, scale 1): the fixed-point rule's sums, exact.
    raw: ExactSums,
    /// The input is int8.
    x_signed: bool,
}

impl QMean {
    /// The fewest channels of a thread's block (whole vectors of f64 lanes): at least
    /// [`MEAN_SHARE`] input bytes, and channels-last at least [`MEAN_NHWC_SHARE_CHANNELS`].
    fn min_share(&self) -> usize {
        let min = MEAN_SHARE.div_ceil(self.pixels.max(1)).div_ceil(16) * 16;
        if self.nhwc {
            min.max(MEAN_NHWC_SHARE_CHANNELS)
        } else {
            min
        }
    }

    /// The means of channels `ch0 ..` of one batch item by the fixed-point rule: the raw
    /// values' integer sums (held exactly in f64), then [`QMean::quantize_exact`]. `x` holds the
    /// block's values (`y.len()` channels of every pixel, [`QMean::block`]).
    fn run_fixed(&self, x: &[u8], ch0: usize, y: &mut [u8], sums: &mut [f64]) {
        let x_signed = self.x_signed;
        let raw = |b: u8| f64::from(widen(x_signed, b));
        if self.nhwc {
            // The vectorized sums of the integers, or else the plain ones.
            if !byte_sums::column_sums(&self.raw, x, sums) {
                sums.fill(0.0);
                for pixel in x.chunks_exact(y.len()) {
                    for (s, &b) in sums.iter_mut().zip(pixel) {
                        *s += raw(b);
                    }
                }
            }
        } else {
            for (s, plane) in sums.iter_mut().zip(x.chunks_exact(self.pixels)) {
                *s = byte_sums::sum(&self.raw, plane)
                    .unwrap_or_else(|| plane.iter().fold(0.0, |s, &b| s + raw(b)));
            }
        }
        self.quantize_exact(sums, ch0, y);
    }

    /// The exact sums this layer's rule adds: the bytes as integers for the fixed-point
    /// rule, their dequantized values for the f32 chain.
    fn exact_sums(&self) -> &ExactSums {
        match self.fixed {
            Some(_) => &self.raw,
            None => &self.exact,
        }
    }

    /// Pixels per share when a channels-last item is summed by ranges of pixels on these
    /// threads (`None`: it is not). Where the channels are too few to share out
    /// ([`QMean::min_share`]), the pixels can be: each thread sums its range of pixels for
    /// every channel, reading its pixels in place (no gathering), and the partial sums are
    /// added. Only where the sums over all the pixels are exact ([`ExactSums::terms`]), so
    /// that the partial sums add up to the very f64 the whole gives: the same bytes.
    fn pixel_share(&self, th: &Threads) -> Option<usize> {
        if !self.nhwc || self.c == 0 || self.min_share() < self.c {
            return None;
        }
        if self.pixels > self.exact_sums().terms() {
            return None;
        }
        let per = th.chunk_size(self.pixels, MEAN_SHARE.div_ceil(self.c), 1);
        (per < self.pixels).then_some(per)
    }

    /// The output bytes of channels `ch0 .. ch0 + y.len()` from their sums over every pixel
    /// (the exact sums of [`QMean::exact_sums`]).
    fn quantize_exact(&self, sums: &[f64], ch0: usize, y: &mut [u8]) {
        match &self.fixed {
            Some(f) => {
                let signed = self.y_dt == DataType::I8;
                for (ch, (o, &s)) in y.iter_mut().zip(sums).enumerate() {
                    *o = f.byte(s, ch0 + ch, self.c, signed);
                }
            }
            None => quantize_sums(self.rule(), sums, y),
        }
    }

    /// The values of channels `ch0 .. ch0 + width` of one batch item `x`: its planes of
    /// those channels (channels-first), the item itself (every channel), or those channels
    /// of each pixel gathered into `gather` (channels-last).
    fn block<'a>(
        &self,
        x: &'a [u8],
        ch0: usize,
        width: usize,
        gather: &'a mut AlignedVec<u8>,
    ) -> std::result::Result<&'a [u8], String> {
        if !self.nhwc {
            return Ok(&x[ch0 * self.pixels..(ch0 + width) * self.pixels]);
        }
        if width == self.c {
            return Ok(x);
        }
        gather
            .try_resize(self.pixels * width)
            .map_err(|e| format!("scratch of {} bytes: {e}", self.pixels * width))?;
        for (pixel, to) in x.chunks_exact(self.c).zip(gather.chunks_exact_mut(width)) {
            to.copy_from_slice(&pixel[ch0..ch0 + width]);
        }
        Ok(gather)
    }

    /// How a sum over the pixels becomes an output byte.
    fn rule(&self) -> Quantize {
        let (lo, hi) = range(self.y_dt);
        Quantize {
            pixels: self.pixels as f64,
            scale: self.y.0,
            zero: f64::from(self.y.1),
            lo: f64::from(lo),
            hi: f64::from(hi),
        }
    }

    /// The output byte of a sum over the pixels.
    fn quantize(&self, sum: f64) -> u8 {
        self.rule().byte(sum)
    }

    /// The means of channels `ch0 .. ch0 + y.len()` of one batch item: `x` the block's values
    /// ([`QMean::block`]), `y` its outputs; `sums` a scratch row of `y.len()`. Each channel's
    /// sum and output depend on that channel's values only, so blocks give the bytes of the
    /// whole.
    fn run(&self, x: &[u8], ch0: usize, y: &mut [u8], sums: &mut [f64]) {
        if self.fixed.is_some() {
            self.run_fixed(x, ch0, y, sums);
            return;
        }
        let v = &self.values;
        if self.nhwc && byte_sums::column_sums(&self.exact, x, sums) {
            quantize_sums(self.rule(), sums, y);
        } else if self.nhwc {
            sums.fill(0.0);
            for pixel in x.chunks_exact(y.len()) {
                for (s, &b) in sums.iter_mut().zip(pixel) {
                    *s += v[usize::from(b)];
                }
            }
            quantize_sums(self.rule(), sums, y);
        } else {
            for (o, plane) in y.iter_mut().zip(x.chunks_exact(self.pixels)) {
                let s = byte_sums::sum(&self.exact, plane)
                    .unwrap_or_else(|| plane.iter().fold(0.0, |s, &b| s + v[usize::from(b)]));
                *o = self.quantize(s);
            }
        }
    }
}

/// The f32 chain's quantization of a mean: the sum over `pixels` pixels divided in f64 and
/// rounded to f32, divided by the output scale in f32, rounded half to even, the zero point
/// added, saturated to `lo ..= hi` (a NaN to 0).
#[derive(Debug, Clone, Copy)]
struct Quantize {
    pixels: f64,
    scale: f32,
    zero: f64,
    lo: f64,
    hi: f64,
}

impl Quantize {
    /// The output byte of `sum` (an i8's two's complement byte where `lo` is negative).
    #[inline(always)]
    fn byte(self, sum: f64) -> u8 {
        let mean = (sum / self.pixels) as f32;
        let r = f64::from(mean / self.scale).round_ties_even() + self.zero;
        // NaN to 0 first, then plain bounds (no NaN left to order).
        let r = if r.is_nan() { 0.0 } else { r };
        (r.max(self.lo).min(self.hi) as i32) as u8
    }
}

/// `y[i] = q.byte(sums[i])`: the loop compiled per tier (there `round_ties_even` is one
/// vector instruction, not a call to `rint` per value).
#[inline(always)]
fn quantize_sums_body(q: Quantize, sums: &[f64], y: &mut [u8]) {
    for (o, &s) in y.iter_mut().zip(sums) {
        *o = q.byte(s);
    }
}

backplane_cpu_kernels::multiversion! {
    /// [`quantize_sums_body`] on the best tier in use.
    fn quantize_sums(q: Quantize, sums: &[f64], y: &mut [u8]) => quantize_sums_body;
}

/// The folded mean, planned.
struct Running {
    io: Io,
    k: QMean,
    th: Threads,
}

thread_local! {
    /// Each thread's sums, kept between layers and executions (not allocated per share: a
    /// model's means are many and small).
    static SUMS: RefCell<AlignedVec<f64>> = const { RefCell::new(AlignedVec::new()) };
    /// Each thread's gathered block of channels, kept the same way.
    static GATHER: RefCell<AlignedVec<u8>> = const { RefCell::new(AlignedVec::new()) };
}

/// The fewest input bytes a thread's block of channels holds (less is summed faster than
/// handed over).
const MEAN_SHARE: usize = 16 * 1024;

/// The fewest channels a thread's block holds channels-last. Such a block is gathered from
/// every pixel (a copy of its run of channels per pixel), which costs more than the sums it
/// shares where the runs are short: a squeeze-excite block's squeeze over a large plane of few
/// channels (32 to 144) ran several times slower shared than on one thread (docs/tflite.md,
/// session 49). Long runs (a classifier's pooling over thousands of channels) still share.
const MEAN_NHWC_SHARE_CHANNELS: usize = 256;

impl Running {
    /// Each item's channels-last means by ranges of `per` pixels ([`QMean::pixel_share`]):
    /// one row of partial sums per range, summed on the threads, then added in order and
    /// quantized on the caller.
    fn run_by_pixels(&self, x: &[u8], y: &mut [u8], per: usize) -> Result<()> {
        let (k, c) = (&self.k, self.k.c);
        let parts = k.pixels.div_ceil(per);
        let mut kept = scratch::try_take(&SUMS, parts * c)
            .map_err(|e| self.io.error(format!("scratch of {} sums: {e}", parts * c)))?;
        let done = self.items_by_pixels(x, y, per, &mut kept[..parts * c]);
        scratch::give_back(&SUMS, kept);
        done
    }

    /// [`Running::run_by_pixels`] with `partial` its rows of partial sums.
    fn items_by_pixels(
        &self,
        x: &[u8],
        y: &mut [u8],
        per: usize,
        partial: &mut [f64],
    ) -> Result<()> {
        let (k, c) = (&self.k, self.k.c);
        for (xi, yi) in x.chunks_exact(c * k.pixels).zip(y.chunks_exact_mut(c)) {
            self.th.chunks(partial, c, |part, sums| {
                let pixels = part * per..((part + 1) * per).min(k.pixels);
                let xs = xi.get(pixels.start * c..pixels.end * c).unwrap_or(&[]);
                match byte_sums::column_sums(k.exact_sums(), xs, sums) {
                    true => Ok(()),
                    false => Err(self.io.error("a share of pixels not summed exactly".into())),
                }
            })?;
            let (total, rest) = partial.split_at_mut(c);
            for part in rest.chunks_exact(c) {
                for (t, &s) in total.iter_mut().zip(part) {
                    *t += s;
                }
            }
            k.quantize_exact(total, 0, yi);
        }
        Ok(())
    }
}

impl Workload for Running {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let missing = || BackendError::Execution(format!("{}: missing buffer", self.io.layer));
        let x = inputs.first().ok_or_else(missing)?.data;
        let y = &mut outputs.first_mut().ok_or_else(missing)?.data;
        let k = &self.k;
        if k.c == 0 || k.pixels == 0 {
            // No pixels: the mean of nothing is NaN, which quantizes to 0 (CpuRef).
            y.fill(k.quantize(f64::NAN));
            return Ok(());
        }
        if let Some(per) = k.pixel_share(&self.th) {
            return self.run_by_pixels(x, y, per);
        }
        let min = k.min_share();
        let per = self.th.chunk_size(k.c, min, 16);
        for (xi, yi) in x.chunks_exact(k.c * k.pixels).zip(y.chunks_exact_mut(k.c)) {
            self.th.chunks(yi, per, |t, yb| {
                let ch0 = t * per;
                // This thread's kept scratch.
                let mut sums = scratch::try_take(&SUMS, yb.len())
                    .map_err(|e| self.io.error(format!("scratch of {} sums: {e}", yb.len())))?;
                let mut gather = scratch::take(&GATHER, 0);
                let done = k
                    .block(xi, ch0, yb.len(), &mut gather)
                    .map(|xb| k.run(xb, ch0, yb, &mut sums[..yb.len()]))
                    .map_err(|e| self.io.error(e));
                scratch::give_back(&SUMS, sums);
                scratch::give_back(&GATHER, gather);
                done
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel of `c` channels over `pixels` pixels, by the f32 chain's rule.
    fn plain(c: usize, pixels: usize, nhwc: bool) -> QMean {
        let exact = || {
            ExactSums::new(Dequant {
                signed: true,
                zero: 0,
                scale: 1.0,
            })
        };
        QMean {
            values: (0..=255u8).map(|b| f64::from(b as i8)).collect(),
            exact: exact(),
            c,
            pixels,
            nhwc,
            y: (1.0, 0),
            y_dt: DataType::I8,
            fixed: None,
            raw: exact(),
            x_signed: true,
        }
    }

    /// Channels-last, a squeeze over a large plane of few channels (whose blocks would be
    /// gathered in short runs) stays whole on one thread, while channels-first the same
    /// layer shares its planes; a wide channels-last layer (a classifier's pooling) shares
    /// whole vectors of lanes.
    #[test]
    fn channels_last_shares_only_long_runs() {
        for (c, pixels) in [(32usize, 48 * 48), (144, 24 * 24), (255, 97 * 89)] {
            let nhwc = plain(c, pixels, true).min_share();
            assert!(nhwc >= c, "{c} channels of {pixels} pixels: {nhwc}");
            let nchw = plain(c, pixels, false).min_share();
            assert!(nchw < c, "{c} channels of {pixels} pixels: {nchw}");
        }
        let wide = plain(2048, 7 * 7, true).min_share();
        assert!(wide < 2048 && wide.is_multiple_of(16), "{wide}");
        // No pixels or a single one: no division by zero, a whole kernel's worth.
        assert!(plain(16, 0, true).min_share() >= 16);
        assert!(plain(16, 1, false).min_share() >= 16);
    }

    /// Channels-last means of few channels over many pixels share their pixels at two
    /// threads; small ones, wide ones (which share channels), channels-first ones and one
    /// thread do not.
    #[test]
    fn few_channels_share_their_pixels() {
        let two = Threads::new(2).unwrap();
        for (c, pixels) in [(32usize, 48 * 48), (144, 24 * 24), (17, 61 * 59)] {
            let per = plain(c, pixels, true).pixel_share(&two);
            assert!(
                per.is_some_and(|p| p < pixels && p * c >= MEAN_SHARE),
                "{c} × {pixels}"
            );
        }
        assert_eq!(plain(3, 7 * 7, true).pixel_share(&two), None);
        assert_eq!(plain(2048, 7 * 7, true).pixel_share(&two), None);
        assert_eq!(plain(32, 48 * 48, false).pixel_share(&two), None);
        assert_eq!(
            plain(32, 48 * 48, true).pixel_share(&Threads::single()),
            None
        );
    }

    /// Blocks of channels (gathered from the pixels, placed by their first channel: the
    /// fixed-point rule rounds the last `C mod 16` channels its own way) give the bytes of
    /// the whole, by both rules: 24 channels over two pixels, sums of ±1, ±3, ±5, ±7 (means
    /// on ties).
    #[test]
    fn channel_blocks_give_the_whole_bytes() {
        let (c, pixels) = (24usize, 2usize);
        let sum = |ch: usize| {
            let v = 2 * (ch % 4) as i8 + 1;
            if ch % 8 < 4 {
                v
            } else {
                -v
            }
        };
        // Pixel 0 holds each channel's sum, pixel 1 zeros.
        let x: Vec<u8> = (0..c)
            .map(|ch| sum(ch) as u8)
            .chain(std::iter::repeat_n(0u8, c))
            .collect();
        for fixed in [true, false] {
            let k = QMean {
                values: (0..=255u8).map(|b| f64::from(b as i8)).collect(),
                exact: ExactSums::new(Dequant {
                    signed: true,
                    zero: 0,
                    scale: 1.0,
                }),
                c,
                pixels,
                nhwc: true,
                y: (1.0, 0),
                y_dt: DataType::I8,
                fixed: fixed.then(|| FixedMean::new((1.0, 0), (1.0, 0), pixels, (-128, 127))),
                raw: ExactSums::new(Dequant {
                    signed: true,
                    zero: 0,
                    scale: 1.0,
                }),
                x_signed: true,
            };
            let mut whole = vec![0u8; c];
            k.run(&x, 0, &mut whole, &mut vec![0.0; c]);
            let mut blocks = vec![0u8; c];
            for (ch0, width) in [(0usize, 16usize), (16, 5), (21, 3)] {
                let mut gather = backplane_cpu_kernels::AlignedVec::new();
                let xb = k.block(&x, ch0, width, &mut gather).unwrap_or_default();
                let yb = &mut blocks[ch0..ch0 + width];
                k.run(xb, ch0, yb, &mut vec![0.0; width]);
            }
            assert_eq!(blocks, whole, "fixed {fixed}");
            // The means themselves: ties rounded up by the fixed-point rule, to even by the
            // f32 chain.
            let want: Vec<u8> = (0..c)
                .map(|ch| {
                    let m = f64::from(sum(ch)) / 2.0;
                    let q = if fixed {
                        (m + 0.5).floor()
                    } else {
                        m.round_ties_even()
                    };
                    q as i8 as u8
                })
                .collect();
            assert_eq!(whole, want, "fixed {fixed}");
        }
    }
}
