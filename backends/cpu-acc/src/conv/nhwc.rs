//! Channels-last (NHWC) convolutions: the layers of the channels-last regions that
//! [`crate::layout`] forms around depthwise convolutions.
//!
//! With the channels innermost, a pointwise convolution is one GEMM with the pixels as rows
//! and the prepacked weights as B (a 7×7 plane fills 54 of 49 tile rows where the NCHW GEMM,
//! pixels as columns, fills 64 lanes for 49), and a depthwise convolution runs along the
//! channels, one vector of channels per tap, with no transposes and no per-row set-up. A
//! convolution with a window and one group (a network's first layer, or a ResNet's 7×7
//! last stage) gathers its im2col rows per block of pixels, reading its input in either
//! layout, so the region's entry needs no separate transpose.
//!
//! A pointwise expansion and the depthwise convolution that alone reads its output can run
//! as one [`NhwcPairWorkload`], band by band, the expanded rows never leaving the cache.
//!
//! Tensors are honest `[N, H, W, C]` tensors in the standard layout: the region pass inserts
//! the `Transpose` layers at its borders, so the runtime sees nothing unusual.

use crate::act::Activation;
use crate::conv::window::{FromGeometry, Geo2};
use crate::conv::{self, choose_conv_algorithm, ConvAlgorithm, ConvLayoutIn, ConvShape};
use crate::conv::{channel_lanes, nhwc_winograd};
use crate::gemm::{self, ASrc, BSrc, Epilogue, MatView, Packed};
use crate::io::{f32s, f32s_mut, input, output, Io};
use crate::simd;
use crate::threads::Threads;
use crate::weights;
use backplane_backend_api::{BackendError, Result, Workload};
use backplane_core::ops::ConvDesc;
use backplane_core::{Tensor, TensorView, TensorViewMut};
pub use backplane_cpu_kernels::nhwc_depthwise::{valid_taps, DwRow};
use backplane_cpu_kernels::AlignedVec;
pub use pair::{pair_order, NhwcPairWorkload, PairOrder};
use std::cell::RefCell;
use std::sync::Arc;

/// Pixels gathered into one im2col block (the block and its GEMM stay in L2).
const IM2COL_ROWS: usize = 96;
/// Most pixels per block of the pointwise tiles (ten tiles of six rows).
const ROW_BLOCK: usize = 60;
/// Rows of one pointwise tile (blocks split between threads at multiples of it).
const ROW_STEP: usize = simd::ROW_STEP;
/// Most weights (C·M floats) of a pointwise convolution that runs on the AVX-512 in-place
/// tiles: the SGEMM packs A per block of rows, as much work as the product at MobileNets'
/// 16-32 channels, and its 32-column tile idles half of itself on 16 output channels; but
/// weights past L2 come from memory, and the SGEMM's prefetching of its packed panels hides
/// that where the tiles do not (the 7×7 and 14×14 layers of 150-400 K weights of
/// EfficientNet-B0 and MobileNetV3 ran slower on the tiles: docs/perf.md, session 45).
const WIDE_TILES_MAX_WEIGHTS: usize = 64 * 1024;
/// Columns of one pointwise tile (half a packed panel).
const ROW_HALF: usize = 16;

/// `[N, C, H, W]` dims as `[N, H, W, C]`.
pub fn to_nhwc(d: &[usize]) -> Vec<usize> {
    match d {
        [n, c, rest @ ..] => {
            let mut v = vec![*n];
            v.extend_from_slice(rest);
            v.push(*c);
            v
        }
        _ => d.to_vec(),
    }
}

/// `[N, H, W, C]` dims as `[N, C, H, W]`.
pub fn to_nchw(d: &[usize]) -> Vec<usize> {
    match d {
        [n, rest @ .., c] if !rest.is_empty() => {
            let mut v = vec![*n, *c];
            v.extend_from_slice(rest);
            v
        }
        _ => d.to_vec(),
    }
}

/// A first layer's input zero-padded (`h`×`w` per channel, NCHW) so that every window lies
/// inside it, and where each im2col step `(ky, kx, c)` reads relative to a window's corner.
struct Window {
    h: usize,
    w: usize,
    offsets: Vec<usize>,
}

impl Window {
    fn new(g: &Geo2, c: usize) -> Self {
        let h = (g.pt + g.h).max((g.oh.max(1) - 1) * g.sh + (g.kh - 1) * g.dh + 1);
        let w = (g.pl + g.w).max((g.ow.max(1) - 1) * g.sw + (g.kw - 1) * g.dw + 1);
        let mut offsets = Vec::with_capacity(g.kh * g.kw * c);
        for ky in 0..g.kh {
            for kx in 0..g.kw {
                for ci in 0..c {
                    offsets.push(ci * h * w + ky * g.dh * w + kx * g.dw);
                }
            }
        }
        Window { h, w, offsets }
    }
}

