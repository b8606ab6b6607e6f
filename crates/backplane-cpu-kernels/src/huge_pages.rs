//! Transparent huge pages for the large buffers (packed weights, scratch).
//!
//! Where the kernel hands out transparent huge pages only on request (`madvise` mode, the
//! common default), a buffer of 4 KiB pages lies wherever the kernel found free pages: its
//! physical placement (which cache sets and memory banks its lines map to) and its TLB reach
//! differ from one process to the next. [`advise`] asks for huge pages over a vector's
//! whole allocation; memory touched after the advice is served in 2 MiB pages where a
//! 2 MiB-aligned range lies inside it. The advice never changes contents, and a kernel
//! that refuses it (no THP, another OS) leaves the buffer as it was.
//!
//! [`filled`] and [`grow`] allocate fallibly, advise, then write: the advice comes before
//! the first touch, when it costs no later collapse.

use std::collections::TryReserveError;

/// Buffers smaller than this are left alone: they cannot hold an aligned huge page.
pub const MIN_BYTES: usize = 2 << 20;

/// The base page: `madvise` needs a page-aligned start.
const PAGE: usize = 4096;

/// Ask for transparent huge pages over `v`'s allocation (its capacity, not only its
/// length). Does nothing for buffers under [`MIN_BYTES`] or where the OS has no such
/// advice; the vector's contents are untouched either way.
pub fn advise<T>(v: &mut Vec<T>) {
    let bytes = v.capacity().saturating_mul(std::mem::size_of::<T>());
    if bytes < MIN_BYTES {
        return;
    }
    let start = v.as_mut_ptr() as usize;
    let Some(end) = start.checked_add(bytes) else {
        return;
    };
    // The whole pages inside the allocation only: advice never reaches memory that
    // another allocation may share.
    let first = start.div_ceil(PAGE).saturating_mul(PAGE);
    let last = end / PAGE * PAGE;
    if last > first {
        os::advise_huge(v.as_mut_ptr().cast(), first - start, last - first);
    }
}

/// `len` copies of `value` in a vector advised for huge pages before it is written, or the
/// allocation error.
pub fn filled<T: Clone>(len: usize, value: T) -> Result<Vec<T>, TryReserveError> {
    let mut v = Vec::new();
    grow(&mut v, len, value)?;
    Ok(v)
}

/// Grow `v` to `len` elements (new ones `value`), reserving fallibly and advising the
/// allocation for huge pages before the new elements are written. A vector already that
/// long is left as it is.
pub fn grow<T: Clone>(v: &mut Vec<T>, len: usize, value: T) -> Result<(), TryReserveError> {
    if v.len() >= len {
        return Ok(());
    }
    let old_cap = v.capacity();
    v.try_reserve_exact(len - v.len())?;
    if v.capacity() != old_cap {
        advise(v);
    }
    v.resize(len, value);
    Ok(())
}

#[cfg(target_os = "linux")]
mod os {
    use std::ffi::{c_int, c_void};

    /// `MADV_HUGEPAGE` of Linux's `<sys/mman.h>` (the same value on every architecture).
    const MADV_HUGEPAGE: c_int = 14;

    extern "C" {
        fn madvise(addr: *mut c_void, length: usize, advice: c_int) -> c_int;
    }

    /// Advise `len` bytes from `offset` bytes past `base` (page-aligned, inside the
    /// allocation `base` starts) for huge pages; a refusal is ignored (advice only).
    pub(super) fn advise_huge(base: *mut u8, offset: usize, len: usize) {
        let addr = base.wrapping_add(offset);
        // SAFETY: `addr..addr + len` is a page-aligned range inside one live allocation the
        // caller holds mutably (`advise` computes it from the vector's pointer and
        // capacity). MADV_HUGEPAGE only marks the range so later page faults may be served
        // with huge pages (and lets khugepaged merge pages already there); it never changes
        // the contents, the mapping's protection or its validity, so no Rust reference into
        // the buffer is affected. The return value only reports whether advice was taken.
        let _ = unsafe { madvise(addr.cast(), len, MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
mod os {
    /// No huge-page advice outside Linux.
    pub(super) fn advise_huge(_base: *mut u8, _offset: usize, _len: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_holds_the_value_at_every_length() {
        for len in [
            0usize,
            1,
            7,
            MIN_BYTES / 4 - 1,
            MIN_BYTES / 4 + 4099,
            3 * MIN_BYTES / 4,
        ] {
            let v = filled(len, 1.5f32).expect("small allocation");
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 1.5));
        }
    }

    #[test]
    fn grow_keeps_the_old_values_and_fills_the_new() {
        let mut v: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        let len = MIN_BYTES; // 4 bytes each: twice the threshold
        grow(&mut v, len, -2.0).expect("allocation");
        assert_eq!(v.len(), len);
        assert!(v[..1000].iter().enumerate().all(|(i, &x)| x == i as f32));
        assert!(v[1000..].iter().all(|&x| x == -2.0));
        // Shorter requests leave the vector as it is.
        grow(&mut v, 10, 9.0).expect("no allocation");
        assert_eq!(v.len(), len);
        assert_eq!(v[10], 10.0);
    }

    #[test]
    fn an_impossible_size_is_an_error_not_an_abort() {
        assert!(filled(usize::MAX / 2, 0u64).is_err());
    }

    /// The `VmFlags` of the mapping holding `addr`, from `/proc/self/smaps`.
    #[cfg(target_os = "linux")]
    fn vm_flags(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = lo <= addr && addr < hi;
                    continue;
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return Some(flags.to_string());
                }
            }
        }
        None
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn advised_buffers_are_marked_and_keep_their_contents() {
        // Past the threshold, unaligned length: the advice covers the inner pages only.
        let mut v = vec![3u8; 3 * MIN_BYTES + 123];
        advise(&mut v);
        v[0] = 1;
        let last = v.len() - 1;
        v[last] = 2;
        assert_eq!((v[0], v[1], v[last - 1], v[last]), (1, 3, 3, 2));
        // Where the kernel offers transparent huge pages at all, the middle of the buffer
        // now lies in a mapping flagged `hg` (MADV_HUGEPAGE).
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if thp.contains('[') && !thp.contains("[never]") {
            let middle = v.as_ptr() as usize + v.len() / 2;
            let flags = vm_flags(middle).expect("the buffer's mapping in smaps");
            assert!(
                flags.split_whitespace().any(|f| f == "hg"),
                "VmFlags:{flags}"
            );
        }
    }
}
