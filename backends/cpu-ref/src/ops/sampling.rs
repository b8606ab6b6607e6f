//! GridSample (f32 and f16, computed in f64), for any number of spatial axes.
//!
//! Each output element reads the input at one position given by the grid, normalized to
//! [-1, 1] per axis (the grid's last axis lists the coordinates innermost axis first). The
//! position is mapped to input coordinates (`align_corners`: -1 and 1 are the centers of the
//! corner elements, else their outer edges); a position outside the input is clamped (border
//! padding) or mirrored (reflection padding) first; then the value is the nearest element or
//! the separable linear or cubic (Keys, a = -0.75) interpolation of its neighbours, where a
//! neighbour outside the input reads 0 (zeros), the border element or the mirrored element.

use super::cast::{write_scalars, Scalar};
use super::indexing::product;
use crate::Result;
use backplane_core::ops::{GridSampleDesc, GridSampleMode, GridSamplePadding};
use backplane_core::shape::strides_of;
use backplane_core::{TensorView, TensorViewMut};

/// The Keys cubic convolution coefficient.
const CUBIC_A: f64 = -0.75;

/// The lowest and highest input coordinate inside the input along an axis of `len`.
fn bounds(len: usize, align_corners: bool) -> (f64, f64) {
    let len = len as f64;
    if align_corners {
        (0.0, len - 1.0)
    } else {
        (-0.5, len - 0.5)
    }
}

/// Mirror `x` at `lo` and `hi` until it lies between them.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    let (distance, from_low) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let flips = (distance / range).trunc();
    let rest = distance - flips * range;
    // An even number of whole flips leaves the position mirrored at the side it left from.
    if (flips % 2.0 == 0.0) == from_low {
        lo + rest
    } else {
        hi - rest
    }
}