/// How a channels-last convolution computes.
enum Kind {
    /// 1×1, stride 1, no padding: `Y[P×M] = X[P×C]·Wᵀ`, W packed as B (K = C, N = M).
    Pointwise(Packed),
    /// One group per channel: the taps `[kh·kw][C]` (tap-major, channels contiguous).
    Depthwise(Vec<f32>),
    /// One group, any window: im2col rows `(ky, kx, c)` times W packed as B.
    Im2col(Packed),
    /// One group, 3×3 stride 1 on a small plane: Winograd F(2×2, 3×3)
    /// (`crate::conv::nhwc_winograd`).
    Winograd(nhwc_winograd::Plan),
    /// A region's first layer (NCHW input, a few channels): output channels in vector lanes
    /// (`crate::conv::channel_lanes`).
    Lanes(channel_lanes::Plan),
}

/// The packed weights' halves as the in-place tiles (`tiles`) or the SGEMM read them: the
/// tiles walk one half-panel down many rows, and at depths from `gemm::SPLIT_MIN_DEPTH` a
/// half split from the other stays in L1 (`simd::Halves`).
fn relay(p: Packed, tiles: bool) -> Packed {
    match tiles {
        true => {
            let halves = gemm::halves_for(p.depth());
            p.with_halves(halves)
        }
        false => p.with_halves(simd::Halves::Interleaved),
    }
}

/// Whether `p` is not laid out as [`relay`] would lay it out for `tiles`.
fn needs_relay(p: &Packed, tiles: bool) -> bool {
    let want = match tiles {
        true => gemm::halves_for(p.depth()),
        false => simd::Halves::Interleaved,
    };
    p.halves() != want
}

/// The constant weights `t` (`[M, C/group, kh, kw]`) in the form `algorithm` reads, through
/// the shared cache (`crate::weights`), laid out for the in-place tiles when `tiles`. The
/// depthwise taps, the pointwise and im2col B operands and the Winograd weights depend on
/// the channel counts and window only, so plans at every input size share them (a
/// channel-lanes plan shares its weight blocks and keeps its own geometry).
fn prepare(
    t: &Arc<Tensor>,
    algorithm: ConvAlgorithm,
    geo: &Geo2,
    (m, c): (usize, usize),
    pointwise: bool,
    tiles: bool,
) -> Result<Arc<Kind>> {
    let w = || t.as_slice::<f32>();
    let taps = geo.kh * geo.kw;
    if algorithm == ConvAlgorithm::Depthwise {
        return weights::shared(t, "nhwc_depthwise", &[c, taps], || {
            let w = w()?;
            // [c][t] → [t][c].
            let mut k = vec![0f32; taps * c];
            for ch in 0..c {
                for tap in 0..taps {
                    k[tap * c + ch] = w[ch * taps + tap];
                }
            }
            Ok(Kind::Depthwise(k))
        });
    }
    if pointwise {
        return weights::shared(t, "nhwc_pointwise", &[c, m, usize::from(tiles)], || {
            // B[k][j] = W[j][k].
            let view = MatView {
                data: w()?,
                rs: 1,
                cs: c,
            };
            Ok(Kind::Pointwise(relay(Packed::pack_b(c, m, view), tiles)))
        });
    }
    match algorithm {
        ConvAlgorithm::WinogradF2 => weights::shared(t, "nhwc_winograd_f2", &[m, c], || {
            Ok(Kind::Winograd(nhwc_winograd::Plan::new(w()?, m, c)?))
        }),
        ConvAlgorithm::ChannelLanes => {
            // The weight blocks are shared; the plan around them is this workload's own.
            let k = c * taps;
            let vectors = channel_lanes::vectors_for(m, 1);
            let blocks = weights::shared(t, "nhwc_channel_lanes", &[m, k, vectors], || {
                channel_lanes::weight_blocks(w()?, m, k, vectors)
            })?;
            let plan = channel_lanes::Plan::with_blocks(geo, blocks, m, c, 1)?;
            Ok(Arc::new(Kind::Lanes(plan)))
        }
        _ => weights::shared(t, "nhwc_im2col", &[taps, c, m, usize::from(tiles)], || {
            let w = w()?;
            // B[(t, ci)][j] = W[j][ci][t], packed straight from W (a reordered copy first
            // raised a 3×3 512→512 layer's peak memory by its 9.4 MB).
            let b = Packed::pack_b_with(taps * c, m, |l, j| {
                let (t, ci) = (l / c, l % c);
                w[(j * c + ci) * taps + t]
            });
            Ok(Kind::Im2col(relay(b, tiles)))
        }),
    }
}

/// Which convolutions run channels-last: one group per channel, or one group (pointwise, or
/// any window when the input is read as im2col rows).
pub fn applies(desc: &ConvDesc, c: usize, m: usize) -> bool {
    let g = desc.group.max(1);
    g == 1 || (g == c && m == c && c > 1)
}

