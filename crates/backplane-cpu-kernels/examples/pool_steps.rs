//! The thread pool's fixed cost per step: steps of two items with a little work each, run
//! back to back and with serial work between them (as a network's layers run), on one thread
//! and on a pool of two. `cargo run --release --example pool_steps -p backplane-cpu-kernels`.

use backplane_cpu_kernels::threads::Threads;
use std::hint::black_box;
use std::time::Instant;

/// About `n` units of arithmetic that the compiler cannot drop.
fn spin(n: u64) -> u64 {
    let mut x = 1u64;
    for i in 0..n {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    x
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let two = Threads::new(2)?;
    let one = Threads::single();
    let steps = 20_000u32;
    for (work, between) in [(0u64, 0u64), (2_000, 0), (2_000, 2_000), (20_000, 5_000)] {
        let mut line = format!("item work {work:6} serial {between:6}:");
        for (name, th) in [("1t", &one), ("2t", &two)] {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                for _ in 0..steps {
                    th.range(2, |_| {
                        black_box(spin(work));
                        Ok(())
                    })?;
                    black_box(spin(between));
                }
                best = best.min(t.elapsed().as_secs_f64() * 1e6 / f64::from(steps));
            }
            line.push_str(&format!(" {name} {best:7.2} us/step"));
        }
        println!("{line}");
    }
    Ok(())
}
