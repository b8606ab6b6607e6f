//! What the pool's claims by place are worth: two steps in a row on a pool of two, as two
//! layers run. The first step writes a buffer of S KiB in two chunks ([`Threads::chunks`]),
//! the second sums it in two items ([`Threads::range`]), item `i` reading chunk `i` (the
//! chunk the same thread wrote, when each thread takes its own place's items) or chunk
//! `1 - i` (the other thread's). Median µs per pair of steps; run beside `core_round_trip`
//! (docs/perf.md, "session 48, two threads across chiplets").
//! `cargo run --release --example pool_locality -p backplane-cpu-kernels`.

use backplane_cpu_kernels::threads::Threads;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Sum in 16 lanes (the loop runs at the loads' speed).
fn sum(data: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for c in data.chunks_exact(16) {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += *v;
        }
    }
    acc.iter().sum()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let two = Threads::new(2)?;
    println!("µs per write step + read step (median)   own chunk   other's chunk");
    let mut kib = 16usize;
    while kib <= 2048 {
        let len = kib * 1024 / 4;
        let mut buf = vec![0f32; len];
        let half = len / 2;
        let rounds = (64 * 1024 / kib).clamp(50, 2000);
        let sink = AtomicU64::new(0);
        let mut line = format!("S = {kib:5} KiB                          ");
        for shift in [0usize, 1] {
            let mut times = Vec::with_capacity(rounds);
            for r in 0..rounds {
                let t = Instant::now();
                two.chunks(&mut buf, half, |i, c| {
                    c.fill((r + i) as f32);
                    Ok(())
                })?;
                let data = &buf;
                two.range(2, |i| {
                    let j = (i + shift) % 2;
                    let s = sum(&data[j * half..(j + 1) * half]);
                    sink.fetch_add(s.to_bits() as u64, Ordering::Relaxed);
                    Ok(())
                })?;
                times.push(t.elapsed().as_secs_f64() * 1e6);
            }
            times.sort_by(f64::total_cmp);
            line.push_str(&format!(" {:11.2}", times[times.len() / 2]));
        }
        black_box(sink.load(Ordering::Relaxed));
        println!("{line}");
        kib *= 4;
    }
    Ok(())
}
