//! The portable micro-kernel: plain Rust, the reference the vector kernels are tested
//! against.

use super::{TileEpilogue, MR, NR};

/// The portable micro-kernel: the same contract as the AVX2 one, in plain Rust.
#[allow(clippy::too_many_arguments)]
pub(crate) fn portable_kernel(
    kc: usize,
    a: &[f32],
    row0: usize,
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    mr: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
) {
    let mut acc = [[0f32; NR]; MR];
    for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)).take(kc) {
        for (row, &av) in acc.iter_mut().zip(&ap[row0..]) {
            for (o, &bv) in row.iter_mut().zip(bp) {
                *o = av.mul_add(bv, *o);
            }
        }
    }
    for (r, row) in acc.iter().enumerate().take(mr) {
        let out = &mut c[r * ldc..r * ldc + nr];
        let rb = ep.row_bias.map_or(0.0, |b| b[r]);
        for (j, (o, &v)) in out.iter_mut().zip(row.iter()).enumerate() {
            let mut x = v * ep.alpha;
            if ep.accumulate {
                x += *o;
            }
            if ep.last {
                x += rb + ep.col_bias.map_or(0.0, |b| b[j]);
                x = ep.act.apply_simple(x);
            }
            *o = x;
        }
    }
}
