//! The Winograd F(4×4, 3×3) transforms with AVX2+FMA intrinsics, eight tiles per vector
//! (`crate::winograd::LANES`): each window row of the eight tiles loaded as eight vectors
//! and transposed in registers (AVX2 gathers were slower: the microcode of this machine
//! makes them expensive), `Bᵀ d B` computed there, the output's `Aᵀ m A` with bias and activation transposed into
//! tile rows and stored. The safe bodies in `crate::winograd` compute the same (they are the
//! fallback, and the tests compare the two); compiled from plain arrays they spilled every
//! intermediate and spent most of their time on moves.

use crate::act::Activation;
use crate::geo::Geo2;
use crate::threads::Threads;

/// Tiles transformed together (one AVX2 vector).
pub const LANES: usize = 8;

/// Output tile side.
pub const TILE: usize = 4;

/// Input tile side.
pub const ALPHA: usize = 6;

/// Where tile `t` (global, over the batch) lies.
#[derive(Debug, Clone, Copy)]
pub struct Tiles {
    /// Tiles per row, per column, per image.
    pub across: usize,
    /// Tile rows per image.
    pub down: usize,
    /// Tiles of all images.
    pub total: usize,
    /// Row pitch of the zero-padded input planes (see `pad_input`).
    pub pitch: usize,
}

impl Tiles {
    /// The tiles of `n` images' outputs of `geo`.
    #[inline]
    pub fn new(geo: &Geo2, n: usize) -> Self {
        let across = geo.ow.div_ceil(TILE);
        let down = geo.oh.div_ceil(TILE);
        Tiles {
            across,
            down,
            total: n * across * down,
            pitch: TILE * across + 2,
        }
    }

    /// Floats of one zero-padded input plane: every tile's 6×6 window inside it.
    #[inline]
    pub fn padded_plane(&self) -> usize {
        (TILE * self.down + 2) * self.pitch
    }

    /// (image, output row, output column) of tile `t`'s top-left pixel.
    #[inline(always)]
    pub fn origin(&self, t: usize) -> (usize, usize, usize) {
        let per = self.across * self.down;
        let (b, r) = (t / per, t % per);
        (b, (r / self.across) * TILE, (r % self.across) * TILE)
    }
}

/// One block of tiles: `first..first + count`; its V matrices in the GEMM's packed-panel
/// layout (`gemm::panel_offset`), its M matrices with rows `pitch` floats apart.
#[derive(Debug, Clone, Copy)]
pub struct Block {
    /// First tile.
    pub first: usize,
    /// Tiles.
    pub count: usize,
    /// `count` rounded up to whole GEMM panels (`simd::NR` columns): the row pitch of the M
    /// matrices, and the padded width of the V matrices' panels.
    pub pitch: usize,
}

/// Floats between the block's consecutive `V_ξ` (or `M_ξ`) matrices of `rows` rows: one
/// cache line more than the matrix, so that the 36 values of one tile (read or written
/// together) do not all fall in the same L1 set when the matrix size is a multiple of 4 KiB.
#[inline(always)]
pub fn xi_stride(rows: usize, pitch: usize) -> usize {
    rows * pitch + 16
}

/// Width of one strip of [`LANES`] output tiles.
pub const STRIP: usize = LANES * TILE;

/// Where the output transform writes.
#[derive(Debug)]
pub enum Dest<'a> {
    /// The convolution's output (NCHW, all images): the valid pixels of each tile.
    Output(&'a mut [f32]),
    /// A block's buffer: for output channel `co` and lane group `g` of the block, 4 rows of
    /// [`LANES`] × 4 values at `((co · groups + g) · 4 + row) · LANES · 4`.
    Strips(&'a mut [f32]),
}

/// What the output transform adds: `m` output channels, their bias, the activation.
#[derive(Debug, Clone, Copy)]
pub struct OutEpilogue<'a> {
    /// Output channels.
    pub m: usize,
    /// Bias per output channel.
    pub bias: Option<&'a [f32]>,
    /// Activation.
    pub act: Activation,
}

const _: () = assert!(LANES == 8 && TILE == 4 && ALPHA == 6 && STRIP == 32);

/// Where the output transform stores lane `l` of a group: row `i` of output channel `co`
/// starts at `co·co_step + base[l] + i·row_step`; `rows[l]` × `cols[l]` values are valid
/// (0 × 0 for lanes past the block's end).
struct LaneDest {
    base: [usize; LANES],
    rows: [usize; LANES],
    cols: [usize; LANES],
}

