//! Pointwise (1×1) NCHW convolutions on small planes as a GEMM with the pixels as rows.
//!
//! The NCHW pointwise GEMM puts the output channels in the tiles' rows (steps of six) and
//! the pixels in their columns (steps of sixteen): a 7×7 plane is 49 columns computed as 64,
//! a quarter of the work wasted. Computed transposed, `Yᵀ = Xᵀ·Wᵀ`, the pixels are the rows
//! (49 as 54) and the channels the columns (440 as 448), so the tiles do far less dead work;
//! the weights are packed once as the B operand, the input planes are packed as A on the
//! fly (each K step six adjacent pixels of one plane), bias and activation are applied in the
//! GEMM's epilogue (per column), and the `[pixels, channels]` product is transposed into the
//! output planes. ResNet's, RegNet's and DenseNet's last stages (7×7 planes) take it, and
//! the strided 1×1 projections into them ([`Plan::run_strided`]: every stride-th pixel of
//! every stride-th row copied into compact planes first, the same copy the NCHW GEMM's
//! stride phases make, then the same product).

use crate::act::Activation;
use crate::conv::window::Geo2;
use crate::gemm::{self, ASrc, BSrc, Epilogue, MatView, Packed};
use crate::simd;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;

/// Rows of the AVX2 tile (the pixels, here).
const ROW_STEP: usize = 6;
/// Columns of the AVX2 tile (the output channels, here).
const COL_STEP: usize = 16;
/// Largest plane taken: the product is transposed into the planes afterwards, a pass that
/// pays only where the NCHW tiles waste enough on a narrow plane.
pub const MAX_PLANE: usize = 256;

/// Fraction of the tiles' lanes doing useful work for `rows` × `cols` outputs.
fn useful(rows: usize, cols: usize) -> f64 {
    let pad = |v: usize, s: usize| v.div_ceil(s) * s;
    (rows * cols) as f64 / (pad(rows, ROW_STEP) * pad(cols, COL_STEP)).max(1) as f64
}

/// Whether a pointwise convolution of one group, `c` → `m` channels over planes of `plane`
/// pixels, takes [`Plan`]: AVX2 (the tile shape the decision is made for), a plane of at
/// most [`MAX_PLANE`] pixels, and at least 10% more of the tiles' work useful than in the
/// NCHW orientation (a 7×7 plane: 89% against 77% at 440 channels).
pub fn applies(c: usize, m: usize, plane: usize) -> bool {
    simd::avx2_in_use()
        && c > 0
        && m > 0
        && (1..=MAX_PLANE).contains(&plane)
        && useful(plane, m) > 1.1 * useful(m, plane)
}

thread_local! {
    static PRODUCT: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static SUBSAMPLED: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
}

/// The smallest share of the subsampling copy handed to a thread (floats): below it, waking
/// a helper costs more than the copy.
const COPY_SHARE: usize = 16 * 1024;

/// The weights of a pointwise convolution packed as the B operand (`Wᵀ`, `c` × `m`).
#[derive(Debug, Clone)]
pub struct Plan {
    weights: Packed,
    c: usize,
    m: usize,
}

impl Plan {
    /// Pack `w` (`[m, c, kh, kw]` row-major, `taps` = kh·kw of them per channel) with its K
    /// steps tap-major (`t·c + ci`), so that each tap's `c` K rows read the input planes at
    /// one offset (`crate::conv::tiny_planes`); a pointwise layer's (`taps` = 1) are its
    /// `[m, c]` matrix transposed.
    pub fn new_tap_major(w: &[f32], m: usize, c: usize, taps: usize) -> Result<Self> {
        let k = c.saturating_mul(taps);
        if c == 0 || taps == 0 || m.checked_mul(k).is_none_or(|n| w.len() < n) {
            return Err(BackendError::Other(
                "convolution weights do not match their shape".into(),
            ));
        }
        let at = |l: usize, j: usize| w.get(j * k + (l % c) * taps + l / c).copied();
        Ok(Plan {
            weights: Packed::pack_b_with(k, m, |l, j| at(l, j).unwrap_or(0.0)),
            c: k,
            m,
        })
    }

