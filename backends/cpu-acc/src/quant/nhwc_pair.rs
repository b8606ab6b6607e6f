//! A channels-last int8 depthwise layer and the pointwise (1×1) layer that alone reads its
//! output, as one step (`QLinearConvPair`, made by [`crate::quant::region`]): each thread
//! takes a band of output rows, runs the depthwise rows of its band into a buffer of its own
//! (thread-local, grown, kept between layers), then the pointwise GEMM over those pixels
//! into the band's rows of the output. The 1×1 layer needs no rows beyond the band's, so
//! there is no barrier between the two layers and the intermediate never leaves the thread
//! (nor the cache: a band is cut into pieces of at most [`PIECE_BYTES`] of intermediate).
//!
//! The bytes are the two layers' bytes: the intermediate is the depthwise layer's output,
//! requantized as that layer requantizes it, and each pixel's pointwise sums are the same
//! whichever thread computes them. Where the rows cannot be shared evenly between the
//! threads (fewer than two rows per thread: a 3×3 plane, whose pointwise layer is better
//! shared by channels), the two layers run one after the other as they would apart.

use super::quads::ByteRows;
use super::{as_nchw, keep, take, Kind, NhwcQConv, Rows, MIN_SHARED_DW_MACS, MIN_SHARED_MACS};
use crate::io::Io;
use crate::plan::{done, Plan};
use crate::quant::conv::{alloc, geometry, Geometry, QConvDesc};
use crate::quant::QLINEAR_CONV_PAIR;
use crate::scratch;
use crate::threads::Threads;
use backplane_backend_api::{LayerDesc, Result, Workload};
use backplane_core::ops::CustomOp;
use backplane_core::{TensorInfo, TensorView, TensorViewMut};
use backplane_cpu_kernels::qgemm::{depthwise_rows, DwLayer};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;
use std::ops::Range;
use std::sync::Mutex;

/// Bytes past a band's intermediate pixels: the byte GEMM reads a u8 pixel's row in place
/// up to its padded depth (a multiple of four), past the last pixel's channels.
const SLACK: usize = 64;

/// The most bytes of intermediate one piece of a band holds (at least one output row): the
/// depthwise rows are written and the pointwise GEMM reads them while they are in the cache.
const PIECE_BYTES: usize = 32 * 1024;

/// The description a `QLinearConvPair` carries: the two layers' descriptions (both
/// channels-last) and the intermediate tensor, `[N, OH, OW, C]`, of the depthwise layer's
/// output type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QConvPairDesc {
    /// The depthwise layer (one channel per group, no depth multiplier).
    pub dw: QConvDesc,
    /// The pointwise layer (1×1, stride 1, no padding, one group).
    pub pw: QConvDesc,
    /// The depthwise layer's output, channels-last.
    pub mid: TensorInfo,
}

impl QConvPairDesc {
    /// The custom op, with output `y`; its inputs are the depthwise layer's input, weights
    /// and bias, then the pointwise layer's weights and bias.
    pub(crate) fn to_op(&self, y: TensorInfo) -> CustomOp {
        crate::quant::custom_op(QLINEAR_CONV_PAIR, self, y)
    }

    /// The description [`QConvPairDesc::to_op`] put in the custom op.
    pub(crate) fn decode(c: &CustomOp) -> std::result::Result<QConvPairDesc, String> {
        crate::quant::payload_of(c, QLINEAR_CONV_PAIR)
    }
}

/// True when `d` is a channels-last pointwise layer over an `h × w` plane giving `oh × ow`:
/// 1×1, stride 1, no padding, one group (its A rows are the input pixels themselves).
pub(crate) fn is_pointwise(
    d: &QConvDesc,
    (h, w): (usize, usize),
    (oh, ow): (usize, usize),
) -> bool {
    d.group == 1
        && d.kernel == [1, 1]
        && d.strides == [1, 1]
        && d.pads == [0, 0]
        && (h, w) == (oh, ow)
}

