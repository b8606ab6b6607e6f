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

/// Greedy by size: place the largest tensors first, each at the lowest offset where it does
/// not overlap a placed tensor that is alive at the same time.
pub fn plan(tensors: &[Lifetime]) -> MemoryPlan {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        tensors[b]
            .bytes
            .cmp(&tensors[a].bytes)
            .then(tensors[a].first.cmp(&tensors[b].first))
    });
    let mut offsets = vec![0usize; tensors.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(tensors.len());
    let mut arena = 0usize;
    for &i in &order {
        let t = tensors[i];
        let size = align(t.bytes);
        // Regions of placed tensors alive at the same time, by offset.
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| tensors[j].first <= t.last && t.first <= tensors[j].last)
            .map(|&j| (offsets[j], offsets[j] + align(tensors[j].bytes)))
            .collect();
        busy.sort_unstable();
        let mut candidate = 0usize;
        for (start, end) in busy {
            if candidate.saturating_add(size) <= start {
                break;
            }
            candidate = candidate.max(end);
        }
        offsets[i] = candidate;
        arena = arena.max(candidate.saturating_add(size));
        placed.push(i);
    }
    let steps = tensors.iter().map(|t| t.last + 1).max().unwrap_or(0);
    let mut live = vec![0usize; steps];
    for t in tensors {
        for v in &mut live[t.first..=t.last] {
            *v = v.saturating_add(align(t.bytes));
        }
    }
    MemoryPlan {
        offsets,
        arena_bytes: arena,
        tensor_bytes: tensors.iter().map(|t| align(t.bytes)).sum(),
        lower_bound: live.into_iter().max().unwrap_or(0),
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
    fn nothing_to_plan() {
        let p = plan(&[]);
        assert_eq!((p.arena_bytes, p.tensor_bytes, p.lower_bound), (0, 0, 0));
    }
}
