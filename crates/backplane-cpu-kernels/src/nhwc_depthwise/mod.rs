//! Rows of the channels-last depthwise convolution: what one output row reads, and its
//! AVX-512 and AVX2 kernels (`avx512`, `avx2`); CpuAcc's compiled loops
//! (`nhwc::dw_row_body`) run where neither does.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use crate::act::Activation;
use crate::geo::Geo2;
use crate::isa::Isa;

/// Least taps (kh·kw·C floats) for which a row runs channel blocks along the whole row
/// rather than pixel by pixel: one pixel's window and the taps (twice this) no longer fit
/// L1 (docs/cpu-acc-bounds.md, "Channels-last depthwise rows").
const BLOCKS_OUTER_TAPS: usize = 4096;

/// One output row of a channels-last depthwise convolution, for `dw_row_body`.
pub struct DwRow<'a> {
    /// The window.
    pub geo: &'a Geo2,
    /// Channels.
    pub c: usize,
    /// One image, `[H, W, C]`.
    pub x: &'a [f32],
    /// The taps, `[kh·kw][C]`.
    pub taps: &'a [f32],
    /// One bias per channel.
    pub bias: &'a [f32],
    /// The activation: the AVX-512 and AVX2 kernels apply those of
    /// [`Activation::in_registers`] and pass the others through.
    pub act: Activation,
}

/// The taps `t < k` whose input index `start + t·d` lies in the image (`pad ≤ · < pad +
/// len`, in padded coordinates), as a range `lo..hi` (empty when none does).
#[inline(always)]
pub fn valid_taps(start: usize, d: usize, pad: usize, len: usize, k: usize) -> (usize, usize) {
    let first = |edge: usize| {
        if start >= edge {
            0
        } else {
            (edge - start).div_ceil(d.max(1))
        }
    };
    let lo = first(pad).min(k);
    (lo, first(pad + len).clamp(lo, k))
}

/// Whether the buffers of `job` hold output row `oy` and everything it reads (`res`, the
/// residual added before the activation, when given).
pub fn row_fits(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &[f32]) -> bool {
    let g = job.geo;
    let row = g.ow * job.c;
    oy < g.oh
        && job.x.len() >= g.h * g.w * job.c
        && job.taps.len() >= g.kh * g.kw * job.c
        && job.bias.len() >= job.c
        && out.len() >= row
        && res.is_none_or(|r| r.len() >= row)
        && g.sh > 0
        && g.sw > 0
}

/// Output row `oy` of a channels-last depthwise convolution into `out` by explicit AVX-512
/// or AVX2 code, the tier in use (the compiled loops kept their accumulators in memory).
/// False, computing nothing, on the portable tier or when a buffer is too short
/// ([`row_fits`]).
pub fn row(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32]) -> bool {
    row_on(crate::isa::isa_in_use(), job, oy, res, out)
}

