//! A B view normalized as it is packed ([`super::BSrc::Normed`]): a BatchNormalization and
//! its activation folded into the 1×1 convolution that reads them.

use super::{pack_b_view, MatView, NR};
use crate::act::Activation;
use crate::simd;

/// A per-K-row affine map and activation applied to a B view as it is packed
/// (`BSrc::Normed`): row `l` of B is read as `act(b[l][j] · scale[l] + shift[l])`, which is
/// an inference BatchNormalization and its activation folded into the 1×1 convolution that
/// reads them, so the normalized tensor is never written.
#[derive(Debug, Clone, Copy)]
pub struct RowNorm<'a> {
    /// Multiplier per K row (at least K values).
    pub scale: &'a [f32],
    /// Addend per K row (at least K values).
    pub shift: &'a [f32],
    /// Applied after the affine map.
    pub act: Activation,
}

/// [`pack_b_view`] with each K row mapped by `norm`: the arithmetic of `BatchNormWorkload`
/// and its activation (`v · scale + shift`, not fused into one rounding; ReLU as
/// `if y < 0 { 0 } else { y }`, NaN kept), so the result matches the unfused layers' bit for
/// bit. Whole panels of a row-major B are read and mapped in one pass; a last, narrow panel
/// (its padding columns stay zero) or a strided B is packed first, then mapped.
pub(super) fn pack_b_normed(
    b: &MatView<'_>,
    norm: &RowNorm<'_>,
    n: usize,
    j0: usize,
    k0: usize,
    kc: usize,
    out: &mut [f32],
) {
    let relu = norm.act == Activation::Relu;
    let other = !relu && norm.act != Activation::None;
    let (scale, shift) = (&norm.scale[k0..k0 + kc], &norm.shift[k0..k0 + kc]);
    for (p, panel) in out.chunks_exact_mut(kc * NR).enumerate() {
        let n0 = j0 + p * NR;
        let width = NR.min(n.saturating_sub(n0));
        let start = k0 * b.rs + n0;
        let whole = b.cs == 1 && width == NR && kc > 0;
        match b.data.get(start..start + (kc - kc.min(1)) * b.rs + NR) {
            Some(src) if whole => normed_rows(src, b.rs, scale, shift, relu, panel),
            _ => {
                pack_b_view(b, n, n0, k0, kc, panel);
                for (dst, (&s, &h)) in panel.chunks_exact_mut(NR).zip(scale.iter().zip(shift)) {
                    for v in &mut dst[..width] {
                        let y = *v * s + h;
                        *v = if relu && y < 0.0 { 0.0 } else { y };
                    }
                }
            }
        }
        if other {
            simd::unary_in_place(norm.act, panel);
            if width < NR {
                for dst in panel.chunks_exact_mut(NR) {
                    dst[width..].fill(0.0);
                }
            }
        }
    }
}

/// [`normed_rows`]' body: `panel[l·NR + t] = f(src[l·rs + t] · scale[l] + shift[l])` for
/// each of the panel's K rows `l` and its [`NR`] columns `t`, `f` ReLU when `relu` (written
/// whole, not in place, so the select is a blend rather than a masked store).
#[inline(always)]
fn normed_rows_body(
    src: &[f32],
    rs: usize,
    scale: &[f32],
    shift: &[f32],
    relu: bool,
    panel: &mut [f32],
) {
    let rows = src.chunks(rs.max(1)).zip(scale.iter().zip(shift));
    for (dst, (row, (&s, &h))) in panel.chunks_exact_mut(NR).zip(rows) {
        let (Some(row), Some(dst)) = (row.first_chunk::<NR>(), dst.first_chunk_mut::<NR>()) else {
            return;
        };
        let mut y = [0f32; NR];
        for (o, &v) in y.iter_mut().zip(row) {
            *o = v * s + h;
        }
        if relu {
            for o in &mut y {
                *o = if *o < 0.0 { 0.0 } else { *o };
            }
        }
        *dst = y;
    }
}

backplane_cpu_kernels::multiversion! {
    /// One whole B panel packed from a row-major B (rows `rs` apart, `src` from the panel's
    /// first element) with each K row's affine map and ReLU applied ([`pack_b_normed`]).
    fn normed_rows(
        src: &[f32],
        rs: usize,
        scale: &[f32],
        shift: &[f32],
        relu: bool,
        panel: &mut [f32],
    ) => normed_rows_body;
}
