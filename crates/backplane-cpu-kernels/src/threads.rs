//! Intra-op parallelism: the calling thread plus `count - 1` helper threads, or no pool at
//! all for one thread (so a 1-thread backend runs exactly the single-threaded code, with no
//! pool hand-offs).
//!
//! A parallel step cuts its items into one contiguous range per thread, each thread taking
//! its own range first and then what is left of the others' (`Claims`), so the same thread
//! takes the same part of consecutive steps; the calling thread works on them too, so it
//! never sleeps while a layer runs, and a helper that wakes late costs only some
//! parallelism, never a wait (see `Pool`). After a step each helper spins for
//! `KEEP_WARM`, then parks: back-to-back layers find the helpers awake instead of paying a
//! wake-up each. Spinning threads yield to the OS every few tens of microseconds, so on a busy
//! machine they hand their core to the thread they wait for. A step's hand-off takes no lock
//! (`pool`: one atomic word for the step's state).
//!
//! The `unsafe` here hands the step's closure, which borrows the caller's stack, to the
//! helpers (the caller closes the step and waits for every helper that joined it before
//! returning: `pool`), and hands each thread the chunks of [`Threads::chunks`] it claimed.
#![allow(unsafe_code)]

mod pool;

use backplane_backend_api::{BackendError, Result};
pub use pool::set_keep_warm;
use pool::Pool;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