/// A convolution on channels-last tensors, with bias, activation and residual fused.
pub struct NhwcConvWorkload {
    io: Io,
    geo: Geo2,
    n: usize,
    c: usize,
    m: usize,
    /// Shared with the workloads of other plans that prepared the same constant alike
    /// (`crate::weights`).
    kind: Arc<Kind>,
    /// A constant bias is shared with other plans' workloads (`super::shared_bias`).
    bias: Arc<Vec<f32>>,
    act: Activation,
    /// Input 3 (channels-last, the output's shape) is added before the activation.
    residual: bool,
    /// The input is `[N, C, H, W]` (a region's entry); the output is channels-last still.
    input_nchw: bool,
    /// Im2col: where each of a row's `kh·kw·C` values lies relative to the input element under
    /// tap (0, 0), channel 0, for pixels whose window lies inside the image.
    offsets: Vec<usize>,
    /// A first layer reading NCHW: its padded input, read in place by the AVX2 tiles.
    window: Option<Window>,
    /// Tiles that read A in place run: the AVX2 ones ([`simd::strided_tiles`]), or for a
    /// pointwise convolution the AVX-512 ones (`wide_tiles`); else the SGEMM.
    in_place_tiles: bool,
    /// The in-place tiles are the AVX-512 ones ([`simd::tiles_strided_wide`]).
    wide_tiles: bool,
    threads: Threads,
}

thread_local! {
    static STRIP: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static IM2COL: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static COLUMN_BLOCKS: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static PADDED_INPUT: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
}

impl NhwcConvWorkload {
    /// Build it from constant weights (ONNX's `[M, C/group, kh, kw]`) and bias.
    pub fn new(
        io: Io,
        desc: &ConvDesc,
        weights: Option<&Arc<Tensor>>,
        bias: Option<&Arc<Tensor>>,
        act: Activation,
        input_nchw: bool,
        threads: Threads,
    ) -> Result<Self> {
        let bad = |m: String| BackendError::Other(format!("{}: {m}", io.layer));
        let xd = io.first_input()?;
        let xd = xd.shape.dims();
        let xd = if input_nchw { xd.to_vec() } else { to_nchw(xd) };
        let wt = weights.ok_or_else(|| bad("channels-last weights must be constant".into()))?;
        let wd = wt.shape().dims().to_vec();
        conv::check(desc, &xd, &wd).map_err(bad)?;
        if xd.len() != 4 {
            return Err(bad("channels-last convolutions are 2-D".into()));
        }
        let g = desc.geometry(&xd)?;
        let geo = Geo2::from_geometry(&g, &xd[2..]).ok_or_else(|| bad("geometry".into()))?;
        let (n, c, m) = (xd[0], xd[1], wd[0]);
        if !applies(desc, c, m) {
            return Err(bad("grouped convolutions do not run channels-last".into()));
        }
        let w = wt.as_slice::<f32>()?;
        let taps = geo.kh * geo.kw;
        let shape = ConvShape {
            geo: &geo,
            c,
            m,
            group: desc.group.max(1),
            threads: threads.count(),
            const_weights: true,
            layout: if input_nchw {
                ConvLayoutIn::NchwToNhwc
            } else {
                ConvLayoutIn::Nhwc
            },
            winograd: true,
        };
        let pointwise = shape.pointwise();
        let algorithm = choose_conv_algorithm(&shape);
        if w.len() != m * (c / desc.group.max(1)) * taps {
            return Err(bad("weights do not match the convolution".into()));
        }
        if algorithm != ConvAlgorithm::Depthwise && desc.group.max(1) != 1 {
            return Err(bad(
                "a depthwise convolution reads channels-last input".into()
            ));
        }
        let tiles = simd::strided_tiles();
        let kind = prepare(wt, algorithm, &geo, (m, c), pointwise && !input_nchw, tiles)?;
        let bias = match super::shared_bias(bias)? {
            Some(b) => b,
            None => Arc::new(vec![0f32; m]),
        };
        if bias.len() != m {
            return Err(bad("bias does not match the output channels".into()));
        }
        let mut offsets = Vec::new();
        if matches!(*kind, Kind::Im2col(_)) {
            for ky in 0..geo.kh {
                for kx in 0..geo.kw {
                    for ci in 0..c {
                        let (dy, dx) = (ky * geo.dh, kx * geo.dw);
                        offsets.push(if input_nchw {
                            ci * geo.h * geo.w + dy * geo.w + dx
                        } else {
                            (dy * geo.w + dx) * c + ci
                        });
                    }
                }
            }
        }
        let wl = NhwcConvWorkload {
            io,
            geo,
            n,
            c,
            m,
            kind,
            bias,
            act,
            residual: false,
            input_nchw,
            offsets,
            window: (input_nchw && geo.oh > 0 && geo.ow > 0).then(|| Window::new(&geo, c)),
            in_place_tiles: false,
            wide_tiles: false,
            threads,
        };
        // A pointwise convolution of small weights runs on the AVX-512 tiles that read its
        // input in place where the CPU has them (see WIDE_TILES_MAX_WEIGHTS).
        let wide = pointwise && !input_nchw && c * m <= WIDE_TILES_MAX_WEIGHTS;
        Ok(wl.with_tiles(tiles || wide))
    }

