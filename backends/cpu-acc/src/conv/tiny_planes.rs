//! Convolutions with a window on tiny output planes (at most [`MAX_PLANE`] pixels: a
//! DenseNet's last stages at a small input size, 4×4 and 2×2), as a product with the pixels
//! as rows.
//!
//! The NCHW GEMM puts a few pixels in the 32 columns of its tiles and runs one tile per twelve
//! output channels over the whole im2col depth, packing B from the padded phases and
//! gathering rows of two or four values each: the tiles' lanes mostly idle, the packing and
//! the phases a large share of the layer. Here the im2col matrix is packed straight into the
//! A panels of the tiles (twelve pixels per K step, each tap's rows packed at once from the
//! runs of pixels it reads), the weights are the B operand, packed once with their K steps
//! tap-major (`conv::pixel_rows::Plan::new_tap_major`), and each tile of up to twelve pixels
//! runs across 32 output channels, bias and activation in its epilogue; the `[pixels, m]`
//! product is then transposed into the planes. The K order differs from the NCHW GEMM's
//! (taps outermost), so the sums round differently from that path's.
//!
//! 8×8 planes (DenseNet's second block, 128 → 32) were no faster this way than on the NCHW
//! GEMM (the pixel packing costs about what the idle lanes did): they are left to it.

use crate::act::Activation;
use crate::conv::window::Geo2;
use crate::gemm::{self, Packed, KC};
use crate::simd::{self, TileEpilogue, MR, NR};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;

/// Largest output plane (pixels) taken: two A panels of twelve pixels at most, so that the
/// tiles stay few and the im2col copy small.
pub const MAX_PLANE: usize = 16;

/// Most values of the packed A (pixel panels times the im2col depth) taken.
const MAX_PACKED: usize = 1 << 20;

/// Most output channels of a layer whose plane needs two A panels (13 to 16 pixels) that
/// takes this path: with more, the NCHW GEMM's packed B is shared by enough weight rows to
/// pay for itself, and its tiles were as fast (ResNet-50's 256-channel 3×3 layers on 4×4 in
/// a 64×64 TFLite model ran about 10 % slower here).
pub const MAX_M_TWO_PANELS: usize = 64;

/// Whether a convolution of one group with a window (not a 1×1 stride-1 unpadded one) over
/// planes giving `oh × ow` outputs, `c` → `m` channels, takes this path: at most
/// [`MAX_PLANE`] output pixels (past one A panel of twelve, at most [`MAX_M_TWO_PANELS`]
/// outputs) and a packed A of at most `MAX_PACKED` values.
pub fn applies(geo: &Geo2, c: usize, m: usize) -> bool {
    let plane = geo.oh * geo.ow;
    let depth = c.saturating_mul(geo.kh).saturating_mul(geo.kw);
    (1..=MAX_PLANE).contains(&plane)
        && m > 0
        && (plane <= MR || m <= MAX_M_TWO_PANELS)
        && depth > 0
        && plane.div_ceil(MR).saturating_mul(MR).saturating_mul(depth) <= MAX_PACKED
}

thread_local! {
    static PANELS: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static ROWS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    static PRODUCT: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
}

/// `y = act(conv(x) + bias)` for one image: `x` its `c` planes of `geo.h × geo.w`, `y` its `m`
/// output planes, `weights` the `[m, c·kh·kw]` weights packed as B (`c·kh·kw` × `m`). The
/// pixel panels are packed on this thread; the output channels (whole 32-column weight
/// panels) are shared out between the threads of `th`, each streaming its part of the
/// weights, computing its columns of the product and transposing them into its planes.
pub fn run(
    th: &Threads,
    geo: &Geo2,
    weights: &Packed,
    x: &[f32],
    bias: Option<&[f32]>,
    act: Activation,
    y: &mut [f32],
) -> Result<()> {
    let bad = |what: &str| BackendError::Execution(format!("tiny-plane convolution: {what}"));
    let (plane, taps, m, depth) = (
        geo.oh * geo.ow,
        geo.kh * geo.kw,
        weights.len(),
        weights.depth(),
    );
    if plane == 0 || m == 0 {
        return Ok(());
    }
    if taps == 0 || depth == 0 || depth % taps != 0 || plane > MAX_PLANE {
        return Err(bad("the window does not match the weights"));
    }
    let c = depth / taps;
    if x.len() < c * geo.h * geo.w || y.len() < m * plane || bias.is_some_and(|b| b.len() < m) {
        return Err(bad("input, output or bias shorter than the plan"));
    }
    let panels = plane.div_ceil(MR);
    let mut a = gemm::try_take(&PANELS, panels * MR * depth)?;
    let res = (|| {
        // The scratch vector may be longer than this layer needs (an earlier, larger one).
        let a = &mut a[..panels * MR * depth];
        ROWS.with(|r| pack_pixels(geo, x, c, &mut r.borrow_mut(), a))?;
        let a = &*a;
        let np = m.div_ceil(NR);
        let per = np.div_ceil(th.count().clamp(1, np));
        th.chunks(&mut y[..m * plane], per * NR * plane, |i, ys| {
            let cols = ys.len() / plane;
            let mut product = gemm::try_take(&PRODUCT, plane * cols)?;
            let part = &mut product[..plane * cols];
            let res = tiles(
                plane,
                depth,
                a,
                weights,
                bias,
                act.kernel_part(),
                (i * per, cols),
                part,
            )
            .and_then(|()| {
                if !act.in_kernel() {
                    simd::unary_in_place(act, part);
                }
                match simd::transpose_tile(part, cols, plane, cols, ys, plane) {
                    true => Ok(()),
                    false => Err(bad("a transpose does not fit its buffers")),
                }
            });
            gemm::give_back(&PRODUCT, product);
            res
        })
    })();
    gemm::give_back(&PANELS, a);
    res
}

