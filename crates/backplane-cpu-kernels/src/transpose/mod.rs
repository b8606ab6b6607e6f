//! Transposes: matrix tiles (NCHW ↔ NHWC at the borders of channels-last regions) and the
//! 16-lane channel blocks of the channels-last depthwise and pooling paths, in registers
//! with AVX-512 (`avx512`: 16×16) or AVX2 (`avx2`: 8×8), else in plain Rust.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use crate::isa::{avx2_in_use, has_avx512};

/// A tile of a matrix transpose: `dst[j·dst_stride + i] = src[i·src_stride + j]` for
/// `i < rows`, `j < cols` (NCHW ↔ NHWC at the borders of channels-last regions). With AVX2,
/// 8×8 blocks are transposed in registers, the edges one value at a time. Returns false,
/// doing nothing, when a slice is too short or a stride too small for its rows.
pub fn transpose_tile(
    src: &[f32],
    src_stride: usize,
    rows: usize,
    cols: usize,
    dst: &mut [f32],
    dst_stride: usize,
) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    let ok = (rows == 1 || src_stride >= cols)
        && (cols == 1 || dst_stride >= rows)
        && src.len() >= (rows - 1) * src_stride + cols
        && dst.len() >= (cols - 1) * dst_stride + rows;
    if !ok {
        return false;
    }
    let (mut i0, mut j0) = (0, 0);
    #[cfg(target_arch = "x86_64")]
    if avx2_in_use() {
        // SAFETY: AVX2 is present (checked); the block loop reads src[i·src_stride + j] and
        // writes dst[j·dst_stride + i] for i < rows / 8 · 8, j < cols / 8 · 8 only, inside
        // both slices (their lengths and strides were checked above).
        unsafe {
            avx2::blocks(
                src.as_ptr(),
                src_stride,
                rows,
                cols,
                dst.as_mut_ptr(),
                dst_stride,
            );
        }
        (i0, j0) = (rows / 8 * 8, cols / 8 * 8);
    }
    // What the blocks left: the last rows (all columns), then the last columns.
    for i in i0..rows {
        for j in 0..cols {
            dst[j * dst_stride + i] = src[i * src_stride + j];
        }
    }
    for i in 0..i0 {
        for j in j0..cols {
            dst[j * dst_stride + i] = src[i * src_stride + j];
        }
    }
    true
}

/// Lanes of a channels-last block (one AVX-512 vector): see [`gather_lanes`].
pub const BLOCK_LANES: usize = 16;

/// Transpose `n` ≤ 16 planes into pixel-major order: `dst[i·16 + l] = src[l·stride + i]`
/// for pixels `i < len` and lanes `l < n`; lanes `n..16` of each pixel are set to zero.
/// When `src` or `dst` is too short for that, nothing is done (never an out-of-bounds
/// access). With AVX-512 the work is done sixteen pixels at
/// a time by an in-register 16×16 transpose.
pub fn gather_lanes(src: &[f32], stride: usize, n: usize, len: usize, dst: &mut [f32]) {
    gather_lanes_pitched(src, stride, n, len, dst, BLOCK_LANES);
}

