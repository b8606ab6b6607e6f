//! SGEMM: `C = epilogue(alpha · A·B)`, BLIS-style.
//!
//! A is cut into panels of [`MR`] rows and B into panels of [`NR`] columns, each stored
//! K-major so the micro-kernel streams both with unit stride. Loops, outermost first: NC
//! columns of B (a packed block shared by all threads, packed in parallel), KC steps of K, then
//! the rows of C split between threads; each thread packs MC rows of A at a time (unless A was
//! packed at load time) and runs the micro-kernel over its MR×NR tiles. Constant operands
//! (weights) are packed once, at workload creation, into a [`Packed`] matrix.
//!
//! B may also be an implicit im2col matrix of a convolution input ([`Im2col`]): it is packed
//! straight from the image, so no im2col buffer is ever built.

use crate::act::Activation;
use crate::simd::{self, TileEpilogue, MR, NR};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
use std::cell::RefCell;

/// Depth of one K block.
pub const KC: usize = 256;
/// Rows of A packed at a time per thread (a multiple of MR).
pub const MC: usize = 120;
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
    data: Vec<f32>,
    len: usize,
    k: usize,
    panel: usize,
}

impl Packed {
    fn padded(&self) -> usize {
        self.len.div_ceil(self.panel) * self.panel
    }

    /// Pack with `get(index along the panelled dimension, k)`.
    fn pack(len: usize, k: usize, panel: usize, get: impl Fn(usize, usize) -> f32) -> Self {
        let padded = len.div_ceil(panel) * panel;
        let mut data = vec![0f32; padded * k];
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
        }
    }

    /// Pack an m×k matrix as the A operand.
    pub fn pack_a(m: usize, k: usize, a: MatView<'_>) -> Self {
        Self::pack(m, k, MR, |i, l| a.at(i, l))
    }

    /// Pack a k×n matrix as the B operand.
    pub fn pack_b(k: usize, n: usize, b: MatView<'_>) -> Self {
        Self::pack(n, k, NR, |j, l| b.at(l, j))
    }

    /// The panels of K block `kb` from panel `p0` on.
    fn block(&self, kb: usize, p0: usize) -> Result<&[f32]> {
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

/// A convolution input seen as the K×N im2col matrix of one group of one image:
/// row `(c, ky, kx)`, column `(oy, ox)`.
#[derive(Debug, Clone, Copy)]
pub struct Im2col<'a> {
    /// The group's channels of one image, [c, h, w].
    pub x: &'a [f32],
    /// Channels.
    pub c: usize,
    /// Input height and width.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Kernel height and width.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Strides.
    pub sh: usize,
    /// Horizontal stride.
    pub sw: usize,
    /// Dilations.
    pub dh: usize,
    /// Horizontal dilation.
    pub dw: usize,
    /// Padding at the top and left.
    pub ph: usize,
    /// Left padding.
    pub pw: usize,
    /// Output height and width.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
}

impl Im2col<'_> {
    /// Columns of the matrix.
    pub fn n(&self) -> usize {
        self.oh * self.ow
    }
}

