//! The pool's helper threads and the protocol of a step: how the caller publishes its work,
//! how helpers join it, and how the caller closes it and waits for those that joined.
//!
//! A step's hot path takes no lock. Its state is one word, [`StepLine::state`]: the step's
//! generation, whether it is open, whether the caller sleeps waiting for it to drain, and how
//! many helpers joined it and have not left. The caller opens a step with one store, a helper
//! joins with a compare-and-swap that fails once the step is closed, leaves with a
//! subtraction, and the caller closes with one atomic and-not, then waits (spinning, then
//! asleep) until the count is zero. So a step costs the state line's trips between the
//! cores and no more: the lock and the condition variables are only taken to park a helper
//! that found no step for [`KEEP_WARM`], to wake one, or for a caller that waited longer
//! than [`FINISH_SPIN`].

use super::SLOT;
use backplane_backend_api::{BackendError, Result};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long helpers spin after a step, waiting for the next one, before they may park.
const KEEP_WARM: Duration = Duration::from_micros(100);

/// Microseconds helpers spin after a step ([`KEEP_WARM`] unless [`set_keep_warm`] changed it).
static KEEP_WARM_US: AtomicU64 = AtomicU64::new(KEEP_WARM.as_micros() as u64);

/// Set how long the helpers of every pool spin after a step, waiting for the next one,
/// before they park (for A/B measurements of the spin policy). Process-wide, as the pools
/// are shared by thread count.
pub fn set_keep_warm(time: Duration) {
    let us = u64::try_from(time.as_micros()).unwrap_or(u64::MAX);
    KEEP_WARM_US.store(us, Ordering::Relaxed);
}

fn keep_warm_time() -> Duration {
    Duration::from_micros(KEEP_WARM_US.load(Ordering::Relaxed))
}

/// How long the calling thread spins for the helpers to finish before blocking.
const FINISH_SPIN: Duration = Duration::from_micros(200);

/// Spin until `done()` holds or `limit` has passed, and return `done()`. Each round reads
/// the condition once and issues a single CPU pause hint; the clock is read every
/// [`CLOCK_EVERY`] rounds (not at all when the condition already holds), and every
/// [`YIELD_AFTER`] of spinning the core is yielded to the OS, so that a spinning thread gives
/// its core to a thread it is waiting for (a helper descheduled on a busy machine) instead of
/// burning the time slice.
///
/// One pause per round, not a burst: a pause costs from a few nanoseconds to a couple of
/// hundred (it is slow on some CPUs and under hypervisors that trap pause loops), and the
/// condition is read only between them, so a burst of 32 made a helper start a step, and a
/// caller see the end of one, microseconds late (docs/perf.md, "small layers at two
/// threads").
#[inline]
pub(super) fn spin_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    if done() {
        return true;
    }
    let start = Instant::now();
    let mut yielded = Duration::ZERO;
    let mut rounds = 0u32;
    loop {
        std::hint::spin_loop();
        if done() {
            return true;
        }
        rounds = rounds.wrapping_add(1);
        if rounds.is_multiple_of(CLOCK_EVERY) {
            let spun = start.elapsed();
            if spun >= limit {
                return done();
            }
            if spun >= yielded + YIELD_AFTER {
                std::thread::yield_now();
                yielded = spun;
            }
        }
    }
}

/// Spin rounds between reads of the clock (reading it can cost as much as a few pauses).
const CLOCK_EVERY: u32 = 8;

/// Spinning between yields to the OS: yields help a busy machine and cost nothing on an
/// idle one (docs/cpu-acc-bounds.md, "Thread pool").
const YIELD_AFTER: Duration = Duration::from_micros(20);

/// [`StepLine::state`]: helpers that joined the step and have not left it.
const JOINED: u64 = (1 << 32) - 1;
/// [`StepLine::state`]: helpers may join the step.
const OPEN: u64 = 1 << 32;
/// [`StepLine::state`]: the caller sleeps on [`ParkLine::left`] until the step drains (set
/// only while the step is closed; the next step's opening clears it).
const WAITING: u64 = 1 << 33;
/// [`StepLine::state`]: one step, in the generation bits above the flags (which wrap).
const GENERATION_ONE: u64 = 1 << 34;

/// The generation of a [`StepLine::state`].
fn generation(state: u64) -> u64 {
    state / GENERATION_ONE
}

/// A step's work as the helpers see it: the caller's closure, its lifetime erased.
type Work = &'static (dyn Fn() + Sync + 'static);

/// What a step's caller and helpers both write, on a line of its own.
#[repr(align(128))]
struct StepLine {
    /// `generation · GENERATION_ONE | WAITING? | OPEN? | joined`. Written by the caller to
    /// open and close a step and by the helpers to join and leave it.
    state: AtomicU64,
    /// Where the open step's closure is: the address of a reference on the caller's stack,
    /// valid while the step has helpers joined (a helper reads it only after joining).
    job: AtomicPtr<Work>,
}

