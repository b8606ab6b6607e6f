//! The per-layer thread choice: whether a layer's parallel steps are shared with the pool's
//! helpers or run on the calling thread alone, chosen by timing both while the network runs.
//!
//! Whether a second thread pays for a layer depends on the layer and on the machine at the
//! moment: a hand-off and the reads of what the other core wrote cost tens of nanoseconds
//! when the two cores share a cache and several times that when they sit on different
//! chiplets, or when the other core is busy with another process. No rule fixed at load time
//! is right in every state, so each layer of a network loaded with more than one thread
//! measures both ways ([`ThreadChoice`]): a few executions each way after the first one, then
//! the faster way, timed now and then, the other way re-timed at growing intervals so that a
//! change of the machine's state is noticed. Either way a layer computes the same bytes
//! ([`threads::alone`] runs the same chunks on one thread), so the choice changes time only.

use crate::threads::{self, Threads};
use backplane_backend_api::{Result, TensorHandle, Workload};
use backplane_core::{TensorView, TensorViewMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// How a layer's steps run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    /// Shared with the pool's helpers.
    Shared,
    /// On the calling thread alone.
    Alone,
}

impl Way {
    fn index(self) -> usize {
        match self {
            Way::Shared => 0,
            Way::Alone => 1,
        }
    }
}

/// Executions run shared and untimed first (the first ones touch fresh memory).
const WARM: u64 = 1;
/// The chosen way is timed every this many executions.
const TIME_EVERY: u64 = 8;
/// Executions between the starts of the last pairs of probes (see [`ThreadChoice::plan`]).
const LONGEST_GAP: u64 = 128;
/// Alone is chosen where its estimate times `.0 / .1` is below shared's (5% faster).
const ALONE_MARGIN: (u128, u128) = (21, 20);
/// Where pairs of probes start, counted from the end of [`WARM`], before they come every
/// [`LONGEST_GAP`] executions: two back to back, then at gaps doubling from 16.
const PAIR_STARTS: [u64; 6] = [0, 2, 20, 52, 116, 244];

/// The timing state of one layer's choice: the last two times of each way (their minimum is
/// the way's estimate, so one execution slowed by something else does not decide) and the
/// way chosen.
#[derive(Debug, Clone)]
pub(crate) struct ThreadChoice {
    /// Nanoseconds, the last two timings of each way (`u64::MAX`: none yet).
    last: [[u64; 2]; 2],
    chosen: Way,
}

impl Default for ThreadChoice {
    fn default() -> Self {
        ThreadChoice {
            last: [[u64::MAX; 2]; 2],
            chosen: Way::Shared,
        }
    }
}

/// Which probe execution `run` is, if any: the shared or the alone half of a pair.
fn probe(run: u64) -> Option<Way> {
    let p = run.checked_sub(WARM)?;
    let last = PAIR_STARTS[PAIR_STARTS.len() - 1];
    let offset = match p.checked_sub(last) {
        Some(past) => past % LONGEST_GAP,
        None => PAIR_STARTS
            .iter()
            .filter_map(|&s| p.checked_sub(s))
            .min()
            .unwrap_or(u64::MAX),
    };
    match offset {
        0 => Some(Way::Shared),
        1 => Some(Way::Alone),
        _ => None,
    }
}

impl ThreadChoice {
    /// How execution `run` (counted from 0) goes and whether it is timed. The schedule is
    /// the same for every layer of a network, so a probe execution runs the whole network
    /// one way: every layer shared (the helpers kept awake from layer to layer, as a layer
    /// that shares among layers that do not would not find them), then every layer alone.
    /// Between probes each layer runs its chosen way, timed now and then.
    pub(crate) fn plan(run: u64, chosen: Way) -> (Way, bool) {
        if run < WARM {
            return (Way::Shared, false);
        }
        match probe(run) {
            Some(way) => (way, true),
            None => (chosen, run.is_multiple_of(TIME_EVERY)),
        }
    }

    /// The way chosen now.
    pub(crate) fn chosen(&self) -> Way {
        self.chosen
    }

    /// The estimate of a way: the lower of its last two timings.
    fn estimate(&self, way: Way) -> u64 {
        let [a, b] = self.last[way.index()];
        a.min(b)
    }