/// Pack panels of the im2col matrix: columns from `j0`, K rows `k0..k0+kc`, as many NR-wide
/// panels as `out` holds (`out.len() / (kc * NR)`).
#[inline(always)]
pub fn pack_b_im2col_body(src: &Im2col<'_>, j0: usize, k0: usize, kc: usize, out: &mut [f32]) {
    let n = src.n();
    let taps = src.kh * src.kw;
    let (h, w) = (src.h as isize, src.w as isize);
    // Per K row: the input plane offset and the tap's offsets.
    let rows: Vec<(usize, isize, isize)> = (k0..k0 + kc)
        .map(|kk| {
            let (ci, rem) = (kk / taps, kk % taps);
            let (ky, kx) = (rem / src.kw, rem % src.kw);
            (
                ci * src.h * src.w,
                (ky * src.dh) as isize - src.ph as isize,
                (kx * src.dw) as isize - src.pw as isize,
            )
        })
        .collect();
    for (p, panel) in out.chunks_exact_mut(kc * NR).enumerate() {
        let n0 = j0 + p * NR;
        if n0 >= n {
            panel.fill(0.0);
            continue;
        }
        let width = NR.min(n - n0);
        // Segments of the panel that lie on one output row: (oy, ox, len, offset).
        let mut segs = [(0usize, 0usize, 0usize, 0usize); NR];
        let mut nseg = 0;
        let mut pos = n0;
        while pos < n0 + width {
            let (oy, ox) = (pos / src.ow, pos % src.ow);
            let len = (src.ow - ox).min(n0 + width - pos);
            segs[nseg] = (oy, ox, len, pos - n0);
            nseg += 1;
            pos += len;
        }
        for (dst, &(plane, dy, dx)) in panel.chunks_exact_mut(NR).zip(&rows) {
            if width < NR {
                dst[width..].fill(0.0);
            }
            for &(oy, ox, len, off) in &segs[..nseg] {
                let d = &mut dst[off..off + len];
                let iy = (oy * src.sh) as isize + dy;
                if iy < 0 || iy >= h {
                    d.fill(0.0);
                    continue;
                }
                let row = &src.x[plane + iy as usize * src.w..plane + (iy as usize + 1) * src.w];
                let ix0 = (ox * src.sw) as isize + dx;
                if src.sw == 1 {
                    let lo = (-ix0).clamp(0, len as isize) as usize;
                    let hi = (w - ix0).clamp(lo as isize, len as isize) as usize;
                    d[..lo].fill(0.0);
                    d[hi..].fill(0.0);
                    if hi > lo {
                        let s = (ix0 + lo as isize) as usize;
                        d[lo..hi].copy_from_slice(&row[s..s + (hi - lo)]);
                    }
                } else {
                    for (t, v) in d.iter_mut().enumerate() {
                        let ix = ix0 + (t * src.sw) as isize;
                        *v = if ix >= 0 && ix < w {
                            row[ix as usize]
                        } else {
                            0.0
                        };
                    }
                }
            }
        }
    }
}