/// The activations the intrinsics apply; others take the safe path.
#[derive(Clone, Copy)]
enum Act {
    None,
    Relu,
    Clip(f32, f32),
    Leaky(f32),
}

/// Whether the vector output transform applies `a` as it stores ([`output`],
/// [`output_channels`]); with any other activation it runs its safe body, one value at a
/// time, and a caller that wants speed stores without it and applies it afterwards.
pub fn applies_in_output(a: Activation) -> bool {
    act_of(a).is_some()
}

fn act_of(a: Activation) -> Option<Act> {
    match a {
        Activation::None => Some(Act::None),
        Activation::Relu => Some(Act::Relu),
        Activation::Clip { min, max } => Some(Act::Clip(min, max)),
        Activation::LeakyRelu { alpha } => Some(Act::Leaky(alpha)),
        _ => None,
    }
}

/// The input transform of one block (see `crate::winograd::input_body`). Returns false,
/// doing nothing, without AVX2+FMA (or with them switched off) or when a window row (read as eight floats, two past the
/// window: the caller leaves [`WINDOW_SLACK`] floats after the padded input) or a V row
/// would fall outside the slices.
pub fn input(tiles: &Tiles, c: usize, blk: &Block, x: &[f32], v: &mut [f32]) -> bool {
    input_threaded(&Threads::single(), tiles, c, blk, x, v)
}

/// [`input`] with the input channels shared out between the threads of `th` (each writes
/// its channels' rows of the 36 V matrices; the arithmetic per value is the same, so the
/// result is too). Returns false, doing nothing, where [`input`] does, or when the threads
/// failed.
pub fn input_threaded(
    th: &Threads,
    tiles: &Tiles,
    c: usize,
    blk: &Block,
    x: &[f32],
    v: &mut [f32],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if !vectors() || blk.count == 0 || c == 0 {
            return false;
        }
        let (plane, pw) = (tiles.padded_plane(), tiles.pitch);
        let groups = blk.count.div_ceil(LANES);
        let vs = xi_stride(c, blk.pitch);
        // Each lane's window origin in its image's padded planes (lanes past the end repeat
        // the last tile).
        let mut orgs = Vec::with_capacity(groups);
        let mut far = 0usize;
        for g in 0..groups {
            let o: [usize; LANES] = std::array::from_fn(|l| {
                let (b, oy, ox) = tiles.origin(blk.first + (g * LANES + l).min(blk.count - 1));
                b * c * plane + oy * pw + ox
            });
            far = far.max(o.iter().copied().max().unwrap_or(0));
            orgs.push(o);
        }
        // Each window row is read as eight floats (two past the window).
        let reads_end = far + 5 * pw + LANES + (c - 1) * plane;
        // V_ξ is packed GEMM panels of c × pitch floats (every panel_offset below that).
        let writes_end = XI_LAST * vs + c * blk.pitch;
        let panels = blk.count.div_ceil(crate::gemm::NR) * crate::gemm::NR;
        if reads_end > x.len() || writes_end > v.len() || panels != blk.pitch {
            return false;
        }
        let run = if wide() { x86::input_wide } else { x86::input };
        let share = c.div_ceil(th.count().max(1));
        let out = Shared(v.as_mut_ptr());
        let out = &out;
        let orgs = &orgs;
        th.range(c.div_ceil(share), |i| {
            let rows = (i * share, ((i + 1) * share).min(c));
            // SAFETY: AVX2 and FMA are present (and AVX-512F/VL when `wide()`); every row
            // read (eight floats from ci·plane + org + i·pw, i < 6) ends at most at reads_end
            // <= x.len(); every store of lane vectors (at ξ·vs + panel_offset(c, count, ci,
            // 8g): eight floats inside one panel row, 8g being a multiple of 8 and panels NR
            // = 32 wide) ends at most at writes_end <= v.len(). The calls write the rows of
            // disjoint channel ranges (panel_offset is one to one in ci), so no two threads
            // write the same float, and nothing reads `v` until `range` has returned.
            unsafe {
                run(
                    x.as_ptr(),
                    orgs,
                    plane,
                    pw,
                    c,
                    rows,
                    blk.count,
                    vs,
                    out.ptr(),
                )
            };
            Ok(())
        })
        .is_ok()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (th, tiles, c, blk, x, v);
        false
    }
}

/// The V matrices' pointer, shared by the threads of [`input_threaded`] (each writes its
/// own channels' rows).
#[cfg(target_arch = "x86_64")]
struct Shared(*mut f32);

#[cfg(target_arch = "x86_64")]
impl Shared {
    /// The pointer (a method, so that closures capture the whole `Shared`).
    fn ptr(&self) -> *mut f32 {
        self.0
    }
}