thread_local! {
    /// This thread's place in its pool: 0 for a calling thread, `i + 1` for helper `i`. A
    /// step's items are cut into one contiguous range per place ([`Claims`]), so the same
    /// thread takes the same part of every step.
    static SLOT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };

    /// Set while [`alone`] runs a closure: the steps it starts run on this thread only.
    static ALONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` with every parallel step it starts run on the calling thread alone, the helpers
/// left out: each step cut into the same chunks as with the helpers, the chunks run in
/// order. A chunk's work does not depend on the thread that runs it, so the results are the
/// same bytes as with the helpers; what changes is only where the time goes (a layer too
/// small, or whose data sits too far from the other core, for the hand-off to pay: see the
/// CpuAcc backend's per-layer thread choice). Nests, and is restored when `f` unwinds.
pub fn alone<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ALONE.set(self.0);
        }
    }
    let _restore = Restore(ALONE.replace(true));
    f()
}

/// One place's range of a step's items, as `front | back << 32`: its owner takes items from
/// the front, other threads (done with their own) from the back. On a pair of cache lines of
/// its own (the neighbouring line is prefetched with it), so that the owner's claims stay on
/// its core.
#[repr(align(128))]
struct Cursor(AtomicU64);

/// Who takes which item of a step: items `0..n` cut into `count` contiguous ranges, range
/// `t` for the thread in place `t`, which takes its items in order; a thread that has run out
/// takes the others' last items. So when consecutive layers share their work out in the same
/// order (the same channels, rows or pixels to the same place), each thread mostly reads
/// what it wrote in the layer before, instead of what the other thread wrote: a cache line
/// written on one core and read on another costs a transfer, several times a local read when
/// the two cores sit on different chiplets (docs/perf.md, "session 48, two threads across
/// chiplets"). A thread that comes late (or never) costs only its items' order, never a
/// wait: every item is taken exactly once either way.
struct Claims {
    count: usize,
    /// The ranges of up to [`INLINE_PLACES`] places (no allocation for a step on few
    /// threads).
    inline: [Cursor; INLINE_PLACES],
    /// The ranges, where there are more places.
    heap: Vec<Cursor>,
}

/// Places whose ranges [`Claims`] keeps without allocating.
const INLINE_PLACES: usize = 4;

impl Claims {
    /// `n` items (below 2³²) for `count` places.
    fn new(n: usize, count: usize) -> Result<Self> {
        let count = count.max(1);
        let cursor = |t: usize| {
            let (front, back) = (t * n / count, (t + 1) * n / count);
            Cursor(AtomicU64::new(front as u64 | (back as u64) << 32))
        };
        let mut heap = Vec::new();
        if count > INLINE_PLACES {
            heap.try_reserve_exact(count)
                .map_err(|_| BackendError::Execution("out of memory for a parallel step".into()))?;
            heap.extend((0..count).map(cursor));
        }
        Ok(Claims {
            count,
            // Places past the count have empty ranges (never looked at).
            inline: std::array::from_fn(|t| match t < count && heap.is_empty() {
                true => cursor(t),
                false => Cursor(AtomicU64::new(0)),
            }),
            heap,
        })
    }

    /// Take the first free item of range `t` (`own`) or its last one (stealing), if any.
    fn take_from(&self, t: usize, own: bool) -> Option<usize> {
        let cursor = &self.heap.get(t).or_else(|| self.inline.get(t))?.0;
        let mut cur = cursor.load(Ordering::Acquire);
        loop {
            let (front, back) = (cur & 0xffff_ffff, cur >> 32);
            if front >= back {
                return None;
            }
            let (next, item) = if own {
                (cur + 1, front)
            } else {
                (front | (back - 1) << 32, back - 1)
            };
            match cursor.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(item as usize),
                Err(now) => cur = now,
            }
        }
    }

    /// The next item for the thread in place `slot` (taken modulo the places: a step run
    /// alone on a helper of another pool still takes every item).
    fn next(&self, slot: usize) -> Option<usize> {
        let me = slot % self.count;
        self.take_from(me, true)
            .or_else(|| (1..self.count).find_map(|d| self.take_from((me + d) % self.count, false)))
    }
}

/// Most items of a step that go out by place ([`Claims`], which counts in 32 bits); a step of
/// more (which the work splits never make) hands them out in order from one counter.
const MAX_CLAIMED: usize = u32::MAX as usize;

/// The start of a step's data, shared with the helpers that take its chunks.
struct Base<T>(*mut T);

impl<T> Base<T> {
    /// The element `i` places on (inside the data, by the caller's bounds).
    fn at(&self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }
}

// SAFETY: the helpers reach the data only through disjoint chunks ([`Threads::chunks`]), and
// sending those is sound for `T: Send`.
unsafe impl<T: Send> Sync for Base<T> {}

/// One task's columns of a row-major matrix ([`Threads::columns`]): the same column range
/// of each row, borrowed mutably for the task.
pub struct Columns<'a, T> {
    /// The task's first column of row 0.
    base: *mut T,
    ld: usize,
    rows: usize,
    width: usize,
    _data: std::marker::PhantomData<&'a mut [T]>,
}

impl<T> Columns<'_, T> {
    /// How many columns the task has.
    pub fn width(&self) -> usize {
        self.width
    }

    /// How many rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The task's columns of row `r` (`None` past the last row).
    pub fn row(&mut self, r: usize) -> Option<&mut [T]> {
        if r >= self.rows {
            return None;
        }
        // SAFETY: `Threads::columns` checked that row `r`'s columns lie inside the matrix's
        // buffer, which it borrows mutably for the step, and gives each task a column range
        // no other task has; `&mut self` keeps this row's slice unique within the task.
        Some(unsafe {
            std::slice::from_raw_parts_mut(self.base.wrapping_add(r * self.ld), self.width)
        })
    }
}

/// The threads a workload may use.
#[derive(Clone)]
pub struct Threads {
    pool: Option<Arc<Pool>>,
    count: usize,
}

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Threads({})", self.count)
    }
}

/// Pools by thread count, shared by every CpuAcc workload of the process (pools are costly to
/// start; workloads of any number of networks share them).
fn pools() -> &'static Mutex<HashMap<usize, Arc<Pool>>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<Pool>>>> = OnceLock::new();
    POOLS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The machine's hardware threads.
pub fn machine_threads() -> usize {
    std::thread::available_parallelism()
        .map(std::num::NonZeroUsize::get)
        .unwrap_or(1)
}

impl Threads {
    /// No parallelism: everything runs on the calling thread.
    pub fn single() -> Self {
        Threads {
            pool: None,
            count: 1,
        }
    }

    /// `count` threads: the calling thread and `count - 1` pool helpers.
    pub fn new(count: usize) -> Result<Self> {
        let count = count.max(1);
        if count == 1 {
            return Ok(Self::single());
        }
        let mut map = pools().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pool) = map.get(&count) {
            return Ok(Threads {
                pool: Some(pool.clone()),
                count,
            });
        }
        let pool = Arc::new(Pool::start(count - 1)?);
        map.insert(count, pool.clone());
        Ok(Threads {
            pool: Some(pool),
            count,
        })
    }

    /// How many threads.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The pool, unless there is none or [`alone`] keeps this thread's steps to itself.
    fn helpers(&self) -> Option<&Arc<Pool>> {
        self.pool.as_ref().filter(|_| !ALONE.get())
    }

    /// Run `f(index, chunk)` over `data.chunks_mut(chunk)`, in parallel when there is a pool
    /// and more than one chunk.
    pub fn chunks<T, F>(&self, data: &mut [T], chunk: usize, f: F) -> Result<()>
    where
        T: Send,
        F: Fn(usize, &mut [T]) -> Result<()> + Sync + Send,
    {
        let chunk = chunk.max(1);
        let n = data.len().div_ceil(chunk);
        match self.helpers() {
            Some(pool) if n > 1 && n <= MAX_CLAIMED => {
                let claims = Claims::new(n, self.count)?;
                let len = data.len();
                let base = Base(data.as_mut_ptr());
                pool.run(|stop| {
                    let slot = SLOT.get();
                    while !stop.load(Ordering::Acquire) {
                        let Some(i) = claims.next(slot) else {
                            break;
                        };
                        let start = i * chunk;
                        let size = chunk.min(len - start);
                        // SAFETY: `data` is borrowed mutably for the whole step, and `Claims`
                        // hands out each index below `n = ceil(len / chunk)` exactly once, so
                        // the chunks `start..start + size` (inside `data`) taken on the
                        // threads are disjoint and none outlives the step: the same slices
                        // `data.chunks_mut(chunk)` would give.
                        let c = unsafe { std::slice::from_raw_parts_mut(base.at(start), size) };
                        f(i, c)?;
                    }
                    Ok(())
                })
            }
            Some(pool) if n > 1 => {
                let items = Mutex::new(data.chunks_mut(chunk).enumerate());
                pool.run(|stop| {
                    while !stop.load(Ordering::Acquire) {
                        let next = items.lock().unwrap_or_else(|p| p.into_inner()).next();
                        match next {
                            Some((i, c)) => f(i, c)?,
                            None => break,
                        }
                    }
                    Ok(())
                })
            }
            _ => {
                for (i, c) in data.chunks_mut(chunk).enumerate() {
                    f(i, c)?;
                }
                Ok(())
            }
        }
    }

    /// Run `f(i, columns)` for the column ranges `i·share .. min((i + 1)·share, n)` of a
    /// row-major matrix of `rows` rows `ld` apart in `data`, in parallel when there is a pool:
    /// each task writes its columns of every row. This is the split that keeps a channels-first
    /// tensor's pixels on the thread that computed them (rows are channels, columns pixels),
    /// where [`Threads::chunks`] can only cut whole rows. Tasks are claimed as in `chunks`, so
    /// task `i` runs on the same thread as item `i` of a step of as many items.
    pub fn columns<T, F>(
        &self,
        data: &mut [T],
        ld: usize,
        rows: usize,
        n: usize,
        share: usize,
        f: F,
    ) -> Result<()>
    where
        T: Send,
        F: Fn(usize, Columns<'_, T>) -> Result<()> + Sync + Send,
    {
        let share = share.max(1);
        if rows == 0 || n == 0 {
            return Ok(());
        }
        if n > ld || data.len() < (rows - 1) * ld + n {
            return Err(BackendError::Execution(
                "column split: the matrix does not fit its buffer".into(),
            ));
        }
        let tasks = n.div_ceil(share);
        let base = Base(data.as_mut_ptr());
        let task = |i: usize| {
            let c0 = i * share;
            f(
                i,
                Columns {
                    base: base.at(c0),
                    ld,
                    rows,
                    width: share.min(n - c0),
                    _data: std::marker::PhantomData,
                },
            )
        };
        // Every task's columns lie inside `data` (checked above) and the tasks' column ranges
        // are disjoint, so `range` running each index once keeps the `Columns` disjoint.
        self.range(tasks, task)
    }

    /// Run `f(i)` for `i` in `0..n`, in parallel when there is a pool.
    pub fn range<F>(&self, n: usize, f: F) -> Result<()>
    where
        F: Fn(usize) -> Result<()> + Sync + Send,
    {
        match self.helpers() {
            Some(pool) if n > 1 && n <= MAX_CLAIMED => {
                let claims = Claims::new(n, self.count)?;
                pool.run(|stop| {
                    let slot = SLOT.get();
                    while !stop.load(Ordering::Acquire) {
                        let Some(i) = claims.next(slot) else {
                            break;
                        };
                        f(i)?;
                    }
                    Ok(())
                })
            }
            Some(pool) if n > 1 => {
                let next = AtomicUsize::new(0);
                pool.run(|stop| {
                    while !stop.load(Ordering::Acquire) {
                        let i = next.fetch_add(1, Ordering::AcqRel);
                        if i >= n {
                            break;
                        }
                        f(i)?;
                    }
                    Ok(())
                })
            }
            _ => (0..n).try_for_each(f),
        }
    }

    /// Split `total` items into chunks for `chunks`: each a multiple of `align` items (the
    /// last may be shorter) and at least `min` items, about two per thread, sized by
    /// [`Threads::share`] so the threads' loads are as even as `align` allows. Less than
    /// `2 · min` items is one chunk: the step runs on the calling thread alone.
    pub fn chunk_size(&self, total: usize, min: usize, align: usize) -> usize {
        let align = align.max(1);
        let units = total.div_ceil(align);
        let per = self.share(units, min.div_ceil(align), 2);
        per.max(1) * align
    }

    /// Units per chunk when `units` units of work (each about the same cost: an aligned block
    /// of rows, a column panel) are split between these threads, at least `min` units per
    /// chunk (below that a chunk costs more in hand-offs than it saves): the chunk size that
    /// gives the smallest load to the busiest thread, among sizes that make about
    /// `per_thread` chunks per thread or fewer, the finest of those (more chunks let the
    /// threads that run ahead take the work of one that was descheduled). Depends on the thread count and the work
    /// only, so the split is even for 2 threads as for 16: 6 units on 2 threads are two
    /// chunks of 3, not three of 2 (where one thread would do 4).
    pub fn share(&self, units: usize, min: usize, per_thread: usize) -> usize {
        even_share(units, self.count, min, per_thread)
    }

    /// How to share a GEMM of `rows` output rows and `panels` column panels between these
    /// threads, where the caller would share rows in chunks of `per_rows` ([`gemm_split`]).
    pub fn gemm_split(
        &self,
        rows: usize,
        panels: usize,
        per_rows: usize,
        tile: usize,
    ) -> GemmSplit {
        gemm_split(rows, panels, self.count, per_rows, tile)
    }
}

/// How the threads share a GEMM's output ([`gemm_split`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmSplit {
    /// Chunks of this many rows (the last may be shorter), each over every column.
    Rows(usize),
    /// Chunks of this many column panels (the last may be shorter), each over every row.
    Panels(usize),
}

/// How `threads` threads share a GEMM of `rows` rows and `panels` column panels, whose kernel
/// computes tiles of `tile` rows by one panel, where the caller would share rows in chunks
/// of `per_rows` (its [`Threads::chunk_size`], which keeps a chunk from being so small that
/// the hand-off costs more than it saves).
///
/// Sharing rows is the default (each thread's rows are its own, no copy). But a layer of few
/// rows (the 7×7 layers at the end of a classifier: 49 rows, a block of 48 and a row) cannot
/// be shared evenly by blocks: one thread would do nearly all of it. Then the threads share
/// the panels instead, each over every row (its columns copied into place afterwards, and
/// its part of B read by each alone), where that makes the busiest thread's tiles at least
/// an eighth fewer (the margin pays for the copy).
pub fn gemm_split(
    rows: usize,
    panels: usize,
    threads: usize,
    per_rows: usize,
    tile: usize,
) -> GemmSplit {
    let (per_rows, tile) = (per_rows.max(1), tile.max(1));
    if threads < 2 || panels < 2 || rows == 0 {
        return GemmSplit::Rows(per_rows);
    }
    // The busiest thread's tiles (row tiles times panels) under each split.
    let row_chunks = (0..rows.div_ceil(per_rows)).map(|i| {
        let r = per_rows.min(rows - i * per_rows);
        r.div_ceil(tile) * panels
    });
    let by_rows = busiest_of(row_chunks, threads);
    let per_panels = even_share(panels, threads, 1, 2).max(1);
    let row_tiles = rows.div_ceil(tile);
    let panel_chunks = (0..panels.div_ceil(per_panels)).map(|i| {
        let p = per_panels.min(panels - i * per_panels);
        p * row_tiles
    });
    let by_panels = busiest_of(panel_chunks, threads);
    if by_panels * 8 <= by_rows * 7 {
        GemmSplit::Panels(per_panels)
    } else {
        GemmSplit::Rows(per_rows)
    }
}

/// The busiest of `threads` equally fast threads' load when chunks of these costs are handed
/// out in order, each to the thread that has done the least so far.
fn busiest_of(costs: impl Iterator<Item = usize>, threads: usize) -> usize {
    let mut loads = vec![0usize; threads.max(1)];
    for c in costs {
        if let Some(least) = loads.iter_mut().min() {
            *least += c;
        }
    }
    loads.into_iter().max().unwrap_or(0)
}

/// [`Threads::share`] for `threads` threads.
pub fn even_share(units: usize, threads: usize, min: usize, per_thread: usize) -> usize {
    let min = min.max(1);
    if units == 0 {
        return 1;
    }
    // Threads that can get a chunk of at least `min` units; one means one chunk.
    let usable = threads.min(units / min).max(1);
    if usable == 1 {
        return units;
    }
    let one_each = units.div_ceil(usable);
    let finest = units.div_ceil(usable * per_thread.max(1)).max(min);
    // Candidates from the finest split up (a few dozen at most: beyond, the finest sizes
    // already balance to within a unit or so), then one chunk per thread, which is always
    // as even as units allow; the finest of the evenest wins.
    let mut best = one_each;
    let mut best_load = busiest_load(units, threads, one_each);
    for per in (finest..one_each).take(64).rev() {
        let load = busiest_load(units, threads, per);
        if load <= best_load {
            best = per;
            best_load = load;
        }
    }
    best
}

/// The units the busiest of `threads` equally fast threads does when `units` are cut into
/// chunks of `per` (the last shorter) and handed out in order to whichever thread is free.
fn busiest_load(units: usize, threads: usize, per: usize) -> usize {
    let n = units.div_ceil(per);
    let last = units - (n - 1) * per;
    let (rounds, rem) = (n / threads, n % threads);
    match rem {
        // Thread 0 never takes the last chunk: it does `rounds` full ones.
        0 => rounds * per,
        // The last chunk is the only one of the final round.
        1 => rounds * per + last,
        _ => (rounds + 1) * per,
    }
}

#[cfg(test)]
mod tests;