/// Pack panels of a strided B view: columns from `j0` (of `n`), K rows `k0..k0+kc`.
fn pack_b_view(b: &MatView<'_>, n: usize, j0: usize, k0: usize, kc: usize, out: &mut [f32]) {
    for (p, panel) in out.chunks_exact_mut(kc * NR).enumerate() {
        let n0 = j0 + p * NR;
        let width = NR.min(n.saturating_sub(n0));
        for (l, dst) in panel.chunks_exact_mut(NR).enumerate() {
            let r = k0 + l;
            if b.cs == 1 && width > 0 {
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
    /// A convolution input, packed on the fly as im2col panels.
    Im2col(Im2col<'a>),
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
    static A_BUF: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static B_BUF: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Borrow this thread's scratch vector (taken out so no RefCell borrow is held across calls).
fn take(buf: &'static std::thread::LocalKey<RefCell<Vec<f32>>>, len: usize) -> Vec<f32> {
    let mut v = buf.with(|b| {
        b.try_borrow_mut()
            .map(|mut b| std::mem::take(&mut *b))
            .unwrap_or_default()
    });
    if v.len() < len {
        v.resize(len, 0.0);
    }
    v
}

fn give_back(buf: &'static std::thread::LocalKey<RefCell<Vec<f32>>>, v: Vec<f32>) {
    buf.with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            *b = v;
        }
    });
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
    if ep.row_bias.is_some_and(|r| r.len() < m) || ep.col_bias.is_some_and(|r| r.len() < n) {
        return Err(err("bias too short"));
    }
    if let ASrc::Packed(p) = a {
        if p.len != m || p.k != k || p.panel != MR {
            return Err(err("packed A does not match the product"));
        }
    }
    if let BSrc::Packed(p) = b {
        if p.len != n || p.k != k || p.panel != NR {
            return Err(err("packed B does not match the product"));
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
    let kernel_act = if ep.act.in_kernel() {
        ep.act
    } else {
        Activation::None
    };
    let rows_per = th.chunk_size(m, MR, MR);
    let mut bbuf = match b {
        BSrc::Packed(_) => Vec::new(),
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
                    BSrc::View(v) => {
                        let buf = &mut bbuf[..np * kc * NR];
                        let per = pack_share(th, np, kc);
                        th.chunks(buf, per * kc * NR, |i, chunk| {
                            pack_b_view(v, n, jc + i * per * NR, pc, kc, chunk);
                            Ok(())
                        })?;
                        buf
                    }
                    BSrc::Im2col(s) => {
                        let buf = &mut bbuf[..np * kc * NR];
                        let per = pack_share(th, np, kc);
                        th.chunks(buf, per * kc * NR, |i, chunk| {
                            simd::pack_b_im2col(s, jc + i * per * NR, pc, kc, chunk);
                            Ok(())
                        })?;
                        buf
                    }
                };
                let first = kb == 0;
                let last = pc + kc == k;
                th.chunks(c, rows_per * ldc, |ci, cc| {
                    let r0 = ci * rows_per;
                    let rows = rows_per.min(m - r0);
                    let mut abuf = match a {
                        ASrc::Packed(_) => Vec::new(),
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
                                    let tep = TileEpilogue {
                                        accumulate: !first || ep.accumulate,
                                        alpha: ep.alpha,
                                        row_bias: ep.row_bias.map(|rb| &rb[r0 + row..]),
                                        col_bias: ep.col_bias.map(|cb| &cb[col..]),
                                        last,
                                        act: kernel_act,
                                    };
                                    let ap = apanels.get(ir * kc * MR..).unwrap_or(&[]);
                                    let cs = cc.get_mut(row * ldc + col..).unwrap_or(&mut []);
                                    if !simd::microkernel(kc, ap, bp, cs, ldc, mr, nr, &tep) {
                                        return Err(err("micro-kernel bounds"));
                                    }
                                }
                            }
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
    result?;
    if !ep.act.in_kernel() {
        let act = ep.act;
        th.chunks(c, rows_per * ldc, |_, cc| {
            for row in cc.chunks_mut(ldc) {
                let len = n.min(row.len());
                simd::unary_in_place(act, &mut row[..len]);
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// Panels of B per packing task: all of them on one thread, or an even share when the block
/// is large enough to be worth splitting.
fn pack_share(th: &Threads, np: usize, kc: usize) -> usize {
    if th.count() == 1 || np * kc * NR < 16 * 1024 {
        np.max(1)
    } else {
        np.div_ceil(th.count()).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0f64;
                for l in 0..k {
                    s += f64::from(a[i * k + l]) * f64::from(b[l * n + j]);
                }
                c[i * n + j] = s as f32;
            }
        }
        c
    }

    fn rand(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn sgemm_matches_naive_for_odd_sizes_and_every_operand_kind() {
        for th in [Threads::single(), Threads::new(2).unwrap()] {
            for &(m, n, k) in &[
                (1, 1, 1),
                (3, 7, 17),
                (7, 17, 3),
                (17, 63, 257),
                (63, 257, 7),
                (13, 300, 600),
                (130, 20, 33),
            ] {
                let a = rand(m * k, 1);
                let b = rand(k * n, 2);
                let want = naive(m, n, k, &a, &b);
                let av = MatView {
                    data: &a,
                    rs: k,
                    cs: 1,
                };
                let bv = MatView {
                    data: &b,
                    rs: n,
                    cs: 1,
                };
                let pa = Packed::pack_a(m, k, av);
                let pb = Packed::pack_b(k, n, bv);
                for (ai, asrc) in [ASrc::View(av), ASrc::Packed(&pa)].iter().enumerate() {
                    for (bi, bsrc) in [BSrc::View(bv), BSrc::Packed(&pb)].iter().enumerate() {
                        let mut c = vec![f32::NAN; m * n];
                        sgemm(&th, m, n, k, asrc, bsrc, &mut c, n, &Epilogue::default()).unwrap();
                        for (x, y) in c.iter().zip(&want) {
                            assert!(
                                (x - y).abs() <= 1e-5 * (k as f32).sqrt() + 1e-5 * y.abs(),
                                "{m}x{n}x{k} a{ai} b{bi}: {x} vs {y}"
                            );
                        }
                    }
                }
            }
        }
    }
}
