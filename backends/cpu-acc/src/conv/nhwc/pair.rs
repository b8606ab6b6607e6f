//! Two channels-last convolutions run as one layer (`FusedConvPair`): an expansion and the
//! depthwise convolution of its output, or a depthwise convolution and its projection, a band
//! of rows at a time so that the tensor between them stays in cache.

use super::*;

/// The order of a [`NhwcPairWorkload`]'s two convolutions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairOrder {
    /// A pointwise expansion, then the depthwise convolution of its output.
    Expansion,
    /// A depthwise convolution, then the pointwise projection of its output.
    Projection,
}

/// How two channels-last convolutions run as one [`NhwcPairWorkload`], if they can: a
/// pointwise one (1×1, stride 1, no padding, one group) and a depthwise one (one group per
/// channel) in either order, `mid` (`[N, H, W, C]`) the first one's output.
pub fn pair_order(
    first: &ConvDesc,
    second: &ConvDesc,
    mid: &backplane_core::TensorInfo,
) -> Option<PairOrder> {
    let d = mid.shape.dims();
    if d.len() != 4 || d[3] <= 1 {
        return None;
    }
    let pointwise = |desc: &ConvDesc| {
        let w = &desc.window;
        let ones = |v: &[usize]| v.iter().all(|&s| s == 1);
        desc.group.max(1) == 1
            && ones(&w.kernel)
            && ones(&w.strides)
            && ones(&w.dilations)
            && w.pads.iter().all(|&p| p == 0)
    };
    if pointwise(first) && second.group == d[3] {
        Some(PairOrder::Expansion)
    } else if first.group == d[3] && pointwise(second) {
        Some(PairOrder::Projection)
    } else {
        None
    }
}

/// Floats of the strip of expanded rows one band of a [`NhwcPairWorkload`] reads (with
/// the band's output, it stays in L2).
pub(super) const STRIP_FLOATS: usize = 64 * 1024;

/// Floats of the strip of depthwise rows one band of a projection pair writes and its
/// pointwise tiles read: a few rows of MobileNetV2's planes (the measurement:
/// docs/cpu-acc-bounds.md, "Channels-last pairs").
pub(super) const PROJECTION_STRIP_FLOATS: usize = 24 * 1024;

/// Two channels-last convolutions, the second alone reading the first's output, run a band
/// of rows at a time so that the tensor between them stays in L2 (`fusion::FUSED_CONV_PAIR`):
/// - [`PairOrder::Expansion`], a pointwise convolution and the depthwise one on its output:
///   each band of depthwise rows is computed from a strip holding the band's input rows,
///   which the pointwise convolution has just expanded; the rows two bands share move to the
///   top of the strip rather than being computed again (MobileNetV2's first expansion,
///   112×112×96 floats, 4.8 MB, is never written out and read back);
/// - [`PairOrder::Projection`], a depthwise convolution and the pointwise one on its output
///   (with a residual or not): each band of depthwise rows goes to a strip that the pointwise
///   convolution reads at once (no rows are shared, a 1×1 window has no reach).
pub struct NhwcPairWorkload {
    io: Io,
    first: NhwcConvWorkload,
    second: NhwcConvWorkload,
}

impl NhwcPairWorkload {
    /// The pair of `first` and `second` (reading `first`'s output): an expansion (pointwise
    /// then depthwise, neither with a residual) or a projection (depthwise then pointwise,
    /// the second with a residual or not).
    pub fn new(io: Io, first: NhwcConvWorkload, second: NhwcConvWorkload) -> Result<Self> {
        let kinds = match (&*first.kind, &*second.kind) {
            (Kind::Pointwise(_), Kind::Depthwise(_)) => !second.residual,
            (Kind::Depthwise(_), Kind::Pointwise(_)) => true,
            _ => false,
        };
        let ok = kinds
            && !first.residual
            && !first.input_nchw
            && !second.input_nchw
            && first.m == second.c
            && first.n == second.n
            && (first.geo.oh, first.geo.ow) == (second.geo.h, second.geo.w);
        if !ok {
            return Err(io.error(
                "a convolution pair is a pointwise and a depthwise convolution, either on the \
                 other's output"
                    .into(),
            ));
        }
        Ok(NhwcPairWorkload { io, first, second })
    }

