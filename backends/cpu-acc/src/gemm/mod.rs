//! SGEMM: `C = epilogue(alpha · A·B)`, BLIS-style.
//!
//! A is cut into panels of [`MR`] rows and B into panels of [`NR`] columns, each stored
//! K-major so the micro-kernel streams both with unit stride. Loops, outermost first: NC
//! columns of B (a packed block shared by all threads, packed in parallel), KC steps of K, then
//! the rows of C split between threads; each thread packs MC rows of A at a time (unless A was
//! packed at load time) and runs the micro-kernel over its MR×NR tiles. Constant operands
//! (weights) are packed once, at workload creation, into a [`Packed`] matrix.
//!
//! B may also be the im2col matrix of a convolution input given as shifted runs of its padded
//! image ([`Shifted`]): it is packed straight from that image, so no im2col buffer is built.

use crate::act::Activation;
use crate::simd::{self, TileEpilogue, MR, NR, ROW_STEP};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;

pub use backplane_cpu_kernels::gemm::{panel_offset, KC};
use shifted::pack_b_shifted;
pub use shifted::Shifted;

mod blocks;
mod few_rows;
mod normed;
mod shifted;
use blocks::*;
use normed::pack_b_normed;
pub use normed::RowNorm;
/// Rows of A packed at a time per thread (a multiple of MR).
pub const MC: usize = 120;
/// Least weights (K·N values) for which [`sgemm`] splits up to [`COLUMN_SPLIT_ROWS`] rows of
/// A between threads by columns of a packed B rather than by rows: twice a core's L2 in f32,
/// so that each thread streaming all of B from memory would cost more than packing A and
/// copying C once more.
const COLUMN_SPLIT_WEIGHTS: usize = 1 << 19;

/// Most rows of A the column split takes: each thread packs them all per K block (at most
/// 480 KB of A at once, in L2), against its share of the weights (a transformer's tokens
/// against a projection, a 7×7 plane's pixels against a convolution's weights).
const COLUMN_SPLIT_ROWS: usize = 4 * MC;

/// Whether [`sgemm`] shares `m` rows of A against a packed `k × n` B between the threads by
/// columns ([`sgemm_columns`]): one A panel, or a few blocks of rows against large weights.
fn splits_by_columns(th: &Threads, m: usize, n: usize, k: usize) -> bool {
    let few = m <= MR || (m <= COLUMN_SPLIT_ROWS && n * k >= COLUMN_SPLIT_WEIGHTS);
    th.count() > 1 && few && n >= 2 * NR * th.count() && n * k >= 1 << 18
}
/// Columns of B packed at a time (a multiple of NR).
pub const NC: usize = 2048;

/// A strided matrix view: element (r, c) is `data[r * rs + c * cs]`.
#[derive(Debug, Clone, Copy)]
pub struct MatView<'a> {
    /// The elements.
    pub data: &'a [f32],
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

impl MatView<'_> {
    #[inline(always)]
    fn at(&self, r: usize, c: usize) -> f32 {
        self.data[r * self.rs + c * self.cs]
    }
}

/// A matrix packed into K-major panels: A side (panels of MR rows) or B side (panels of NR
/// columns). `len` is the panelled dimension (m or n).
#[derive(Debug, Clone)]
pub struct Packed {
    /// Line-aligned: the tiles' vector loads of a B panel never straddle two lines.
    data: AlignedVec<f32>,
    len: usize,
    k: usize,
    panel: usize,
    /// How a B panel's two halves lie: interleaved as packed, or split by [`Packed::with_halves`]
    /// for the tiles that read A in place (only they read a split panel).
    halves: simd::Halves,
}

impl Packed {
    fn padded(&self) -> usize {
        self.len.div_ceil(self.panel) * self.panel
    }

