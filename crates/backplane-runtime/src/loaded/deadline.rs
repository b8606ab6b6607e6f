//! The deadline of one execution (`RuntimeOptions::max_execution_time`), kept per thread so
//! that the control-flow bodies an execution runs share it.

use std::time::{Duration, Instant};

thread_local! {
    /// The deadline of the execution running on this thread (with its limit), shared with
    /// the control-flow bodies it runs, which execute on the same thread.
    pub(super) static DEADLINE: std::cell::Cell<Option<(Instant, Duration)>> =
        const { std::cell::Cell::new(None) };
}

/// Sets this thread's deadline for one top-level execution; restores the previous one
/// (none, or an enclosing execution's) when dropped.
pub(super) struct DeadlineGuard(Option<(Instant, Duration)>);

impl DeadlineGuard {
    pub(super) fn start(limit: Option<Duration>) -> Self {
        let previous = DEADLINE.with(|d| d.get());
        if previous.is_none() {
            if let Some(limit) = limit {
                let deadline = Instant::now().checked_add(limit);
                DEADLINE.with(|d| d.set(deadline.map(|at| (at, limit))));
            }
        }
        DeadlineGuard(previous)
    }
}

impl Drop for DeadlineGuard {
    fn drop(&mut self) {
        let previous = self.0;
        DEADLINE.with(|d| d.set(previous));
    }
}
