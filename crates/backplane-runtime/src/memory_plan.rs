//! Memory planning: pack the host tensors of a network into one arena, reusing bytes between
//! tensors whose lifetimes do not overlap.

/// Offsets are multiples of this, so every tensor can be viewed as any element type and
/// vector loads stay aligned.
pub const ALIGNMENT: usize = 64;

/// One tensor to place: its size and the steps during which it must hold its value
/// (`first..=last`, in execution order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// Size in bytes.
    pub bytes: usize,
    /// The step that writes it.
    pub first: usize,
    /// The last step that reads it.
    pub last: usize,
}

/// Where every tensor goes, and what that costs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryPlan {
    /// Byte offset of each tensor in the arena, in the order given.
    pub offsets: Vec<usize>,
    /// Size of the arena.
    pub arena_bytes: usize,
    /// Sum of all tensors' (aligned) sizes: what allocating each separately would cost.
    pub tensor_bytes: usize,
    /// The largest set of (aligned) tensors alive at one step: no plan can use less.
    pub lower_bound: usize,
    /// Concat/Split layers that copy nothing because their parts are placed inside the whole.
    pub sub_tensor_layers: usize,
}

fn align(n: usize) -> usize {
    n.div_ceil(ALIGNMENT).saturating_mul(ALIGNMENT)
}

/// Placed tensors indexed by when they start, to find those alive during a span of steps
/// without looking at the others: a segment tree over the tensors sorted by first step, each
/// node holding the latest last step of the placed tensors below it.
struct PlacedIndex {
    /// Leaves start here (a power of two).
    size: usize,
    /// Per node: the latest `last` of the placed tensors below it, if any.
    latest: Vec<Option<usize>>,
}

impl PlacedIndex {
    fn new(n: usize) -> Self {
        let size = n.max(1).next_power_of_two();
        PlacedIndex {
            size,
            latest: vec![None; 2 * size],
        }
    }

    /// Mark the tensor at sorted position `pos` placed, alive until `last`.
    fn place(&mut self, pos: usize, last: usize) {
        let mut node = self.size + pos;
        while node >= 1 {
            let slot = &mut self.latest[node];
            *slot = Some(slot.map_or(last, |l| l.max(last)));
            node /= 2;
        }
    }

    /// Sorted positions below `prefix` (tensors that start no later than the span ends) whose
    /// tensor is placed and alive at or after `from`.
    fn alive(&self, prefix: usize, from: usize, out: &mut Vec<usize>) {
        // Explicit stack of (node, node's first leaf, leaves below it).
        let mut stack = vec![(1usize, 0usize, self.size)];
        while let Some((node, lo, len)) = stack.pop() {
            let reaches = matches!(self.latest[node], Some(l) if l >= from);
            if lo >= prefix || !reaches {
                continue;
            }
            if len == 1 {
                out.push(lo);
            } else {
                let half = len / 2;
                stack.push((2 * node + 1, lo + half, half));
                stack.push((2 * node, lo, half));
            }
        }
    }
}