/// The helpers' parking place: only the slow paths write here, so the caller's read of
/// `parked` on each step stays in its cache.
#[repr(align(128))]
struct ParkLine {
    /// Helpers asleep, or about to sleep, on `wake` (counted before they last look at the
    /// step's state; see [`wait_for_step`]).
    parked: AtomicUsize,
    /// Held to sleep on `wake` or `left` and to notify either.
    lock: Mutex<()>,
    /// Wakes parked helpers when a step opens.
    wake: Condvar,
    /// Wakes a caller waiting for the last helper to leave its step.
    left: Condvar,
}

/// The state a pool's helpers share with the callers.
struct Shared {
    step: StepLine,
    park: ParkLine,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ()> {
        self.park.lock.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The callers' flag, on a line the helpers never touch.
#[repr(align(128))]
struct Busy(AtomicBool);

/// The shared steps' stop flag, which every thread reads once per item: in the pool, on a
/// line of its own, so that it stays in each core's cache from step to step (a flag made
/// afresh on the caller's stack for each step would cost the helpers a transfer each).
#[repr(align(128))]
struct Flag(AtomicBool);

/// A pool of helper threads shared by the workloads that use the same thread count.
///
/// A step publishes its work; helpers that are awake (or wake in time) join it and take
/// items alongside the caller. When the caller has run out of items it closes the step and
/// waits only for the helpers that joined: a helper that wakes late (parked, or its core
/// given to another process) finds the step closed and goes back to waiting, so it costs
/// some parallelism, never a wait. (With rayon's scopes the caller waited for every
/// helper's job to run, even one that found nothing left to do: docs/cpu-acc-bounds.md,
/// "Thread pool".)
pub(super) struct Pool {
    shared: Arc<Shared>,
    /// Set while a step runs: a second caller at the same time (another network on this
    /// thread count, or a step started from inside a step) runs its step alone instead of
    /// waiting.
    busy: Busy,
    /// The stop flag of the step that holds `busy`: set when an item fails, cleared by the
    /// caller once every helper left.
    stop: Flag,
}

impl Pool {
    /// Start `helpers` threads.
    pub(super) fn start(helpers: usize) -> Result<Self> {
        let shared = Arc::new(Shared {
            step: StepLine {
                state: AtomicU64::new(0),
                job: AtomicPtr::new(std::ptr::null_mut()),
            },
            park: ParkLine {
                parked: AtomicUsize::new(0),
                lock: Mutex::new(()),
                wake: Condvar::new(),
                left: Condvar::new(),
            },
        });
        for i in 0..helpers {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("cpuacc-{i}"))
                .spawn(move || {
                    SLOT.set(i + 1);
                    helper(&shared)
                })
                .map_err(|e| {
                    BackendError::Other(format!("cannot start {} CpuAcc threads: {e}", helpers + 1))
                })?;
        }
        Ok(Pool {
            shared,
            busy: Busy(AtomicBool::new(false)),
            stop: Flag(AtomicBool::new(false)),
        })
    }

    /// Run `work(&stop)` on the calling thread and on every helper that joins in time; `work`
    /// takes items until none are left (or `stop` is set) and returns its first error. A
    /// panic in `work` on any thread becomes an error.
    pub(super) fn run<W>(&self, work: W) -> Result<()>
    where
        W: Fn(&AtomicBool) -> Result<()> + Sync,
    {
        // A second caller at the same time runs its step alone, with a stop flag of its own.
        let with_helpers = self
            .busy
            .0
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        let alone = AtomicBool::new(false);
        let stop = if with_helpers { &self.stop.0 } else { &alone };
        // Locked only when an item fails.
        let error: Mutex<Option<BackendError>> = Mutex::new(None);
        let record = |r: Result<()>| {
            if let Err(e) = r {
                stop.store(true, Ordering::Release);
                let mut slot = error.lock().unwrap_or_else(|p| p.into_inner());
                if slot.is_none() {
                    *slot = Some(e);
                }
            }
        };
        let job = || {
            let r = std::panic::catch_unwind(AssertUnwindSafe(|| work(stop)));
            record(r.unwrap_or_else(|_| {
                Err(BackendError::Execution("a CpuAcc kernel panicked".into()))
            }));
        };
        if with_helpers {
            self.share(&job);
            // Every helper left: no one reads the flag until the next step opens. Written only
            // when set, so that the line stays shared in the helpers' caches.
            if self.stop.0.load(Ordering::Relaxed) {
                self.stop.0.store(false, Ordering::Relaxed);
            }
            self.busy.0.store(false, Ordering::Release);
        } else {
            job();
        }
        error
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .map_or(Ok(()), Err)
    }

    /// Run `job` on the calling thread and on the helpers that join in time; return once
    /// every helper that joined has left (so `job` is never called after this returns).
    /// Only one caller at a time (`busy`).
    fn share(&self, job: &(dyn Fn() + Sync)) {
        let shared = &*self.shared;
        let line = &shared.step;
        // The address of this reference is what the helpers get: a thin pointer to a fat
        // one, with the lifetimes erased (the cast changes only the pointee's lifetimes).
        // It stays valid while any helper may read it: see the SAFETY comment in `helper`
        // (declared before `_close`, it is dropped after `_close` has waited).
        let job_ref: &(dyn Fn() + Sync) = job;
        let job_at = std::ptr::from_ref(&job_ref).cast::<Work>().cast_mut();
        line.job.store(job_at, Ordering::Relaxed);
        // No helper is joined (the last step's `Close` waited until none was), and only the
        // caller changes a state without helpers joined, so the state is stable here.
        let last = line.state.load(Ordering::Relaxed);
        let open = (last & !(GENERATION_ONE - 1)).wrapping_add(GENERATION_ONE) | OPEN;
        // Sequentially consistent with the load of `parked` below, as a helper's count in
        // `parked` is with its load of the state before it sleeps: either the caller sees the
        // helper counted and wakes it, or the helper sees this step open and does not sleep.
        line.state.store(open, Ordering::SeqCst);
        if shared.park.parked.load(Ordering::SeqCst) > 0 {
            let _guard = shared.lock();
            shared.park.wake.notify_all();
        }
        let _close = Close(shared);
        job();
    }
}

/// Closes the current step when dropped: no helper may join it any more, and the caller waits
/// (spinning briefly, then asleep) for those that did. A guard, so that it runs even if the
/// caller's share unwinds.
struct Close<'a>(&'a Shared);

