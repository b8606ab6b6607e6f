//! The constant weights of the int8 GEMM layers (fully connected, channels-last
//! convolutions) packed once across plans: the byte GEMM's quads where they are in use and
//! every centered weight fits i8, else the pair GEMM's 16-bit pairs, made through the shared
//! cache of packed constants (`crate::weights`), and their layers' per-column
//! requantizations ([`shared_requant`]) through the same cache.

use crate::io::Io;
use crate::weights;
use backplane_backend_api::Result;
use backplane_core::Tensor;
use backplane_cpu_kernels::qgemm::{
    quads_in_use, ColumnRequant, QPackedB, QuadPackedB, RequantRange,
};
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
/// transposition), the weights' signedness and zero points; `requant` names the kind of
/// its requantization ([`shared_requant`]).
pub(super) struct Source<'a> {
    pub(super) tensor: &'a Arc<Tensor>,
    pub(super) kind: &'static str,
    pub(super) requant: &'static str,
    pub(super) params: &'a [usize],
    pub(super) signed: bool,
    pub(super) zeros: &'a [i32],
    /// The fixed-point rule's multipliers `(q, shift)` per column when the layer follows
    /// it (`ColumnRequant::fixed_point`).
    pub(super) fixed: Option<&'a [(i32, i32)]>,
}