    /// Pack with `get(index along the panelled dimension, k)`.
    fn pack(len: usize, k: usize, panel: usize, get: impl Fn(usize, usize) -> f32) -> Self {
        let padded = len.div_ceil(panel) * panel;
        let mut data = AlignedVec::new();
        data.resize(padded * k);
        let mut at = 0;
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            for p0 in (0..padded).step_by(panel) {
                for l in 0..kc {
                    for t in 0..panel {
                        let i = p0 + t;
                        if i < len {
                            data[at] = get(i, k0 + l);
                        }
                        at += 1;
                    }
                }
            }
        }
        Packed {
            data,
            len,
            k,
            panel,
            halves: simd::Halves::Interleaved,
        }
    }

    /// The same B operand with each panel's two 16-column halves laid out as `halves` says:
    /// [`simd::Halves::Split`] for the AVX2 tiles that read A in place (they walk one half
    /// down many rows, and a split half is one run in L1); only those tiles read a split
    /// panel ([`sgemm`] refuses it). An A operand comes back as it was.
    pub(crate) fn with_halves(mut self, halves: simd::Halves) -> Self {
        if self.panel != NR || self.halves == halves {
            return self;
        }
        let half = NR / 2;
        let split = halves == simd::Halves::Split;
        let mut panel = vec![0f32; KC * NR];
        let (mut at, padded) = (0, self.padded());
        for k0 in (0..self.k).step_by(KC) {
            let kc = KC.min(self.k - k0);
            for dst in self.data[at..at + padded * kc].chunks_exact_mut(kc * NR) {
                let src = &mut panel[..kc * NR];
                src.copy_from_slice(dst);
                // Half h of K step l: at l·NR + h·16 interleaved, (h·kc + l)·16 split.
                for l in 0..kc {
                    for h in 0..2 {
                        let (inter, apart) = (l * NR + h * half, (h * kc + l) * half);
                        let (to, from) = if split {
                            (apart, inter)
                        } else {
                            (inter, apart)
                        };
                        dst[to..to + half].copy_from_slice(&src[from..from + half]);
                    }
                }
            }
            at += padded * kc;
        }
        self.halves = halves;
        self
    }

    /// How a B panel's halves lie.
    pub(crate) fn halves(&self) -> simd::Halves {
        self.halves
    }

    /// Every K block's panels (a B operand: laid out as [`panel_offset`] says) and how their
    /// halves lie, for [`each_half_panel`].
    pub(crate) fn panels(&self) -> (&[f32], simd::Halves) {
        (&self.data, self.halves)
    }

    /// Pack an m×k matrix as the A operand.
    pub fn pack_a(m: usize, k: usize, a: MatView<'_>) -> Self {
        Self::pack(m, k, MR, |i, l| a.at(i, l))
    }

    /// Pack a k×n matrix as the B operand.
    pub fn pack_b(k: usize, n: usize, b: MatView<'_>) -> Self {
        Self::pack(n, k, NR, |j, l| b.at(l, j))
    }

    /// Pack a k×n matrix as the B operand, element `(l, j)` given by `get(l, j)` (a layout
    /// no strided view describes, packed without an intermediate copy).
    pub(crate) fn pack_b_with(k: usize, n: usize, get: impl Fn(usize, usize) -> f32) -> Self {
        Self::pack(n, k, NR, |j, l| get(l, j))
    }

    /// The panels of K block `kb` from panel `p0` on.
    pub(crate) fn block(&self, kb: usize, p0: usize) -> Result<&[f32]> {
        let k0 = kb * KC;
        let kc = KC.min(self.k.saturating_sub(k0));
        let start = k0 * self.padded() + p0 * kc * self.panel;
        let end = (k0 + kc) * self.padded();
        self.data
            .get(start..end)
            .ok_or_else(|| BackendError::Execution("packed operand is too small".into()))
    }

    /// Rows (A) or columns (B) of the packed matrix.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty matrix.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Depth.
    pub fn depth(&self) -> usize {
        self.k
    }
}

/// Pack panels of a strided B view: columns from `j0` (of `n`), K rows `k0..k0+kc`.
fn pack_b_view(b: &MatView<'_>, n: usize, j0: usize, k0: usize, kc: usize, out: &mut [f32]) {
    for (p, panel) in out.chunks_exact_mut(kc * NR).enumerate() {
        let n0 = j0 + p * NR;
        let width = NR.min(n.saturating_sub(n0));
        // Column-major B (a transposed view: attention's Kᵀ): each column's K values are one
        // run, the panel their transpose, by 8×8 blocks in registers.
        if b.rs == 1
            && width > 0
            && b.data
                .get(n0 * b.cs + k0..)
                .is_some_and(|src| simd::gather_lanes_pitched(src, b.cs, width, kc, panel, NR))
        {
            continue;
        }
        for (l, dst) in panel.chunks_exact_mut(NR).enumerate() {
            let r = k0 + l;
            if b.cs == 1 && width == NR {
                // A fixed-size copy: inlined as a few vector moves, no memcpy call.
                let s = r * b.rs + n0;
                dst.copy_from_slice(&b.data[s..s + NR]);
            } else if b.cs == 1 && width > 0 {
                let s = r * b.rs + n0;
                dst[..width].copy_from_slice(&b.data[s..s + width]);
            } else {
                for (t, v) in dst[..width].iter_mut().enumerate() {
                    *v = b.at(r, n0 + t);
                }
            }
            dst[width..].fill(0.0);
        }
    }
}