    /// Note that execution `run` took `nanos` run `way`, and choose the faster way after
    /// the alone half of a pair of probes and after each timing of the chosen way (whose
    /// estimate may have risen above the other's: the machine changed).
    pub(crate) fn record(&mut self, run: u64, way: Way, nanos: u64) {
        let last = &mut self.last[way.index()];
        *last = [last[1], nanos];
        if way == self.chosen || probe(run) == Some(Way::Alone) {
            self.chosen = self.faster();
        }
    }

    /// Alone where its estimate is below shared's by more than [`ALONE_MARGIN`], else
    /// shared: the layers' own splits were tuned shared, and a layer that runs alone moves
    /// its output away from the helpers that read it in the next layer, so a tie stays
    /// shared.
    fn faster(&self) -> Way {
        let (alone, shared) = (self.estimate(Way::Alone), self.estimate(Way::Shared));
        let (num, den) = ALONE_MARGIN;
        if u128::from(alone) * num < u128::from(shared) * den {
            Way::Alone
        } else {
            Way::Shared
        }
    }
}

/// A workload whose parallel steps are shared or run alone as its [`ThreadChoice`] says.
/// Executions of one network on several threads at once share the choice; the hot path is
/// an atomic count and a load, the lock is taken only on timed executions.
pub(crate) struct Chosen {
    inner: Box<dyn Workload>,
    /// The layer's name, for the log line that says when its choice changes.
    layer: String,
    runs: AtomicU64,
    /// Whether the chosen way is alone (a copy of the choice's, read without the lock).
    alone: AtomicBool,
    choice: Mutex<ThreadChoice>,
}

impl Chosen {
    /// `inner` with its thread use chosen at run time; `inner` alone where `threads` has no
    /// helpers (nothing to choose).
    pub(crate) fn wrap(
        inner: Box<dyn Workload>,
        layer: &str,
        threads: &Threads,
    ) -> Box<dyn Workload> {
        if threads.count() < 2 {
            return inner;
        }
        Box::new(Chosen {
            inner,
            layer: layer.to_string(),
            runs: AtomicU64::new(0),
            alone: AtomicBool::new(false),
            choice: Mutex::new(ThreadChoice::default()),
        })
    }

    fn run(&self, f: impl FnOnce() -> Result<()>) -> Result<()> {
        let run = self.runs.fetch_add(1, Ordering::Relaxed);
        let chosen = match self.alone.load(Ordering::Relaxed) {
            true => Way::Alone,
            false => Way::Shared,
        };
        let (way, timed) = ThreadChoice::plan(run, chosen);
        let start = timed.then(Instant::now);
        let result = match way {
            Way::Shared => f(),
            Way::Alone => threads::alone(f),
        };
        if let (Some(start), Ok(())) = (start, &result) {
            let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            let mut choice = self.choice.lock().unwrap_or_else(|p| p.into_inner());
            let before = choice.chosen();
            choice.record(run, way, nanos);
            let now = choice.chosen();
            if now != before || run == WARM + PAIR_STARTS[1] + 1 {
                tracing::debug!(
                    "CpuAcc layer {}: steps {} (timed shared {} ns, alone {} ns; execution {run})",
                    self.layer,
                    match now {
                        Way::Shared => "shared with the helpers",
                        Way::Alone => "on the calling thread alone",
                    },
                    choice.estimate(Way::Shared),
                    choice.estimate(Way::Alone),
                );
            }
            self.alone.store(now == Way::Alone, Ordering::Relaxed);
        }
        result
    }
}

