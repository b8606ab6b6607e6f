//! Depthwise 3×3 convolution of one plane read a row at a time, eight (AVX2) or sixteen
//! (AVX-512) outputs of a row per vector: no copy of the plane and no transposes.
//!
//! Each output row accumulates three input rows. AVX-512 reads the plane in place: each
//! tap's sixteen inputs are one masked load at stride 1, or two masked loads and an even-lane
//! permute at stride 2; the masks drop the inputs past the plane's edges (the zero padding),
//! masked-off lanes are never read, and up to four vectors of a row are computed together
//! with one accumulator per kernel row, so twelve FMA chains are in flight. AVX2 has no
//! masked load that is sure not to touch its masked-off lanes, so it copies each input row
//! once into a buffer of three rows that holds the padding around it (zero, or −∞ for the
//! maximum), and every load is a whole vector from there; at stride 2 the three taps of a
//! kernel row take the even and odd lanes of two runs (`shufps`), in an order of their own
//! that one permute puts right before the store.

use crate::act::Activation;
use crate::geo::Geo2;
use crate::isa::Isa;

/// Whether [`plane`] computes this geometry: a 3×3 window, dilation 1, the same stride 1 or
/// 2 both ways, and AVX-512 or AVX2 (not turned off by a portable tier, `isa::limit_isa`).
pub fn applies(g: &Geo2) -> bool {
    best_isa().is_some() && window_fits(g)
}

/// A 3×3 window, dilation 1, the same stride 1 or 2 both ways: what the kernels compute.
fn window_fits(g: &Geo2) -> bool {
    g.kh == 3 && g.kw == 3 && g.dh == 1 && g.dw == 1 && g.sh == g.sw && (1..=2).contains(&g.sh)
}

/// The vector family [`plane`] runs on this machine, if any.
fn best_isa() -> Option<Isa> {
    crate::isa::avx2_in_use().then(crate::isa::isa_in_use)
}

/// Whether the rows path is worth taking for this geometry (it [`applies`], and the rows
/// are wide enough to fill the vectors): output rows of at least 14 with sixteen lanes, of
/// at least 16 with eight. Narrower planes take the channels-last path (see `depthwise`;
/// the measurements: docs/cpu-acc-bounds.md, "Depthwise convolutions").
pub fn worth(g: &Geo2) -> bool {
    applies(g)
        && match best_isa() {
            Some(Isa::Avx512) => g.ow >= 14,
            _ => g.ow >= 16,
        }
}

/// `y = act(conv(x) + bias)` for one plane of a depthwise convolution: `x` holds the `h·w`
/// input plane, `w` its nine taps (row-major), `y` the `oh·ow` output plane; `rows` is
/// scratch that the AVX2 kernel grows to three padded input rows (kept between planes, so it
/// is allocated once). Only the in-kernel activations are applied (see
/// [`Activation::in_kernel`]). Returns false, writing nothing, when [`applies`] does not hold
/// or a slice is too short.
#[allow(clippy::too_many_arguments)]
pub fn plane(
    g: &Geo2,
    x: &[f32],
    w: &[f32],
    bias: f32,
    act: Activation,
    y: &mut [f32],
    rows: &mut Vec<f32>,
) -> bool {
    best_isa().is_some_and(|isa| plane_on::<false>(isa, g, x, w, bias, act, y, rows))
}

/// `y` = the 3×3 max pooling of one plane (`x`: `h·w`, `y`: `oh·ow`; padding never wins,
/// and a NaN in a window makes its output NaN, as CpuRef's); `rows` as for [`plane`].
/// Returns false, writing nothing, when [`applies`] does not hold or a slice is too short.
pub fn max_plane(g: &Geo2, x: &[f32], y: &mut [f32], rows: &mut Vec<f32>) -> bool {
    let none = Activation::None;
    best_isa().is_some_and(|isa| plane_on::<true>(isa, g, x, &[0.0; 9], 0.0, none, y, rows))
}

/// [`plane`] (MAX false) or [`max_plane`] (MAX true) with the kernel of `isa` (AVX-512 or
/// AVX2; false when the CPU lacks it), so tests can compare the families this CPU runs.
#[allow(clippy::too_many_arguments)]
pub fn plane_on<const MAX: bool>(
    isa: Isa,
    g: &Geo2,
    x: &[f32],
    w: &[f32],
    bias: f32,
    act: Activation,
    y: &mut [f32],
    rows: &mut Vec<f32>,
) -> bool {
    let shape_ok = window_fits(g)
        && g.oh > 0
        && g.ow > 0
        && x.len() >= g.h * g.w
        && w.len() >= 9
        && y.len() >= g.oh * g.ow;
    if !shape_ok || !isa.available() {
        return false;
    }
    let taps: [f32; 9] = std::array::from_fn(|t| w[t]);
    #[cfg(target_arch = "x86_64")]
    match isa {
        Isa::Avx512 => {
            // SAFETY: AVX-512F is present (checked). Every load is masked to the lanes whose
            // input row and column lie inside the h×w plane `x` holds (masked-off lanes are
            // not read, and their addresses are formed with wrapping arithmetic), and every
            // store to the lanes of output columns < ow of rows < oh, inside `y` (checked
            // above).
            unsafe {
                if MAX {
                    avx512::max_planes(g, x.as_ptr(), y.as_mut_ptr());
                } else {
                    avx512::planes::<MAX>(g, x.as_ptr(), &taps, bias, act, y.as_mut_ptr());
                }
            }
            return true;
        }
        Isa::Avx2 => {
            let len = avx2::row_len(g);
            rows.clear();
            rows.resize(3 * len, if MAX { f32::NEG_INFINITY } else { 0.0 });
            // SAFETY: AVX2 and FMA are present (checked). `rows` holds three rows of
            // `row_len(g)` floats, as the kernel requires; `x` holds h·w inputs and `y`
            // oh·ow outputs (checked above).
            unsafe { avx2::planes::<MAX>(g, x, &taps, bias, act, y, rows) };
            return true;
        }
        Isa::Portable => {}
    }
    let _ = (taps, bias, act, y, rows);
    false
}

#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(target_arch = "x86_64")]
mod avx2;