/// Pack `mc` rows of a strided A view from row `i0`, K columns `k0..k0+kc`.
fn pack_a_view(a: &MatView<'_>, i0: usize, mc: usize, k0: usize, kc: usize, out: &mut [f32]) {
    let panels = mc.div_ceil(MR);
    for (p, panel) in out.chunks_exact_mut(kc * MR).take(panels).enumerate() {
        let rows = MR.min(mc - p * MR);
        // Row-major A: the panel is its rows transposed, 16 K columns at a time in
        // registers with AVX-512 (the lanes past `rows` zero).
        let start = (i0 + p * MR) * a.rs + k0;
        if a.cs == 1
            && a.data
                .get(start..)
                .is_some_and(|rest| simd::gather_lanes_pitched(rest, a.rs, rows, kc, panel, MR))
        {
            continue;
        }
        if a.rs == 1 {
            // Column-major A (a transposed view): each K step's MR values are a contiguous
            // run of one column.
            for (l, dst) in panel.chunks_exact_mut(MR).enumerate().take(kc) {
                let s = (k0 + l) * a.cs + i0 + p * MR;
                dst[..rows].copy_from_slice(&a.data[s..s + rows]);
                dst[rows..].fill(0.0);
            }
            continue;
        }
        if a.cs == 1 && rows == MR {
            // Six contiguous rows interleaved: sequential writes, one pass.
            let r: [&[f32]; MR] = std::array::from_fn(|t| {
                let s = (i0 + p * MR + t) * a.rs + k0;
                &a.data[s..s + kc]
            });
            for (l, dst) in panel.chunks_exact_mut(MR).enumerate().take(kc) {
                for (d, row) in dst.iter_mut().zip(&r) {
                    *d = row[l];
                }
            }
            continue;
        }
        for t in 0..MR {
            let i = p * MR + t;
            if i >= mc {
                for l in 0..kc {
                    panel[l * MR + t] = 0.0;
                }
                continue;
            }
            if a.cs == 1 {
                let s = (i0 + i) * a.rs + k0;
                for (l, &v) in a.data[s..s + kc].iter().enumerate() {
                    panel[l * MR + t] = v;
                }
            } else {
                for l in 0..kc {
                    panel[l * MR + t] = a.at(i0 + i, k0 + l);
                }
            }
        }
    }
}