    /// `y = act(conv(x) + bias)` for one image: `x` its `c` planes of `plane` pixels, `y` its
    /// `m` output planes.
    pub fn run(
        &self,
        th: &Threads,
        plane: usize,
        x: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        y: &mut [f32],
    ) -> Result<()> {
        let (c, m) = (self.c, self.m);
        if plane == 0 || m == 0 {
            return Ok(());
        }
        if x.len() < c * plane || y.len() < m * plane || bias.is_some_and(|b| b.len() < m) {
            return Err(BackendError::Execution(
                "pointwise convolution: input, output or bias shorter than the plan".into(),
            ));
        }
        let mut product = gemm::try_take(&PRODUCT, plane * m)?;
        let ep = Epilogue {
            col_bias: bias,
            act,
            ..Epilogue::default()
        };
        let a = ASrc::View(MatView {
            data: &x[..c * plane],
            rs: 1,
            cs: plane,
        });
        let res = gemm::sgemm(
            th,
            plane,
            m,
            c,
            &a,
            &BSrc::Packed(&self.weights),
            &mut product[..plane * m],
            m,
            &ep,
        )
        .and_then(|()| transpose_into_planes(th, &product[..plane * m], plane, m, y));
        gemm::give_back(&PRODUCT, product);
        res
    }
}

impl Plan {
    /// `y = act(conv(x) + bias)` for one image of a 1×1 unpadded convolution of geometry
    /// `geo` (any stride; every output reads an input pixel, as
    /// `ConvShape::strided_pointwise` checks): `x` its `c` planes of `geo.h × geo.w`
    /// pixels, `y` its `m` output planes of `geo.oh × geo.ow`. With a stride, the pixels
    /// read are copied into compact planes first, then [`Plan::run`] runs on them.
    pub fn run_strided(
        &self,
        th: &Threads,
        geo: &Geo2,
        x: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        y: &mut [f32],
    ) -> Result<()> {
        let plane = geo.oh * geo.ow;
        if geo.sh == 1 && geo.sw == 1 && geo.oh == geo.h && geo.ow == geo.w {
            return self.run(th, plane, x, bias, act, y);
        }
        let (c, in_plane) = (self.c, geo.h * geo.w);
        if !geo.pointwise_inside() || x.len() < c * in_plane {
            return Err(BackendError::Execution(
                "strided pointwise convolution: a window or input the plan does not take".into(),
            ));
        }
        if plane == 0 || c == 0 {
            return self.run(th, plane, &[], bias, act, y);
        }
        let mut sub = gemm::try_take(&SUBSAMPLED, c * plane)?;
        let per = th.chunk_size(c, COPY_SHARE.div_ceil(plane), 1);
        let res = th
            .chunks(&mut sub[..c * plane], per * plane, |i, dst| {
                for (j, d) in dst.chunks_exact_mut(plane).enumerate() {
                    let ci = i * per + j;
                    let src = x.get(ci * in_plane..(ci + 1) * in_plane).unwrap_or(&[]);
                    subsample_plane(geo, src, d);
                }
                Ok(())
            })
            .and_then(|()| self.run(th, plane, &sub[..c * plane], bias, act, y));
        gemm::give_back(&SUBSAMPLED, sub);
        res
    }
}

impl Plan {
    /// `y = act(conv(x) + bias)` for one image of a convolution of geometry `geo` whose
    /// weights the plan holds ([`Plan::new_tap_major`]): a 1×1 unpadded window reading inside the
    /// plane by [`Plan::run_strided`], any other window by `crate::conv::tiny_planes`.
    pub fn run_conv(
        &self,
        th: &Threads,
        geo: &Geo2,
        x: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        y: &mut [f32],
    ) -> Result<()> {
        match geo.pointwise_inside() {
            true => self.run_strided(th, geo, x, bias, act, y),
            false => crate::conv::tiny_planes::run(th, geo, &self.weights, x, bias, act, y),
        }
    }
}

/// `dst[oy·ow + ox] = src[oy·sh·w + ox·sw]`: the pixels a strided 1×1 window reads of one
/// plane (`src`, `h × w`), compact (`dst`, `oh × ow`). Rows `src` lacks are left as they
/// are (the caller checked that every row read lies inside the plane).
fn subsample_plane(geo: &Geo2, src: &[f32], dst: &mut [f32]) {
    for (oy, d) in dst.chunks_exact_mut(geo.ow.max(1)).take(geo.oh).enumerate() {
        let row = src.get(oy * geo.sh * geo.w..).unwrap_or(&[]);
        let row = &row[..geo.w.min(row.len())];
        if geo.sw == 2 {
            for (v, pair) in d.iter_mut().zip(row.chunks(2)) {
                *v = pair[0];
            }
        } else {
            for (v, &s) in d.iter_mut().zip(row.iter().step_by(geo.sw.max(1))) {
                *v = s;
            }
        }
    }
}

