//! Per-thread scratch vectors kept between layers and executions, each starting on a 64-byte
//! line ([`AlignedVec`], so vector loads from them never straddle two lines): a workload borrows its
//! thread's vector by taking it out of the thread-local slot (so no `RefCell` borrow is held
//! across calls, and a nested use of the same slot simply gets a fresh vector) and gives it
//! back when done. A vector that is not given back (an early error return) is dropped, and
//! the next use allocates again.

use backplane_backend_api::{BackendError, Result};
use backplane_cpu_kernels::AlignedVec;
use bytemuck::Pod;
use std::cell::RefCell;
use std::thread::LocalKey;

/// A thread-local slot holding one scratch vector.
pub(crate) type Slot<T> = &'static LocalKey<RefCell<AlignedVec<T>>>;

/// This thread's vector from `slot`, at least `len` long (grown with zeros).
pub(crate) fn take<T: Pod>(slot: Slot<T>, len: usize) -> AlignedVec<T> {
    let mut v = slot.with(|b| {
        b.try_borrow_mut()
            .map(|mut b| std::mem::take(&mut *b))
            .unwrap_or_default()
    });
    if v.len() < len {
        v.resize(len);
    }
    v
}

/// [`take`], failing with an error instead of aborting when the memory for `len` elements
/// cannot be had (a buffer sized by the model).
pub(crate) fn try_take<T: Pod>(slot: Slot<T>, len: usize) -> Result<AlignedVec<T>> {
    let mut v = take(slot, 0);
    grow(&mut v, len)?;
    Ok(v)
}

/// Make `v` at least `len` long (grown with zeros), failing with an error instead of
/// aborting when the memory cannot be had.
pub(crate) fn grow<T: Pod>(v: &mut AlignedVec<T>, len: usize) -> Result<()> {
    if v.len() < len {
        v.try_resize(len).map_err(|_| {
            BackendError::Execution(format!("no memory for a {len}-element scratch buffer"))
        })?;
    }
    Ok(())
}

/// Give `v` back to this thread's `slot` for the next use.
pub(crate) fn give_back<T>(slot: Slot<T>, v: AlignedVec<T>) {
    slot.with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            *b = v;
        }
    });
}