impl Drop for Close<'_> {
    fn drop(&mut self) {
        let shared = self.0;
        let state = &shared.step.state;
        // Acquire: every helper that left before this saw its accesses to the step's data
        // finished (their leaving subtractions are releases on this word).
        let closed = state.fetch_and(!OPEN, Ordering::AcqRel);
        if closed & JOINED == 0 {
            return;
        }
        if spin_until(FINISH_SPIN, || state.load(Ordering::Acquire) & JOINED == 0) {
            return;
        }
        let mut guard = shared.lock();
        loop {
            let s = state.load(Ordering::Acquire);
            if s & JOINED == 0 {
                return;
            }
            // Under the lock: the last helper to leave sees `WAITING` in the value it
            // subtracts from and takes the lock to notify, which it gets only once this
            // thread sleeps, so the notification is not lost.
            if s & WAITING == 0
                && state
                    .compare_exchange(s, s | WAITING, Ordering::Acquire, Ordering::Acquire)
                    .is_err()
            {
                continue;
            }
            guard = shared
                .park
                .left
                .wait(guard)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Wait (spinning for [`KEEP_WARM`], then parked) until the step state's generation is not
/// `seen`; return that state.
fn wait_for_step(shared: &Shared, seen: u64) -> u64 {
    let state = &shared.step.state;
    let mut s = 0;
    if spin_until(keep_warm_time(), || {
        s = state.load(Ordering::Acquire);
        generation(s) != seen
    }) {
        return s;
    }
    let park = &shared.park;
    let mut guard = shared.lock();
    // Counted before the state is looked at (sequentially consistent, see `Pool::share`).
    park.parked.fetch_add(1, Ordering::SeqCst);
    loop {
        s = state.load(Ordering::SeqCst);
        if generation(s) != seen {
            break;
        }
        guard = park.wake.wait(guard).unwrap_or_else(|p| p.into_inner());
    }
    park.parked.fetch_sub(1, Ordering::Relaxed);
    s
}

/// A helper's life: spin for [`KEEP_WARM`] after each step waiting for the next one, then
/// park; join each step that is still open when it looks, at most once.
fn helper(shared: &Shared) {
    let line = &shared.step;
    let mut seen = 0u64;
    loop {
        let mut s = wait_for_step(shared, seen);
        seen = generation(s);
        // Join the step of generation `seen` unless it closed (a later step is looked at
        // afresh on the next round).
        let joined = loop {
            if s & OPEN == 0 || generation(s) != seen {
                break false;
            }
            match line
                .state
                .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break true,
                Err(now) => s = now,
            }
        };
        if !joined {
            continue;
        }
        let job_at = line.job.load(Ordering::Relaxed);
        // SAFETY: this helper is counted in the state's joined helpers of an open step, so
        // that step's caller is inside `Pool::share`: it stored `job_at` (the address of its
        // reference to the closure, both on its stack) before the store that opened the step,
        // which the successful acquire exchange above synchronizes with (the other helpers'
        // joins and leaves in between are read-modify-writes, which keep the release
        // sequence). The caller does not store another job, return, or unwind out of `share`
        // (its `Close` guard) before the count is back to zero and no helper can join again,
        // so the reference and the closure it borrows outlive this call; this helper's
        // leaving subtraction below is a release that `Close`'s acquire loads see. The
        // closure is `Sync`, so calling it from here is sound, and it catches its own panics;
        // the `catch_unwind` here only keeps the count right should that ever fail.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| unsafe {
            if let Some(job) = job_at.as_ref() {
                job();
            }
        }));
        let left = line.state.fetch_sub(1, Ordering::Release);
        if left & WAITING != 0 && left & JOINED == 1 {
            let _guard = shared.lock();
            shared.park.left.notify_all();
        }
    }
}