/// True when `d` over `c` input channels to `m` is a depthwise layer the pair runs: one
/// channel per group, more than one channel (one channel is a one-group layer, a GEMM).
pub(crate) fn is_depthwise(d: &QConvDesc, c: usize, m: usize) -> bool {
    d.group > 1 && d.group == c && m == c
}

/// The plan of a `QLinearConvPair`.
pub(crate) fn plan<'a>(
    c: &'a CustomOp,
    layer: &'a LayerDesc,
) -> std::result::Result<Plan<'a>, String> {
    let d = QConvPairDesc::decode(c)?;
    let [x, w1, b1, w2, b2] = layer.inputs.as_slice() else {
        return Err(format!(
            "{QLINEAR_CONV_PAIR} takes x, the depthwise weights and bias, the pointwise weights \
             and bias"
        ));
    };
    let y = layer.outputs.first().ok_or("no output")?;
    for (t, what) in [
        (x, "x"),
        (w1, "w1"),
        (w2, "w2"),
        (&d.mid, "the intermediate"),
        (y, "y"),
    ] {
        if !super::super::is_8bit(t.dtype) {
            return Err(format!(
                "{QLINEAR_CONV_PAIR}: {what} is {}, not 8-bit",
                t.dtype
            ));
        }
    }
    let int32 = |b: &TensorInfo, slot: usize| {
        b.dtype == backplane_core::DataType::I32 && layer.constant(slot).is_some()
    };
    if !int32(b1, 2) || !int32(b2, 4) || layer.constant(1).is_none() || layer.constant(3).is_none()
    {
        return Err(format!(
            "{QLINEAR_CONV_PAIR}: constant weights and int32 biases expected"
        ));
    }
    let g1 = geometry(&d.dw, &as_nchw(x)?, w1, &as_nchw(&d.mid)?)?;
    let g2 = geometry(&d.pw, &as_nchw(&d.mid)?, w2, &as_nchw(y)?)?;
    if !is_depthwise(&d.dw, g1.c, g1.m) || !is_pointwise(&d.pw, (g2.h, g2.w), (g2.oh, g2.ow)) {
        return Err(format!(
            "{QLINEAR_CONV_PAIR}: not a depthwise layer then a pointwise one"
        ));
    }
    if b1.shape.elements() != g1.m || b2.shape.elements() != g2.m {
        return Err(format!(
            "{QLINEAR_CONV_PAIR}: a bias does not match its channels"
        ));
    }
    Ok(Plan::new(move |io, th| {
        done(QConvPair::new(io, d, (g1, g2), layer, th)?)
    }))
}

/// Output rows (of all images) per band for a pair of `rows` output rows, each row
/// `dw_row` depthwise and `pw_row` pointwise multiply-adds, or `None` where `th` runs the two
/// layers one after the other: the rows shared as a step of the pair's work per row asks
/// ([`MIN_SHARED_DW_MACS`] of the depthwise layer's and [`MIN_SHARED_MACS`] of the pointwise
/// layer's multiply-adds make one least share), where every thread can take two rows or
/// more and there is more than one share; one thread takes all rows as one band.
fn band_rows(th: &Threads, rows: usize, dw_row: usize, pw_row: usize) -> Option<usize> {
    let count = th.count();
    if count <= 1 {
        return Some(rows.max(1));
    }
    if rows < 2 * count {
        return None;
    }
    // A row's work in pointwise multiply-adds (a depthwise one costs the ratio of the two
    // rules' least shares).
    let ratio = (MIN_SHARED_MACS / MIN_SHARED_DW_MACS).max(1);
    let row = dw_row.saturating_mul(ratio).saturating_add(pw_row).max(1);
    let min_rows = MIN_SHARED_MACS.div_ceil(row);
    let per = th.chunk_size(rows, min_rows, 1);
    (per < rows).then_some(per)
}

/// The two layers as one workload.
struct QConvPair {
    io: Io,
    /// The depthwise layer (its own description of the intermediate as output).
    dw: NhwcQConv,
    /// The pointwise layer (reading the intermediate).
    pw: NhwcQConv,
    /// The whole intermediate, for the executions that run the layers one after the other,
    /// kept between them.
    mid: Mutex<Vec<u8>>,
    /// Output rows per band ([`band_rows`] for these layers and threads), `None` where the
    /// layers run one after the other.
    band: Option<usize>,
    th: Threads,
}