/// The centered weights `wv(k, j)` (depth `k` by `n` columns) of `src` packed for the byte
/// GEMM when it is in use and every value fits i8, else for the pair GEMM.
pub(super) fn packed_b(
    src: &Source<'_>,
    (k, n): (usize, usize),
    wv: impl Fn(usize, usize) -> i16,
    io: &Io,
) -> Result<PackedB> {
    let key = packing_key(src, (k, n), 0, io)?;
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

/// The key of `src`'s packing for a `k` × `n` GEMM, with room for `more` values.
fn packing_key(
    src: &Source<'_>,
    (k, n): (usize, usize),
    more: usize,
    io: &Io,
) -> Result<Vec<usize>> {
    let mut key = Vec::new();
    key.try_reserve_exact(src.params.len() + src.zeros.len() + 3 + more)
        .map_err(|_| io.error("cannot allocate the packing key".into()))?;
    key.extend([k, n, usize::from(src.signed)]);
    key.extend_from_slice(src.params);
    // Zero points by their 32 bits (a negative one is not a small number).
    key.extend(src.zeros.iter().map(|&z| z as u32 as usize));
    Ok(key)
}

/// The requantization of the `n` output columns of a GEMM on `b` (packed from `src`, depth
/// `k`): each column's bias and multiplier and the common `range`; with the byte GEMM the
/// bias less the activations' unsigned zero point `x_zero` times the column's weight sum
/// ([`QuadPackedB::folded_bias`]). Shared by the plans through the cache of packed
/// constants, keyed by the weights' packing and every value it holds (the bias and the
/// multipliers by value: a plan's int32 bias is folded anew from the model's constants).
#[allow(clippy::too_many_arguments)]
pub(super) fn shared_requant(
    src: &Source<'_>,
    b: &PackedB,
    (k, n): (usize, usize),
    x_zero: i32,
    bias: &[i32],
    scale: &[f32],
    range: RequantRange,
    io: &Io,
) -> Result<Arc<ColumnRequant>> {
    if bias.len() != n || scale.len() != n {
        return Err(io.error(format!(
            "{} biases and {} multipliers for {n} columns",
            bias.len(),
            scale.len()
        )));
    }
    let bits = |v: f32| v.to_bits() as usize;
    let mut key = packing_key(src, (k, n), 4 * n + 6, io)?;
    let quads = matches!(b, PackedB::Quads(_));
    key.extend([usize::from(quads), x_zero as u32 as usize]);
    key.extend(bias.iter().map(|&v| v as u32 as usize));
    key.extend(scale.iter().map(|&v| bits(v)));
    key.extend([bits(range.zero), bits(range.lo), bits(range.hi)]);
    key.push(usize::from(src.fixed.is_some()));
    for &(q, shift) in src.fixed.unwrap_or_default() {
        key.extend([q as u32 as usize, shift as u32 as usize]);
    }
    if let Some(m) = src.fixed {
        if m.len() != n {
            return Err(io.error(format!("{} multipliers for {n} columns", m.len())));
        }
    }
    weights::shared(src.tensor, src.requant, &key, || {
        let folded = match b {
            PackedB::Quads(q) => Some(
                q.folded_bias(bias, x_zero)
                    .ok_or_else(|| io.error("cannot allocate the folded bias".into()))?,
            ),
            PackedB::Pairs(_) => None,
        };
        let bias = folded.as_deref().unwrap_or(bias);
        match src.fixed {
            Some(m) => ColumnRequant::fixed_point(bias, m, range),
            None => ColumnRequant::new(bias, scale, range),
        }
        .ok_or_else(|| io.error("cannot allocate the requantization".into()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::{scoped, PackedWeights};
    use backplane_core::{DataType, TensorInfo};

    /// One requantization per packing and values: the same weights, bias, multipliers and
    /// range share one; another bias, multiplier or zero point makes its own.
    #[test]
    fn requantizations_are_shared_by_their_values() {
        let (k, n) = (5, 3);
        let info = TensorInfo::new(DataType::I8, vec![n, k]);
        let values: Vec<f64> = (0..k * n).map(|i| i as f64 - 7.0).collect();
        let w = Arc::new(Tensor::from_f64_values(info, &values).unwrap_or_else(|e| panic!("{e}")));
        let io = Io {
            layer: "fc".into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        let src = Source {
            tensor: &w,
            kind: "test_b",
            requant: "test_requant",
            params: &[1],
            signed: true,
            zeros: &[0],
            fixed: None,
        };
        let wv = |kk: usize, j: usize| (j * k + kk) as i16 - 7;
        let range = RequantRange {
            zero: 3.0,
            lo: -10.0,
            hi: 10.0,
        };
        let cache = Arc::new(PackedWeights::new());
        let make = |bias: &[i32], scale: &[f32], x_zero: i32| {
            scoped(&cache, || {
                let b = packed_b(&src, (k, n), wv, &io)?;
                shared_requant(&src, &b, (k, n), x_zero, bias, scale, range, &io)
            })
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let scale = [0.5f32, 0.25, 0.125];
        let a = make(&[1, 2, 3], &scale, 4);
        let b = make(&[1, 2, 3], &scale, 4);
        assert!(Arc::ptr_eq(&a, &b), "equal values share one requantization");
        let others = [
            make(&[1, 2, 4], &scale, 4),
            make(&[1, 2, 3], &[0.5, 0.25, 0.5], 4),
            make(&[1, 2, 3], &scale, 5),
        ];
        for (i, o) in others.iter().enumerate() {
            assert!(!Arc::ptr_eq(&a, o), "other values {i} make their own");
        }
        let requant = cache
            .stats_by_kind()
            .into_iter()
            .find(|(kind, _)| *kind == "test_requant")
            .map(|(_, s)| (s.packed, s.reused));
        // The byte GEMM folds the zero point into the bias, so another zero point is
        // another requantization; the pair GEMM's does not depend on it, but is keyed by it
        // all the same.
        assert_eq!(requant, Some((4, 1)));
        // The pair GEMM's requantization (whichever form this machine packs above) is
        // shared among pair packings and apart from the byte GEMM's.
        let pairs = || {
            QPackedB::pack(k, n, wv)
                .map(|b| PackedB::Pairs(Arc::new(b)))
                .unwrap_or_else(|| panic!("pairs"))
        };
        let on_pairs = || {
            scoped(&cache, || {
                shared_requant(&src, &pairs(), (k, n), 4, &[1, 2, 3], &scale, range, &io)
            })
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let (p1, p2) = (on_pairs(), on_pairs());
        assert!(Arc::ptr_eq(&p1, &p2), "pair requantizations are shared");
        assert_eq!(
            Arc::ptr_eq(&p1, &a),
            !quads_in_use(),
            "the byte GEMM's requantization is its own"
        );
        // Too few biases for the columns is an error, not a panic.
        let short = scoped(&cache, || {
            let b = packed_b(&src, (k, n), wv, &io)?;
            shared_requant(&src, &b, (k, n), 4, &[1, 2], &scale[..2], range, &io)
        });
        assert!(short.is_err());
        drop((a, b, others, p1, p2));
    }
}