/// Cubic convolution weights of the taps at -1, 0, 1, 2 around a position `t` in [0, 1)
/// past the left tap.
fn cubic_weights(t: f64) -> [f64; 4] {
    let a = CUBIC_A;
    // |d| <= 1: (a + 2)|d|^3 - (a + 3)|d|^2 + 1;  1 < |d| < 2: a|d|^3 - 5a|d|^2 + 8a|d| - 4a.
    let near = |d: f64| ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0;
    let far = |d: f64| ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

/// Round half to even.
fn round_half_even(v: f64) -> f64 {
    let r = v.round();
    if (v - v.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - v.signum()
    } else {
        r
    }
}

/// The input index that tap index `i` reads along an axis of `len`, or `None` for a zero.
fn padded_index(
    i: i64,
    len: usize,
    padding: GridSamplePadding,
    align_corners: bool,
) -> Option<usize> {
    let last = len.saturating_sub(1);
    match padding {
        GridSamplePadding::Zeros => usize::try_from(i).ok().filter(|&i| i < len),
        GridSamplePadding::Border => Some(usize::try_from(i.max(0)).map_or(0, |i| i.min(last))),
        GridSamplePadding::Reflection => {
            let (lo, hi) = bounds(len, align_corners);
            let m = reflect(i as f64, lo, hi).trunc();
            // `as` saturates (and maps NaN to 0); the clamp keeps rounding at the edges in.
            Some((m.max(0.0) as usize).min(last))
        }
    }
}

/// GridSample.
pub(crate) fn grid_sample(
    desc: &GridSampleDesc,
    x: &TensorView<'_>,
    grid: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let dims = x.dims();
    let (batch, channels, spatial) = (dims[0], dims[1], &dims[2..]);
    let rank = spatial.len();
    let points = product(&grid.dims()[1..=rank]);
    let (xs, gs) = (x.to_f64_vec(), grid.to_f64_vec());
    let in_plane = product(spatial);
    let strides = strides_of(spatial);
    // 2^rank (linear) or 4^rank (cubic) neighbours per output element.
    let per_axis: u32 = match desc.mode {
        GridSampleMode::Nearest => 1,
        GridSampleMode::Linear => 2,
        GridSampleMode::Cubic => 4,
    };
    if per_axis
        .checked_pow(rank as u32)
        .is_none_or(|n| n > 1 << 20)
    {
        return Err(backplane_backend_api::BackendError::Execution(format!(
            "GridSample: {rank} spatial axes need too many neighbours per element"
        )));
    }
    let mut out = vec![Scalar::Float(0.0); batch * channels * points];
    for n in 0..batch {
        for p in 0..points {
            let g = &gs[(n * points + p) * rank..(n * points + p + 1) * rank];
            // Per axis: the taps (index, weight) around the sampled position.
            let taps: Vec<Vec<(i64, f64)>> = (0..rank)
                .map(|axis| {
                    let len = spatial[axis];
                    let norm = g[rank - 1 - axis];
                    let mut c = if desc.align_corners {
                        (norm + 1.0) / 2.0 * (len as f64 - 1.0)
                    } else {
                        ((norm + 1.0) * len as f64 - 1.0) / 2.0
                    };
                    if desc.mode == GridSampleMode::Nearest {
                        c = round_half_even(c);
                    }
                    let (lo, hi) = bounds(len, desc.align_corners);
                    if c < lo || c > hi {
                        c = match desc.padding {
                            GridSamplePadding::Zeros => c,
                            GridSamplePadding::Border => c.clamp(0.0, len as f64 - 1.0),
                            GridSamplePadding::Reflection => reflect(c, lo, hi),
                        };
                    }
                    let base = c.floor();
                    let t = c - base;
                    // `as` saturates: a huge or NaN position reads padding, never panics.
                    let base = base as i64;
                    match desc.mode {
                        GridSampleMode::Nearest => vec![(c.trunc() as i64, 1.0)],
                        GridSampleMode::Linear => {
                            vec![(base, 1.0 - t), (base.saturating_add(1), t)]
                        }
                        GridSampleMode::Cubic => cubic_weights(t)
                            .into_iter()
                            .zip(-1i64..)
                            .map(|(w, k)| (base.saturating_add(k), w))
                            .collect(),
                    }
                })
                .collect();
            // Every combination of one tap per axis: its input offset (None: reads zero)
            // and the product of the weights.
            let mut combos: Vec<(Option<usize>, f64)> = vec![(Some(0), 1.0)];
            for (axis, axis_taps) in taps.iter().enumerate() {
                let mut next = Vec::with_capacity(combos.len() * axis_taps.len());
                for &(offset, weight) in &combos {
                    for &(i, w) in axis_taps {
                        let index =
                            padded_index(i, spatial[axis], desc.padding, desc.align_corners);
                        let at = offset.zip(index).map(|(o, i)| o + i * strides[axis]);
                        next.push((at, weight * w));
                    }
                }
                combos = next;
            }
            for ch in 0..channels {
                let plane = &xs[(n * channels + ch) * in_plane..(n * channels + ch + 1) * in_plane];
                let value: f64 = combos
                    .iter()
                    .map(|&(at, w)| at.map_or(0.0, |at| plane[at] * w))
                    .sum();
                out[(n * channels + ch) * points + p] = Scalar::Float(value);
            }
        }
    }
    write_scalars(y, &out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{reflect, round_half_even};
    use crate::test_util::{assert_close, eval_f32, f32s};
    use backplane_core::ops::{GridSampleDesc, GridSampleMode, GridSamplePadding};
    use backplane_core::Op;

    fn op(mode: GridSampleMode, padding: GridSamplePadding, align_corners: bool) -> Op {
        Op::GridSample(GridSampleDesc {
            mode,
            padding,
            align_corners,
        })
    }

    #[test]
    fn helpers() {
        assert_eq!(round_half_even(0.5), 0.0);
        assert_eq!(round_half_even(1.5), 2.0);
        assert_eq!(round_half_even(-0.5), 0.0);
        assert_eq!(round_half_even(-1.5), -2.0);
        assert_eq!(round_half_even(1.4), 1.0);
        // The example of the specification: -3.5 in [-1, 1] → 1.5 → 0.5.
        assert_eq!(reflect(-3.5, -1.0, 1.0), 0.5);
        assert_eq!(reflect(2.25, 0.0, 2.0), 1.75);
        assert_eq!(reflect(0.5, 0.0, 2.0), 0.5);
    }

    #[test]
    fn linear_interpolates_and_pads() {
        // One row [1, 2, 3, 4] (H = 1, W = 4); sample x positions, y = 0.
        let x = f32s(&[1, 1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
        let grid = |xs: &[f32]| {
            let v: Vec<f32> = xs.iter().flat_map(|&x| [x, 0.0]).collect();
            f32s(&[1, 1, xs.len(), 2], &v)
        };
        let g = grid(&[-1.0, 0.0, 1.0, -0.25]);
        // align_corners: -1 → 0, 0 → 1.5, 1 → 3, -0.25 → 1.125.
        let y = eval_f32(
            &op(GridSampleMode::Linear, GridSamplePadding::Zeros, true),
            &[&x, &g],
        );
        assert_close(&y, &[1.0, 2.5, 4.0, 2.125], 1e-6);
        // Not aligned: -1 → -0.5 (half of x[0] and a zero), 1 → 3.5; border clamps.
        let g = grid(&[-1.0, 1.0]);
        let zeros = eval_f32(
            &op(GridSampleMode::Linear, GridSamplePadding::Zeros, false),
            &[&x, &g],
        );
        assert_close(&zeros, &[0.5, 2.0], 1e-6);
        let border = eval_f32(
            &op(GridSampleMode::Linear, GridSamplePadding::Border, false),
            &[&x, &g],
        );
        assert_close(&border, &[1.0, 4.0], 1e-6);
        // Reflection about -0.5 and 3.5: 1.5 (x = 1.5 normalized = 4.5 - 0.5 → 2.5).
        let g = grid(&[1.5]);
        let reflected = eval_f32(
            &op(GridSampleMode::Linear, GridSamplePadding::Reflection, false),
            &[&x, &g],
        );
        assert_close(&reflected, &[3.5], 1e-6);
    }

    #[test]
    fn nearest_and_cubic() {
        let x = f32s(&[1, 1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
        // align_corners, x = -1/3 → 1.0 exactly; x = 0 → 1.5 rounds to 2 (even).
        let g = f32s(&[1, 1, 2, 2], &[-1.0 / 3.0, 0.0, 0.0, 0.0]);
        let y = eval_f32(
            &op(GridSampleMode::Nearest, GridSamplePadding::Zeros, true),
            &[&x, &g],
        );
        assert_eq!(y, vec![2.0, 3.0]);
        // Cubic convolution reproduces a linear ramp inside the input.
        let g = f32s(&[1, 1, 1, 2], &[0.0, 0.0]);
        let y = eval_f32(
            &op(GridSampleMode::Cubic, GridSamplePadding::Border, true),
            &[&x, &g],
        );
        assert_close(&y, &[2.5], 1e-6);
    }
}