/// [`row`] by the kernels of tier `isa` (for tests of each tier in one process): false,
/// computing nothing, for the portable tier, a tier the CPU lacks, or buffers too short.
pub fn row_on(isa: Isa, job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32]) -> bool {
    if !row_fits(job, oy, res, out) || !isa.available() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    match isa {
        Isa::Avx512 => {
            // SAFETY: AVX-512F, AVX2 and FMA are present (`available`); the buffer lengths
            // the kernel relies on were checked by `row_fits`, and `valid_taps` keeps every
            // tap it visits inside the image (rows pt ≤ iy·… < pt + h, columns likewise).
            unsafe { avx512::row(job, oy, res, out) };
            return true;
        }
        Isa::Avx2 => {
            // SAFETY: AVX2 and FMA are present (`available`); as above.
            unsafe { avx2::row(job, oy, res, out) };
            return true;
        }
        Isa::Portable => {}
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Output row `oy` by the definition: every tap inside the image, in f64.
    fn reference(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>) -> Vec<f32> {
        let (g, c) = (job.geo, job.c);
        let mut out = vec![0f32; g.ow * c];
        for ox in 0..g.ow {
            for ch in 0..c {
                let mut a = f64::from(job.bias[ch]);
                for ky in 0..g.kh {
                    for kx in 0..g.kw {
                        let iy = (oy * g.sh + ky * g.dh) as isize - g.pt as isize;
                        let ix = (ox * g.sw + kx * g.dw) as isize - g.pl as isize;
                        if iy < 0 || ix < 0 || iy >= g.h as isize || ix >= g.w as isize {
                            continue;
                        }
                        let x = job.x[(iy as usize * g.w + ix as usize) * c + ch];
                        let w = job.taps[(ky * g.kw + kx) * c + ch];
                        a += f64::from(x) * f64::from(w);
                    }
                }
                let mut v = a as f32;
                if let Some(r) = res {
                    v += r[ox * c + ch];
                }
                out[ox * c + ch] = act_f64(job.act, v);
            }
        }
        out
    }

    /// The activation in f64: the in-kernel ones as the kernels define them, and those the
    /// kernels apply in registers ([`Activation::in_registers`]) by their definitions.
    pub(crate) fn act_f64(act: Activation, v: f32) -> f32 {
        let x = f64::from(v);
        let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
        let unit = |x: f64| x.clamp(0.0, 1.0);
        match act {
            Activation::Sigmoid => sigmoid(x) as f32,
            Activation::Silu => (x * sigmoid(x)) as f32,
            Activation::HardSwish => (x * unit(x / 6.0 + 0.5)) as f32,
            Activation::HardSigmoid { alpha, beta } => {
                unit(f64::from(alpha) * x + f64::from(beta)) as f32
            }
            _ => act.apply_simple(v),
        }
    }

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 37 + seed * 11) % 97) as f32 - 48.0) / 32.0)
            .collect()
    }

    /// Every tier's kernels against the definition: 3×3 at strides 1 and 2 (the
    /// weights-in-registers kernels), 5×5 (groups of four pixels) and 7×7 windows, strides 2, dilation 2, pads
    /// on every side, channel counts around the vector widths (1, 7, 16, 17, 64, 67) and past the block
    /// threshold (640 under a 3×3 window), a residual, the in-kernel activations and those
    /// applied in registers (SiLU, hard swish, sigmoid, hard sigmoid; the AVX2 kernels'
    /// scalar channel tails included).
    #[test]
    fn every_tier_matches_the_definition() {
        let tiers: Vec<Isa> = [Isa::Avx512, Isa::Avx2]
            .into_iter()
            .filter(|t| t.available())
            .collect();
        // (h, w, k, stride, dilation, pad, channels)
        let cases = [
            (5, 40, 3, 1, 1, 1, 16),
            (6, 37, 3, 1, 1, 1, 17),
            (4, 33, 3, 1, 1, 0, 67),
            (5, 35, 3, 1, 1, 1, 7),
            (9, 9, 5, 2, 1, 2, 67),
            (13, 11, 5, 1, 1, 2, 1),
            (8, 8, 7, 1, 1, 3, 64),
            (7, 10, 3, 2, 2, 2, 33),
            (4, 5, 3, 1, 1, 1, 640),
            (3, 3, 3, 2, 1, 0, 130),
            // Stride 2 under a 3×3 window on rows of at least eight outputs (AVX-512's
            // weights-in-registers kernel): odd and even sides, with and without padding,
            // channels of one vector, tails past one and two.
            (7, 37, 3, 2, 1, 1, 33),
            (6, 20, 3, 2, 1, 0, 16),
            (5, 18, 3, 2, 1, 1, 50),
            // A 3×3 row of seven outputs (one group of four between the padded edges).
            (9, 7, 3, 1, 1, 1, 48),
            // 5×5 four pixels a step (AVX-512's kernel that loads each input vector once per
            // group, edge columns masked): strides 1 and 2 (rows of at least 16 outputs),
            // pads 2 and 0, channel tails, a last group of one to three pixels, a row
            // narrower than the window, a 7×7 plane.
            (7, 23, 5, 1, 1, 2, 33),
            (6, 33, 5, 2, 1, 2, 48),
            (5, 16, 5, 1, 1, 0, 16),
            (4, 3, 5, 1, 1, 2, 16),
            (7, 7, 5, 1, 1, 2, 40),
            // The last eight channels of MobileNetV3's 72 and 120 under a lane mask in the
            // same steps as the others: 3×3 at strides 1 and 2, 5×5 at stride 2 on a row
            // of 20 outputs.
            (4, 30, 3, 1, 1, 1, 72),
            (5, 29, 3, 2, 1, 1, 24),
            (5, 40, 5, 2, 1, 2, 120),
        ];
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::Clip {
                min: -0.5,
                max: 0.75,
            },
            Activation::LeakyRelu { alpha: 0.1 },
            Activation::Silu,
            Activation::HardSwish,
            Activation::Sigmoid,
            Activation::HardSigmoid {
                alpha: 0.2,
                beta: 0.5,
            },
        ];
        let mut checked = 0;
        for (ci, &(h, w, k, s, d, p, c)) in cases.iter().enumerate() {
            let geo = Geo2 {
                h,
                w,
                kh: k,
                kw: k,
                sh: s,
                sw: s,
                dh: d,
                dw: d,
                pt: p,
                pl: p,
                oh: (h + 2 * p - d * (k - 1) - 1) / s + 1,
                ow: (w + 2 * p - d * (k - 1) - 1) / s + 1,
            };
            let x = values(h * w * c, ci);
            let taps = values(k * k * c, ci + 1);
            let bias = values(c, ci + 2);
            let res = values(geo.ow * c, ci + 3);
            for (ai, &act) in acts.iter().enumerate() {
                let job = DwRow {
                    geo: &geo,
                    c,
                    x: &x,
                    taps: &taps,
                    bias: &bias,
                    act,
                };
                let r = (ai % 2 == 1).then_some(&res[..]);
                for oy in 0..geo.oh {
                    let want = reference(&job, oy, r);
                    for &isa in &tiers {
                        let mut out = vec![f32::NAN; geo.ow * c];
                        assert!(row_on(isa, &job, oy, r, &mut out));
                        for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                            assert!(
                                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                                "{isa:?} case {ci} act {ai} row {oy} at {i}: {a} vs {b}"
                            );
                        }
                        checked += 1;
                    }
                }
            }
        }
        // Every row of every case on each tier the CPU has (none only without AVX2).
        let rows: usize = cases
            .iter()
            .map(|&(h, _, k, s, d, p, _)| (h + 2 * p - d * (k - 1) - 1) / s + 1)
            .sum();
        assert_eq!(checked, rows * acts.len() * tiers.len());
    }

    /// The portable tier has no kernel here, and short buffers are refused.
    #[test]
    fn portable_and_short_buffers_compute_nothing() {
        let geo = Geo2 {
            h: 3,
            w: 3,
            kh: 3,
            kw: 3,
            sh: 1,
            sw: 1,
            dh: 1,
            dw: 1,
            pt: 1,
            pl: 1,
            oh: 3,
            ow: 3,
        };
        let (x, taps, bias) = (vec![1.0; 9 * 4], vec![1.0; 9 * 4], vec![0.0; 4]);
        let job = DwRow {
            geo: &geo,
            c: 4,
            x: &x,
            taps: &taps,
            bias: &bias,
            act: Activation::None,
        };
        let mut out = vec![f32::NAN; 12];
        assert!(!row_on(Isa::Portable, &job, 0, None, &mut out));
        assert!(out.iter().all(|v| v.is_nan()));
        let mut short = vec![0.0; 11];
        assert!(!row_on(Isa::Avx2, &job, 0, None, &mut short));
    }
}
