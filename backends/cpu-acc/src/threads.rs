//! Intra-op parallelism: the calling thread plus `count - 1` helpers from a rayon pool, or no
//! pool at all for one thread (so a 1-thread backend runs exactly the single-threaded code, with
//! no pool hand-offs).
//!
//! A parallel step hands its items out through a shared counter: the calling thread works on
//! them too, so it never sleeps while a layer runs and a helper that wakes late costs only some
//! parallelism, not a wait. After a step, each helper is kept awake for `KEEP_WARM` by a small
//! spinning job that ends as soon as the next step starts (or the time is up, after which the
//! helpers park as rayon's idle workers do): back-to-back layers find the helpers awake instead
//! of paying a wake-up each. Spinning threads yield to the OS every few tens of microseconds,
//! so on a busy machine they hand their core to the thread they wait for.

use backplane_backend_api::{BackendError, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long helpers spin after a step, waiting for the next one, before they may park.
const KEEP_WARM: Duration = Duration::from_micros(100);

/// [`KEEP_WARM`], or `BACKPLANE_CPUACC_SPIN_US` microseconds when set (read once), for A/B
/// measurements of the spin policy.
fn keep_warm_time() -> Duration {
    static T: OnceLock<Duration> = OnceLock::new();
    *T.get_or_init(|| {
        std::env::var("BACKPLANE_CPUACC_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_micros)
            .unwrap_or(KEEP_WARM)
    })
}

/// How long the calling thread spins for the helpers to finish before blocking.
const FINISH_SPIN: Duration = Duration::from_micros(200);

/// One round of a spin-wait: a few CPU pause hints, and every [`YIELD_EVERY`] rounds a yield
/// to the OS, so that a spinning thread gives its core to a thread it is waiting for (a
/// helper descheduled on a busy machine) instead of burning the time slice.
#[inline]
fn pause(rounds: &mut u32) {
    for _ in 0..32 {
        std::hint::spin_loop();
    }
    *rounds = rounds.wrapping_add(1);
    if (*rounds).is_multiple_of(YIELD_EVERY) {
        std::thread::yield_now();
    }
}

/// Spin rounds between yields (a round is ~0.3 µs). Measured with a busy loop on one of two
/// cores, MobileNetV2 on 2 threads: median 31.5 ms with yields, 47.6 ms without; no
/// difference on an idle machine.
const YIELD_EVERY: u32 = 64;

/// A pool of helper threads shared by the workloads that use the same thread count.
struct Pool {
    rayon: rayon::ThreadPool,
    helpers: usize,
    /// Bumped when a step starts; keep-warm jobs end when it moves.
    generation: Arc<AtomicUsize>,
    /// Keep-warm jobs spawned and not yet finished.
    warm: Arc<AtomicUsize>,
}

impl Pool {
    /// Run `work(&stop)` on the calling thread and on every helper; `work` takes items until
    /// none are left (or `stop` is set) and returns its first error.
    fn run<W>(&self, work: W) -> Result<()>
    where
        W: Fn(&AtomicBool) -> Result<()> + Sync,
    {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let stop = AtomicBool::new(false);
        let done = AtomicUsize::new(0);
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
        self.rayon.in_place_scope(|scope| {
            for _ in 0..self.helpers {
                scope.spawn(|_| {
                    record(work(&stop));
                    done.fetch_add(1, Ordering::AcqRel);
                });
            }
            record(work(&stop));
            // Items are all taken: wait briefly for the helpers' last items without sleeping
            // (the scope blocks for whatever is still running after that).
            let start = Instant::now();
            let mut rounds = 0u32;
            while done.load(Ordering::Acquire) < self.helpers && start.elapsed() < FINISH_SPIN {
                pause(&mut rounds);
            }
        });
        self.keep_warm();
        match error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Keep the helpers busy-waiting for a short while so that the next step finds them awake.
    fn keep_warm(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        while self.warm.load(Ordering::Acquire) < self.helpers {
            self.warm.fetch_add(1, Ordering::AcqRel);
            let current = self.generation.clone();
            let warm = self.warm.clone();
            let keep_warm = keep_warm_time();
            self.rayon.spawn(move || {
                let start = Instant::now();
                let mut rounds = 0u32;
                while current.load(Ordering::Acquire) == generation && start.elapsed() < keep_warm {
                    pause(&mut rounds);
                }
                warm.fetch_sub(1, Ordering::AcqRel);
            });
        }
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
        let helpers = count - 1;
        let rayon = rayon::ThreadPoolBuilder::new()
            .num_threads(helpers)
            .thread_name(|i| format!("cpuacc-{i}"))
            .build()
            .map_err(|e| {
                BackendError::Other(format!("cannot start {count} CpuAcc threads: {e}"))
            })?;
        let pool = Arc::new(Pool {
            rayon,
            helpers,
            generation: Arc::new(AtomicUsize::new(0)),
            warm: Arc::new(AtomicUsize::new(0)),
        });
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

    /// Run `f(index, chunk)` over `data.chunks_mut(chunk)`, in parallel when there is a pool
    /// and more than one chunk.
    pub fn chunks<T, F>(&self, data: &mut [T], chunk: usize, f: F) -> Result<()>
    where
        T: Send,
        F: Fn(usize, &mut [T]) -> Result<()> + Sync + Send,
    {
        let chunk = chunk.max(1);
        match &self.pool {
            Some(pool) if data.len() > chunk => {
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

    /// Run `f(i)` for `i` in `0..n`, in parallel when there is a pool.
    pub fn range<F>(&self, n: usize, f: F) -> Result<()>
    where
        F: Fn(usize) -> Result<()> + Sync + Send,
    {
        match &self.pool {
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

    /// Split `total` items into chunks for `chunks`: about `per_thread` chunks per thread,
    /// each at least `min` items and a multiple of `align`.
    pub fn chunk_size(&self, total: usize, min: usize, align: usize) -> usize {
        let align = align.max(1);
        let tasks = if self.count == 1 { 1 } else { self.count * 2 };
        let per = total.div_ceil(tasks).max(min).max(1);
        per.div_ceil(align) * align
    }
}
