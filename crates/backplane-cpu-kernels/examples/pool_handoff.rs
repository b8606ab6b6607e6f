//! The pool's hand-off cost: empty and tiny steps of [`Threads::range`] and
//! [`Threads::chunks`] on a pool of two, back to back, in ns per step, beside the round trip
//! of a flag between two threads measured in the same process (a step cannot cost less than
//! about one round trip: the helper must see the step open, and the caller must see it leave).
//!
//! Cache lines a step moves between the two cores when the helper is awake and joins (each
//! a one-way transfer, about half a round trip):
//! - the step's state line, to the caller when it opens the step, to the helper when it reads
//!   it and again when it joins (its read left a shared copy on the caller), back to the
//!   caller when it closes the step after the helper left: 3-4;
//! - the helper's claim cursor (written by the caller when the step starts, then by the
//!   helper), the stop flag the helper reads, and whichever cursor a thread steals from: 2-4.
//!
//! Run beside `core_round_trip` (docs/perf.md, "session 49, the pool's hand-off").
//! `cargo run --release --example pool_handoff -p backplane-cpu-kernels`.

use backplane_cpu_kernels::threads::Threads;
use std::hint::black_box;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// One kind of step, run once.
type Step<'a> = dyn FnMut() -> backplane_backend_api::Result<()> + 'a;

/// The best (on a busy machine: the two threads' scheduled together) of `rounds` rounds of
/// `trips` round trips of a flag between this thread and another, in mean ns per trip.
fn round_trip(rounds: u32, trips: u32) -> f64 {
    let flag = Arc::new(AtomicU32::new(0));
    let other = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            for _ in 0..rounds * trips {
                while flag.load(Ordering::Acquire) != 1 {
                    std::hint::spin_loop();
                }
                flag.store(0, Ordering::Release);
            }
        })
    };
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let start = Instant::now();
        for _ in 0..trips {
            flag.store(1, Ordering::Release);
            while flag.load(Ordering::Acquire) != 0 {
                std::hint::spin_loop();
            }
        }
        best = best.min(start.elapsed().as_nanos() as f64 / f64::from(trips));
    }
    let _ = other.join();
    best
}

/// The median and the best over `rounds` of the mean ns per call of `step` over `steps`
/// calls (the best is the figure for a quiet machine: rounds where both threads ran).
fn step_ns(rounds: usize, steps: u32, mut step: impl FnMut()) -> (f64, f64) {
    let mut times: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..steps {
                step();
            }
            t.elapsed().as_nanos() as f64 / f64::from(steps)
        })
        .collect();
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[0])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let two = Threads::new(2)?;
    let sink = AtomicU64::new(0);
    let mut data = vec![0u32; 64];
    let (rounds, steps) = (200, 1_000);
    println!(
        "round trip before (best): {:8.1} ns",
        round_trip(100, 2_000)
    );
    println!("{:28} {:>10} {:>10}", "ns per step", "median", "best");
    let missed = AtomicU64::new(0);
    let cases: [(&str, Box<Step>); 5] = [
        (
            "range(2), empty items",
            Box::new(|| two.range(2, |_| Ok(()))),
        ),
        (
            "range(64), one add each",
            Box::new(|| {
                two.range(64, |i| {
                    sink.fetch_add(i as u64, Ordering::Relaxed);
                    Ok(())
                })
            }),
        ),
        (
            "chunks(64 of 32), writes",
            Box::new(|| {
                two.chunks(&mut data, 32, |i, c| {
                    c.iter_mut().for_each(|v| *v = black_box(i as u32));
                    Ok(())
                })
            }),
        ),
        (
            "range(2), both threads",
            Box::new(|| {
                // Each item waits until both have started: the step's time is the hand-off
                // itself (the helper seeing the step, the caller seeing it leave).
                let arrived = AtomicU32::new(0);
                two.range(2, |_| {
                    arrived.fetch_add(1, Ordering::AcqRel);
                    let t = Instant::now();
                    while arrived.load(Ordering::Acquire) < 2 {
                        if t.elapsed().as_micros() > 200 {
                            missed.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        std::hint::spin_loop();
                    }
                    Ok(())
                })
            }),
        ),
        (
            "range(2), 200 ns each",
            Box::new(|| {
                two.range(2, |_| {
                    let t = Instant::now();
                    while t.elapsed().as_nanos() < 200 {
                        std::hint::spin_loop();
                    }
                    Ok(())
                })
            }),
        ),
    ];
    for (name, mut step) in cases {
        let mut failed = None;
        let (median, best) = step_ns(rounds, steps, || {
            if let Err(e) = step() {
                failed = Some(e);
            }
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
        println!("{name:28} {median:10.1} {best:10.1}");
    }
    println!(
        "steps of both threads where one waited 200 us in vain: {}",
        missed.load(Ordering::Relaxed)
    );
    println!(
        "round trip after (best):  {:8.1} ns",
        round_trip(100, 2_000)
    );
    black_box(sink.load(Ordering::Relaxed));
    Ok(())
}