thread_local! {
    /// Each thread's intermediate pixels of its band (or piece of one), kept between layers
    /// and executions.
    static BAND: RefCell<AlignedVec<u8>> = const { RefCell::new(AlignedVec::new()) };
}

impl QConvPair {
    fn new(
        io: Io,
        d: QConvPairDesc,
        (g1, g2): (Geometry, Geometry),
        layer: &LayerDesc,
        th: Threads,
    ) -> Result<Self> {
        let constant = |slot: usize| {
            layer
                .constants
                .get(slot)
                .and_then(Option::as_ref)
                .ok_or_else(|| io.error(format!("input {slot} is not constant")))
        };
        let bias = |slot: usize| -> Result<&[i32]> { Ok(constant(slot)?.as_slice::<i32>()?) };
        let info = |slot: usize| -> Result<TensorInfo> {
            io.inputs
                .get(slot)
                .cloned()
                .ok_or_else(|| io.error(format!("input {slot} is missing")))
        };
        let y = io
            .outputs
            .first()
            .cloned()
            .ok_or_else(|| io.error("no output".into()))?;
        let dw_io = Io {
            layer: format!("{} (depthwise)", io.layer),
            inputs: vec![info(0)?, info(1)?, info(2)?],
            outputs: vec![d.mid.clone()],
        };
        let pw_io = Io {
            layer: format!("{} (pointwise)", io.layer),
            inputs: vec![d.mid.clone(), info(3)?, info(4)?],
            outputs: vec![y],
        };
        let dw = NhwcQConv::new(dw_io, d.dw, g1, constant(1)?, bias(2)?, th.clone())?;
        let pw = NhwcQConv::new(pw_io, d.pw, g2, constant(3)?, bias(4)?, th.clone())?;
        let kinds = matches!(dw.kind, Kind::Depthwise(_))
            && matches!(
                pw.kind,
                Kind::Gemm {
                    pointwise: true,
                    ..
                } | Kind::Quads {
                    pointwise: true,
                    ..
                }
            );
        if !kinds {
            return Err(io.error("not a depthwise layer then a pointwise one".into()));
        }
        let (g1, g2) = (&dw.geo, &pw.geo);
        let [kh, kw] = dw.d.kernel;
        let band = band_rows(
            &th,
            g1.n * g1.oh,
            g1.ow * g1.c * kh * kw,
            g2.ow * g2.c * g2.m,
        );
        Ok(QConvPair {
            io,
            dw,
            pw,
            mid: Mutex::new(Vec::new()),
            band,
            th,
        })
    }

    /// Output rows `rows` of the pair into `yc` (their `ow · M` bytes each), on the calling
    /// thread: in pieces of rows whose intermediate fits [`PIECE_BYTES`], the depthwise
    /// rows into the thread's band buffer, then the pointwise GEMM over its pixels.
    fn band(&self, layer: &DwLayer, x: &[u8], rows: Range<usize>, yc: &mut [u8]) -> Result<()> {
        let (c, m, ow) = (self.dw.geo.c, self.pw.geo.m, self.dw.geo.ow);
        let mid_row = (ow * c).max(1);
        let piece = (PIECE_BYTES / mid_row).clamp(1, rows.len().max(1));
        let mut buf = scratch::try_take(&BAND, piece * mid_row + SLACK)?;
        let mut done = Ok(());
        for (i, yp) in yc.chunks_mut((piece * ow * m).max(1)).enumerate() {
            let r0 = rows.start + i * piece;
            let n = yp.len() / (ow * m).max(1);
            let pixels = n * ow * c;
            if !depthwise_rows(layer, x, r0..r0 + n, &mut buf[..pixels]) {
                done = Err(self
                    .io
                    .error("depthwise rows refused their operands".into()));
                break;
            }
            // The slack stays in the slice: a u8 pixel row is read in place to its padded
            // depth (the bytes past the channels meet zero weights).
            let mid = &buf[..pixels + SLACK];
            done = self.pointwise(mid, yp);
            if done.is_err() {
                break;
            }
        }
        scratch::give_back(&BAND, buf);
        done
    }

