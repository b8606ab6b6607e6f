//! What it costs a thread to read data that another thread just wrote, against data it
//! wrote itself: the question behind the slow two-thread windows of the shared host, where
//! the two vCPUs sit on different chiplets (docs/perf.md, "session 48, two threads across
//! chiplets"). Run it beside `core_round_trip` (which tells the state).
//!
//! For buffer sizes S of 16 KiB to 2 MiB, per KiB read (median of many rounds):
//! - `own`: thread A writes S, then A reads (sums) it;
//! - `other`: A writes S, then thread B reads it;
//! - `split own` / `split other`: A and B each write half of S at the same time, then each
//!   reads its own half, or the half the other wrote (A's read is timed);
//! - `rewrite`: A writes S again after B read it (the lines B holds must be taken back),
//!   against A rewriting what only A read.
//!
//! `cargo run --release --example cross_read -p backplane-cpu-kernels`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Partner commands (`Shared::cmd`); the partner sets `IDLE` when it has finished one.
const IDLE: u32 = 0;
const WRITE: u32 = 1;
const READ: u32 = 2;
const QUIT: u32 = 3;

struct Shared {
    /// The buffer's two halves (each locked by the thread that uses it, outside the timing,
    /// so that the loops are the compiler's vectorized ones).
    halves: [Mutex<Vec<u64>>; 2],
    /// Words of each half in use.
    len: AtomicU64,
    cmd: AtomicU32,
    /// The halves the partner's command covers: bit 0 the first, bit 1 the second.
    mask: AtomicU32,
    /// The partner's last timed operation, ns.
    ns: AtomicU64,
    /// Keeps the sums alive.
    sink: AtomicU64,
}

fn write(data: &mut [u64], seed: u64) {
    for (i, w) in data.iter_mut().enumerate() {
        *w = seed.wrapping_add(i as u64);
    }
}

/// Sum `data` (a multiple of 32 words) in 32 lanes, so that the loop runs at the speed of
/// the loads, not of one add chain.
fn read(data: &[u64]) -> u64 {
    let mut acc = [0u64; 32];
    for c in data.chunks_exact(32) {
        for (a, w) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(*w);
        }
    }
    acc.iter().fold(0u64, |s, a| s.wrapping_add(*a))
}

/// Lock the halves in `mask`.
fn lock(s: &Shared, mask: u32) -> Vec<MutexGuard<'_, Vec<u64>>> {
    (0..2)
        .filter(|h| mask & (1 << h) != 0)
        .map(|h| s.halves[h].lock().unwrap_or_else(|p| p.into_inner()))
        .collect()
}

/// Write (or read) the halves of `mask` on this thread; the time taken, ns.
fn op(s: &Shared, mask: u32, is_write: bool, seed: u64) -> u64 {
    let len = s.len.load(Ordering::Relaxed) as usize;
    let mut g = lock(s, mask);
    let t = Instant::now();
    let mut sum = 0u64;
    for v in g.iter_mut() {
        if is_write {
            write(&mut v[..len], seed);
        } else {
            sum = sum.wrapping_add(read(&v[..len]));
        }
    }
    let ns = t.elapsed().as_nanos() as u64;
    s.sink.fetch_add(sum, Ordering::Relaxed);
    ns
}

fn spin_while(cmd: &AtomicU32, busy: impl Fn(u32) -> bool) -> u32 {
    loop {
        let c = cmd.load(Ordering::Acquire);
        if !busy(c) {
            return c;
        }
        std::hint::spin_loop();
    }
}

fn partner(s: &Shared) {
    let mut seed = 1u64;
    loop {
        let c = spin_while(&s.cmd, |c| c == IDLE);
        if c == QUIT {
            return;
        }
        seed = seed.wrapping_add(7);
        let ns = op(s, s.mask.load(Ordering::Relaxed), c == WRITE, seed);
        s.ns.store(ns, Ordering::Relaxed);
        s.cmd.store(IDLE, Ordering::Release);
    }
}

/// Hand the partner a command on the halves of `mask` without waiting for it.
fn start(s: &Shared, cmd: u32, mask: u32) {
    s.mask.store(mask, Ordering::Relaxed);
    s.cmd.store(cmd, Ordering::Release);
}

/// Wait for the partner's command and return its time, ns.
fn finish(s: &Shared) -> u64 {
    spin_while(&s.cmd, |c| c != IDLE);
    s.ns.load(Ordering::Relaxed)
}

fn median(v: &mut [u64]) -> f64 {
    v.sort_unstable();
    v[v.len() / 2] as f64
}

fn main() {
    const MAX_KIB: usize = 2048;
    let half_words = MAX_KIB * 1024 / 16;
    let shared = Arc::new(Shared {
        halves: [
            Mutex::new(vec![0; half_words]),
            Mutex::new(vec![0; half_words]),
        ],
        len: AtomicU64::new(0),
        cmd: AtomicU32::new(IDLE),
        mask: AtomicU32::new(0),
        ns: AtomicU64::new(0),
        sink: AtomicU64::new(0),
    });
    let other = {
        let s = shared.clone();
        std::thread::spawn(move || partner(&s))
    };
    let s = &*shared;
    println!(
        "ns per KiB (median)    own read  other read  split own  split other | rewrite after own / other read"
    );
    let mut kib = 16;
    let mut seed = 3u64;
    while kib <= MAX_KIB {
        s.len.store((kib * 1024 / 16) as u64, Ordering::Relaxed);
        let rounds = (16 * 1024 / kib).clamp(40, 1000);
        let (mut own, mut oth, mut sown, mut soth, mut rw_own, mut rw_oth) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..rounds {
            seed = seed.wrapping_add(1);
            // A writes, A reads; A writes again.
            op(s, 3, true, seed);
            own.push(op(s, 3, false, 0));
            rw_own.push(op(s, 3, true, seed ^ 5));
            // B reads what A wrote; A writes again over what B holds.
            start(s, READ, 3);
            oth.push(finish(s));
            rw_oth.push(op(s, 3, true, seed ^ 9));
            // Each writes half, then reads its own half, or the other's.
            for swap in [false, true] {
                start(s, WRITE, 2);
                op(s, 1, true, seed);
                finish(s);
                let (mine, theirs) = if swap { (2, 1) } else { (1, 2) };
                start(s, READ, theirs);
                let t = op(s, mine, false, 0);
                finish(s);
                if swap { &mut soth } else { &mut sown }.push(t);
            }
        }
        let k = kib as f64;
        let hk = k / 2.0;
        println!(
            "S = {kib:5} KiB        {:9.1} {:11.1} {:10.1} {:12.1} | {:6.1} / {:6.1}",
            median(&mut own) / k,
            median(&mut oth) / k,
            median(&mut sown) / hk,
            median(&mut soth) / hk,
            median(&mut rw_own) / k,
            median(&mut rw_oth) / k,
        );
        kib *= 2;
    }
    shared.cmd.store(QUIT, Ordering::Release);
    if other.join().is_err() {
        eprintln!("the partner thread stopped early");
        std::process::exit(1);
    }
}