/// The A operand of [`sgemm`].
#[derive(Debug, Clone, Copy)]
pub enum ASrc<'a> {
    /// Packed at load time.
    Packed(&'a Packed),
    /// Packed on the fly.
    View(MatView<'a>),
}

/// The B operand of [`sgemm`].
#[derive(Debug, Clone, Copy)]
pub enum BSrc<'a> {
    /// Packed at load time.
    Packed(&'a Packed),
    /// Packed on the fly.
    View(MatView<'a>),
    /// Packed on the fly, each K row mapped by a [`RowNorm`] as it is packed.
    Normed(MatView<'a>, RowNorm<'a>),
    /// Shifted runs of a padded convolution input.
    Shifted(Shifted<'a>),
    /// Already laid out as [`Packed::pack_b`] lays out a K×N matrix (see [`panel_offset`])
    /// by whoever computed it, so nothing is packed (the Winograd input transform writes
    /// its matrices so).
    Panels(&'a [f32]),
}

/// The panels of K block `kb` from panel `p0` on, of a K×N operand in the packed-panel
/// layout.
fn panels_block(data: &[f32], k: usize, n: usize, kb: usize, p0: usize) -> Result<&[f32]> {
    let padded = n.div_ceil(NR) * NR;
    let k0 = kb * KC;
    let kc = KC.min(k.saturating_sub(k0));
    data.get(k0 * padded + p0 * kc * NR..(k0 + kc) * padded)
        .ok_or_else(|| err("B panels are too small"))
}

/// What happens to `alpha · A·B` before it is stored in C.
#[derive(Debug, Clone, Copy)]
pub struct Epilogue<'a> {
    /// Scale of the product.
    pub alpha: f32,
    /// Add C's prior contents.
    pub accumulate: bool,
    /// Bias per row of C (m values).
    pub row_bias: Option<&'a [f32]>,
    /// Bias per column of C (n values).
    pub col_bias: Option<&'a [f32]>,
    /// Activation.
    pub act: Activation,
}

impl<'a> Epilogue<'a> {
    /// The micro-kernel's epilogue for the tile whose top left is C's element `at`
    /// (row, column): `accumulate` onto C, `last` K block (biases and `act` then apply).
    fn tile(
        &self,
        accumulate: bool,
        last: bool,
        at: (usize, usize),
        act: Activation,
    ) -> TileEpilogue<'a> {
        TileEpilogue {
            accumulate,
            alpha: self.alpha,
            row_bias: self.row_bias.map(|rb| &rb[at.0..]),
            col_bias: self.col_bias.map(|cb| &cb[at.1..]),
            last,
            act,
        }
    }
}

impl Default for Epilogue<'_> {
    fn default() -> Self {
        Epilogue {
            alpha: 1.0,
            accumulate: false,
            row_bias: None,
            col_bias: None,
            act: Activation::None,
        }
    }
}

thread_local! {
    static A_BUF: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static B_BUF: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static PARTS_BUF: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
}

pub(crate) use crate::scratch::{give_back, take, try_take};

/// `c[..n] = act(alpha·a·B [+ c] + row_bias + col_bias)` for one row `a` (K values) and a
/// packed B: each [`NR`]-column panel summed over K in registers ([`simd::gemv_panel`]),
/// the panels shared out between the threads. The weights are read once, in order.
fn gemv(
    th: &Threads,
    n: usize,
    k: usize,
    a: &MatView<'_>,
    pb: &Packed,
    c: &mut [f32],
    ep: &Epilogue<'_>,
) -> Result<()> {
    let row: Vec<f32> = (0..k).map(|l| a.at(0, l)).collect();
    let panels = n.div_ceil(NR);
    let per = th.chunk_size(panels, 2, 1);
    let row_bias = ep.row_bias.map_or(0.0, |r| r[0]);
    th.chunks(&mut c[..n], per * NR, |i, cc| {
        for (q, cp) in cc.chunks_mut(NR).enumerate() {
            let p = i * per + q;
            let mut acc = [0f32; NR];
            for (kb, k0) in (0..k).step_by(KC).enumerate() {
                let kc = KC.min(k - k0);
                let panel = pb
                    .block(kb, p)?
                    .get(..kc * NR)
                    .ok_or_else(|| err("B panel"))?;
                simd::gemv_panel(&row[k0..k0 + kc], panel, &mut acc);
            }
            for (j, (o, &v)) in cp.iter_mut().zip(&acc).enumerate() {
                let mut x = ep.alpha * v;
                if ep.accumulate {
                    x += *o;
                }
                x += row_bias + ep.col_bias.map_or(0.0, |cb| cb[p * NR + j]);
                *o = crate::math::apply(ep.act, x);
            }
        }
        Ok(())
    })
}

fn err(what: &str) -> BackendError {
    BackendError::Execution(format!("sgemm: {what}"))
}

/// `C[m×n] (row stride ldc) = act(alpha·A·B [+ C] + row_bias + col_bias)`.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    th: &Threads,
    m: usize,
    n: usize,
    k: usize,
    a: &ASrc<'_>,
    b: &BSrc<'_>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
) -> Result<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    if c.len() < (m - 1) * ldc + n || (m > 1 && ldc < n) {
        return Err(err("output buffer too small"));
    }
    // Only C's m rows are split between threads, however long the buffer.
    let c = &mut c[..(m - 1) * ldc + n];
    if ep.row_bias.is_some_and(|r| r.len() < m) || ep.col_bias.is_some_and(|r| r.len() < n) {
        return Err(err("bias too short"));
    }
    if let BSrc::Shifted(sh) = b {
        if sh.rows.len() != k || sh.end(n) > sh.data.len() {
            return Err(err("shifted B does not match the product"));
        }
    }
    if let BSrc::Normed(_, norm) = b {
        if norm.scale.len() < k || norm.shift.len() < k {
            return Err(err("B's row normalization is shorter than K"));
        }
    }
    if let ASrc::Packed(p) = a {
        if p.len != m || p.k != k || p.panel != MR {
            return Err(err("packed A does not match the product"));
        }
    }
    // A row-major A with many rows: the tiles that read A where it lies, against a packed
    // B, or a B view packed whole first (one not too large: attention's Kᵀ and V).
    let padded = n.div_ceil(NR) * NR;
    let in_place = match (a, b) {
        (ASrc::View(av), BSrc::Packed(_)) => in_place_tiles(m, av.cs, ep),
        (ASrc::View(av), BSrc::View(_)) => in_place_tiles(m, av.cs, ep) && k * padded <= IN_PLACE_B,
        _ => false,
    };
    if let BSrc::Packed(p) = b {
        let split_ok = in_place || p.halves == simd::Halves::Interleaved;
        if p.len != n || p.k != k || p.panel != NR || !split_ok {
            return Err(err("packed B does not match the product"));
        }
    }
    if let BSrc::Panels(d) = b {
        if d.len() < k * n.div_ceil(NR) * NR {
            return Err(err("B panels are too small"));
        }
    }
    if k == 0 {
        for i in 0..m {
            let row = &mut c[i * ldc..i * ldc + n];
            for (j, v) in row.iter_mut().enumerate() {
                let mut x = if ep.accumulate { *v } else { 0.0 };
                x += ep.row_bias.map_or(0.0, |r| r[i]) + ep.col_bias.map_or(0.0, |r| r[j]);
                *v = crate::math::apply(ep.act, x);
            }
        }
        return Ok(());
    }
    let kernel_act = ep.act.kernel_part();
    let rows_per = th.chunk_size(m, MR, MR);
    if let (true, ASrc::View(av)) = (in_place, a) {
        let in_tile = strided_tile_act(ep.act);
        match b {
            BSrc::Packed(pb) => in_place_driver(th, m, n, k, av, pb.panels(), c, ldc, ep, in_tile)?,
            BSrc::View(bv) => {
                // Every K block's panels, laid out as a packed B (`panel_offset`).
                let mut buf = take(&B_BUF, k * padded);
                let packed = (|| -> Result<()> {
                    for pc in (0..k).step_by(KC) {
                        let kc = KC.min(k - pc);
                        let block = &mut buf[pc * padded..(pc + kc) * padded];
                        let per = pack_share(th, padded / NR, kc);
                        th.chunks(block, per * kc * NR, |i, chunk| {
                            pack_b_view(bv, n, i * per * NR, pc, kc, chunk);
                            Ok(())
                        })?;
                    }
                    let panels = (&buf[..k * padded], simd::Halves::Interleaved);
                    in_place_driver(th, m, n, k, av, panels, c, ldc, ep, in_tile)
                })();
                give_back(&B_BUF, buf);
                packed?;
            }
            _ => return Err(err("in-place tiles take a packed B or a view")),
        }
        return Ok(());
    }
    if let ASrc::Packed(pa) = a {
        if !ep.accumulate && !matches!(b, BSrc::Packed(_)) {
            if m * k <= SMALL_A {
                return sgemm_small_a(th, m, n, k, pa, b, c, ldc, ep, kernel_act);
            }
            if th.count() > 1 && n <= NB * NR && m >= 8 * MR && m * n * k >= PARALLEL_MACS {
                return sgemm_rows(th, m, n, k, pa, b, c, ldc, ep, kernel_act);
            }
        }
    }
    if let (1, BSrc::Packed(pb), ASrc::View(av)) = (m, b, a) {
        // One row (a batch-1 fully connected layer): a product of a vector and a matrix, as
        // many FMAs as there are weights; the tiles would compute six rows for one.
        return gemv(th, n, k, av, pb, c, ep);
    }
    if let BSrc::Packed(pb) = b {
        // A few rows against a large packed B (a batch-1 fully connected layer, a convolution
        // over a 7×7 plane): the rows cannot be shared out, or a split of them would have
        // every thread stream all the weights; the columns can.
        if splits_by_columns(th, m, n, k) {
            return sgemm_columns(th, m, n, k, a, pb, c, ldc, ep, kernel_act);
        }
    }
    let mut bbuf = match b {
        BSrc::Packed(_) | BSrc::Panels(_) => AlignedVec::new(),
        _ => take(&B_BUF, KC * NC.min(n.div_ceil(NR) * NR)),
    };
    let result = (|| -> Result<()> {
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            let np = nc.div_ceil(NR);
            for (kb, pc) in (0..k).step_by(KC).enumerate() {
                let kc = KC.min(k - pc);
                let bpanels: &[f32] = match b {
                    BSrc::Packed(p) => p.block(kb, jc / NR)?,
                    BSrc::Panels(d) => panels_block(d, k, n, kb, jc / NR)?,
                    BSrc::View(v) => {
                        let buf = &mut bbuf[..np * kc * NR];
                        let per = pack_share(th, np, kc);
                        th.chunks(buf, per * kc * NR, |i, chunk| {
                            pack_b_view(v, n, jc + i * per * NR, pc, kc, chunk);
                            Ok(())
                        })?;
                        buf
                    }
                    BSrc::Normed(v, norm) => {
                        let buf = &mut bbuf[..np * kc * NR];
                        let per = pack_share(th, np, kc);
                        th.chunks(buf, per * kc * NR, |i, chunk| {
                            pack_b_normed(v, norm, n, jc + i * per * NR, pc, kc, chunk);
                            Ok(())
                        })?;
                        buf
                    }
                    BSrc::Shifted(s) => {
                        let buf = &mut bbuf[..np * kc * NR];
                        let per = pack_share(th, np, kc);
                        th.chunks(buf, per * kc * NR, |i, chunk| {
                            pack_b_shifted(s, n, jc + i * per * NR, pc, kc, chunk)
                        })?;
                        buf
                    }
                };
                let first = kb == 0;
                let last = pc + kc == k;
                let next = match (pc + KC < k, jc + NC < n) {
                    (true, _) => Some((pc + KC, jc, nc)),
                    (false, true) => Some((0, jc + NC, NC.min(n - jc - NC))),
                    (false, false) => None,
                };
                let parts = m.div_ceil(rows_per);
                th.chunks(c, rows_per * ldc, |ci, cc| {
                    let r0 = ci * rows_per;
                    let rows = rows_per.min(m - r0);
                    let calls = rows.div_ceil(MR) * np;
                    let fetch = Ahead::new(b, k, next, calls).part(ci, parts);
                    let mut call = 0;
                    let mut abuf = match a {
                        ASrc::Packed(_) => AlignedVec::new(),
                        ASrc::View(_) => take(&A_BUF, MC * KC),
                    };
                    let res = (|| -> Result<()> {
                        for ic in (0..rows).step_by(MC) {
                            let mc = MC.min(rows - ic);
                            let apanels: &[f32] = match a {
                                ASrc::Packed(p) => p.block(kb, (r0 + ic) / MR)?,
                                ASrc::View(v) => {
                                    pack_a_view(v, r0 + ic, mc, pc, kc, &mut abuf);
                                    &abuf
                                }
                            };
                            for jr in 0..np {
                                let nr = NR.min(nc - jr * NR);
                                let col = jc + jr * NR;
                                let bp = bpanels
                                    .get(jr * kc * NR..(jr + 1) * kc * NR)
                                    .ok_or_else(|| err("B panel out of range"))?;
                                for ir in 0..mc.div_ceil(MR) {
                                    let mr = MR.min(mc - ir * MR);
                                    let row = ic + ir * MR;
                                    let tep = ep.tile(
                                        !first || ep.accumulate,
                                        last,
                                        (r0 + row, col),
                                        kernel_act,
                                    );
                                    let ap = apanels.get(ir * kc * MR..).unwrap_or(&[]);
                                    let cs = cc.get_mut(row * ldc + col..).unwrap_or(&mut []);
                                    let ahead = match b {
                                        BSrc::Packed(_) => next_panel_share(bpanels, jr, kc, ir),
                                        _ => &[],
                                    };
                                    let f = match ahead.is_empty() {
                                        true => fetch.step(call, kc),
                                        false => simd::Fetch::run(ahead),
                                    };
                                    call += 1;
                                    if !simd::microkernel_rows_fetching(
                                        kc, ap, 0, bp, cs, ldc, mr, nr, &tep, f,
                                    ) {
                                        return Err(err("micro-kernel bounds"));
                                    }
                                }
                            }
                            let block = cc.get_mut(ic * ldc + jc..).unwrap_or(&mut []);
                            act_after_block(ep.act, kernel_act, last, block, ldc, mc, nc);
                        }
                        Ok(())
                    })();
                    if !abuf.is_empty() {
                        give_back(&A_BUF, abuf);
                    }
                    res
                })?;
            }
        }
        Ok(())
    })();
    if !bbuf.is_empty() {
        give_back(&B_BUF, bbuf);
    }
    result
}

