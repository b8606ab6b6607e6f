//! How far apart the machine's cores are: two threads hand a flag back and forth and the
//! mean round trip is printed. On the shared 2-vCPU host the two vCPUs are sometimes ~80 ns
//! apart and sometimes ~400 ns (other chiplets); two-thread timings taken in the second state
//! are not comparable with the first (docs/perf.md, "Whole suite after session 47").
//! `cargo run --release --example core_round_trip -p backplane-cpu-kernels`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

const ROUNDS: u32 = 200_000;

fn main() {
    let flag = Arc::new(AtomicU32::new(0));
    let other = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            for _ in 0..ROUNDS {
                while flag.load(Ordering::Acquire) != 1 {
                    std::hint::spin_loop();
                }
                flag.store(0, Ordering::Release);
            }
        })
    };
    let start = Instant::now();
    for _ in 0..ROUNDS {
        flag.store(1, Ordering::Release);
        while flag.load(Ordering::Acquire) != 0 {
            std::hint::spin_loop();
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
    if other.join().is_err() {
        eprintln!("the other thread stopped early");
        std::process::exit(1);
    }
    println!("round trip between two threads: {ns:.1} ns");
}
