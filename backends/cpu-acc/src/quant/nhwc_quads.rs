//! The channels-last one-group convolution on the byte GEMM
//! ([`backplane_cpu_kernels::qgemm::quads`], `vpdpbusd`): A rows are unsigned bytes, so
//! - a pointwise layer's u8 pixels are A as they are, read in place (a block copy only where
//!   a row's padded depth would run past the input: the last rows when C is not a multiple
//!   of 4), i8 pixels flipped to `x ^ 0x80 = x + 128` in a block copy;
//! - other layers take their windows from a copy of the input padded with the activations'
//!   zero point (in the same unsigned form), so a border tap adds `(z − z)·w = 0` as the
//!   centered path's zero padding does.
//!
//! The activations' zero point (plus 128 for i8) times each channel's weight sum is folded
//! into the bias at construction, so the bytes are the pair GEMM's.

use super::{alloc, keep, padded_extent, take, NhwcQConv};
use crate::quant::{unsigned_form, unsigned_rows};
use crate::scratch;
use crate::threads::GemmSplit;
use backplane_backend_api::Result;
use backplane_cpu_kernels::qgemm::{
    quad_gemm_requantized, ColumnRequant, QuadPackedB, QNR, QUAD_ROWS,
};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;

/// Output pixels per block: a multiple of the tile's twelve rows.
const BLOCK_ROWS: usize = 48;

thread_local! {
    /// Each thread's block of A rows for [`NhwcQConv::quads_by_pixels`], kept between layers
    /// and executions (not allocated and zeroed per share). Its bytes past a row's depth are
    /// whatever an earlier layer left: they meet zero weights.
    static A_BLOCK: RefCell<AlignedVec<u8>> = const { RefCell::new(AlignedVec::new()) };
}

/// Bytes past the A rows of a window block: a short run is copied as one 16- or 32-byte
/// move, which may write past the run (see [`copy_run`]).
const SLACK: usize = 32;

/// Copy `len` bytes from `src[from ..]` to `dst[at ..]`. A run of at most 32 bytes is moved
/// as 16 or 32 bytes where both slices have them (a fixed-size move, not a call to
/// `memcpy`), so up to 31 bytes past the run may be overwritten: the callers write each A
/// row's runs in order, rows in order, and leave [`SLACK`] bytes after the last row, so
/// what is overwritten is a later run, the K padding (which meets zero weights) or the
/// slack.
#[inline]
fn copy_run(dst: &mut [u8], at: usize, src: &[u8], from: usize, len: usize) {
    let wide = if len <= 16 { 16 } else { 32 };
    if len <= 32 && at + wide <= dst.len() && from + wide <= src.len() {
        // Fixed 16-byte moves only (one size for both arms, so that the compiler does not
        // merge them into a call with a variable length).
        copy16(dst, at, src, from);
        if len > 16 {
            copy16(dst, at + 16, src, from + 16);
        }
    } else {
        dst[at..at + len].copy_from_slice(&src[from..from + len]);
    }
}

/// Copy 16 bytes from `src[from ..]` to `dst[at ..]`.
#[inline(always)]
fn copy16(dst: &mut [u8], at: usize, src: &[u8], from: usize) {
    let mut v = [0u8; 16];
    v.copy_from_slice(&src[from..from + 16]);
    dst[at..at + 16].copy_from_slice(&v);
}