/// The A panels: panel `p`, K step `t·c + ci` (tap-major, as the weights were packed by
/// `pixel_rows::Plan::new_tap_major`), lane `l` = the input value tap `t` of channel `ci`
/// reads for output pixel `p·MR + l` (0 where it reads padding, and in the lanes past the
/// plane's pixels). A tap reads the same places of every channel's plane: for each tap and
/// panel, the pixels that read inside the plane form a few runs (one per output row the
/// panel touches, at stride 1), and the tap's `c` K rows are packed from those runs at once
/// (`simd::pack_segments`, masked loads with AVX-512).
fn pack_pixels(
    geo: &Geo2,
    x: &[f32],
    c: usize,
    rows: &mut Vec<usize>,
    a: &mut [f32],
) -> Result<()> {
    let bad = |what: &str| BackendError::Execution(format!("tiny-plane convolution: {what}"));
    let (plane, taps, in_plane) = (geo.oh * geo.ow, geo.kh * geo.kw, geo.h * geo.w);
    let depth = c * taps;
    rows.clear();
    rows.try_reserve(c)
        .map_err(|_| bad("no memory for the rows"))?;
    rows.extend((0..c).map(|ci| ci * in_plane));
    for t in 0..taps {
        let (ky, kx) = (t / geo.kw, t % geo.kw);
        for (p, panel) in a.chunks_exact_mut(MR * depth).enumerate() {
            let mut segments = [(0usize, 0usize, 0usize); MR];
            let mut count = 0usize;
            for l in 0..MR.min(plane.saturating_sub(p * MR)) {
                let (oy, ox) = ((p * MR + l) / geo.ow, (p * MR + l) % geo.ow);
                let iy = (oy * geo.sh + ky * geo.dh).checked_sub(geo.pt);
                let ix = (ox * geo.sw + kx * geo.dw).checked_sub(geo.pl);
                let at = match (iy, ix) {
                    (Some(iy), Some(ix)) if iy < geo.h && ix < geo.w => iy * geo.w + ix,
                    _ => continue,
                };
                match count.checked_sub(1).map(|i| &mut segments[i]) {
                    Some((d, s, len)) if *s + *len == at && *d + *len == l => *len += 1,
                    _ => {
                        segments[count] = (l, at, 1);
                        count += 1;
                    }
                }
            }
            let dst = &mut panel[t * c * MR..(t + 1) * c * MR];
            if !simd::pack_segments(x, rows, &segments[..count], dst, MR) {
                return Err(bad("a pixel panel does not fit its buffers"));
            }
        }
    }
    Ok(())
}

