//! Permute: the layout conversion the optimizer inserts between backends whose
//! tensor-handle factories declare different data layouts. It moves elements as a
//! transpose does, for any element type.

use backplane_backend_api::{BackendError, Result, Workload};
use backplane_core::{TensorView, TensorViewMut};

/// Reorders a tensor's bytes from one physical axis order to another.
pub(super) struct PermuteWorkload {
    pub from: Vec<usize>,
    pub to: Vec<usize>,
}

/// For a tensor of logical `dims` stored in axis order `from`: its physical dims, and the
/// transpose of them that stores it in order `to`.
pub(crate) fn physical_permutation(
    dims: &[usize],
    from: &[usize],
    to: &[usize],
) -> Option<(Vec<usize>, Vec<usize>)> {
    let physical: Vec<usize> = from
        .iter()
        .map(|&a| dims.get(a).copied())
        .collect::<Option<_>>()?;
    let perm: Vec<usize> = to
        .iter()
        .map(|a| from.iter().position(|b| b == a))
        .collect::<Option<_>>()?;
    Some((physical, perm))
}

/// Row-major strides of `dims`, in elements.
fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// Permute `src` (shaped `dims`, elements of `esize` bytes) into `dst`.
pub(crate) fn permute_bytes(
    src: &[u8],
    dims: &[usize],
    perm: &[usize],
    esize: usize,
    dst: &mut [u8],
) -> Result<()> {
    let rank = dims.len();
    if perm.len() != rank || src.len() != dst.len() {
        return Err(BackendError::Execution(format!(
            "permute {perm:?} of a rank-{rank} tensor ({} bytes into {})",
            src.len(),
            dst.len()
        )));
    }
    let in_strides = strides(dims);
    let out_dims: Vec<usize> = perm
        .iter()
        .map(|&p| dims.get(p).copied().unwrap_or(1))
        .collect();
    // Input stride of each output axis.
    let step: Vec<usize> = perm
        .iter()
        .map(|&p| in_strides.get(p).copied().unwrap_or(0))
        .collect();
    let count: usize = out_dims.iter().product();
    if count * esize != dst.len() {
        return Err(BackendError::Execution(
            "permute: the buffer does not match the shape".into(),
        ));
    }
    let mut index = vec![0usize; rank];
    let mut from = 0usize;
    for k in 0..count {
        let s = src
            .get(from * esize..(from + 1) * esize)
            .ok_or_else(|| BackendError::Execution("permute read out of range".into()))?;
        dst[k * esize..(k + 1) * esize].copy_from_slice(s);
        // Advance the output index (last axis fastest), tracking the input offset.
        for a in (0..rank).rev() {
            index[a] += 1;
            from += step[a];
            if index[a] < out_dims[a] {
                break;
            }
            from -= step[a] * out_dims[a];
            index[a] = 0;
        }
    }
    Ok(())
}

impl Workload for PermuteWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        let (Some(x), Some(y)) = (inputs.first(), outputs.first_mut()) else {
            return Err(BackendError::Execution(
                "permute needs one input and one output".into(),
            ));
        };
        let (physical, perm) =
            physical_permutation(x.dims(), &self.from, &self.to).ok_or_else(|| {
                BackendError::Execution(format!(
                    "axis orders {:?} -> {:?} do not fit {}",
                    self.from, self.to, x.info
                ))
            })?;
        permute_bytes(x.data, &physical, &perm, x.info.dtype.size(), y.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutes_like_a_transpose() {
        // 2x3 -> 3x2
        let src: Vec<u8> = (0..6).collect();
        let mut dst = vec![0u8; 6];
        permute_bytes(&src, &[2, 3], &[1, 0], 1, &mut dst).unwrap();
        assert_eq!(dst, vec![0, 3, 1, 4, 2, 5]);
        // NCHW 1x2x2x2 -> NHWC, 4-byte elements.
        let src: Vec<u8> = (0..8u32).flat_map(|v| v.to_ne_bytes()).collect();
        let mut dst = vec![0u8; 32];
        permute_bytes(&src, &[1, 2, 2, 2], &[0, 2, 3, 1], 4, &mut dst).unwrap();
        let got: Vec<u32> = dst
            .chunks(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(got, vec![0, 4, 1, 5, 2, 6, 3, 7]);
        assert!(permute_bytes(&src, &[1, 2, 2, 2], &[0, 1], 4, &mut dst).is_err());
    }

    #[test]
    fn channels_last_and_back_is_the_identity() {
        let dims = [2, 3, 4, 5];
        let src: Vec<u8> = (0..120).collect();
        let (std, cl) = (vec![0, 1, 2, 3], vec![0, 2, 3, 1]);
        let (p, perm) = physical_permutation(&dims, &std, &cl).unwrap();
        assert_eq!(
            (p.as_slice(), perm.as_slice()),
            (&dims[..], &[0, 2, 3, 1][..])
        );
        let mut nhwc = vec![0u8; 120];
        permute_bytes(&src, &p, &perm, 1, &mut nhwc).unwrap();
        // Element (n=0, c=1, h=0, w=0) = 20 sits at NHWC position 1.
        assert_eq!(nhwc[1], 20);
        let (p, perm) = physical_permutation(&dims, &cl, &std).unwrap();
        assert_eq!(p, vec![2, 4, 5, 3]);
        let mut back = vec![0u8; 120];
        permute_bytes(&nhwc, &p, &perm, 1, &mut back).unwrap();
        assert_eq!(back, src);
    }
}