/// Where the A rows come from.
#[derive(Clone, Copy)]
pub(super) enum ByteRows<'a> {
    /// The input pixels (a pointwise layer).
    Pixels(&'a [u8]),
    /// Windows of the padded unsigned input.
    Windows(&'a [u8]),
}

impl NhwcQConv {
    /// The XOR that turns an input byte into its unsigned form.
    fn flip(&self) -> u8 {
        unsigned_form(self.x_signed, 0).0
    }

    /// The byte GEMM layer: A rows from the pixels or the padded copy, blocks of pixels or
    /// panels of channels shared by the threads as [`NhwcQConv::gemm`] shares them.
    pub(super) fn quads(
        &self,
        b: &QuadPackedB,
        rq: &ColumnRequant,
        pointwise: bool,
        x: &[u8],
        y: &mut [u8],
    ) -> Result<()> {
        let g = &self.geo;
        let pixels = g.n * g.oh * g.ow;
        let mut xp = take(&self.padded_bytes);
        if !pointwise {
            self.padded_bytes(x, &mut xp)?;
        }
        let src = if pointwise {
            ByteRows::Pixels(x)
        } else {
            ByteRows::Windows(&xp)
        };
        // The vector tile has a kernel per count of rows: half a tile costs about half.
        let done = match self.share(pixels, QUAD_ROWS, QUAD_ROWS / 2) {
            GemmSplit::Panels(per_task) => self.quads_by_channels(b, rq, src, per_task, y),
            GemmSplit::Rows(per_task) => self.quads_by_pixels(b, rq, src, per_task, y),
        };
        keep(&self.padded_bytes, xp);
        done
    }

    /// The input in unsigned form inside `n` images of `hp × wp` pixels whose padding holds
    /// the zero point: padded pixel (n, yy, xx) at `((n·hp + yy)·wp + xx)·C`. Written into
    /// `out` (the previous execution's buffer, whose padding is already the zero point, or
    /// a new one).
    fn padded_bytes(&self, x: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let g = &self.geo;
        let c = g.c;
        let (hp, wp) = padded_extent(&self.d, &self.geo);
        let image = hp * wp * c;
        if out.len() != g.n * image {
            // A byte in range: the zero point is one of the input type's values.
            let zero = unsigned_form(self.x_signed, self.d.x.1).1.clamp(0, 255) as u8;
            *out = alloc(g.n * image, zero, &self.io)?;
        }
        let (pt, pl) = (self.d.pads[0], self.d.pads[1]);
        let end = (pl + g.w).min(wp);
        if pl >= end || image == 0 {
            return Ok(());
        }
        let flip = self.flip();
        self.padded_rows(out, wp * c, |r, prow| {
            let (n, iy) = (r / hp, (r % hp).wrapping_sub(pt));
            if iy < g.h {
                let src = &x[((n * g.h + iy) * g.w) * c..][..(end - pl) * c];
                for (d, &s) in prow[pl * c..][..src.len()].iter_mut().zip(src) {
                    *d = s ^ flip;
                }
            }
        })
    }

    /// Fill `a` (rows of `kq` bytes; the bytes past the depth are left as they are: they
    /// meet zero weights) with the A rows of output pixels `p0 .. p0 + rows`. For windows,
    /// `a` holds [`SLACK`] bytes past the rows (the short runs' moves, [`copy_run`]).
    fn byte_rows(&self, src: ByteRows<'_>, p0: usize, rows: usize, kq: usize, a: &mut [u8]) {
        let g = &self.geo;
        let d = &self.d;
        let c = g.c;
        let flip = self.flip();
        match src {
            ByteRows::Pixels(x) => {
                let rows_x = &x[p0 * c..][..rows * c];
                unsigned_rows(rows_x, c, flip, &mut a[..rows * kq], kq);
            }
            ByteRows::Windows(xp) => {
                let [kh, kw] = d.kernel;
                let (hp, wp) = padded_extent(d, g);
                let out = g.oh * g.ow;
                // The output pixel of row i, stepped along (no division per row).
                let (mut n, q) = (p0 / out.max(1), p0 % out.max(1));
                let (mut oy, mut ox) = (q / g.ow.max(1), q % g.ow.max(1));
                let run = kw * c;
                let step = d.dilations[0] * wp * c;
                let origin = |n: usize, oy: usize, ox: usize| {
                    ((n * hp + oy * d.strides[0]) * wp + ox * d.strides[1]) * c
                };
                let mut base = origin(n, oy, ox);
                for i in 0..rows {
                    let row = i * kq;
                    let mut from = base;
                    for ky in 0..kh {
                        if d.dilations[1] == 1 {
                            copy_run(a, row + ky * run, xp, from, run);
                        } else {
                            for kx in 0..kw {
                                let at = from + kx * d.dilations[1] * c;
                                copy_run(a, row + (ky * kw + kx) * c, xp, at, c);
                            }
                        }
                        from += step;
                    }
                    ox += 1;
                    base += d.strides[1] * c;
                    if ox == g.ow {
                        ox = 0;
                        oy += 1;
                        if oy == g.oh {
                            oy = 0;
                            n += 1;
                        }
                        base = origin(n, oy, ox);
                    }
                }
            }
        }
    }

    /// The pixels `p0 .. p0 + rows` of a u8 pointwise layer as A read in place (pitch C),
    /// where every row's padded depth lies inside the input; else `None` (a block copy).
    fn in_place<'x>(
        &self,
        src: ByteRows<'x>,
        p0: usize,
        rows: usize,
        kq: usize,
    ) -> Option<&'x [u8]> {
        let c = self.geo.c;
        match src {
            ByteRows::Pixels(x) if !self.x_signed && rows > 0 => {
                let start = p0 * c;
                let end = (p0 + rows - 1) * c + kq;
                x.get(start..end)
            }
            _ => None,
        }
    }

    /// The byte GEMM with the threads sharing blocks of output pixels.
    fn quads_by_pixels(
        &self,
        b: &QuadPackedB,
        rq: &ColumnRequant,
        src: ByteRows<'_>,
        per_task: usize,
        y: &mut [u8],
    ) -> Result<()> {
        let m = self.geo.m;
        let per_task = per_task.max(1);
        self.th.chunks(y, per_task * m, |task, yc| {
            self.quads_rows(b, rq, src, task * per_task, yc)
        })
    }

    /// The output rows `yc` of the byte GEMM, from output pixel `first` on, on the calling
    /// thread: blocks of A rows read in place or made in the thread's kept block.
    pub(super) fn quads_rows(
        &self,
        b: &QuadPackedB,
        rq: &ColumnRequant,
        src: ByteRows<'_>,
        first: usize,
        yc: &mut [u8],
    ) -> Result<()> {
        let g = &self.geo;
        let (m, c) = (g.m, g.c);
        let kq = b.depth_padded();
        let panels = m.div_ceil(QNR);
        // This thread's kept block of A rows, grown when a block needs one.
        let mut a = scratch::take(&A_BLOCK, 0);
        let mut done = Ok(());
        for (bi, yb) in yc.chunks_mut(BLOCK_ROWS * m).enumerate() {
            let rows = yb.len() / m.max(1);
            let p0 = first + bi * BLOCK_ROWS;
            let ok = if let Some(x) = self.in_place(src, p0, rows, kq) {
                quad_gemm_requantized(x, c, rows, b, 0..panels, rq, yb, m)
            } else {
                let need = BLOCK_ROWS * kq + SLACK;
                if let Err(e) = scratch::grow(&mut a, need) {
                    done = Err(e);
                    break;
                }
                self.byte_rows(src, p0, rows, kq, &mut a);
                quad_gemm_requantized(&a, kq, rows, b, 0..panels, rq, yb, m)
            };
            if !ok {
                done = Err(self.io.error("byte GEMM refused its operands".into()));
                break;
            }
        }
        scratch::give_back(&A_BLOCK, a);
        done
    }

    /// The byte GEMM of a layer of few output pixels: every pixel's A row made (into a
    /// buffer kept between executions) or read in place once, the threads sharing the output
    /// channels, `per_task` panels at a time, each writing its columns of `y` in place
    /// ([`share_columns`]).
    fn quads_by_channels(
        &self,
        b: &QuadPackedB,
        rq: &ColumnRequant,
        src: ByteRows<'_>,
        per_task: usize,
        y: &mut [u8],
    ) -> Result<()> {
        let g = &self.geo;
        let kq = b.depth_padded();
        let pixels = g.n * g.oh * g.ow;
        let mut copy = take(&self.a_bytes);
        let (a, lda) = match self.in_place(src, 0, pixels, kq) {
            Some(x) => (x, g.c),
            None => {
                // The bytes past each row's depth are whatever an earlier execution left:
                // they meet zero weights.
                if copy.len() != pixels * kq + SLACK {
                    copy = alloc(pixels * kq + SLACK, 0u8, &self.io)?;
                }
                self.byte_rows(src, 0, pixels, kq, &mut copy);
                (&copy[..], kq)
            }
        };
        let done = self.by_channel_shares(y, pixels, per_task, "byte", |rows, p, tile, ld| {
            let a = &a[rows.start * lda..];
            quad_gemm_requantized(a, lda, rows.len(), b, p, rq, tile, ld)
        });
        keep(&self.a_bytes, copy);
        done
    }
}