/// The share of the packed B panel after panel `q` (of depth `kc`, in `panels`: a K block's
/// panels from some panel on) that the `t`-th tile run against panel `q` prefetches: `kc`
/// floats·16 (one line per K step) each, the first two tiles covering the next panel whole.
/// Weights streamed from memory arrive in L2 before the tiles reach them; empty past the
/// block's last panel and for later tiles.
pub(crate) fn next_panel_share(panels: &[f32], q: usize, kc: usize, t: usize) -> &[f32] {
    let next = panels.get((q + 1) * kc * NR..).unwrap_or(&[]);
    let next = &next[..(kc * NR).min(next.len())];
    let from = (t * kc * 16).min(next.len());
    let to = ((t + 1) * kc * 16).min(next.len());
    &next[from..to]
}

/// Least depth (K) whose packed B the in-place tiles read as split halves
/// ([`Packed::with_halves`]): below it the split halves were slower (the measurement:
/// docs/cpu-acc-bounds.md, "Split B halves").
pub(crate) const SPLIT_MIN_DEPTH: usize = 96;

/// The layout the in-place tiles read best for a packed B of depth `k`, on this machine.
pub(crate) fn halves_for(k: usize) -> simd::Halves {
    if k >= SPLIT_MIN_DEPTH && crate::options::current().split_halves {
        simd::Halves::Split
    } else {
        simd::Halves::Interleaved
    }
}