    /// The pointwise layer over the intermediate pixels `mid` (from its first pixel) into
    /// their output rows `y`, on the calling thread.
    fn pointwise(&self, mid: &[u8], y: &mut [u8]) -> Result<()> {
        match &self.pw.kind {
            Kind::Quads { b, rq, .. } => self.pw.quads_rows(b, rq, ByteRows::Pixels(mid), 0, y),
            Kind::Gemm { b, rq, .. } => self.pw.gemm_rows(b, rq, Rows::Pixels(mid), 0, y),
            Kind::Depthwise(_) => Err(self.io.error("the second layer is not pointwise".into())),
        }
    }

    /// The two layers one after the other, each shared by the threads as it is alone, the
    /// intermediate in the pair's kept buffer.
    fn apart(&self, x: &[u8], y: &mut [u8]) -> Result<()> {
        let g = &self.dw.geo;
        let len = g.n * g.oh * g.ow * g.c;
        let mut mid = take(&self.mid);
        if mid.len() != len + SLACK {
            mid = alloc(len + SLACK, 0u8, &self.io)?;
        }
        let done = self
            .dw
            .run(x, &mut mid[..len])
            .and_then(|()| self.pw.run(&mid, y));
        keep(&self.mid, mid);
        done
    }
}

impl Workload for QConvPair {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io
            .check_copied(inputs, outputs, |k| (1..=4).contains(&k))?;
        let missing = || self.io.error("missing buffer".into());
        let x = inputs.first().ok_or_else(missing)?.data;
        let y = &mut *outputs.first_mut().ok_or_else(missing)?.data;
        let Kind::Depthwise(layer) = &self.dw.kind else {
            return Err(self.io.error("the first layer is not depthwise".into()));
        };
        let Some(per) = self.band else {
            return self.apart(x, y);
        };
        let out_row = self.pw.geo.ow * self.pw.geo.m;
        self.th.chunks(y, per * out_row, |task, yc| {
            let first = task * per;
            let rows = first..first + yc.len() / out_row.max(1);
            self.band(layer, x, rows, yc)
        })
    }

    fn reads_constant_input(&self, slot: usize) -> bool {
        (1..=4).contains(&slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MobileNetV1's pairs at two threads: 48×48 (32 channels, 3×3, to 64) and 6×6 (256 to
    /// 256) are shared in bands of whole rows that divide each thread's half (three threads:
    /// third); 3×3 planes (three rows: fewer than two a thread) and a pair too small to
    /// share run the layers apart; one thread takes all rows as one band.
    #[test]
    fn pairs_are_banded_by_rows_or_run_apart() -> Result<()> {
        let (two, three) = (Threads::new(2)?, Threads::new(3)?);
        let big = (48 * 32 * 9, 48 * 32 * 64);
        let Some(per) = band_rows(&two, 48, big.0, big.1) else {
            panic!("48 rows at two threads run apart");
        };
        assert!(per <= 24 && 24 % per == 0, "{per}");
        let six = (6 * 256 * 9, 6 * 256 * 256);
        assert_eq!(band_rows(&two, 6, six.0, six.1), Some(3));
        // Three threads: shares of two rows, or of one (two to a thread, side by side).
        assert!(matches!(band_rows(&three, 6, six.0, six.1), Some(1 | 2)));
        let plane = (3 * 512 * 9, 3 * 512 * 512);
        assert_eq!(band_rows(&two, 3, plane.0, plane.1), None);
        assert_eq!(band_rows(&two, 8, 4 * 8 * 9, 4 * 8 * 8), None);
        assert_eq!(band_rows(&Threads::single(), 3, plane.0, plane.1), Some(3));
        assert_eq!(band_rows(&Threads::single(), 0, 0, 0), Some(1));
        Ok(())
    }
}
