//! Whole-tensor copies: Concat, and the reshapes (Reshape, Flatten, Squeeze, Unsqueeze,
//! Identity) whose output is a copy of their input's bytes.
//!
//! The output is a sequence of contiguous segments (for each outer index, one run per
//! input). It is cut into equal byte ranges, one or two per thread, and each range copies
//! the parts of the segments it covers, so the threads share the copy evenly however few,
//! many or uneven the inputs are (DenseNet concatenates one growing tensor with 32 channels).
//! Below [`PARALLEL_BYTES`] the copy runs on the calling thread.

use crate::io::{input, output, Io};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result, Workload};
use backplane_core::shape::normalize_axis;
use backplane_core::{TensorView, TensorViewMut};

/// Outputs of at most this many bytes are copied by the calling thread alone (a copy this
/// small takes about as long as waking a helper); larger ones in ranges of at least half
/// of it.
pub const PARALLEL_BYTES: usize = 128 * 1024;

/// Concat (any element type).
pub struct ConcatWorkload {
    io: Io,
    /// Product of the dims before the axis.
    outer: usize,
    /// Bytes per outer step of each input.
    chunks: Vec<usize>,
    threads: Threads,
}

impl ConcatWorkload {
    /// Plan it.
    pub fn new(io: Io, axis: i64, threads: Threads) -> Result<Self> {
        let first = io.first_input()?;
        let rank = first.shape.rank();
        let a = normalize_axis(axis, rank)?;
        let outer: usize = first.shape.dims()[..a].iter().product();
        let chunks = io
            .inputs
            .iter()
            .map(|i| i.shape.dims()[a..].iter().product::<usize>() * i.dtype.size())
            .collect();
        Ok(ConcatWorkload {
            io,
            outer,
            chunks,
            threads,
        })
    }
}

impl Workload for ConcatWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let sources: Vec<&[u8]> = inputs.iter().map(|x| x.data).collect();
        let y = output(outputs)?;
        copy_segments(&self.threads, &sources, &self.chunks, self.outer, y.data)
    }
}

/// A copy of the input's bytes (the reshapes).
pub struct CopyWorkload {
    io: Io,
    threads: Threads,
}

impl CopyWorkload {
    /// Plan it.
    pub fn new(io: Io, threads: Threads) -> Self {
        CopyWorkload { io, threads }
    }
}

impl Workload for CopyWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = input(inputs, 0)?;
        let y = output(outputs)?;
        copy_segments(&self.threads, &[x.data], &[x.data.len()], 1, y.data)
    }
}

/// `y` = for each of `outer` steps, `lens[i]` bytes of each `sources[i]` in turn (step `o`
/// reads `sources[i][o · lens[i]..]`), in equal byte ranges shared between the threads.
pub fn copy_segments(
    threads: &Threads,
    sources: &[&[u8]],
    lens: &[usize],
    outer: usize,
    y: &mut [u8],
) -> Result<()> {
    let row: usize = lens.iter().sum();
    if sources.len() != lens.len()
        || row.checked_mul(outer) != Some(y.len())
        || sources.iter().zip(lens).any(|(s, &l)| s.len() < l * outer)
    {
        return Err(BackendError::Execution(
            "Concat: the inputs do not fill the output".into(),
        ));
    }
    if y.is_empty() {
        return Ok(());
    }
    let per = if threads.count() == 1 || y.len() <= PARALLEL_BYTES {
        y.len()
    } else {
        threads.chunk_size(y.len(), PARALLEL_BYTES / 2, 64)
    };
    threads.chunks(y, per, |ci, dst| {
        copy_range(sources, lens, row, ci * per, dst);
        Ok(())
    })
}

/// Bytes `start..start + dst.len()` of the concatenation into `dst` (the caller checked
/// that the sources cover the whole output).
fn copy_range(sources: &[&[u8]], lens: &[usize], row: usize, start: usize, dst: &mut [u8]) {
    let (mut o, mut off) = (start / row, start % row);
    // The input whose run holds byte `off` of the row, and the offset inside it.
    let mut i = 0;
    while i < lens.len() && off >= lens[i] {
        off -= lens[i];
        i += 1;
    }
    let mut done = 0;
    while done < dst.len() {
        if i == lens.len() {
            o += 1;
            i = 0;
            continue;
        }
        let len = lens[i];
        let take = (len - off).min(dst.len() - done);
        if take > 0 {
            let s = o * len + off;
            dst[done..done + take].copy_from_slice(&sources[i][s..s + take]);
            done += take;
        }
        i += 1;
        off = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every thread count and range size gives the serial concatenation, with empty inputs,
    /// one-byte runs and ranges that cut runs anywhere.
    #[test]
    fn ranges_give_the_concatenation() {
        let lens_cases: [&[usize]; 4] = [&[3, 0, 5], &[1], &[7, 1, 1, 13], &[0, 4]];
        for lens in lens_cases {
            for outer in [1usize, 2, 5] {
                let sources: Vec<Vec<u8>> = lens
                    .iter()
                    .enumerate()
                    .map(|(i, &l)| (0..l * outer).map(|b| (i * 50 + b) as u8).collect())
                    .collect();
                let refs: Vec<&[u8]> = sources.iter().map(Vec::as_slice).collect();
                let row: usize = lens.iter().sum();
                let mut want = Vec::new();
                for o in 0..outer {
                    for (s, &l) in refs.iter().zip(lens) {
                        want.extend_from_slice(&s[o * l..(o + 1) * l]);
                    }
                }
                for start in 0..want.len() {
                    for end in start..=want.len() {
                        let mut got = vec![0u8; end - start];
                        copy_range(&refs, lens, row, start, &mut got);
                        assert_eq!(got, want[start..end], "{lens:?} x{outer} {start}..{end}");
                    }
                }
                for t in [1usize, 2, 3, 5, 16] {
                    let th = Threads::new(t).unwrap();
                    let mut y = vec![0u8; want.len()];
                    copy_segments(&th, &refs, lens, outer, &mut y).unwrap();
                    assert_eq!(y, want);
                }
            }
        }
    }

    /// Outputs above the threshold are split into many ranges: the result is the serial one.
    #[test]
    fn large_copies_split_between_threads() {
        let lens = [96 * 1024usize, 4, 33 * 1024 + 3];
        let sources: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| (0..l * 3).map(|b| (b * 7 + i) as u8).collect())
            .collect();
        let refs: Vec<&[u8]> = sources.iter().map(Vec::as_slice).collect();
        let mut want = vec![0u8; lens.iter().sum::<usize>() * 3];
        copy_segments(&Threads::single(), &refs, &lens, 3, &mut want).unwrap();
        for t in [2usize, 3, 5, 16] {
            let th = Threads::new(t).unwrap();
            let mut y = vec![0u8; want.len()];
            copy_segments(&th, &refs, &lens, 3, &mut y).unwrap();
            assert!(y == want, "{t} threads");
        }
        let mut short = vec![0u8; 10];
        assert!(copy_segments(&Threads::single(), &refs, &lens, 3, &mut short).is_err());
    }
}