/// Most rows of one block of [`sgemm_in_place`]: ten six-row tiles (their K block of A, at
/// most 60 KB, stays in L2 while each B half-panel runs down them from L1).
const IN_PLACE_ROWS: usize = 60;

/// Whether [`sgemm`] takes `m` rows of A from a view whose columns are `a_cs` apart in
/// place ([`sgemm_in_place`]): AVX2 tiles, row-major A, more rows than one packed A panel,
/// no row bias.
pub(crate) fn in_place_tiles(m: usize, a_cs: usize, ep: &Epilogue<'_>) -> bool {
    simd::strided_tiles() && a_cs == 1 && m > MR && ep.row_bias.is_none()
}

/// Most floats of a B view that [`sgemm`] packs whole for the in-place tiles (1 MB; a larger
/// one takes the packed-A path, which packs B a block at a time).
const IN_PLACE_B: usize = 256 * 1024;

/// The in-place product by the driver that suits its shape: few rows against a large B by
/// [`few_rows::sgemm_few_rows`], others by [`sgemm_in_place`].
#[allow(clippy::too_many_arguments)]
fn in_place_driver(
    th: &Threads,
    m: usize,
    n: usize,
    k: usize,
    av: &MatView<'_>,
    panels: (&[f32], simd::Halves),
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    in_tile: Activation,
) -> Result<()> {
    if few_rows::takes(th, m, n, k, ep) {
        few_rows::sgemm_few_rows(th, m, n, k, av, panels, c, ldc, ep, in_tile)
    } else {
        sgemm_in_place(th, m, n, k, av, panels, c, ldc, ep, in_tile)
    }
}

