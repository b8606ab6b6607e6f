//! DFT and STFT (any float type, computed in f64) by the direct sum: for each output bin k
//! of a transform of length L, y[k] = Σ_j x[j] e^(∓2πi jk/L) (the inverse divides by L).
//! Signals shorter than L are zero-padded, longer ones cut.

use super::cast::{write_scalars, Scalar};
use super::indexing::product;
use crate::Result;
use backplane_core::ops::{DftDesc, StftDesc};
use backplane_core::{TensorView, TensorViewMut};

/// The transform of `signal` (complex, at most `length` values used) at bins `0..bins`.
fn transform(signal: &[(f64, f64)], length: usize, bins: usize, inverse: bool) -> Vec<(f64, f64)> {
    let sign = if inverse { 1.0 } else { -1.0 };
    let step = 2.0 * std::f64::consts::PI / length as f64;
    let scale = if inverse { 1.0 / length as f64 } else { 1.0 };
    (0..bins)
        .map(|k| {
            let (mut re, mut im) = (0.0, 0.0);
            for (j, &(a, b)) in signal.iter().take(length).enumerate() {
                // (j * k) mod L keeps the angle small, so the twiddle stays accurate.
                let angle = sign * step * ((j as u128 * k as u128) % length as u128) as f64;
                let (s, c) = angle.sin_cos();
                re += a * c - b * s;
                im += a * s + b * c;
            }
            (re * scale, im * scale)
        })
        .collect()
}

/// Read element `i` of a tensor with `comps` (1 or 2) values per complex number.
fn complex_at(xs: &[f64], comps: usize, i: usize) -> (f64, f64) {
    let re = xs[i * comps];
    let im = if comps == 2 { xs[i * comps + 1] } else { 0.0 };
    (re, im)
}

/// DFT.
pub(crate) fn dft(desc: &DftDesc, x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    let dims = x.dims();
    let last = dims.len() - 1;
    let comps = dims[last];
    let (outer, n_in, inner) = (
        product(&dims[..desc.axis]),
        dims[desc.axis],
        product(&dims[desc.axis + 1..last]),
    );
    let bins = desc.bins();
    let xs = x.to_f64_vec();
    let mut out = vec![Scalar::Float(0.0); outer * bins * inner * 2];
    let mut signal = Vec::with_capacity(n_in);
    for o in 0..outer {
        for i in 0..inner {
            signal.clear();
            signal.extend((0..n_in).map(|j| complex_at(&xs, comps, (o * n_in + j) * inner + i)));
            for (k, (re, im)) in transform(&signal, desc.length, bins, desc.inverse)
                .into_iter()
                .enumerate()
            {
                let at = ((o * bins + k) * inner + i) * 2;
                out[at] = Scalar::Float(re);
                out[at + 1] = Scalar::Float(im);
            }
        }
    }
    write_scalars(y, &out)
}

/// STFT: the DFT of each (windowed) frame.
pub(crate) fn stft(
    desc: &StftDesc,
    x: &TensorView<'_>,
    window: Option<&TensorView<'_>>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let dims = x.dims();
    let (batch, len, comps) = (dims[0], dims[1], dims[2]);
    let frames = y.dims()[1];
    let bins = desc.bins();
    let xs = x.to_f64_vec();
    let window = window.map_or_else(|| vec![1.0; desc.frame_length], |w| w.to_f64_vec());
    let mut out = Vec::with_capacity(batch * frames * bins * 2);
    for b in 0..batch {
        for f in 0..frames {
            let start = f * desc.frame_step;
            let frame: Vec<(f64, f64)> = (0..desc.frame_length)
                .map(|j| {
                    let (re, im) = complex_at(&xs, comps, b * len + start + j);
                    (re * window[j], im * window[j])
                })
                .collect();
            for (re, im) in transform(&frame, desc.frame_length, bins, false) {
                out.push(Scalar::Float(re));
                out.push(Scalar::Float(im));
            }
        }
    }
    write_scalars(y, &out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::test_util::{assert_near, eval_f32, f32s};
    use backplane_core::ops::{DftDesc, StftDesc};
    use backplane_core::Op;

    #[test]
    fn dft_of_a_real_signal() {
        // x = [1, 2, 3, 4]: X0 = 10, X1 = -2 + 2i, X2 = -2, X3 = -2 - 2i.
        let x = f32s(&[4, 1], &[1.0, 2.0, 3.0, 4.0]);
        let op = Op::Dft(DftDesc {
            axis: 0,
            length: 4,
            inverse: false,
            onesided: false,
        });
        let y = eval_f32(&op, &[&x]);
        assert_near(&y, &[10.0, 0.0, -2.0, 2.0, -2.0, 0.0, -2.0, -2.0], 1e-5);
        // Cut to length 2 ([1, 2]), one-sided bins 0..=1: 3 and -1.
        let op = Op::Dft(DftDesc {
            axis: 0,
            length: 2,
            inverse: false,
            onesided: true,
        });
        assert_near(&eval_f32(&op, &[&x]), &[3.0, 0.0, -1.0, 0.0], 1e-5);
    }

    #[test]
    fn inverse_dft_undoes_the_dft_along_an_inner_axis() {
        // The complex signal [10, -2 + 2i] along axis 1 of [1, 2, 2].
        let x = f32s(&[1, 2, 2], &[10.0, 0.0, -2.0, 2.0]);
        let op = Op::Dft(DftDesc {
            axis: 1,
            length: 2,
            inverse: true,
            onesided: false,
        });
        // [(10 + (-2+2i)) / 2, (10 - (-2+2i)) / 2] = [4 + i, 6 - i].
        assert_near(&eval_f32(&op, &[&x]), &[4.0, 1.0, 6.0, -1.0], 1e-5);
    }

    #[test]
    fn stft_frames_and_window() {
        // Signal [1, 2, 3, 4, 5], frames of 2 every 2: [1, 2], [3, 4]; window [1, 0.5].
        let x = f32s(&[1, 5, 1], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        let w = f32s(&[2], &[1.0, 0.5]);
        let op = Op::Stft(StftDesc {
            frame_step: 2,
            frame_length: 2,
            onesided: true,
        });
        // Frame [1, 1]: bins 2, 0; frame [3, 2]: bins 5, 1.
        assert_near(
            &eval_f32(&op, &[&x, &w]),
            &[2.0, 0.0, 0.0, 0.0, 5.0, 0.0, 1.0, 0.0],
            1e-5,
        );
    }
}