/// `y[j·plane + i] = p[i·m + j]`: the `[plane, m]` product into `m` planes, the channels
/// shared out between threads in multiples of eight.
fn transpose_into_planes(
    th: &Threads,
    p: &[f32],
    plane: usize,
    m: usize,
    y: &mut [f32],
) -> Result<()> {
    let per = th.chunk_size(m, 64, 8);
    th.chunks(&mut y[..m * plane], per * plane, |i, ys| {
        let j0 = i * per;
        let cols = ys.len() / plane;
        let src = p.get(j0..).unwrap_or(&[]);
        if simd::transpose_tile(src, m, plane, cols, ys, plane) {
            Ok(())
        } else {
            Err(BackendError::Execution(
                "pointwise convolution: a transpose does not fit its buffers".into(),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::{choose_conv_algorithm, ConvAlgorithm, ConvLayoutIn, ConvShape};

    /// A 1×1 window of stride `s` on an `h × w` plane, unpadded.
    fn strided(h: usize, w: usize, s: usize) -> Geo2 {
        Geo2 {
            h,
            w,
            kh: 1,
            kw: 1,
            sh: s,
            sw: s,
            dh: 1,
            dw: 1,
            pt: 0,
            pl: 0,
            oh: (h - 1) / s + 1,
            ow: (w - 1) / s + 1,
        }
    }

    #[test]
    fn strided_projections_onto_small_planes_take_it() {
        let geo = strided(14, 14, 2);
        let shape = ConvShape {
            geo: &geo,
            c: 1024,
            m: 2048,
            group: 1,
            threads: 1,
            const_weights: true,
            layout: ConvLayoutIn::Nchw,
            winograd: true,
        };
        assert!(shape.strided_pointwise() && !shape.pointwise());
        let want = match simd::avx2_in_use() {
            true => ConvAlgorithm::PixelRows,
            false => ConvAlgorithm::Gemm,
        };
        assert_eq!(choose_conv_algorithm(&shape), want);
        // Padded, or reading a row past the plane's end (an output row of padding): not a
        // strided pointwise product.
        let padded = Geo2 {
            pt: 1,
            pl: 1,
            oh: 8,
            ow: 8,
            ..geo
        };
        let past = Geo2 { oh: 8, ..geo };
        for g in [&padded, &past] {
            assert!(!ConvShape { geo: g, ..shape }.strided_pointwise());
        }
        // A 28×28 output: the NCHW tiles waste little there.
        let large = strided(56, 56, 2);
        let shape = ConvShape {
            geo: &large,
            c: 256,
            m: 512,
            ..shape
        };
        assert_ne!(choose_conv_algorithm(&shape), ConvAlgorithm::PixelRows);
    }

    #[test]
    fn a_strided_run_is_the_run_on_the_pixels_read() {
        let (c, m) = (7, 37);
        let value = |i: usize, k: usize| ((i * k) % 23) as f32 / 8.0 - 1.4;
        let w: Vec<f32> = (0..m * c).map(|i| value(i, 5)).collect();
        let bias: Vec<f32> = (0..m).map(|i| value(i, 3)).collect();
        let plan = Plan::new_tap_major(&w, m, c, 1).unwrap();
        for (h, wd, s) in [(9, 8, 2), (13, 11, 2), (10, 10, 3), (1, 1, 2), (2, 5, 2)] {
            let geo = strided(h, wd, s);
            let plane = geo.oh * geo.ow;
            let x: Vec<f32> = (0..c * h * wd).map(|i| value(i, 7)).collect();
            let mut sub = Vec::new();
            for ci in 0..c {
                for oy in 0..geo.oh {
                    for ox in 0..geo.ow {
                        sub.push(x[ci * h * wd + oy * s * wd + ox * s]);
                    }
                }
            }
            for threads in [1, 2] {
                let th = Threads::new(threads).unwrap();
                let (mut got, mut want) = (vec![f32::NAN; m * plane], vec![0.0; m * plane]);
                let (b, act) = (Some(&bias[..]), Activation::Relu);
                plan.run_strided(&th, &geo, &x, b, act, &mut got).unwrap();
                plan.run(&th, plane, &sub, b, act, &mut want).unwrap();
                assert_eq!(got, want, "{h}x{wd} stride {s}, {threads} thread(s)");
            }
        }
        // A window the plan does not take is an error, not a read past the input.
        let past = Geo2 {
            oh: 6,
            ..strided(9, 8, 2)
        };
        let x = vec![0.0; c * 72];
        let mut y = vec![0.0; m * 6 * 4];
        let th = Threads::single();
        let res = plan.run_strided(&th, &past, &x, None, Activation::None, &mut y);
        assert!(res.is_err());
    }

    #[test]
    fn small_planes_with_many_channels_take_it() {
        if !simd::avx2_in_use() {
            return;
        }
        assert!(applies(440, 440, 49));
        assert!(applies(2048, 512, 49));
        // 14×14: 196 of 208 columns are used already.
        assert!(!applies(208, 440, 196));
        // Large planes never.
        assert!(!applies(64, 64, 56 * 56));
    }
}