    /// On the in-place tiles (`on`, where the CPU runs them: the AVX2 ones, or the AVX-512
    /// ones for a pointwise convolution) or on the SGEMM, with the
    /// weights' panels laid out for the one chosen: the tiles walk one half-panel down many
    /// rows, and at depths from `gemm::SPLIT_MIN_DEPTH` a half split from the other stays in
    /// L1 (`simd::Halves`).
    fn with_tiles(mut self, on: bool) -> Self {
        let pointwise = matches!(*self.kind, Kind::Pointwise(_));
        self.wide_tiles = on && pointwise && !simd::strided_tiles() && simd::wide_strided_tiles();
        self.in_place_tiles = on && simd::strided_tiles() || self.wide_tiles;
        // The AVX-512 tiles read a panel's halves interleaved, as the SGEMM does.
        let tiles = self.in_place_tiles && !self.wide_tiles;
        // Prepared for `simd::strided_tiles()` at creation; laid out again (a copy of this
        // workload's own) only when a test asks for the other path.
        let relaid = match &*self.kind {
            Kind::Pointwise(p) if needs_relay(p, tiles) => {
                Some(Kind::Pointwise(relay(p.clone(), tiles)))
            }
            Kind::Im2col(p) if needs_relay(p, tiles) => Some(Kind::Im2col(relay(p.clone(), tiles))),
            _ => None,
        };
        if let Some(kind) = relaid {
            self.kind = Arc::new(kind);
        }
        self
    }

    /// Take input 3 as a residual added before the activation: `act(conv(x) + b + r)`.
    pub fn with_residual(mut self) -> Result<Self> {
        self.io.check_residual()?;
        self.residual = true;
        Ok(self)
    }

    fn pixels(&self) -> usize {
        self.n * self.geo.oh * self.geo.ow
    }

    fn pointwise(&self, p: &Packed, x: &[f32], r: Option<&[f32]>, y: &mut [f32]) -> Result<()> {
        if self.in_place_tiles {
            return self.pointwise_tiles(p, x, r, y);
        }
        if let Some(r) = r {
            y.copy_from_slice(r);
        }
        self.product(&self.threads, p, x, self.c, r.is_some(), y)
    }

    /// `y` (rows of M values) = epilogue(A·W), the whole activation included, for A's rows
    /// `a[r·lda..]` and the packed weights `p`: by the in-place tiles where they run (on this
    /// thread), else by the SGEMM (on `th`).
    fn product(
        &self,
        th: &Threads,
        p: &Packed,
        a: &[f32],
        lda: usize,
        accumulate: bool,
        y: &mut [f32],
    ) -> Result<()> {
        if !self.in_place_tiles {
            return self.sgemm_rows(th, p, a, lda, accumulate, y);
        }
        self.tiles_in(p, a, lda, accumulate, y, 0..self.m)?;
        if !simd::strided_tiles_apply(self.act) {
            simd::unary_in_place(self.act, y);
        }
        Ok(())
    }

    /// `y` (rows of M values) = epilogue(A·W) by the SGEMM, for A's rows `a[r·lda..]` and
    /// the packed weights `p`: the path without the in-place tiles.
    fn sgemm_rows(
        &self,
        th: &Threads,
        p: &Packed,
        a: &[f32],
        lda: usize,
        accumulate: bool,
        y: &mut [f32],
    ) -> Result<()> {
        let ep = Epilogue {
            accumulate,
            col_bias: Some(self.bias.as_slice()),
            act: self.act,
            ..Epilogue::default()
        };
        let (rows, m) = (y.len() / self.m, self.m);
        let a = ASrc::View(MatView {
            data: a,
            rs: lda,
            cs: 1,
        });
        gemm::sgemm(th, rows, m, p.depth(), &a, &BSrc::Packed(p), y, m, &ep)
    }

