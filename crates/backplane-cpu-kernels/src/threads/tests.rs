//! The pool's and the work splits' tests.

use super::*;
use std::time::Duration;

/// The busiest thread's load under a greedy hand-out, simulated.
fn simulated_load(units: usize, threads: usize, per: usize) -> usize {
    let mut loads = vec![0usize; threads];
    let mut left = units;
    while left > 0 {
        let take = per.min(left);
        left -= take;
        let t = (0..threads).min_by_key(|&t| loads[t]).unwrap();
        loads[t] += take;
    }
    loads.into_iter().max().unwrap()
}

/// The chosen chunk size is never worse than one chunk per thread (the best possible,
/// `ceil(units / threads)` units for the busiest thread) when `min` allows every thread
/// a chunk; every chunk holds at least `min` units unless there is one chunk; and the
/// load formula agrees with a simulated hand-out.
#[test]
fn shares_are_even_for_any_thread_count() {
    for threads in [1usize, 2, 3, 5, 16] {
        for units in 1..300usize {
            for min in [1usize, 2, 7] {
                for per_thread in [1usize, 2, 4] {
                    let per = even_share(units, threads, min, per_thread);
                    assert!(per >= 1 && per <= units, "{units} {threads} {min}: {per}");
                    let n = units.div_ceil(per);
                    if n > 1 {
                        assert!(per >= min, "{units} on {threads}, min {min}: {per}");
                        assert!(n <= threads * per_thread.max(1) + threads);
                    }
                    let load = simulated_load(units, threads, per);
                    assert_eq!(load, busiest_load(units, threads, per));
                    if units >= threads * min {
                        let best = units.div_ceil(threads);
                        assert_eq!(load, best, "{units} units on {threads}, min {min}: {per}");
                    }
                }
            }
        }
    }
    // The cases that motivated it: 6 row blocks on 2 threads, 6 panels on 2.
    assert_eq!(even_share(6, 2, 1, 2), 3);
    // Where the finest split is as even, it stays (a descheduled helper holds less).
    assert_eq!(even_share(24, 2, 1, 4), 3);
    assert_eq!(even_share(100, 2, 1, 2), 25);
    assert_eq!(even_share(3, 2, 1, 2), 1);
    // Too little work for a second thread: one chunk.
    assert_eq!(even_share(5, 2, 3, 2), 5);
    assert_eq!(Threads::single().chunk_size(100, 1, 1), 100);
}

/// A GEMM of few rows (a 7×7 layer: 49 rows, one block of 48 and a row) shares its
/// panels evenly; one of many rows, or of one panel, or on one thread shares rows as
/// [`Threads::chunk_size`] does; and whichever split is chosen, the busiest thread does
/// no more than under the other split plus the margin.
#[test]
fn gemm_splits_share_few_rows_by_panels() {
    // Rows in blocks of 48, as the channels-last byte GEMM shares them.
    let blocks = |rows: usize, threads: usize| even_share(rows.div_ceil(48), threads, 1, 2) * 48;
    let split =
        |rows, panels, threads| gemm_split(rows, panels, threads, blocks(rows, threads), 12);
    assert_eq!(split(49, 60, 2), GemmSplit::Panels(15));
    assert_eq!(split(49, 10, 2), GemmSplit::Panels(5));
    assert_eq!(split(49, 20, 3), GemmSplit::Panels(7));
    assert_eq!(split(49, 1, 2), GemmSplit::Rows(48));
    assert_eq!(split(49, 60, 1), GemmSplit::Rows(96));
    // 14×14 and larger planes split evenly enough by rows.
    assert_eq!(split(196, 4, 2), GemmSplit::Rows(96));
    assert_eq!(split(196, 24, 2), GemmSplit::Rows(96));
    assert_eq!(split(12544, 2, 2), GemmSplit::Rows(blocks(12544, 2)));
    assert_eq!(split(0, 5, 2), GemmSplit::Rows(48));
    // Rows in chunks of any length (a fully connected layer's): 70 rows as 35 + 35 keep
    // rows; one row shares panels.
    assert_eq!(gemm_split(70, 8, 2, 35, 12), GemmSplit::Rows(35));
    assert_eq!(gemm_split(1, 63, 2, 1, 12), GemmSplit::Panels(16));
    let th = Threads::new(2).unwrap();
    assert_eq!(th.gemm_split(49, 60, 48, 12), GemmSplit::Panels(15));
    for threads in [1usize, 2, 3, 5] {
        for rows in 1..200usize {
            for panels in [1usize, 2, 3, 7, 10, 60] {
                for (block, tile) in [(48, 12), (32, 4), (1, 12)] {
                    let per_rows = even_share(rows.div_ceil(block), threads, 1, 2) * block;
                    let chosen = gemm_split(rows, panels, threads, per_rows, tile);
                    let by_rows = |per: usize| {
                        let chunks = (0..rows.div_ceil(per))
                            .map(|i| per.min(rows - i * per).div_ceil(tile) * panels);
                        busiest_of(chunks, threads)
                    };
                    let by_panels = |per: usize| {
                        let chunks = (0..panels.div_ceil(per))
                            .map(|i| per.min(panels - i * per) * rows.div_ceil(tile));
                        busiest_of(chunks, threads)
                    };
                    match chosen {
                        GemmSplit::Rows(per) => {
                            assert_eq!(per, per_rows, "{rows} {panels} {threads}");
                            let alt = even_share(panels, threads, 1, 2);
                            if threads > 1 && panels > 1 {
                                assert!(8 * by_panels(alt) > 7 * by_rows(per));
                            }
                        }
                        GemmSplit::Panels(per) => {
                            assert!(threads > 1 && panels > 1 && per < panels);
                            assert!(8 * by_panels(per) <= 7 * by_rows(per_rows));
                        }
                    }
                }
            }
        }
    }
}