/// [`gather_lanes`] with `pitch` ≤ 32 lanes per pixel in `dst` (`n` ≤ `pitch`):
/// `dst[i·pitch + l] = src[l·stride + i]`, lanes `n..pitch` zero: packing twelve rows of a
/// GEMM operand into an A panel is this with `pitch` 12, and 32 columns of a column-major B
/// into a B panel with `pitch` 32. Returns false, doing nothing, when a slice is too short
/// or `n` exceeds `pitch`.
pub fn gather_lanes_pitched(
    src: &[f32],
    stride: usize,
    n: usize,
    len: usize,
    dst: &mut [f32],
    pitch: usize,
) -> bool {
    if !(1..=2 * BLOCK_LANES).contains(&pitch) || n > pitch {
        return false;
    }
    let pixels = dst.len() / pitch * BLOCK_LANES;
    let (n, len) = lane_extent(src.len(), stride, n, len, pixels, pitch);
    if len == 0 {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx512() && pitch <= BLOCK_LANES {
        // SAFETY: AVX-512F is present (`has_avx512`); `lane_extent` checked that `src` holds
        // `(n-1)·stride + len` floats and `dst` `len·pitch` (its length rounded down to
        // whole pixels of `pitch` floats); 1 <= n <= pitch <= 16.
        unsafe { avx512::gather(src.as_ptr(), stride, n, len, dst.as_mut_ptr(), pitch) };
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2_in_use() {
        // SAFETY: AVX2 is present (checked); `lane_extent` checked that `src` holds
        // `(n-1)·stride + len` floats and `dst` `len·pitch`; 1 <= n <= pitch <= 16.
        let done = unsafe { avx2::gather(src.as_ptr(), stride, n, len, dst.as_mut_ptr(), pitch) };
        // The last pixels (fewer than eight) in plain Rust.
        let (src_rest, dst_rest) = (&src[done..], &mut dst[done * pitch..]);
        gather_lanes_portable(src_rest, stride, n, len - done, dst_rest, pitch);
        return true;
    }
    gather_lanes_portable(src, stride, n, len, dst, pitch);
    true
}

/// The inverse of [`gather_lanes`]: `dst[l·stride + i] = src[i·16 + l]` for pixels `i < len`
/// and lanes `l < n` (nothing when a slice is too short, like [`gather_lanes`]).
pub fn scatter_lanes(src: &[f32], len: usize, n: usize, dst: &mut [f32], stride: usize) {
    let (n, len) = lane_extent(dst.len(), stride, n, len, src.len(), BLOCK_LANES);
    #[cfg(target_arch = "x86_64")]
    if has_avx512() && len > 0 {
        // SAFETY: AVX-512F is present; `lane_extent` clamped `n` and `len` so that `dst`
        // holds `(n-1)·stride + len` floats and `src` holds `len·16`.
        unsafe { avx512::scatter(src.as_ptr(), len, n, dst.as_mut_ptr(), stride) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2_in_use() && len > 0 {
        // SAFETY: AVX2 is present (checked); `lane_extent` clamped `n` and `len` so that
        // `dst` holds `(n-1)·stride + len` floats and `src` holds `len·16`.
        let done = unsafe { avx2::scatter(src.as_ptr(), len, n, dst.as_mut_ptr(), stride) };
        // The last pixels (fewer than eight) in plain Rust.
        let (src_rest, dst_rest) = (&src[done * BLOCK_LANES..], &mut dst[done..]);
        scatter_lanes_portable(src_rest, len - done, n, dst_rest, stride);
        return;
    }
    scatter_lanes_portable(src, len, n, dst, stride);
}

/// `(n, len)` when both sides hold them (the planes side: `planes` floats, `n` (at most
/// `lanes`) runs of `len` at `stride`; the pixels side: `pixels` floats, `len` runs of 16),
/// else `(0, 0)`.
fn lane_extent(
    planes: usize,
    stride: usize,
    n: usize,
    len: usize,
    pixels: usize,
    lanes: usize,
) -> (usize, usize) {
    let n = n.min(lanes);
    let planes_need = (n.max(1) - 1)
        .checked_mul(stride)
        .and_then(|v| v.checked_add(len));
    let fits = planes_need.is_some_and(|need| need <= planes)
        && len
            .checked_mul(BLOCK_LANES)
            .is_some_and(|need| need <= pixels);
    if n == 0 || len == 0 || !fits {
        return (0, 0);
    }
    (n, len)
}

/// [`gather_lanes`] in plain Rust (`n`, `len` already checked).
fn gather_lanes_portable(
    src: &[f32],
    stride: usize,
    n: usize,
    len: usize,
    dst: &mut [f32],
    pitch: usize,
) {
    for (i, px) in dst.chunks_exact_mut(pitch).take(len).enumerate() {
        for (l, v) in px.iter_mut().enumerate() {
            *v = if l < n { src[l * stride + i] } else { 0.0 };
        }
    }
}

/// [`scatter_lanes`] in plain Rust (`n`, `len` already checked).
fn scatter_lanes_portable(src: &[f32], len: usize, n: usize, dst: &mut [f32], stride: usize) {
    for (i, px) in src.chunks_exact(BLOCK_LANES).take(len).enumerate() {
        for (l, &v) in px.iter().enumerate().take(n) {
            dst[l * stride + i] = v;
        }
    }
}

#[cfg(test)]
mod tests;
