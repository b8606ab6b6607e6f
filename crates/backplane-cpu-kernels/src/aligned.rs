//! A growable buffer whose elements start on a 64-byte boundary (a cache line, one AVX-512
//! vector): the kernels' packed panels and scratch buffers.
//!
//! A `Vec<f32>` starts wherever the allocator puts it, 16 bytes past a line for most large
//! buffers, so every 64-byte vector load from it straddles two lines. On some CPUs (Intel's
//! among them) such a split load costs about twice an aligned one, and a micro-kernel that
//! streams a packed panel loses a sixth or more of its throughput; this type rules that out.

use bytemuck::Pod;
use std::collections::TryReserveError;
use std::marker::PhantomData;

/// The alignment of an [`AlignedVec`]'s first element, in bytes.
pub const ALIGNMENT: usize = 64;

/// One 64-byte line of storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; ALIGNMENT]);

// SAFETY: `Line` is 64 bytes of `u8` with no padding (size 64 = alignment 64), so every bit
// pattern is valid and the all-zero pattern is a valid value.
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: as above; `Line` is `Copy`, `repr(C)`, holds no pointers and has no padding bytes.
unsafe impl bytemuck::Pod for Line {}

/// A vector of `T` whose first element lies on a 64-byte boundary; new elements are zero.
/// Dereferences to `[T]`. Growth is fallible ([`AlignedVec::try_resize`]): buffers sized by
/// a model's shapes report a failed allocation instead of aborting.
pub struct AlignedVec<T> {
    lines: Vec<Line>,
    len: usize,
    _elem: PhantomData<T>,
}

impl<T: Pod> AlignedVec<T> {
    /// An empty vector (allocates nothing).
    pub const fn new() -> Self {
        // A line holds a whole number of elements, each at most line-aligned: the casts of
        // the lines to `[T]` cannot fail (checked when the type is used, at compile time).
        const {
            let size = std::mem::size_of::<T>();
            assert!(size > 0 && ALIGNMENT.is_multiple_of(size));
            assert!(std::mem::align_of::<T>() <= ALIGNMENT);
        }
        AlignedVec {
            lines: Vec::new(),
            len: 0,
            _elem: PhantomData,
        }
    }

    /// `len` zeros, or the allocation's error.
    pub fn try_zeroed(len: usize) -> Result<Self, TryReserveError> {
        let mut v = Self::new();
        v.try_resize(len)?;
        Ok(v)
    }

    /// A copy of `values`, or the allocation's error.
    pub fn try_from_slice(values: &[T]) -> Result<Self, TryReserveError> {
        let mut v = Self::try_zeroed(values.len())?;
        v.copy_from_slice(values);
        Ok(v)
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Lines needed for `len` elements.
    fn lines_for(len: usize) -> usize {
        len.saturating_mul(std::mem::size_of::<T>())
            .div_ceil(ALIGNMENT)
    }

    /// Make the vector `len` long: elements past the old length are zero, those past `len`
    /// are dropped (the memory is kept for the next growth).
    pub fn try_resize(&mut self, len: usize) -> Result<(), TryReserveError> {
        let lines = Self::lines_for(len);
        if lines > self.lines.len() {
            self.lines.try_reserve_exact(lines - self.lines.len())?;
        }
        self.resize(len);
        Ok(())
    }

    /// [`AlignedVec::try_resize`] for buffers of a size the code fixes (not a model): like
    /// `Vec::resize`, a failed allocation aborts.
    pub fn resize(&mut self, len: usize) {
        // Elements the lines held before: those past the old length may hold old values
        // (from an earlier, longer length); new lines come zeroed.
        let held = self.lines.len() * (ALIGNMENT / std::mem::size_of::<T>());
        let lines = Self::lines_for(len);
        if lines > self.lines.len() {
            self.lines.resize(lines, Line([0; ALIGNMENT]));
        }
        let old = self.len;
        self.len = len;
        if len > old {
            let stale = old..len.min(held);
            if let Some(tail) = self.get_mut(stale) {
                tail.fill(T::zeroed());
            }
        }
    }

    /// The elements, with the lines' tail past `len` left out.
    fn all(&self) -> &[T] {
        bytemuck::cast_slice(&self.lines)
    }

    /// As [`AlignedVec::all`], mutably.
    fn all_mut(&mut self) -> &mut [T] {
        bytemuck::cast_slice_mut(&mut self.lines)
    }
}

impl<T: Pod> Default for AlignedVec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Pod> std::ops::Deref for AlignedVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        let len = self.len;
        &self.all()[..len]
    }
}

impl<T: Pod> std::ops::DerefMut for AlignedVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        let len = self.len;
        &mut self.all_mut()[..len]
    }
}

impl<T: Pod> Clone for AlignedVec<T> {
    fn clone(&self) -> Self {
        AlignedVec {
            lines: self.lines.clone(),
            len: self.len,
            _elem: PhantomData,
        }
    }
}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for AlignedVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Pod + PartialEq> PartialEq for AlignedVec<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_line_and_grows_with_zeros() {
        let mut v = AlignedVec::<f32>::try_zeroed(5).unwrap();
        assert_eq!(v.as_ptr() as usize % ALIGNMENT, 0);
        assert_eq!(&v[..], &[0.0; 5]);
        v.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = i as f32 + 1.0);
        v.try_resize(40).unwrap();
        assert_eq!(v.as_ptr() as usize % ALIGNMENT, 0);
        assert_eq!(v.len(), 40);
        assert_eq!(&v[..5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert!(v[5..].iter().all(|&x| x == 0.0));
    }

    #[test]
    fn shrinking_then_growing_zeroes_the_old_tail() {
        let mut v = AlignedVec::<i16>::try_from_slice(&[7; 50]).unwrap();
        v.try_resize(3).unwrap();
        assert_eq!(&v[..], &[7, 7, 7]);
        v.try_resize(50).unwrap();
        assert_eq!(&v[..3], &[7, 7, 7]);
        assert!(v[3..].iter().all(|&x| x == 0));
    }

    #[test]
    fn every_element_type_is_aligned() {
        let a = AlignedVec::<u8>::try_zeroed(1).unwrap();
        let b = AlignedVec::<f64>::try_zeroed(1000).unwrap();
        let c = AlignedVec::<usize>::try_zeroed(3).unwrap();
        for p in [
            a.as_ptr() as usize,
            b.as_ptr() as usize,
            c.as_ptr() as usize,
        ] {
            assert_eq!(p % ALIGNMENT, 0);
        }
        assert!(AlignedVec::<f32>::new().is_empty());
    }

    #[test]
    fn an_impossible_size_is_an_error() {
        assert!(AlignedVec::<f32>::try_zeroed(usize::MAX / 2).is_err());
    }
}