/// Each place takes its own contiguous range first, in order, and then the other places'
/// items from their ends; every item once, for any item and place count (places beyond
/// the count, as on a helper of a larger pool, wrap around).
#[test]
fn claims_take_own_range_first_then_the_others_from_the_back() {
    let c = Claims::new(10, 2).unwrap();
    let mine: Vec<usize> = (0..5).filter_map(|_| c.next(1)).collect();
    assert_eq!(mine, vec![5, 6, 7, 8, 9]);
    assert_eq!(c.next(1), Some(4));
    assert_eq!(c.next(0), Some(0));
    assert_eq!(c.next(3), Some(3));
    assert_eq!(c.next(1), Some(2));
    assert_eq!(c.next(0), Some(1));
    assert_eq!((c.next(0), c.next(1)), (None, None));
    for n in [0usize, 1, 2, 3, 7, 13, 64] {
        for count in 1..=5 {
            let c = Claims::new(n, count).unwrap();
            let mut seen = vec![0u32; n];
            let mut slot = 0;
            while let Some(i) = c.next(slot) {
                seen[i] += 1;
                slot = (slot * 7 + 3) % (count + 2);
            }
            assert!(seen.iter().all(|&v| v == 1), "{n} items, {count} places");
        }
    }
}

/// `columns` writes every column range of every row once (rows 1, 3, 17, 64; columns 1,
/// 7, 13, 55·55; shares that divide them or leave a narrow last range) at 1, 2 and 3
/// threads, leaves the columns past `n` alone, and refuses a matrix its buffer cannot
/// hold.
#[test]
fn columns_cover_each_range_of_each_row_once() {
    for threads in [1, 2, 3] {
        let th = Threads::new(threads).unwrap();
        for rows in [1usize, 3, 17, 64] {
            for n in [1usize, 7, 13, 55 * 55] {
                for share in [1usize, 4, 32, n.div_ceil(2), n] {
                    let ld = n + 3;
                    let mut data = vec![u32::MAX; (rows - 1) * ld + n];
                    th.columns(&mut data, ld, rows, n, share, |t, mut cols| {
                        assert_eq!(cols.rows(), rows);
                        assert_eq!(cols.width(), share.min(n - t * share));
                        for r in 0..rows {
                            for (j, v) in cols.row(r).unwrap().iter_mut().enumerate() {
                                assert_eq!(*v, u32::MAX);
                                *v = (r * ld + t * share + j) as u32;
                            }
                        }
                        assert!(cols.row(rows).is_none());
                        Ok(())
                    })
                    .unwrap();
                    for (i, v) in data.iter().enumerate() {
                        let want = if i % ld < n { i as u32 } else { u32::MAX };
                        assert_eq!(*v, want, "{threads}t {rows}x{n} share {share} at {i}");
                    }
                }
            }
        }
        let mut short = vec![0u8; 10];
        assert!(th.columns(&mut short, 4, 3, 3, 1, |_, _| Ok(())).is_err());
        assert!(th.columns(&mut short, 2, 3, 3, 1, |_, _| Ok(())).is_err());
    }
}

