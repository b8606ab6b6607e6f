//! Intra-op parallelism: a rayon pool of a chosen size, or none at all for one thread (so a
//! 1-thread backend runs exactly the single-threaded code, with no pool hand-offs).

use backplane_backend_api::{BackendError, Result};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The threads a workload may use.
#[derive(Clone)]
pub struct Threads {
    pool: Option<Arc<rayon::ThreadPool>>,
    count: usize,
}

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Threads({})", self.count)
    }
}

/// Pools by size, shared by every CpuAcc workload of the process (pools are costly to start;
/// workloads of any number of networks share them).
fn pools() -> &'static Mutex<HashMap<usize, Arc<rayon::ThreadPool>>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
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

    /// `count` threads (the calling thread waits while the pool works).
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
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(count)
            .thread_name(|i| format!("cpuacc-{i}"))
            .build()
            .map_err(|e| {
                BackendError::Other(format!("cannot start {count} CpuAcc threads: {e}"))
            })?;
        let pool = Arc::new(pool);
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
            Some(pool) if data.len() > chunk => pool.install(|| {
                data.par_chunks_mut(chunk)
                    .enumerate()
                    .try_for_each(|(i, c)| f(i, c))
            }),
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
            Some(pool) if n > 1 => pool.install(|| (0..n).into_par_iter().try_for_each(f)),
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
