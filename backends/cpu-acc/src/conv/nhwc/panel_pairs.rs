//! The channels-last pointwise product on the AVX-512 tiles that take two packed panels
//! at once ([`simd::tiles_strided_pairs`]), for the convolutions of few input channels.

use super::NhwcConvWorkload;
use crate::act::Activation;
use crate::gemm::Packed;
use crate::simd;
use backplane_backend_api::Result;

/// Deepest pointwise convolution whose AVX-512 tiles take two packed panels at once
/// ([`simd::tiles_strided_pairs`]): a value of A feeds four FMAs, not two, which pays at
/// the few input channels where the tile's loads bound it, while the two panels' weights
/// (`K·256` bytes) stay a small part of L1.
const PAIRS_MAX_DEPTH: usize = 80;

impl NhwcConvWorkload {
    /// [`NhwcConvWorkload::tiles_in`] by pairs of packed panels
    /// ([`simd::tiles_strided_pairs`], 33 to 64 columns a tile; a last panel alone by
    /// [`simd::tiles_strided_wide`]) for weights of one K block at most [`PAIRS_MAX_DEPTH`]
    /// deep with interleaved halves; `None` (nothing computed) for other weights, or when
    /// `cols` does not start at a panel.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pairs_in(
        &self,
        p: &Packed,
        a: &[f32],
        lda: usize,
        accumulate: bool,
        yb: &mut [f32],
        cols: &std::ops::Range<usize>,
        act: Activation,
    ) -> Option<Result<()>> {
        let kc = p.depth();
        let (b, halves) = p.panels();
        let suits = (1..=PAIRS_MAX_DEPTH).contains(&kc)
            && halves == simd::Halves::Interleaved
            && cols.start.is_multiple_of(simd::NR)
            && cols.len() > simd::NR;
        if !suits {
            return None;
        }
        let ldc = cols.len();
        let rows = yb.len() / ldc;
        for j0 in cols.clone().step_by(2 * simd::NR) {
            let nr = (2 * simd::NR).min(cols.end - j0);
            let ep = simd::TileEpilogue {
                accumulate,
                alpha: 1.0,
                row_bias: None,
                col_bias: self.bias.get(j0..),
                last: true,
                act,
            };
            // One K block: panel j0/NR starts (j0/NR)·kc·NR = j0·kc floats in.
            let (bj, c) = (b.get(j0 * kc..), yb.get_mut(j0 - cols.start..));
            let ran = match (bj, c) {
                (Some(bj), Some(c)) if nr > simd::NR => {
                    simd::tiles_strided_pairs(kc, a, lda, rows, bj, c, ldc, nr, &ep)
                }
                (Some(bj), Some(c)) => {
                    simd::tiles_strided_wide(kc, a, lda, rows, (bj, halves), c, ldc, nr, &ep)
                }
                _ => false,
            };
            if !ran {
                return Some(Err(self
                    .io
                    .error("channels-last tiles were refused".into())));
            }
        }
        Some(Ok(()))
    }
}