/// Every item is taken exactly once over many steps in a row, on the caller and helpers.
#[test]
fn steps_cover_every_item() {
    let th = Threads::new(3).unwrap();
    for step in 0..500 {
        let n = 1 + step % 37;
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        th.range(n, |i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        assert!(
            hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
            "step {step}"
        );
        let mut data = vec![0u32; 5 * n];
        th.chunks(&mut data, 3, |ci, c| {
            c.iter_mut().for_each(|v| *v = ci as u32 + 1);
            Ok(())
        })
        .unwrap();
        let want: Vec<u32> = (0..5 * n).map(|i| (i / 3) as u32 + 1).collect();
        assert_eq!(data, want, "step {step}");
    }
}

/// Inside [`alone`] every step runs on the calling thread, in the same chunks as with the
/// helpers (so the same bytes); outside it, and after it returns or unwinds, steps are
/// shared again.
#[test]
fn alone_keeps_steps_on_the_caller_in_the_same_chunks() {
    let th = private(3);
    let me = std::thread::current().id();
    let step = |th: &Threads| {
        let on_caller = AtomicUsize::new(0);
        let mut data = vec![0u32; 1000];
        th.chunks(&mut data, 7, |ci, c| {
            if std::thread::current().id() == me {
                on_caller.fetch_add(1, Ordering::Relaxed);
            }
            // Slow enough that awake helpers take some chunks.
            busy_for(20_000);
            c.iter_mut()
                .enumerate()
                .for_each(|(k, v)| *v = (ci * 1000 + k) as u32);
            Ok(())
        })
        .unwrap();
        (data, on_caller.load(Ordering::Relaxed))
    };
    let chunks = 1000usize.div_ceil(7);
    let (shared, _) = step(&th);
    let (lone, on_caller) = alone(|| step(&th));
    assert_eq!(lone, shared);
    assert_eq!(on_caller, chunks);
    let ids = std::sync::Mutex::new(std::collections::HashSet::new());
    alone(|| {
        th.range(50, |_| {
            ids.lock().unwrap().insert(std::thread::current().id());
            Ok(())
        })
    })
    .unwrap();
    assert_eq!(ids.lock().unwrap().len(), 1);
    // Nested, and restored after an unwind.
    alone(|| alone(|| ()));
    let _ = std::panic::catch_unwind(|| alone(|| panic!("inside alone")));
    let helped = (0..50).any(|_| step(&th).1 < chunks);
    assert!(
        helped,
        "the helpers never took a chunk after alone returned"
    );
}

/// An item's error comes back from the step; a panicking item becomes an error (the step
/// neither hangs nor takes the process down), and the pool still works afterwards.
#[test]
fn errors_and_panics_come_back_as_errors() {
    let th = Threads::new(2).unwrap();
    let r = th.range(64, |i| {
        if i == 40 {
            Err(BackendError::Execution("item 40".into()))
        } else {
            Ok(())
        }
    });
    assert!(matches!(r, Err(BackendError::Execution(m)) if m == "item 40"));
    let r = th.range(64, |i| {
        if i == 7 {
            panic!("item 7 panics");
        }
        Ok(())
    });
    assert!(matches!(r, Err(BackendError::Execution(m)) if m.contains("panicked")));
    let total = AtomicUsize::new(0);
    th.range(10, |i| {
        total.fetch_add(i, Ordering::Relaxed);
        Ok(())
    })
    .unwrap();
    assert_eq!(total.load(Ordering::Relaxed), 45);
}

/// Callers on several threads sharing one pool (networks run side by side): each step
/// still takes every item exactly once, whether it got the helpers or ran alone.
#[test]
fn concurrent_callers_share_a_pool() {
    let callers: Vec<_> = (0..3)
        .map(|c| {
            std::thread::spawn(move || {
                let th = Threads::new(2).unwrap();
                for step in 0..300 {
                    let n = 1 + (step + c) % 29;
                    let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                    th.range(n, |i| {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    })
                    .unwrap();
                    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
                }
            })
        })
        .collect();
    for c in callers {
        c.join().unwrap();
    }
}

/// A step started from inside a step (the pool is busy) runs on its own thread and
/// finishes.
#[test]
fn nested_steps_run() {
    let th = Threads::new(2).unwrap();
    let total = AtomicUsize::new(0);
    th.range(4, |_| {
        th.range(5, |j| {
            total.fetch_add(j, Ordering::Relaxed);
            Ok(())
        })
    })
    .unwrap();
    assert_eq!(total.load(Ordering::Relaxed), 4 * 10);
}

/// `count` threads on a pool of their own, not shared with the other tests running at the
/// same time (a step on a busy pool runs alone on its caller). Its helpers outlive the test,
/// parked.
fn private(count: usize) -> Threads {
    Threads {
        pool: Some(Arc::new(Pool::start(count - 1).unwrap())),
        count,
    }
}

/// Run `f` on a thread of its own and fail if it has not finished within `secs` seconds: a
/// lost wake-up hangs a step, and this makes that a failure instead of a hung test.
fn within(secs: u64, f: impl FnOnce() + Send + 'static) {
    let (done, finished) = std::sync::mpsc::channel();
    let body = std::thread::spawn(move || {
        f();
        let _ = done.send(());
    });
    match finished.recv_timeout(Duration::from_secs(secs)) {
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("hung for {secs} s"),
        // Finished, or panicked (the sender dropped): pass the panic on.
        _ => {
            if let Err(p) = body.join() {
                std::panic::resume_unwind(p);
            }
        }
    }
}

/// Spin for about `ns` nanoseconds (a helper caught in the middle of an item).
fn busy_for(ns: u64) {
    let t = std::time::Instant::now();
    while (t.elapsed().as_nanos() as u64) < ns {
        std::hint::spin_loop();
    }
}

/// Many tiny steps in a row, each closed while helpers are joining or still working: every
/// item runs exactly once, by its own step's closure, and no item is running (or starts)
/// once the step has returned. A caller that returned before a joined helper left would
/// leave `in_flight` above zero, or let the helper take the next step's items through the
/// old closure (`now` moved on, and the next step's items not all hit), at 2, 3 and 4
/// threads (1: no pool, the same guarantees trivially).
#[test]
fn no_item_runs_after_its_step_returns() {
    within(300, || {
        for threads in [1usize, 2, 3, 4] {
            let th = match threads {
                1 => Threads::single(),
                _ => private(threads),
            };
            let now = AtomicU64::new(0);
            let in_flight = AtomicUsize::new(0);
            let late = AtomicUsize::new(0);
            let on_helpers = AtomicUsize::new(0);
            let caller = std::thread::current().id();
            let steps: u64 = if threads <= 2 { 100_000 } else { 20_000 };
            // On a loaded machine the helpers may miss every one of the first `steps` (the
            // caller takes the items first): then it goes on until one took an item, for at
            // most two minutes, so the check below stays meaningful and does not flake.
            let start = std::time::Instant::now();
            let more = || {
                threads > 1
                    && on_helpers.load(Ordering::Relaxed) == 0
                    && start.elapsed() < Duration::from_secs(120)
            };
            let mut k = 0u64;
            while k < steps || more() {
                now.store(k, Ordering::SeqCst);
                let n = 1 + (k % 7) as usize;
                let hits: [AtomicUsize; 7] = std::array::from_fn(|_| AtomicUsize::new(0));
                let item = |i: usize| {
                    in_flight.fetch_add(1, Ordering::SeqCst);
                    if now.load(Ordering::SeqCst) != k {
                        late.fetch_add(1, Ordering::SeqCst);
                    }
                    hits[i].fetch_add(1, Ordering::Relaxed);
                    if std::thread::current().id() != caller {
                        on_helpers.fetch_add(1, Ordering::Relaxed);
                    }
                    if k.is_multiple_of(5) {
                        busy_for(300);
                    }
                    if now.load(Ordering::SeqCst) != k {
                        late.fetch_add(1, Ordering::SeqCst);
                    }
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                };
                if k.is_multiple_of(2) {
                    th.range(n, |i| {
                        item(i);
                        Ok(())
                    })
                    .unwrap();
                } else {
                    let mut data = [0u8; 7];
                    th.chunks(&mut data[..n], 1, |i, c| {
                        c[0] += 1;
                        item(i);
                        Ok(())
                    })
                    .unwrap();
                    assert!(data[..n].iter().all(|&v| v == 1), "{threads}t step {k}");
                }
                assert_eq!(in_flight.load(Ordering::SeqCst), 0, "{threads}t step {k}");
                assert!(
                    hits[..n].iter().all(|h| h.load(Ordering::Relaxed) == 1),
                    "{threads}t step {k}"
                );
                assert!(hits[n..].iter().all(|h| h.load(Ordering::Relaxed) == 0));
                k += 1;
            }
            assert_eq!(late.load(Ordering::SeqCst), 0, "{threads} threads");
            // The helpers took part (else this tested nothing).
            assert_eq!(on_helpers.load(Ordering::Relaxed) > 0, threads > 1);
        }
    });
}

/// Errors and panics on any item (the caller's or a helper's) come back from their step,
/// steps after them run every item, and no item runs once its step returned; then every
/// helper still joins a step (a leaked join would hang a later step, a lost one would let
/// a step return early).
#[test]
fn errors_and_panics_in_many_steps_leave_the_pool_whole() {
    within(300, || {
        for threads in [2usize, 3, 4] {
            let th = private(threads);
            let in_flight = AtomicUsize::new(0);
            for k in 0..3_000usize {
                let n = 2 + k % 11;
                let bad = k % n;
                let panics = k % 100 == 0;
                let ran = AtomicUsize::new(0);
                let r = th.range(n, |i| {
                    in_flight.fetch_add(1, Ordering::SeqCst);
                    ran.fetch_add(1, Ordering::Relaxed);
                    busy_for(if i % 2 == 0 { 100 } else { 0 });
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    if i == bad && k % 3 == 0 {
                        if panics {
                            panic!("item {i} panics");
                        }
                        return Err(BackendError::Execution(format!("item {i}")));
                    }
                    Ok(())
                });
                assert_eq!(in_flight.load(Ordering::SeqCst), 0, "{threads}t step {k}");
                match r {
                    Ok(()) => {
                        assert!(k % 3 != 0, "{threads}t step {k}: the error was lost");
                        assert_eq!(ran.load(Ordering::Relaxed), n);
                    }
                    Err(BackendError::Execution(m)) if panics => assert!(m.contains("panicked")),
                    Err(BackendError::Execution(m)) => assert_eq!(m, format!("item {bad}")),
                    Err(e) => panic!("{threads}t step {k}: {e}"),
                }
            }
            assert!(
                all_threads_take_part(&th, Duration::ZERO),
                "{threads} threads"
            );
        }
    });
}

/// Whether every thread of `th` takes an item of one step: each of `count` items waits (up
/// to seconds) until all have started, so no thread can take two. Then the helpers' items
/// sleep for `helper_work` while the caller's returns at once, and the step must not return
/// before they are done.
fn all_threads_take_part(th: &Threads, helper_work: Duration) -> bool {
    let count = th.count();
    let caller = std::thread::current().id();
    let (arrived, in_flight) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let ids = Mutex::new(Vec::new());
    let r = th.range(count, |_| {
        in_flight.fetch_add(1, Ordering::SeqCst);
        ids.lock().unwrap().push(std::thread::current().id());
        arrived.fetch_add(1, Ordering::SeqCst);
        let t = std::time::Instant::now();
        while arrived.load(Ordering::SeqCst) < count && t.elapsed().as_secs() < 10 {
            std::thread::yield_now();
        }
        if std::thread::current().id() != caller {
            std::thread::sleep(helper_work);
        }
        in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    });
    assert_eq!(
        in_flight.load(Ordering::SeqCst),
        0,
        "returned before a helper left"
    );
    let mut ids = ids.into_inner().unwrap();
    ids.sort_by_key(|id| format!("{id:?}"));
    ids.dedup();
    r.is_ok() && ids.len() == count
}

/// After idle gaps longer than the helpers spin (they park), the next step wakes them and
/// each takes part; a step whose helpers work longer than the caller spins for them (it
/// sleeps until the last leaves) returns only once they left.
#[test]
fn parked_helpers_wake_and_slow_helpers_are_waited_for() {
    within(300, || {
        for threads in [2usize, 3, 4] {
            let th = private(threads);
            for (round, gap_us) in [0u64, 300, 2_000, 20_000, 300, 5_000, 0]
                .into_iter()
                .enumerate()
            {
                std::thread::sleep(Duration::from_micros(gap_us));
                let work = Duration::from_millis(if round % 2 == 0 { 3 } else { 0 });
                assert!(
                    all_threads_take_part(&th, work),
                    "{threads}t after {gap_us} us idle (round {round})"
                );
            }
        }
    });
}
