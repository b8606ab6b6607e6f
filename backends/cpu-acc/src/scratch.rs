//! Per-thread scratch vectors kept between layers and executions: a workload borrows its
//! thread's vector by taking it out of the thread-local slot (so no `RefCell` borrow is held
//! across calls, and a nested use of the same slot simply gets a fresh vector) and gives it
//! back when done. A vector that is not given back (an early error return) is dropped, and
//! the next use allocates again.

use backplane_backend_api::{BackendError, Result};
use std::cell::RefCell;
use std::thread::LocalKey;

/// A thread-local slot holding one scratch vector.
pub(crate) type Slot<T> = &'static LocalKey<RefCell<Vec<T>>>;

/// This thread's vector from `slot`, at least `len` long (grown with `T::default()`).
pub(crate) fn take<T: Copy + Default>(slot: Slot<T>, len: usize) -> Vec<T> {
    let mut v = slot.with(|b| {
        b.try_borrow_mut()
            .map(|mut b| std::mem::take(&mut *b))
            .unwrap_or_default()
    });
    if v.len() < len {
        v.resize(len, T::default());
    }
    v
}

/// [`take`], failing with an error instead of aborting when the memory for `len` elements
/// cannot be had (a buffer sized by the model).
pub(crate) fn try_take<T: Copy + Default>(slot: Slot<T>, len: usize) -> Result<Vec<T>> {
    let mut v = take(slot, 0);
    grow(&mut v, len)?;
    Ok(v)
}

/// Make `v` at least `len` long (grown with `T::default()`), failing with an error instead
/// of aborting when the memory cannot be had.
pub(crate) fn grow<T: Copy + Default>(v: &mut Vec<T>, len: usize) -> Result<()> {
    if v.len() < len {
        v.try_reserve_exact(len - v.len()).map_err(|_| {
            BackendError::Execution(format!("no memory for a {len}-element scratch buffer"))
        })?;
        v.resize(len, T::default());
    }
    Ok(())
}

/// Give `v` back to this thread's `slot` for the next use.
pub(crate) fn give_back<T>(slot: Slot<T>, v: Vec<T>) {
    slot.with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            *b = v;
        }
    });
}