impl Workload for Chosen {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.run(|| self.inner.execute(inputs, outputs))
    }

    fn execute_handles(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
    ) -> Result<()> {
        self.run(|| self.inner.execute_handles(inputs, outputs))
    }

    fn reads_constant_input(&self, slot: usize) -> bool {
        self.inner.reads_constant_input(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `runs` executions of a layer whose ways take `time(run, way)` nanoseconds, and
    /// returns the way each execution took.
    fn simulate(runs: u64, time: impl Fn(u64, Way) -> u64) -> Vec<Way> {
        let mut choice = ThreadChoice::default();
        (0..runs)
            .map(|run| {
                let (way, timed) = ThreadChoice::plan(run, choice.chosen());
                if timed {
                    choice.record(run, way, time(run, way));
                }
                way
            })
            .collect()
    }

    /// Whether every execution in `runs` that is not a probe went `way`.
    fn all_but_probes(ways: &[Way], runs: std::ops::Range<u64>, way: Way) -> bool {
        runs.filter(|&r| probe(r).is_none())
            .all(|r| ways[r as usize] == way)
    }

    /// Probes come in pairs (shared, then alone), back to back after the first execution,
    /// then at gaps doubling to [`LONGEST_GAP`].
    #[test]
    fn probes_come_in_pairs_at_growing_gaps() {
        let starts: Vec<u64> = (0..1000)
            .filter(|&r| probe(r) == Some(Way::Shared))
            .collect();
        assert_eq!(&starts[..8], &[1, 3, 21, 53, 117, 245, 373, 501]);
        for &s in &starts {
            assert_eq!(probe(s + 1), Some(Way::Alone));
            assert!(s + 2 == 3 || probe(s + 2).is_none());
        }
        assert_eq!(
            (0..1000).filter(|&r| probe(r).is_some()).count(),
            2 * starts.len()
        );
        assert_eq!(ThreadChoice::plan(0, Way::Alone), (Way::Shared, false));
        assert_eq!(ThreadChoice::plan(8, Way::Alone), (Way::Alone, true));
        assert_eq!(ThreadChoice::plan(9, Way::Alone), (Way::Alone, false));
    }

    /// After the first two pairs of probes the faster way is kept, whichever it is; the
    /// slower one runs only in the probes.
    #[test]
    fn the_faster_way_is_kept() {
        for fast in [Way::Alone, Way::Shared] {
            let ways = simulate(4000, |_, w| if w == fast { 1000 } else { 1500 });
            assert_eq!(ways[0], Way::Shared);
            assert_eq!(
                &ways[1..5],
                &[Way::Shared, Way::Alone, Way::Shared, Way::Alone]
            );
            assert!(all_but_probes(&ways, 5..4000, fast), "{fast:?}");
        }
    }

    /// When the machine changes (sharing becomes slower than running alone at execution
    /// 2,000, as when the two cores end up far apart), the layer moves to alone at the
    /// second timing of its chosen way, and back to shared at the next pair of probes when
    /// it changes back.
    #[test]
    fn the_choice_follows_a_change_of_the_machine() {
        let far = 2000..4000;
        let ways = simulate(6000, |run, w| match (w, far.contains(&run)) {
            (Way::Shared, false) => 600,
            (Way::Shared, true) => 1400,
            (Way::Alone, _) => 1000,
        });
        assert!(all_but_probes(&ways, 5..2009, Way::Shared));
        assert!(all_but_probes(&ways, 2009..4001, Way::Alone));
        let back = (4000..6000)
            .find(|&r| probe(r).is_none() && ways[r as usize] == Way::Shared)
            .expect("back to shared");
        assert!(back <= 4000 + LONGEST_GAP + 2, "back at {back}");
        assert!(all_but_probes(&ways, back..6000, Way::Shared));
    }

    /// One slow timing (the thread descheduled) does not move a layer off the faster way:
    /// the estimate is the lower of the last two timings.
    #[test]
    fn one_slow_timing_does_not_decide() {
        let ways = simulate(3000, |run, w| match (w, run) {
            (Way::Shared, 800) => 50_000,
            (Way::Shared, _) => 500,
            (Way::Alone, _) => 900,
        });
        assert!(all_but_probes(&ways, 5..3000, Way::Shared));
    }

    /// On a tie, and where alone is faster by less than the margin, the steps stay shared;
    /// a clearer gain goes alone.
    #[test]
    fn ties_stay_shared() {
        for (alone, want) in [(1000, Way::Shared), (960, Way::Shared), (940, Way::Alone)] {
            let ways = simulate(500, |_, w| if w == Way::Alone { alone } else { 1000 });
            assert!(all_but_probes(&ways, 5..500, want), "alone {alone}");
        }
    }
}
