//! The constant weights of the int8 GEMM layers (fully connected, channels-last
//! convolutions) packed once across plans: the byte GEMM's quads where they are in use and
//! every centered weight fits i8, else the pair GEMM's 16-bit pairs, made through the shared
//! cache of packed constants (`crate::weights`).

use crate::io::Io;
use crate::weights;
use backplane_backend_api::Result;
use backplane_core::Tensor;
use backplane_cpu_kernels::qgemm::{quads_in_use, QPackedB, QuadPackedB};
use std::sync::Arc;

/// Packed int8 weights, as the GEMM that reads them takes them.
pub(super) enum PackedB {
    /// 16-bit pairs for the pair GEMM.
    Pairs(Arc<QPackedB>),
    /// i8 quads for the byte GEMM.
    Quads(Arc<QuadPackedB>),
}

/// What the centered weights were made from besides the constant's bytes: the site's
/// packing `kind`, the layout parameters `params` its `wv` reads the constant in (shape,
/// transposition), the weights' signedness and zero points.
pub(super) struct Source<'a> {
    pub(super) tensor: &'a Arc<Tensor>,
    pub(super) kind: &'static str,
    pub(super) params: &'a [usize],
    pub(super) signed: bool,
    pub(super) zeros: &'a [i32],
}

/// The centered weights `wv(k, j)` (depth `k` by `n` columns) of `src` packed for the byte
/// GEMM when it is in use and every value fits i8, else for the pair GEMM.
pub(super) fn packed_b(
    src: &Source<'_>,
    (k, n): (usize, usize),
    wv: impl Fn(usize, usize) -> i16,
    io: &Io,
) -> Result<PackedB> {
    let mut key = Vec::new();
    key.try_reserve_exact(src.params.len() + src.zeros.len() + 3)
        .map_err(|_| io.error("cannot allocate the packing key".into()))?;
    key.extend([k, n, usize::from(src.signed)]);
    key.extend_from_slice(src.params);
    // Zero points by their 32 bits (a negative one is not a small number).
    key.extend(src.zeros.iter().map(|&z| z as u32 as usize));
    // Decided before the look-up (a scan, cheaper than packing): which form this layer reads.
    let fits = || (0..k).all(|kk| (0..n).all(|j| i8::try_from(wv(kk, j)).is_ok()));
    if quads_in_use() && fits() {
        let quads = weights::shared(src.tensor, src.kind, &key, || {
            QuadPackedB::pack(k, n, &wv)
                .ok_or_else(|| io.error("the byte GEMM's weights cannot be allocated".into()))
        });
        // Where the quads cannot be allocated, the pair GEMM (as before the cache).
        if let Ok(b) = quads {
            return Ok(PackedB::Quads(b));
        }
    }
    let b = weights::shared(src.tensor, src.kind, &key, || {
        QPackedB::pack(k, n, &wv)
            .ok_or_else(|| io.error("cannot allocate the packed weights".into()))
    })?;
    Ok(PackedB::Pairs(b))
}