// SAFETY: the threads write disjoint floats through it (see `input_threaded`) while the
// slice it came from is borrowed mutably for the whole call.
#[cfg(target_arch = "x86_64")]
unsafe impl Sync for Shared {}

/// Floats read past the last window row of the padded input (zeros the caller appends).
pub const WINDOW_SLACK: usize = LANES - ALPHA;

/// Whether the intrinsics run at all: AVX2 and FMA are present and not switched off
/// (a portable tier, `isa::limit_isa`, keeps every kernel on its safe body).
#[cfg(target_arch = "x86_64")]
fn vectors() -> bool {
    crate::isa::avx2_in_use()
}

/// Whether the AVX-512VL builds of the transforms run (32 vector registers): the AVX-512
/// micro-kernel is in use (so not switched off) and the CPU has AVX-512VL.
#[cfg(target_arch = "x86_64")]
fn wide() -> bool {
    crate::isa::kernels().avx512vl
}

/// The last of the 36 transformed matrices.
const XI_LAST: usize = ALPHA * ALPHA - 1;

/// The output transform of one block (see `crate::winograd::output_body`). Returns false,
/// doing nothing, without AVX2+FMA, for an activation other than none, Relu, Clip and
/// LeakyRelu, or when a read or write would fall outside the slices.
pub fn output(
    geo: &Geo2,
    tiles: &Tiles,
    blk: &Block,
    ep: &OutEpilogue<'_>,
    mo: &[f32],
    dest: &mut Dest<'_>,
) -> bool {
    output_channels(geo, tiles, blk, ep, 0..ep.m, mo, dest)
}

/// [`output`] for the output channels `channels` (of `ep.m`) only, so that threads can
/// share one block's output transform: `dest` then starts at the first of them (channel
/// `co` is written where [`output`] writes channel `co − channels.start`). A range other
/// than the whole `0..ep.m` with [`Dest::Output`] takes only tiles of the first image
/// (other images' planes of those channels are not contiguous); returns false otherwise.
pub fn output_channels(
    geo: &Geo2,
    tiles: &Tiles,
    blk: &Block,
    ep: &OutEpilogue<'_>,
    channels: std::ops::Range<usize>,
    mo: &[f32],
    dest: &mut Dest<'_>,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let Some(act) = act_of(ep.act) else {
            return false;
        };
        let full = ep.m;
        let (co0, co1) = (channels.start, channels.end);
        if !vectors() || blk.count == 0 || co0 >= co1 || co1 > full {
            return false;
        }
        let m = co1 - co0;
        let bias = match ep.bias {
            Some(b) => match b.get(co0..co1) {
                Some(part) => Some(part),
                None => return false,
            },
            None => None,
        };
        let partial = m < full;
        if partial
            && matches!(dest, Dest::Output(_))
            && blk.first + blk.count > tiles.across * tiles.down
        {
            return false;
        }
        let groups = blk.count.div_ceil(LANES);
        let ms = xi_stride(full, blk.pitch);
        if XI_LAST * ms + (co1 - 1) * blk.pitch + groups * LANES > mo.len()
            || groups * LANES > blk.pitch
        {
            return false;
        }
        // The rows of channel co0 onwards.
        let Some(mo) = mo.get(co0 * blk.pitch..) else {
            return false;
        };
        let out_plane = geo.oh * geo.ow;
        let strips = matches!(dest, Dest::Strips(_));
        let (co_step, row_step) = if strips {
            (groups * TILE * STRIP, STRIP)
        } else {
            (out_plane, geo.ow)
        };
        let mut lanes = Vec::with_capacity(groups);
        let mut end = 0usize;
        for g in 0..groups {
            let mut d = LaneDest {
                base: [0; LANES],
                rows: [0; LANES],
                cols: [0; LANES],
            };
            for l in 0..LANES {
                let local = g * LANES + l;
                if local >= blk.count {
                    continue;
                }
                if strips {
                    // A block's strips: every lane's 4×4 values, side by side.
                    d.base[l] = g * TILE * STRIP + l * TILE;
                    (d.rows[l], d.cols[l]) = (TILE, TILE);
                } else {
                    let (b, oy, ox) = tiles.origin(blk.first + local);
                    d.base[l] = (b * full) * out_plane + oy * geo.ow + ox;
                    d.rows[l] = TILE.min(geo.oh.saturating_sub(oy));
                    d.cols[l] = TILE.min(geo.ow.saturating_sub(ox));
                }
                if d.rows[l] > 0 && d.cols[l] > 0 {
                    end = end.max(d.base[l] + (d.rows[l] - 1) * row_step + d.cols[l]);
                }
            }
            lanes.push(d);
        }
        let y: &mut [f32] = match dest {
            Dest::Output(y) => y,
            Dest::Strips(buf) => buf,
        };
        if end + (m - 1) * co_step > y.len() {
            return false;
        }
        // SAFETY: AVX2 and FMA are present (and AVX-512F/VL when `wide()`); M reads (from
        // channel co0's rows) end at most at 35·ms + (m-1)·pitch + groups·8 <= mo.len()
        // (checked on the whole slice for co0 + m - 1 = co1 - 1); every store of lane l writes at most
        // rows[l] rows of cols[l] floats from co·co_step + base[l], all of which end at most
        // at end + (m-1)·co_step <= y.len(); the bias slice holds m values when given.
        unsafe {
            let run = if wide() {
                x86::output_wide
            } else {
                x86::output
            };
            run(
                mo.as_ptr(),
                ms,
                blk.pitch,
                m,
                bias,
                act,
                &lanes,
                co_step,
                row_step,
                y.as_mut_ptr(),
            )
        };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (geo, tiles, blk, ep, channels, mo, dest);
        false
    }
}