    /// Output rows `r0 ..` (of all images, `yc` holding whole rows) a band at a time.
    #[allow(clippy::too_many_arguments)]
    fn bands(
        &self,
        p: &Packed,
        taps: &[f32],
        x: &[f32],
        r0: usize,
        yc: &mut [f32],
        band: usize,
        strip: &mut [f32],
    ) -> Result<()> {
        let g = &self.second.geo;
        let (cin, c) = (self.first.c, self.second.c);
        let (row_in, row_out) = (g.w * c, g.ow * c);
        let image_in = g.h * g.w * cin;
        let single = Threads::single();
        let total = yc.len() / row_out;
        // The image and the rows `lo..hi` of it the strip holds, from its top.
        let mut held: Option<(usize, usize, usize)> = None;
        let mut j = 0;
        while j < total {
            let (b, oy0) = ((r0 + j) / g.oh, (r0 + j) % g.oh);
            let oy1 = (oy0 + band).min(g.oh).min(oy0 + total - j);
            // The input rows of output rows oy0..oy1 inside the image.
            let lo = (oy0 * g.sh).saturating_sub(g.pt);
            let reach = (oy1 - 1) * g.sh + (g.kh - 1) * g.dh + 1;
            let hi = reach.saturating_sub(g.pt).min(g.h).max(lo);
            let start = match held {
                Some((hb, hlo, hhi)) if hb == b && hlo <= lo && lo < hhi => {
                    let keep = hhi.min(hi) - lo;
                    let from = (lo - hlo) * row_in;
                    strip.copy_within(from..from + keep * row_in, 0);
                    lo + keep
                }
                _ => lo,
            };
            if hi > start {
                let a = &x[b * image_in + start * g.w * cin..b * image_in + hi * g.w * cin];
                let dst = &mut strip[(start - lo) * row_in..(hi - lo) * row_in];
                let blocks = a.chunks(ROW_BLOCK * cin).zip(dst.chunks_mut(ROW_BLOCK * c));
                for (ab, db) in blocks {
                    self.first.product(&single, p, ab, cin, false, db)?;
                }
            }
            held = Some((b, lo, hi));
            // The band from the strip, whose row 0 is the image's row `lo`.
            let sub = Geo2 {
                h: hi - lo,
                pt: g.pt + lo - oy0 * g.sh,
                oh: oy1 - oy0,
                ..*g
            };
            let job = DwRow {
                geo: &sub,
                c,
                x: &strip[..(hi - lo) * row_in],
                taps,
                bias: &self.second.bias,
                act: self.second.act,
            };
            let out = &mut yc[j * row_out..(j + oy1 - oy0) * row_out];
            for (oy, row) in out.chunks_exact_mut(row_out).enumerate() {
                if !simd::nhwc_depthwise_row(&job, oy, None, row) {
                    return Err(self.io.error("depthwise buffers do not match".into()));
                }
            }
            j += oy1 - oy0;
        }
        Ok(())
    }
}

impl Workload for NhwcPairWorkload {
    /// Only X and the residual are read at execution: both convolutions' weights and biases
    /// are prepared at load.
    fn reads_constant_input(&self, slot: usize) -> bool {
        slot == 0 || (self.second.residual && slot == 5)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io
            .check_copied(inputs, outputs, |slot| !self.reads_constant_input(slot))?;
        let x = f32s(input(inputs, 0)?)?;
        let r = match self.second.residual {
            true => Some(f32s(input(inputs, 5)?)?),
            false => None,
        };
        let y = f32s_mut(output(outputs)?)?;
        self.run(x, r, y)
    }
}

impl NhwcPairWorkload {
    /// `y` = the second convolution (plus the residual `r`) of the first one of `x`.
    pub(super) fn run(&self, x: &[f32], r: Option<&[f32]>, y: &mut [f32]) -> Result<()> {
        if r.is_some() != self.second.residual || r.is_some_and(|r| r.len() != y.len()) {
            return Err(self
                .io
                .error("the residual does not match the output".into()));
        }
        match (&*self.first.kind, &*self.second.kind) {
            (Kind::Pointwise(p), Kind::Depthwise(taps)) => self.expansion(p, taps, x, y),
            (Kind::Depthwise(taps), Kind::Pointwise(p)) => self.projection(taps, p, x, r, y),
            _ => Err(self.io.error("convolution pair kinds changed".into())),
        }
    }

