//! Pointwise (1×1) NCHW convolutions on small planes as a GEMM with the pixels as rows.
//!
//! The NCHW pointwise GEMM puts the output channels in the tiles' rows (steps of six) and
//! the pixels in their columns (steps of sixteen): a 7×7 plane is 49 columns computed as 64,
//! a quarter of the work wasted. Computed transposed, `Yᵀ = Xᵀ·Wᵀ`, the pixels are the rows
//! (49 as 54) and the channels the columns (440 as 448), so the tiles do far less dead work;
//! the weights are packed once as the B operand, the input planes are packed as A on the
//! fly (each K step six adjacent pixels of one plane), bias and activation are applied in the
//! GEMM's epilogue (per column), and the `[pixels, channels]` product is transposed into the
//! output planes. ResNet's, RegNet's and DenseNet's last stages (7×7 planes) take it.

use crate::act::Activation;
use crate::gemm::{self, ASrc, BSrc, Epilogue, MatView, Packed};
use crate::simd;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
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
    static PRODUCT: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The weights of a pointwise convolution packed as the B operand (`Wᵀ`, `c` × `m`).
#[derive(Debug, Clone)]
pub struct Plan {
    weights: Packed,
    c: usize,
    m: usize,
}

impl Plan {
    /// Pack `w` (`[m, c]` row-major: `[m, c, 1, 1]`).
    pub fn new(w: &[f32], m: usize, c: usize) -> Result<Self> {
        if w.len() < m * c {
            return Err(BackendError::Other(
                "pointwise weights are shorter than their shape".into(),
            ));
        }
        let view = MatView {
            data: w,
            rs: 1,
            cs: c,
        };
        Ok(Plan {
            weights: Packed::pack_b(c, m, view),
            c,
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