/// [`sgemm`] of a row-major A read where it lies against a packed B (`panels`: laid out as
/// [`Packed::pack_b`] lays out a K×N matrix, halves as given), by
/// [`simd::tiles_strided`]: nothing is packed per run (the packed-A path transposed every K
/// block of A into panels first). Each thread's rows go in even blocks of at most
/// [`IN_PLACE_ROWS`]; for each K block, each 16-column half of B (each panel of at most 24
/// columns whole) runs down the block's rows.
#[allow(clippy::too_many_arguments)]
fn sgemm_in_place(
    th: &Threads,
    m: usize,
    n: usize,
    k: usize,
    av: &MatView<'_>,
    (panels, halves): (&[f32], simd::Halves),
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    in_tile: Activation,
) -> Result<()> {
    let per = th.chunk_size(m, ROW_STEP, ROW_STEP);
    th.chunks(c, per * ldc, |i, cc| {
        let rows = (cc.len() + ldc - n) / ldc;
        let block = rows.div_ceil(rows.div_ceil(IN_PLACE_ROWS));
        for b0 in (0..rows).step_by(block) {
            let (r0, br) = (i * per + b0, block.min(rows - b0));
            each_half_panel((panels, halves), k, n, simd::WIDE, |hp| {
                let a = av.data.get(r0 * av.rs + hp.k0..).unwrap_or(&[]);
                let tep = ep.tile(ep.accumulate || hp.kb > 0, hp.last, (0, hp.j0), in_tile);
                let cb = cc.get_mut(b0 * ldc + hp.j0..).unwrap_or(&mut []);
                let next = halves.next(hp.kc, hp.j0 % NR);
                match simd::tiles_strided(hp.kc, a, av.rs, br, hp.b, cb, ldc, hp.nr, &tep, next) {
                    true => Ok(()),
                    false => Err(err("in-place tiles refused")),
                }
            })?;
            let rows = cc.get_mut(b0 * ldc..).unwrap_or(&mut []);
            act_after_block(ep.act, in_tile, true, rows, ldc, br, n);
        }
        Ok(())
    })
}