#[cfg(target_arch = "x86_64")]
#[path = "avx2.rs"]
mod x86;

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 + seed * 104729) % 113) as f32 / 13.0 - 4.0)
            .collect()
    }

    /// The AVX2 and AVX-512VL builds of the transforms are the same code with more
    /// registers: their results agree bit for bit.
    #[test]
    fn wide_and_avx2_builds_agree() {
        if !(crate::isa::has_avx2_fma() && wide()) {
            return;
        }
        let (plane, pw, c, count) = (200, 14, 3, 16);
        let x = values(c * plane + LANES, 1);
        let orgs = vec![
            [0, 4, 8, 12, 28, 32, 36, 40],
            [56, 60, 64, 68, 84, 88, 92, 96],
        ];
        let vs = c * 32 + 16;
        // (Columns 16..32 of each panel row are not written by either.)
        let (mut a, mut b) = (vec![0f32; 36 * vs], vec![0f32; 36 * vs]);
        // SAFETY: AVX2, FMA and AVX-512F/VL are present (checked); the largest read ends at
        // 2·200 + 96 + 5·14 + 8 < x.len(); V's panels (3 × 32 floats) fit in vs.
        unsafe {
            x86::input(
                x.as_ptr(),
                &orgs,
                plane,
                pw,
                c,
                (0, c),
                count,
                vs,
                a.as_mut_ptr(),
            );
            x86::input_wide(
                x.as_ptr(),
                &orgs,
                plane,
                pw,
                c,
                (0, c),
                count,
                vs,
                b.as_mut_ptr(),
            );
        }
        for xi in 0..36 {
            let used = xi * vs..xi * vs + c * 32;
            assert_eq!(a[used.clone()], b[used], "V_{xi}");
        }

        let (m, pitch) = (3, 32);
        let ms = m * pitch + 16;
        let mo = values(36 * ms, 2);
        let lanes: Vec<LaneDest> = (0..2)
            .map(|g| LaneDest {
                base: std::array::from_fn(|l| (g * LANES + l) * 4 * 20),
                rows: [4, 4, 4, 3, 4, 4, 2, 4],
                cols: [4, 1, 4, 4, 4, 3, 4, 4],
            })
            .collect();
        let bias = [0.5, -0.25, 1.0];
        for act in [Act::None, Act::Relu, Act::Clip(-1.0, 1.5), Act::Leaky(0.1)] {
            let size = 2 * 20 * 16 * 4 + m * 2000;
            let (mut ya, mut yb) = (vec![7f32; size], vec![7f32; size]);
            // SAFETY: as above; lane l of group g writes rows of 20 floats from
            // co·2000 + (8g + l)·80, inside `size`.
            unsafe {
                x86::output(
                    mo.as_ptr(),
                    ms,
                    pitch,
                    m,
                    Some(&bias),
                    act,
                    &lanes,
                    2000,
                    20,
                    ya.as_mut_ptr(),
                );
                x86::output_wide(
                    mo.as_ptr(),
                    ms,
                    pitch,
                    m,
                    Some(&bias),
                    act,
                    &lanes,
                    2000,
                    20,
                    yb.as_mut_ptr(),
                );
            }
            assert_eq!(ya, yb);
            assert!(ya.iter().any(|&v| v != 7.0));
        }
    }
}