    /// The pointwise GEMM by [`simd::tiles_strided`] tiles reading the input where it lies,
    /// split between the threads by blocks of [`ROW_BLOCK`] pixels; the residual `r`, when
    /// given, copied into each block just before its tiles add onto it (in L1 then, where a
    /// copy of the whole output first left it in L2 or memory).
    fn pointwise_tiles(
        &self,
        p: &Packed,
        x: &[f32],
        r: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<()> {
        let (px, m, c) = (self.pixels(), self.m, self.c);
        let threads = self.threads.count();
        let per = if px < 2 * ROW_BLOCK * threads {
            // Few pixels (a 7×7 plane): one even share per thread, not one block and a rest,
            // and not rounded to whole six-row tiles: 49 rows as 25 (five tiles of five) and
            // 24 (four of six), not 30 and 19, now that a column's tiles are even.
            px.div_ceil(threads)
        } else {
            self.threads.chunk_size(px, ROW_BLOCK, ROW_STEP)
        };
        self.threads.chunks(&mut y[..px * m], per * m, |i, yc| {
            // Even blocks of at most ROW_BLOCK rows (49 rows: one block, not 48 and 1; 98
            // rows: two of 49).
            let rows = yc.len() / m;
            let block = rows.div_ceil(rows.div_ceil(ROW_BLOCK));
            for (bi, yb) in yc.chunks_mut(block * m).enumerate() {
                let r0 = i * per + bi * block;
                if let Some(r) = r {
                    yb.copy_from_slice(&r[r0 * m..r0 * m + yb.len()]);
                }
                self.product(&self.threads, p, &x[r0 * c..], c, r.is_some(), yb)?;
            }
            Ok(())
        })
    }

    /// `yb` = epilogue(A·B) for A's rows `a[r·lda..]` (K = `p`'s depth) and the packed
    /// weights `p`, output columns `cols` only (whole packed panels, or up to M), `yb`
    /// holding rows of just those columns: see [`NhwcConvWorkload::each_half`].
    fn tiles_in(
        &self,
        p: &Packed,
        a: &[f32],
        lda: usize,
        accumulate: bool,
        yb: &mut [f32],
        cols: std::ops::Range<usize>,
    ) -> Result<()> {
        let ldc = cols.len();
        let rows = yb.len() / ldc.max(1);
        // The whole activation where the tiles apply it as they store, else the part they
        // can (the caller applies the rest).
        let act = match simd::strided_tiles_apply(self.act) {
            true => self.act,
            false => self.act.kernel_part(),
        };
        if self.wide_tiles {
            if let Some(done) = self.pairs_in(p, a, lda, accumulate, yb, &cols, act) {
                return done;
            }
            // Whole panels: one or two 16-lane columns per tile.
            return self.each_half(p, accumulate, simd::NR, act, |k0, kc, j0, nr, b, ep| {
                if !cols.contains(&j0) {
                    return true;
                }
                let c = &mut yb[j0 - cols.start..];
                a.get(k0..)
                    .is_some_and(|a| simd::tiles_strided_wide(kc, a, lda, rows, b, c, ldc, nr, ep))
            });
        }
        self.each_half(p, accumulate, simd::WIDE, act, |k0, kc, j0, nr, b, ep| {
            if !cols.contains(&j0) {
                return true;
            }
            let c = &mut yb[j0 - cols.start..];
            // While its first tile runs, the half that comes next in memory is fetched into
            // L2 (the weights of a 7×7 plane's layer come from L3 or memory, and its few
            // rows leave too little work per panel to hide that).
            let next = b.1.next(kc, j0 % simd::NR);
            a.get(k0..)
                .is_some_and(|a| simd::tiles_strided(kc, a, lda, rows, b, c, ldc, nr, ep, next))
        })
    }

    /// [`NhwcConvWorkload::im2col`] for a few pixels (a 7×7 plane) on several threads: the
    /// im2col rows gathered once, each thread computing every row for its share of the
    /// output columns (whole packed panels) into its own block, then copied out; the
    /// weights are read once in all, where a split of 49 rows would have each thread read
    /// them all.
    fn im2col_by_columns(
        &self,
        p: &Packed,
        x: &[f32],
        r: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<()> {
        let (m, k) = (self.m, self.geo.kh * self.geo.kw * self.c);
        let px = self.pixels();
        let panels = m.div_ceil(simd::NR);
        let share = panels.div_ceil(self.threads.count()) * simd::NR;
        let mut buf = gemm::take(&IM2COL, px * k);
        let len = px * share * m.div_ceil(share);
        let mut blocks = gemm::take(&COLUMN_BLOCKS, len);
        self.gather(x, 0, px, &mut buf[..px * k]);
        let a = &buf[..px * k];
        let done = self
            .threads
            .chunks(&mut blocks[..len], px * share, |i, block| {
                let cols = i * share..((i + 1) * share).min(m);
                let block = &mut block[..px * cols.len()];
                if let Some(r) = r {
                    for (dst, src) in block.chunks_exact_mut(cols.len()).zip(r.chunks_exact(m)) {
                        dst.copy_from_slice(&src[cols.clone()]);
                    }
                }
                self.tiles_in(p, a, k, r.is_some(), block, cols)?;
                if !simd::strided_tiles_apply(self.act) {
                    simd::unary_in_place(self.act, block);
                }
                Ok(())
            });
        if done.is_ok() {
            for (i, block) in blocks[..len].chunks(px * share).enumerate() {
                let cols = i * share..((i + 1) * share).min(m);
                if cols.is_empty() {
                    continue;
                }
                let block = &block[..px * cols.len()];
                for (dst, src) in y.chunks_exact_mut(m).zip(block.chunks_exact(cols.len())) {
                    dst[cols.clone()].copy_from_slice(src);
                }
            }
        }
        gemm::give_back(&IM2COL, buf);
        gemm::give_back(&COLUMN_BLOCKS, blocks);
        done
    }

    /// Run `tile(k0, kc, j0, nr, b, ep)` for each K block (from `k0`, `kc` deep) of each
    /// 16-column half (from column `j0`, `nr` wide; `b` the panel from that half on, and how
    /// its halves lie) of the packed weights `p`, or of each whole panel when it has at most
    /// `wide` columns (more than 16: the 3×24 tile), with
    /// the epilogue of that block (`accumulate` onto C for all but the first block when not
    /// set; bias and `act`, what the tiles apply of the activation, on the last). Each runs down all the rows of
    /// a block (the weights stay in L1, the rows in L2). `tile` returns false when refused.
    fn each_half(
        &self,
        p: &Packed,
        accumulate: bool,
        wide: usize,
        act: Activation,
        mut tile: impl FnMut(
            usize,
            usize,
            usize,
            usize,
            (&[f32], simd::Halves),
            &simd::TileEpilogue<'_>,
        ) -> bool,
    ) -> Result<()> {
        gemm::each_half_panel(p.panels(), p.depth(), self.m, wide, |hp| {
            let ep = simd::TileEpilogue {
                accumulate: accumulate || hp.kb > 0,
                alpha: 1.0,
                row_bias: None,
                col_bias: Some(&self.bias[hp.j0..]),
                last: hp.last,
                act,
            };
            match tile(hp.k0, hp.kc, hp.j0, hp.nr, hp.b, &ep) {
                true => Ok(()),
                false => Err(self.io.error("channels-last tiles were refused".into())),
            }
        })
    }

    /// A first layer reading NCHW by [`simd::tiles_offsets`]: the input is copied once into
    /// a zero-padded buffer, and each output row's pixels read their windows there in place
    /// (rows `stride` apart, taps and channels at the offsets of [`Window`]), with no
    /// im2col copy.
    fn entry_in_place(
        &self,
        p: &Packed,
        win: &Window,
        x: &[f32],
        r: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<()> {
        let g = &self.geo;
        let (c, m) = (self.c, self.m);
        let plane = win.h * win.w;
        let image = c * plane;
        let mut buf = gemm::take(&PADDED_INPUT, self.n * image);
        // Padded rows, split between the threads: zeros around each input row.
        let padded_rows = self.n * c * win.h;
        let per = self.threads.chunk_size(padded_rows, 64, 1);
        self.threads
            .chunks(&mut buf[..self.n * image], per * win.w, |i, dst| {
                for (j, d) in dst.chunks_exact_mut(win.w).enumerate() {
                    let (plane_at, ry) = ((i * per + j) / win.h, (i * per + j) % win.h);
                    match ry.checked_sub(g.pt).filter(|&iy| iy < g.h) {
                        Some(iy) => {
                            let s = (plane_at * g.h + iy) * g.w;
                            d[..g.pl].fill(0.0);
                            d[g.pl..g.pl + g.w].copy_from_slice(&x[s..s + g.w]);
                            d[g.pl + g.w..].fill(0.0);
                        }
                        None => d.fill(0.0),
                    }
                }
                Ok(())
            })?;
        let padded = &buf[..self.n * image];
        let row = g.ow * m;
        let rows = self.n * g.oh;
        let per = self.threads.chunk_size(rows, 1, 1);
        let done = self
            .threads
            .chunks(&mut y[..rows * row], per * row, |i, yc| {
                for (j, yr) in yc.chunks_exact_mut(row).enumerate() {
                    let (b, oy) = ((i * per + j) / g.oh, (i * per + j) % g.oh);
                    let a = &padded[b * image + oy * g.sh * win.w..(b + 1) * image];
                    if let Some(r) = r {
                        let at = (i * per + j) * row;
                        yr.copy_from_slice(&r[at..at + row]);
                    }
                    let act = self.act.kernel_part();
                    self.each_half(p, r.is_some(), ROW_HALF, act, |k0, kc, j0, nr, bh, ep| {
                        let offs = &win.offsets[k0..];
                        simd::tiles_offsets(kc, a, g.sw, offs, g.ow, bh, &mut yr[j0..], m, nr, ep)
                    })?;
                    // The activation the tiles do not apply, on the row while it is in L1.
                    if !self.act.in_kernel() {
                        simd::unary_in_place(self.act, yr);
                    }
                }
                Ok(())
            });
        gemm::give_back(&PADDED_INPUT, buf);
        done
    }

    fn depthwise(&self, taps: &[f32], x: &[f32], r: Option<&[f32]>, y: &mut [f32]) -> Result<()> {
        let geo = &self.geo;
        let (c, row) = (self.c, geo.ow * self.c);
        let image_in = geo.h * geo.w * c;
        let rows = self.n * geo.oh;
        let per = self.threads.chunk_size(rows, 1, 1);
        self.threads
            .chunks(&mut y[..rows * row], per * row, |i, yc| {
                for (j, out) in yc.chunks_exact_mut(row).enumerate() {
                    let at = (i * per + j) * row;
                    let (b, oy) = ((i * per + j) / geo.oh, (i * per + j) % geo.oh);
                    let job = DwRow {
                        geo,
                        c,
                        x: &x[b * image_in..(b + 1) * image_in],
                        taps,
                        bias: self.bias.as_slice(),
                        act: self.act,
                    };
                    let res = r.map(|r| &r[at..at + row]);
                    if !simd::nhwc_depthwise_row(&job, oy, res, out) {
                        return Err(self.io.error("depthwise buffers do not match".into()));
                    }
                }
                Ok(())
            })
    }

    fn im2col(&self, p: &Packed, x: &[f32], r: Option<&[f32]>, y: &mut [f32]) -> Result<()> {
        if let Some(win) = self.window.as_ref().filter(|_| self.in_place_tiles) {
            return self.entry_in_place(p, win, x, r, y);
        }
        let (m, k) = (self.m, self.geo.kh * self.geo.kw * self.c);
        let px = self.pixels();
        if self.threads.count() > 1 && px <= IM2COL_ROWS {
            if self.in_place_tiles {
                return self.im2col_by_columns(p, x, r, y);
            }
            // One block of rows (a 7×7 plane): gathered once, the product shared by the
            // threads (the SGEMM splits the columns of large weights between them).
            let mut buf = gemm::take(&IM2COL, px * k);
            self.gather(x, 0, px, &mut buf[..px * k]);
            let y = &mut y[..px * m];
            if let Some(r) = r {
                y.copy_from_slice(&r[..px * m]);
            }
            let done = self.product(&self.threads, p, &buf[..px * k], k, r.is_some(), y);
            gemm::give_back(&IM2COL, buf);
            return done;
        }
        let per = self.threads.chunk_size(px, IM2COL_ROWS, 1).min(IM2COL_ROWS);
        let single = Threads::single();
        self.threads.chunks(&mut y[..px * m], per * m, |i, yc| {
            let (p0, rows) = (i * per, yc.len() / m);
            let mut buf = gemm::take(&IM2COL, rows * k);
            self.gather(x, p0, rows, &mut buf[..rows * k]);
            if let Some(r) = r {
                yc.copy_from_slice(&r[p0 * m..(p0 + rows) * m]);
            }
            let done = self.product(&single, p, &buf[..rows * k], k, r.is_some(), yc);
            gemm::give_back(&IM2COL, buf);
            done
        })
    }

    /// The im2col rows of pixels `p0 .. p0 + rows`: row `p` holds, tap by tap `(ky, kx)`,
    /// the `C` input values under it (zeros in the padding).
    fn gather(&self, x: &[f32], p0: usize, rows: usize, out: &mut [f32]) {
        let g = &self.geo;
        let (c, k) = (self.c, g.kh * g.kw * self.c);
        let plane = g.h * g.w;
        let inside = |o: usize, s: usize, d: usize, pad: usize, len: usize, k: usize| {
            o * s >= pad && o * s + (k - 1) * d < pad + len
        };
        for (j, row) in out.chunks_exact_mut(k).enumerate().take(rows) {
            let p = p0 + j;
            let (b, oy, ox) = (p / (g.oh * g.ow), p / g.ow % g.oh, p % g.ow);
            if inside(oy, g.sh, g.dh, g.pt, g.h, g.kh) && inside(ox, g.sw, g.dw, g.pl, g.w, g.kw) {
                // The whole window inside the image: one offset table for every such pixel.
                let (iy, ix) = (oy * g.sh - g.pt, ox * g.sw - g.pl);
                let base = if self.input_nchw {
                    b * c * plane + iy * g.w + ix
                } else {
                    ((b * g.h + iy) * g.w + ix) * c
                };
                let src = &x[base..];
                if self.input_nchw {
                    for (d, &o) in row.iter_mut().zip(&self.offsets) {
                        *d = src[o];
                    }
                } else {
                    // Channels-last: each tap's C values are one run.
                    for (dst, taps) in row.chunks_exact_mut(c).zip(self.offsets.chunks_exact(c)) {
                        let o = taps[0];
                        dst.copy_from_slice(&src[o..o + c]);
                    }
                }
                continue;
            }
            for ky in 0..g.kh {
                let iy = (oy * g.sh + ky * g.dh)
                    .checked_sub(g.pt)
                    .filter(|&v| v < g.h);
                for kx in 0..g.kw {
                    let dst = &mut row[(ky * g.kw + kx) * c..(ky * g.kw + kx + 1) * c];
                    let ix = (ox * g.sw + kx * g.dw)
                        .checked_sub(g.pl)
                        .filter(|&v| v < g.w);
                    match (iy, ix) {
                        (Some(iy), Some(ix)) if self.input_nchw => {
                            let base = b * c * plane + iy * g.w + ix;
                            for (ci, d) in dst.iter_mut().enumerate() {
                                *d = x[base + ci * plane];
                            }
                        }
                        (Some(iy), Some(ix)) => {
                            let s = ((b * g.h + iy) * g.w + ix) * c;
                            dst.copy_from_slice(&x[s..s + c]);
                        }
                        _ => dst.fill(0.0),
                    }
                }
            }
        }
    }
}

impl Workload for NhwcConvWorkload {
    /// Only X and the residual are read at execution: weights and bias are prepared at load.
    fn reads_constant_input(&self, slot: usize) -> bool {
        slot == 0 || (self.residual && slot == 3)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io
            .check_copied(inputs, outputs, |slot| !self.reads_constant_input(slot))?;
        let x = f32s(input(inputs, 0)?)?;
        let r = if self.residual {
            Some(f32s(input(inputs, 3)?)?)
        } else {
            None
        };
        let y = f32s_mut(output(outputs)?)?;
        if y.len() != self.pixels() * self.m || r.is_some_and(|r| r.len() != y.len()) {
            return Err(self.io.error("output buffers do not match".into()));
        }
        self.compute(x, r, y)
    }
}

impl NhwcConvWorkload {
    /// `y = act(conv(x) + bias (+ r))` by the layer's kind (buffers checked by the caller).
    fn compute(&self, x: &[f32], r: Option<&[f32]>, y: &mut [f32]) -> Result<()> {
        match &*self.kind {
            Kind::Pointwise(p) => self.pointwise(p, x, r, y),
            Kind::Depthwise(t) => self.depthwise(t, x, r, y),
            Kind::Im2col(p) => self.im2col(p, x, r, y),
            Kind::Winograd(plan) => {
                let (th, geo) = (&self.threads, &self.geo);
                plan.run(th, geo, self.n, x, self.bias.as_slice(), self.act, r, y)
            }
            Kind::Lanes(plan) => {
                let g = &self.geo;
                let (image, out) = (self.c * g.h * g.w, g.oh * g.ow * self.m);
                for (i, yi) in y.chunks_exact_mut(out.max(1)).enumerate() {
                    let xi = x.get(i * image..(i + 1) * image).unwrap_or(&[]);
                    let ri = r.map(|r| &r[i * out..(i + 1) * out]);
                    plan.run_nhwc(
                        &self.threads,
                        xi,
                        Some(self.bias.as_slice()),
                        self.act,
                        ri,
                        yi,
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// Channels per step of the depthwise loop (two AVX2 or one AVX-512 vector).
const DW_LANES: usize = 16;

/// `L` channels from `c0` of one output pixel, whose tap (0, 0) lies at padded input row and
/// column `at`: the bias, each valid tap (rows `ys`, columns `xs`, which never reach into the
/// padding), the residual, the activation.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn dw_lanes<const L: usize>(
    job: &DwRow<'_>,
    c0: usize,
    ys: (usize, usize),
    xs: (usize, usize),
    at: (usize, usize),
    res: Option<&[f32]>,
    out: &mut [f32],
) -> Option<()> {
    let g = job.geo;
    let c = job.c;
    let mut acc: [f32; L] = job.bias.get(c0..c0 + L)?.try_into().ok()?;
    for ky in ys.0..ys.1 {
        let iy = at.0 + ky * g.dh - g.pt;
        for kx in xs.0..xs.1 {
            let ix = at.1 + kx * g.dw - g.pl;
            let xa = (iy * g.w + ix) * c + c0;
            let wa = (ky * g.kw + kx) * c + c0;
            let xv = job.x.get(xa..xa + L)?;
            let wv = job.taps.get(wa..wa + L)?;
            for l in 0..L {
                acc[l] = wv[l].mul_add(xv[l], acc[l]);
            }
        }
    }
    if let Some(r) = res {
        for (a, &v) in acc.iter_mut().zip(r.get(c0..c0 + L)?) {
            *a += v;
        }
    }
    let o = out.get_mut(c0..c0 + L)?;
    match job.act {
        Activation::Relu | Activation::Clip { .. } | Activation::LeakyRelu { .. } => {
            for (d, &a) in o.iter_mut().zip(&acc) {
                *d = job.act.apply_simple(a);
            }
        }
        _ => o.copy_from_slice(&acc),
    }
    Some(())
}

/// Output row `oy` of a channels-last depthwise convolution into `out` (`ow·C` values),
/// `res` (the same size) added before the activation. False when a buffer is too short.
#[inline(always)]
pub fn dw_row_body(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32]) -> bool {
    let g = job.geo;
    let c = job.c;
    let ys = valid_taps(oy * g.sh, g.dh, g.pt, g.h, g.kh);
    if out.len() < g.ow * c || res.is_some_and(|r| r.len() < g.ow * c) {
        return false;
    }
    for ox in 0..g.ow {
        let xs = valid_taps(ox * g.sw, g.dw, g.pl, g.w, g.kw);
        let at = (oy * g.sh, ox * g.sw);
        let o = &mut out[ox * c..(ox + 1) * c];
        let r = res.map(|r| &r[ox * c..(ox + 1) * c]);
        let mut c0 = 0;
        while c0 + DW_LANES <= c {
            if dw_lanes::<DW_LANES>(job, c0, ys, xs, at, r, &mut *o).is_none() {
                return false;
            }
            c0 += DW_LANES;
        }
        while c0 + 4 <= c {
            if dw_lanes::<4>(job, c0, ys, xs, at, r, &mut *o).is_none() {
                return false;
            }
            c0 += 4;
        }
        while c0 < c {
            if dw_lanes::<1>(job, c0, ys, xs, at, r, &mut *o).is_none() {
                return false;
            }
            c0 += 1;
        }
    }
    true
}

mod pair;
mod panel_pairs;
#[cfg(test)]
mod tests;
