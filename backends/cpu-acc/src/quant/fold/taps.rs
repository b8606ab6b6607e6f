//! Kernel taps that no output reaches: a folded int8 convolution over an input smaller than
//! its window (Inception-v3's 3×3, 1×3 and 3×1 convolutions over its last 1×1 maps, SAME
//! padding) reads only padding through some of its kernel rows or columns. Each padded tap
//! holds the input's zero point, so it adds `(z − z) · w = 0` to every sum: the rows and
//! columns of taps that read padding for every output can go, the begin padding shrinking
//! by the taps dropped before the first kept one. The sums, and so the bytes, are the same;
//! the layer streams only the weights it uses (a 3×3 layer over a 1×1 map becomes a 1×1
//! layer, a ninth of the weights).

use backplane_core::{Tensor, TensorInfo};

/// The first and last taps of one axis that some output reads inside the input, for input
/// size `n`, window `k`, stride `s`, dilation `d`, begin padding `pb` and `o` outputs;
/// `None` when no tap does (the caller keeps the layer as it is).
pub(super) fn reached(
    n: usize,
    k: usize,
    s: usize,
    d: usize,
    pb: usize,
    o: usize,
) -> Option<(usize, usize)> {
    let inside = |t: usize| {
        (0..o).any(|i| {
            let at = i * s + t * d;
            at >= pb && at - pb < n
        })
    };
    let first = (0..k).find(|&t| inside(t))?;
    let last = (0..k).rev().find(|&t| inside(t))?;
    Some((first, last))
}

/// The trimmed form of a convolution: its kernel, begin pads, and the weights of the kept
/// taps.
pub(super) struct Trimmed {
    /// The kept taps' extent [KH, KW].
    pub kernel: [usize; 2],
    /// The begin pads over the kept taps (top, left).
    pub pads: [usize; 2],
    /// `[M, C/group, KH, KW]` weights of the kept taps, the original's type.
    pub weights: Tensor,
}

/// The convolution of `[M, C/group, KH, KW]` 8-bit weights `w` over an `[.., H, W]` input
/// (`spatial`) into `out` outputs per axis, with its strides, dilations and begin pads,
/// trimmed to the taps some output reads inside the input; `None` when every tap is kept,
/// when a dropped leading tap would leave a negative begin pad, or for a shape it does not
/// take.
pub(super) fn trim(
    w: &Tensor,
    spatial: [usize; 2],
    out: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    pads: [usize; 2],
) -> Option<Trimmed> {
    let &[m, cg, kh, kw] = w.shape().dims() else {
        return None;
    };
    let mut kept = [(0, 0); 2];
    for a in 0..2 {
        let k = [kh, kw][a];
        let (first, last) = reached(spatial[a], k, strides[a], dilations[a], pads[a], out[a])?;
        // The pads stay nonnegative: the first kept tap starts at or before the input.
        if first * dilations[a] > pads[a] {
            return None;
        }
        kept[a] = (first, last);
    }
    let [(r0, r1), (c0, c1)] = kept;
    if (r0, r1, c0, c1) == (0, kh - 1, 0, kw - 1) {
        return None;
    }
    let (nh, nw) = (r1 - r0 + 1, c1 - c0 + 1);
    let src = w.bytes();
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(m * cg * nh * nw).ok()?;
    for plane in src.chunks_exact(kh * kw).take(m * cg) {
        for row in plane.chunks_exact(kw).skip(r0).take(nh) {
            bytes.extend_from_slice(row.get(c0..=c1)?);
        }
    }
    let info = TensorInfo::new(w.dtype(), vec![m, cg, nh, nw]);
    Some(Trimmed {
        kernel: [nh, nw],
        pads: [pads[0] - r0 * dilations[0], pads[1] - c0 * dilations[1]],
        weights: Tensor::from_bytes(info, &bytes).ok()?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use backplane_core::DataType;

    #[test]
    fn reached_taps_of_small_inputs() {
        // 3 taps, SAME (pad 1) over a 1-wide input: only the middle one.
        assert_eq!(reached(1, 3, 1, 1, 1, 1), Some((1, 1)));
        // Over 2 inputs every tap is read by one of the outputs.
        assert_eq!(reached(2, 3, 1, 1, 1, 2), Some((0, 2)));
        // 7 taps, pad 3, over 4 inputs: the outer taps read padding only.
        assert_eq!(reached(4, 7, 1, 1, 3, 4), Some((0, 6)));
        assert_eq!(reached(2, 7, 1, 1, 3, 2), Some((2, 4)));
        // Dilation 2, pad 2, one input: the middle tap.
        assert_eq!(reached(1, 3, 1, 2, 2, 1), Some((1, 1)));
        // Stride 2 over 3 inputs with pad 1, 2 outputs: all taps.
        assert_eq!(reached(3, 3, 2, 1, 1, 2), Some((0, 2)));
        assert_eq!(reached(0, 3, 1, 1, 1, 1), None);
    }

    #[test]
    fn trimmed_weights_keep_the_reached_taps() {
        // [M 2, C 1, 3, 3], values their index.
        let w = Tensor::from_vec(vec![2, 1, 3, 3], (0..18).map(|v| v as i8).collect()).unwrap();
        let t = trim(&w, [1, 1], [1, 1], [1, 1], [1, 1], [1, 1]).unwrap();
        assert_eq!(t.kernel, [1, 1]);
        assert_eq!(t.pads, [0, 0]);
        assert_eq!(t.weights.as_slice::<i8>().unwrap(), &[4, 13]);
        assert_eq!(t.weights.dtype(), DataType::I8);
        // A 1×3 row over a 1×1 map.
        let w = Tensor::from_vec(vec![1, 2, 1, 3], vec![1u8, 2, 3, 4, 5, 6]).unwrap();
        let t = trim(&w, [1, 1], [1, 1], [1, 1], [1, 1], [0, 1]).unwrap();
        assert_eq!((t.kernel, t.pads), ([1, 1], [0, 0]));
        assert_eq!(t.weights.as_slice::<u8>().unwrap(), &[2, 5]);
        // Every tap reached: nothing to trim.
        assert!(trim(&w, [1, 4], [1, 4], [1, 1], [1, 1], [0, 1]).is_none());
        // Dilation 2 over one input, pad 2: the middle tap, at no pad.
        let w = Tensor::from_vec(vec![1, 1, 3, 1], vec![7i8, 8, 9]).unwrap();
        let t = trim(&w, [1, 1], [1, 1], [1, 1], [2, 1], [2, 0]).unwrap();
        assert_eq!((t.kernel, t.pads), ([1, 1], [0, 0]));
        assert_eq!(t.weights.as_slice::<i8>().unwrap(), &[8]);
        // A 7×1 column over 2 rows (pad 3): taps 2 ..= 4, begin pad 1.
        let w = Tensor::from_vec(vec![1, 1, 7, 1], (1..=7).collect::<Vec<i8>>()).unwrap();
        let t = trim(&w, [2, 5], [2, 5], [1, 1], [1, 1], [3, 0]).unwrap();
        assert_eq!((t.kernel, t.pads), ([3, 1], [1, 0]));
        assert_eq!(t.weights.as_slice::<i8>().unwrap(), &[3, 4, 5]);
    }
}