/// One step of [`each_half_panel`]: a 16-column half of a packed B panel in one K block, or
/// a whole panel of at most `wide` columns.
pub(crate) struct HalfPanel<'a> {
    /// The K block.
    pub kb: usize,
    /// Its first K row.
    pub k0: usize,
    /// Its depth.
    pub kc: usize,
    /// The first column.
    pub j0: usize,
    /// Columns (at most 16, or `wide`).
    pub nr: usize,
    /// B from the half's start on, and how the panel's halves lie.
    pub b: (&'a [f32], simd::Halves),
    /// Whether the K block is the last.
    pub last: bool,
}

/// Call `f` on each [`HalfPanel`] of a packed B (`panels`, K×N, as [`Packed::panels`] gives
/// it), K blocks outermost: each 16-column half of each panel, or a whole panel of 17 to
/// `wide` columns (the 3×24 tile, where `wide` allows it). Stops at `f`'s first error.
pub(crate) fn each_half_panel(
    panels: (&[f32], simd::Halves),
    k: usize,
    n: usize,
    wide: usize,
    f: impl FnMut(&HalfPanel<'_>) -> Result<()>,
) -> Result<()> {
    each_half_panel_in(panels, k, n, wide, (0, n.div_ceil(NR)), f)
}

/// [`each_half_panel`] over panels `cols.0..cols.1` only (a task's share of the columns).
pub(crate) fn each_half_panel_in(
    (panels, halves): (&[f32], simd::Halves),
    k: usize,
    n: usize,
    wide: usize,
    cols: (usize, usize),
    mut f: impl FnMut(&HalfPanel<'_>) -> Result<()>,
) -> Result<()> {
    for (kb, k0) in (0..k).step_by(KC).enumerate() {
        let kc = KC.min(k - k0);
        let block = panels_block(panels, k, n, kb, cols.0)?;
        let share = block
            .chunks_exact(kc * NR)
            .take(cols.1.saturating_sub(cols.0));
        for (pi, panel) in (cols.0..).zip(share) {
            let width = (n - pi * NR).min(NR);
            let step = if width > simd::HALF && width <= wide {
                NR
            } else {
                simd::HALF
            };
            for h in (0..width).step_by(step) {
                f(&HalfPanel {
                    kb,
                    k0,
                    kc,
                    j0: pi * NR + h,
                    nr: (width - h).min(step),
                    b: (&panel[halves.start(kc, h)..], halves),
                    last: k0 + kc == k,
                })?;
            }
        }
    }
    Ok(())
}

/// After a block of C is computed through the last K block (`last`), `rows` rows of `cols`
/// values from the start of `c`, `ldc` apart: apply `act` when the tiles applied none of it
/// (`in_tile`, the activation their epilogue had, is either all of `act` or
/// [`Activation::None`]), while the block is still in L1 or L2. (A pass over the whole
/// output after the product read it back from memory and was one more parallel step per
/// layer; a pass per tile, on rows of 32 values, ran the compiled loop's short tail and was
/// slower still.) Element by element as the compiled pass, so the results are the same bits.
#[inline]
pub(crate) fn act_after_block(
    act: Activation,
    in_tile: Activation,
    last: bool,
    c: &mut [f32],
    ldc: usize,
    rows: usize,
    cols: usize,
) {
    if !last || !matches!(in_tile, Activation::None) || matches!(act, Activation::None) {
        return;
    }
    for r in 0..rows {
        let end = c.len().min(r * ldc + cols);
        if let Some(row) = c.get_mut(r * ldc..end) {
            simd::unary_in_place(act, row);
        }
    }
}

/// The activation the tiles that read A in place ([`simd::tiles_strided`]) apply as they
/// store: all of `act` where they can ([`simd::strided_tiles_apply`]), else its in-kernel
/// part ([`act_after_block`] applies the rest).
pub(crate) fn strided_tile_act(act: Activation) -> Activation {
    if simd::strided_tiles_apply(act) {
        act
    } else {
        act.kernel_part()
    }
}

#[cfg(test)]
mod tests;