    /// `y` = the depthwise convolution of the pointwise convolution of `x`.
    fn expansion(&self, p: &Packed, taps: &[f32], x: &[f32], y: &mut [f32]) -> Result<()> {
        let g = &self.second.geo;
        let (row_in, row_out) = (g.w * self.second.c, g.ow * self.second.c);
        let rows = self.second.n * g.oh;
        if x.len() != self.first.pixels() * self.first.c || y.len() != rows * row_out {
            return Err(self
                .io
                .error("convolution pair buffers do not match".into()));
        }
        // Bands of as many output rows as keep the strip within STRIP_FLOATS (at least one).
        let reach = (g.kh - 1) * g.dh + 1;
        let fit = (STRIP_FLOATS / row_in.max(1)).max(reach);
        let band = (fit - reach) / g.sh.max(1) + 1;
        let strip_rows = (band - 1) * g.sh + reach;
        let th = &self.second.threads;
        let per = th.chunk_size(rows, 1, 1);
        th.chunks(y, per * row_out, |i, yc| {
            let mut strip = gemm::take(&STRIP, strip_rows * row_in);
            let done = self.bands(p, taps, x, i * per, yc, band, &mut strip);
            gemm::give_back(&STRIP, strip);
            done
        })
    }

    /// `y` = the pointwise convolution (plus `r`, when given) of the depthwise convolution
    /// of `x`: each thread's rows a band at a time, the band's depthwise rows in a strip of
    /// at most [`PROJECTION_STRIP_FLOATS`] that the pointwise tiles read at once.
    fn projection(
        &self,
        taps: &[f32],
        p: &Packed,
        x: &[f32],
        r: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<()> {
        let (dw, pw) = (&self.first, &self.second);
        let g = &dw.geo;
        let (c, m) = (dw.c, pw.m);
        let (row_mid, row_out) = (g.ow * c, g.ow * m);
        let rows = dw.n * g.oh;
        let image_in = g.h * g.w * c;
        if x.len() != dw.n * image_in || y.len() != rows * row_out {
            return Err(self
                .io
                .error("convolution pair buffers do not match".into()));
        }
        let band = (PROJECTION_STRIP_FLOATS / row_mid.max(1)).max(1);
        let single = Threads::single();
        let th = &pw.threads;
        let per = th.chunk_size(rows, 1, 1);
        th.chunks(y, per * row_out, |i, yc| {
            let mut strip = gemm::take(&STRIP, band * row_mid);
            let mut run = || -> Result<()> {
                let total = yc.len() / row_out;
                for j in (0..total).step_by(band) {
                    let nb = band.min(total - j);
                    let mid = &mut strip[..nb * row_mid];
                    for (t, row) in mid.chunks_exact_mut(row_mid).enumerate() {
                        let (b, oy) = ((i * per + j + t) / g.oh, (i * per + j + t) % g.oh);
                        let job = DwRow {
                            geo: g,
                            c,
                            x: &x[b * image_in..(b + 1) * image_in],
                            taps,
                            bias: &dw.bias,
                            act: dw.act,
                        };
                        if !simd::nhwc_depthwise_row(&job, oy, None, row) {
                            return Err(self.io.error("depthwise buffers do not match".into()));
                        }
                    }
                    let out = &mut yc[j * row_out..(j + nb) * row_out];
                    if let Some(r) = r {
                        let at = (i * per + j) * row_out;
                        out.copy_from_slice(&r[at..at + nb * row_out]);
                    }
                    let blocks = mid.chunks(ROW_BLOCK * c).zip(out.chunks_mut(ROW_BLOCK * m));
                    for (ab, ob) in blocks {
                        pw.product(&single, p, ab, c, r.is_some(), ob)?;
                    }
                }
                Ok(())
            };
            let done = run();
            gemm::give_back(&STRIP, strip);
            done
        })
    }
}