/// Greedy by size: place the largest tensors first, each at the lowest offset where it does
/// not overlap a placed tensor that is alive at the same time. Finding those tensors costs
/// O(log n) each, so a plan costs O(n log n) plus the pairs of tensors alive together.
pub fn plan(tensors: &[Lifetime]) -> MemoryPlan {
    let n = tensors.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        tensors[b]
            .bytes
            .cmp(&tensors[a].bytes)
            .then(tensors[a].first.cmp(&tensors[b].first))
    });
    // Tensors by first step, and each tensor's position in that order.
    let mut by_first: Vec<usize> = (0..n).collect();
    by_first.sort_by_key(|&i| tensors[i].first);
    let mut position = vec![0usize; n];
    for (pos, &i) in by_first.iter().enumerate() {
        position[i] = pos;
    }
    let mut index = PlacedIndex::new(n);
    let mut offsets = vec![0usize; n];
    let mut arena = 0usize;
    let mut alive = Vec::new();
    let mut busy: Vec<(usize, usize)> = Vec::new();
    for &i in &order {
        let t = tensors[i];
        let size = align(t.bytes);
        // Placed tensors alive at the same time: they start no later than `t` ends and end
        // no earlier than it starts.
        let prefix = by_first.partition_point(|&j| tensors[j].first <= t.last);
        alive.clear();
        index.alive(prefix, t.first, &mut alive);
        busy.clear();
        busy.extend(alive.iter().map(|&pos| {
            let j = by_first[pos];
            (
                offsets[j],
                offsets[j].saturating_add(align(tensors[j].bytes)),
            )
        }));
        busy.sort_unstable();
        let mut candidate = 0usize;
        for &(start, end) in &busy {
            if candidate.saturating_add(size) <= start {
                break;
            }
            candidate = candidate.max(end);
        }
        offsets[i] = candidate;
        arena = arena.max(candidate.saturating_add(size));
        index.place(position[i], t.last);
    }
    // Bytes alive per step, from the changes at each tensor's first and past its last step.
    let steps = tensors
        .iter()
        .map(|t| t.last.saturating_add(2))
        .max()
        .unwrap_or(0);
    let mut change = vec![0i128; steps];
    for t in tensors {
        let bytes = align(t.bytes) as i128;
        change[t.first.min(t.last)] += bytes;
        change[t.last + 1] -= bytes;
    }
    let mut live = 0i128;
    let mut lower_bound = 0i128;
    for c in change {
        live += c;
        lower_bound = lower_bound.max(live);
    }
    MemoryPlan {
        offsets,
        arena_bytes: arena,
        tensor_bytes: tensors
            .iter()
            .fold(0usize, |sum, t| sum.saturating_add(align(t.bytes))),
        lower_bound: usize::try_from(lower_bound).unwrap_or(usize::MAX),
        sub_tensor_layers: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
        a.0 < b.1 && b.0 < a.1
    }

    fn check(tensors: &[Lifetime], p: &MemoryPlan) {
        for i in 0..tensors.len() {
            assert_eq!(p.offsets[i] % ALIGNMENT, 0);
            assert!(p.offsets[i] + tensors[i].bytes <= p.arena_bytes);
            for j in 0..i {
                let alive_together =
                    tensors[i].first <= tensors[j].last && tensors[j].first <= tensors[i].last;
                let (ri, rj) = (
                    (p.offsets[i], p.offsets[i] + tensors[i].bytes),
                    (p.offsets[j], p.offsets[j] + tensors[j].bytes),
                );
                assert!(
                    !(alive_together && overlaps(ri, rj)),
                    "tensors {i} and {j} collide"
                );
            }
        }
        assert!(p.arena_bytes >= p.lower_bound);
    }

    #[test]
    fn a_chain_reuses_memory() {
        // t0 -> t1 -> t2 -> t3, each read only by the next step.
        let t: Vec<Lifetime> = (0..4)
            .map(|i| Lifetime {
                bytes: 1000,
                first: i,
                last: i + 1,
            })
            .collect();
        let p = plan(&t);
        check(&t, &p);
        assert_eq!(p.arena_bytes, 2 * 1024, "two buffers ping-pong");
        assert_eq!(p.lower_bound, 2 * 1024);
        assert_eq!(p.tensor_bytes, 4 * 1024);
    }

    #[test]
    fn random_lifetimes_never_collide() {
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        for _ in 0..50 {
            let n = 1 + next() % 40;
            let t: Vec<Lifetime> = (0..n)
                .map(|_| {
                    let first = next() % 30;
                    Lifetime {
                        bytes: 1 + next() % 5000,
                        first,
                        last: first + next() % 6,
                    }
                })
                .collect();
            let p = plan(&t);
            check(&t, &p);
            assert!(p.arena_bytes <= p.tensor_bytes);
        }
    }

    #[test]
    fn a_long_chain_plans_quickly() {
        // 200,000 tensors, each read by the next step only: a quadratic planner takes
        // minutes here.
        let t: Vec<Lifetime> = (0..200_000)
            .map(|i| Lifetime {
                bytes: 64 + (i % 7) * 64,
                first: i,
                last: i + 1,
            })
            .collect();
        let started = std::time::Instant::now();
        let p = plan(&t);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "planning took {:?}",
            started.elapsed()
        );
        assert!(p.arena_bytes <= 2 * 7 * 64);
        assert_eq!(p.lower_bound, 7 * 64 + 6 * 64);
        for w in t.windows(2).zip(p.offsets.windows(2)) {
            let ((a, b), (oa, ob)) = ((w.0[0], w.0[1]), (w.1[0], w.1[1]));
            assert!(oa + a.bytes <= ob || ob + b.bytes <= oa);
        }
    }

    #[test]
    fn nothing_to_plan() {
        let p = plan(&[]);
        assert_eq!((p.arena_bytes, p.tensor_bytes, p.lower_bound), (0, 0, 0));
    }
}
