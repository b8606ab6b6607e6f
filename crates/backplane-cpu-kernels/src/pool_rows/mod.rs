//! Channels-last window rows over 16-lane channel blocks: one output row of a depthwise
//! convolution or a max pooling, with AVX-512 (`avx512`); without it the caller's own loop
//! runs.

#[cfg(target_arch = "x86_64")]
mod avx512;

use crate::isa::has_avx512;
use crate::transpose::BLOCK_LANES;

/// One output row of a channels-last depthwise convolution: for pixels `j < ow`,
/// `out[j·16..][l] = bias[l] + Σ_t w[t·16 + l] · x[j·step + offs[t] + l]` (no activation).
/// Returns false, computing nothing, when a slice is too short for that (or without
/// AVX-512, where the caller's own loop runs instead).
pub fn depthwise_row(
    x: &[f32],
    step: usize,
    offs: &[usize],
    w: &[f32],
    bias: &[f32],
    ow: usize,
    out: &mut [f32],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if has_avx512()
        && row_fits(x, step, offs, ow, out)
        && w.len() >= offs.len() * BLOCK_LANES
        && bias.len() >= BLOCK_LANES
    {
        // SAFETY: AVX-512F is present; every read `x[j·step + offs[t] .. + 16]` for j < ow
        // and every write `out[j·16 .. + 16]` is in bounds (`row_fits`), `w` holds 16 floats
        // per tap and `bias` 16 (checked just above).
        unsafe {
            avx512::row::<false>(
                x.as_ptr(),
                step,
                offs,
                w.as_ptr(),
                bias.as_ptr(),
                ow,
                out.as_mut_ptr(),
            )
        };
        return true;
    }
    false
}

/// One output row of a channels-last max pooling: for pixels `j < ow`,
/// `out[j·16..][l] = max_t x[j·step + offs[t] + l]` (inputs without NaN). Returns false,
/// computing nothing, like [`depthwise_row`].
pub fn max_row(x: &[f32], step: usize, offs: &[usize], ow: usize, out: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() && row_fits(x, step, offs, ow, out) {
        // SAFETY: AVX-512F is present and the reads and writes are in bounds (`row_fits`);
        // the max kernel never reads its weight and bias pointers.
        unsafe {
            avx512::row::<true>(
                x.as_ptr(),
                step,
                offs,
                std::ptr::null(),
                std::ptr::null(),
                ow,
                out.as_mut_ptr(),
            )
        };
        return true;
    }
    false
}

/// Whether `x` holds every window of a channels-last row (`x[j·step + offs[t] .. + 16]` for
/// j < ow) and `out` its `ow` pixels.
fn row_fits(x: &[f32], step: usize, offs: &[usize], ow: usize, out: &[f32]) -> bool {
    let reach = offs
        .iter()
        .max()
        .and_then(|&m| ow.checked_sub(1)?.checked_mul(step)?.checked_add(m))
        .and_then(|r| r.checked_add(BLOCK_LANES));
    reach.is_some_and(|r| r <= x.len())
        && ow.checked_mul(BLOCK_LANES).is_some_and(|n| n <= out.len())
}