/// `product[pixel·cols + j]` = epilogue(A·B) for output channel `q0·NR + j` (`j < cols`),
/// for the packed pixel panels `a` (depth `depth`) against the packed weights' panels from
/// `q0` on, K block by K block, every tile twelve pixels (or fewer) by 32 output channels
/// (or fewer).
#[allow(clippy::too_many_arguments)]
fn tiles(
    plane: usize,
    depth: usize,
    a: &[f32],
    weights: &Packed,
    bias: Option<&[f32]>,
    act: Activation,
    (q0, cols): (usize, usize),
    product: &mut [f32],
) -> Result<()> {
    let m = weights.len().min(q0 * NR + cols);
    let bad = || BackendError::Execution("tiny-plane convolution: a tile does not fit".into());
    for (kb, k0) in (0..depth).step_by(KC).enumerate() {
        let kc = KC.min(depth - k0);
        let block = weights.block(kb, 0)?;
        // The panel after the last of this block: the next block's first.
        let following = weights.block(kb + 1, 0).unwrap_or(&[]);
        let last = k0 + kc == depth;
        for p in 0..plane.div_ceil(MR) {
            let mr = MR.min(plane - p * MR);
            let ap = a.get(p * MR * depth + k0 * MR..).ok_or_else(bad)?;
            for (q, bp) in block.chunks_exact(kc * NR).enumerate().skip(q0) {
                let col = q * NR;
                if col >= m {
                    break;
                }
                // The weights stream from memory (a layer's are read once per inference):
                // each tile fetches its share of the next panel into L2 while it runs.
                let next = match block.get((q + 1) * kc * NR..) {
                    Some(rest) if !rest.is_empty() => rest,
                    _ => following,
                };
                let next = &next[..next.len().min(kc * NR)];
                let ahead = next.get(p * kc * 16..).unwrap_or(&[]);
                let ahead = &ahead[..ahead.len().min(kc * 16)];
                let ep = TileEpilogue {
                    accumulate: kb > 0,
                    alpha: 1.0,
                    row_bias: None,
                    col_bias: bias.and_then(|b| b.get(col..)),
                    last,
                    act,
                };
                let c = product
                    .get_mut(p * MR * cols + col - q0 * NR..)
                    .ok_or_else(bad)?;
                let nr = NR.min(m - col);
                if !simd::microkernel_fetching(kc, ap, bp, c, cols, mr, nr, &ep, ahead) {
                    return Err(bad());
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::{choose_conv_algorithm, ConvAlgorithm, ConvLayoutIn, ConvShape};

    /// A `k`×`k` window of stride `s`, padded by `p`, on an `h × w` plane.
    fn window(h: usize, w: usize, k: usize, s: usize, p: usize) -> Geo2 {
        Geo2 {
            h,
            w,
            kh: k,
            kw: k,
            sh: s,
            sw: s,
            dh: 1,
            dw: 1,
            pt: p,
            pl: p,
            oh: (h + 2 * p - k) / s + 1,
            ow: (w + 2 * p - k) / s + 1,
        }
    }

    fn chosen(geo: &Geo2, c: usize, m: usize) -> ConvAlgorithm {
        choose_conv_algorithm(&ConvShape {
            geo,
            c,
            m,
            group: 1,
            threads: 1,
            const_weights: true,
            layout: ConvLayoutIn::Nchw,
            winograd: true,
        })
    }

    #[test]
    fn tiny_planes_take_the_pixel_rows() {
        // DenseNet-121's last blocks at a 64×64 input: 3×3, 128 → 32 on 4×4 and 2×2.
        for side in [4, 2, 1] {
            let geo = window(side, side, 3, 1, 1);
            assert!(applies(&geo, 128, 32), "{side}x{side}");
            assert_eq!(chosen(&geo, 128, 32), ConvAlgorithm::PixelRows);
        }
        // A stride of 2 onto 2×2, and a 5×5 window on 3×3.
        assert!(applies(&window(4, 4, 3, 2, 1), 64, 64));
        assert!(applies(&window(3, 3, 5, 1, 2), 17, 5));
        // Many outputs: on 2×2 still, on 4×4 (two pixel panels) not.
        assert!(applies(&window(2, 2, 3, 1, 1), 512, 512));
        assert!(!applies(&window(4, 4, 3, 1, 1), 256, 256));
        assert!(applies(&window(4, 4, 3, 1, 1), 256, 64));
        // Larger planes keep their paths: 8×8 and ResNet's 7×7 (the NCHW GEMM), 14×14.
        for (side, c, m) in [(8, 128, 32), (7, 512, 512), (14, 256, 256)] {
            let geo = window(side, side, 3, 1, 1);
            assert!(!applies(&geo, c, m), "{side}x{side}");
            assert_ne!(
                chosen(&geo, c, m),
                ConvAlgorithm::PixelRows,
                "{side}x{side}"
            );
        }
        // A packed A past its bound: 2×2 outputs of a 3×3 window over 40,000 channels.
        assert!(!applies(&window(2, 2, 3, 1, 1), 40_000, 8));
        // Grouped layers do not.
        let geo = window(4, 4, 3, 1, 1);
        let grouped = ConvShape {
            geo: &geo,
            c: 64,
            m: 64,
            group: 2,
            threads: 1,
            const_weights: true,
            layout: ConvLayoutIn::Nchw,
            winograd: true,
        };
        assert_ne!(choose_conv_algorithm(&grouped), ConvAlgorithm::PixelRows);
    }
}
