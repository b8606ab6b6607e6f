//! Planning a loaded network's memory: where each host tensor goes in the arena, which slot
//! every tensor has, and the working memory (arena plus handles) an execution runs in.

use super::{LoadedNetwork, Step};
use crate::memory_plan::{self, Lifetime, MemoryPlan};
use crate::{Result, RuntimeError};
use backplane_backend_api::{
    BackendId, FactoryId, MemoryManager, NetworkId, TensorHandle, TensorHandleFactoryRegistry,
};
use backplane_core::{Network, Op, TensorId, TensorInfo, TensorKind};
use std::sync::{Arc, Mutex};

/// Where a tensor's bytes are during an execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Slot {
    /// The caller's input number `n`.
    Input(usize),
    /// A constant of the network.
    Constant(TensorId),
    /// A constant no workload reads at execution (they copied it at load): released, and
    /// passed as an empty view.
    Released,
    /// Bytes `offset..offset + len` of the host arena.
    Arena { offset: usize, len: usize },
    /// Handle number `n` of the working memory.
    Handle(usize),
}

/// One execution's buffers.
pub(super) struct WorkingMemory {
    /// The arena's words, a cache line longer than the plan needs: the plan's offsets are
    /// multiples of [`crate::memory_plan::ALIGNMENT`] from `arena_start`, the first word on a
    /// 64-byte boundary (a large allocation starts 16 bytes into a page, and kernels writing
    /// 64-byte strips of a tensor then split every line with the strip beside it).
    pub(super) arena: Vec<u64>,
    /// First word of the arena proper.
    pub(super) arena_start: usize,
    pub(super) handles: Vec<Option<Box<dyn TensorHandle>>>,
}

impl WorkingMemory {
    /// The arena proper, from its aligned start.
    pub(super) fn arena(&self) -> &[u8] {
        bytemuck_bytes_ref(self.arena.get(self.arena_start..).unwrap_or(&[]))
    }
}

/// The arena proper of `words` from word `start`, writable (a function of the field, not of
/// the whole working memory, so its handles stay borrowable beside it).
pub(super) fn arena_mut(words: &mut [u64], start: usize) -> &mut [u8] {
    bytemuck_bytes(words.get_mut(start..).unwrap_or(&mut []))
}

/// Where each host tensor goes in the arena.
#[derive(Debug, Clone)]
pub(crate) struct HostLayout {
    /// Absolute byte offset of each host tensor (`None` for tensors elsewhere and for
    /// MemImport outputs, which share their input's memory).
    pub offsets: Vec<Option<usize>>,
    /// The arena plan.
    pub plan: MemoryPlan,
    /// Layers that need not run because their outputs are views of their inputs' memory
    /// (Concat written in place by its producers, Split read in place by its consumers).
    pub elided: Vec<bool>,
    /// Tensors that are a sub-tensor of another or have sub-tensors.
    pub aliased: Vec<bool>,
}

/// Plan the host arena. Concat and Split along an axis with nothing but size-1 axes before
/// it are *sub-tensor* layers: each part is a contiguous range of the whole, so the parts are
/// placed inside the whole and the layer copies nothing. So are the layers whose output is
/// their input's bytes, or one contiguous range of them (Reshape, Flatten, Squeeze,
/// Unsqueeze, Identity; a Slice of one range): the output is a view of the input's memory.
pub(crate) fn plan_host_memory(network: &Network, factories: &[FactoryId]) -> Result<HostLayout> {
    let host = FactoryId::host();
    let n = network.tensors().len();
    // Follow MemImport chains to the tensor that owns the memory.
    let owner = |mut t: TensorId| loop {
        match network.tensor(t).kind {
            TensorKind::Produced { layer, .. } if network.layer(layer).op == Op::MemImport => {
                t = network.layer(layer).inputs[0];
            }
            _ => return t,
        }
    };
    let in_arena = |t: TensorId| {
        matches!(network.tensor(t).kind, TensorKind::Produced { .. })
            && owner(t) == t
            && factories.get(t.0).unwrap_or(&host) == &host
    };
    let is_output = |t: TensorId| network.outputs().contains(&t);
    // Prefix of `dims` before `axis` is all ones: the parts along `axis` are contiguous.
    let contiguous = |dims: &[usize], axis: i64| {
        backplane_core::shape::normalize_axis(axis, dims.len())
            .map(|a| dims[..a].iter().all(|&d| d == 1))
            .unwrap_or(false)
    };
    let mut parent: Vec<Option<(TensorId, usize)>> = vec![None; n];
    let mut has_children = vec![false; n];
    let mut elided = vec![false; network.layers().len()];
    // Concats last to first: a Concat whose output is itself a part of a later Concat places
    // its parts inside that later output, and one whose parts all sit, in order, inside a
    // later Concat (DenseNet's growing concatenations, each a prefix of the next) becomes a
    // view of that range. Every sub-tensor stays one level below its root.
    for (i, layer) in network.layers().iter().enumerate().rev() {
        let Op::Concat { axis } = &layer.op else {
            continue;
        };
        let out = layer.outputs[0];
        let ins = &layer.inputs;
        let distinct = ins.iter().enumerate().all(|(k, t)| !ins[..k].contains(t));
        if !in_arena(out)
            || has_children[out.0]
            || !contiguous(network.tensor(out).info.shape.dims(), *axis)
            || !distinct
        {
            continue;
        }
        let mut starts = Vec::with_capacity(ins.len());
        let mut bytes = 0usize;
        for t in ins {
            starts.push(bytes);
            bytes = bytes.saturating_add(network.tensor(*t).info.num_bytes()?);
        }
        if bytes != network.tensor(out).info.num_bytes()? {
            continue;
        }
        let placeable =
            |t: TensorId| in_arena(t) && t != out && !has_children[t.0] && !is_output(t);
        // The parts already sit in order inside one root: the output is a view of them.
        let in_order_at = |(root, base): (TensorId, usize)| {
            ins.iter()
                .zip(&starts)
                .all(|(t, &s)| placeable(*t) && parent[t.0] == Some((root, base + s)))
        };
        if let (None, Some(first)) = (parent[out.0], ins.first().and_then(|t| parent[t.0])) {
            if !is_output(out) && in_order_at(first) {
                parent[out.0] = Some(first);
                has_children[first.0 .0] = true;
                elided[i] = true;
            }
            continue;
        }
        let (root, base) = parent[out.0].unwrap_or((out, 0));
        let ok = ins
            .iter()
            .zip(&starts)
            .all(|(t, &s)| placeable(*t) && parent[t.0].is_none_or(|p| p == (root, base + s)));
        if ok {
            for (t, &s) in ins.iter().zip(&starts) {
                parent[t.0] = Some((root, base + s));
            }
            has_children[root.0] = true;
            elided[i] = true;
        }
    }
    for (i, layer) in network.layers().iter().enumerate() {
        if let Op::Split { axis, .. } = &layer.op {
            let x = layer.inputs[0];
            let ok = in_arena(x)
                && parent[x.0].is_none()
                && contiguous(network.tensor(x).info.shape.dims(), *axis)
                && layer
                    .outputs
                    .iter()
                    .all(|t| in_arena(*t) && parent[t.0].is_none() && !has_children[t.0]);
            if ok {
                let mut offset = 0usize;
                for t in &layer.outputs {
                    parent[t.0] = Some((x, offset));
                    offset = offset.saturating_add(network.tensor(*t).info.num_bytes()?);
                }
                has_children[x.0] = true;
                elided[i] = true;
            }
        }
    }
    // Views second: a Concat or Split placed first keeps its parts where its producers and
    // consumers write and read them (a Slice that feeds a Concat writes into the Concat's
    // output rather than the Concat copying a view).
    for (i, layer) in network.layers().iter().enumerate() {
        match &layer.op {
            Op::Reshape { .. }
            | Op::Flatten { .. }
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. }
            | Op::Identity
            | Op::Slice(_) => {
                let (Some(&x), Some(&y)) = (layer.inputs.first(), layer.outputs.first()) else {
                    continue;
                };
                let x_info = &network.tensor(x).info;
                let y_info = &network.tensor(y).info;
                let offset = match &layer.op {
                    Op::Slice(desc) => contiguous_slice(desc, x_info),
                    _ => Some(0),
                };
                let ok = layer.inputs.len() == 1
                    && layer.outputs.len() == 1
                    && in_arena(x)
                    && in_arena(y)
                    && parent[y.0].is_none()
                    && !has_children[y.0]
                    && !is_output(x)
                    && !is_output(y)
                    && x_info.dtype == y_info.dtype
                    && y_info.num_bytes()? > 0;
                if let (true, Some(offset)) = (ok, offset) {
                    // A view of a view, or of a part of a Concat or Split, goes straight to
                    // the memory's owner: every sub-tensor is one level below its root.
                    let (root, base) = parent[x.0].unwrap_or((x, 0));
                    parent[y.0] = Some((root, base.saturating_add(offset)));
                    has_children[root.0] = true;
                    elided[i] = true;
                }
            }
            _ => {}
        }
    }
    // The tensor whose memory holds `t`, and where in it.
    let root = |t: TensorId| {
        let t = owner(t);
        match parent[t.0] {
            Some((p, off)) => (p, off),
            None => (t, 0),
        }
    };
    let steps = network.layers().len();
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    for (i, layer) in network.layers().iter().enumerate() {
        for t in &layer.outputs {
            let r = root(*t).0;
            first[r.0] = first[r.0].min(i);
            last[r.0] = last[r.0].max(i);
        }
        for t in &layer.inputs {
            let r = root(*t).0;
            last[r.0] = last[r.0].max(i);
        }
    }
    for t in network.outputs() {
        last[root(*t).0 .0] = steps;
    }
    let mut planned = Vec::new();
    let mut lifetimes = Vec::new();
    for t in 0..n {
        if in_arena(TensorId(t)) && parent[t].is_none() {
            planned.push(t);
            lifetimes.push(Lifetime {
                bytes: network.tensors()[t].info.num_bytes()?,
                first: first[t].min(last[t]),
                last: last[t],
            });
        }
    }
    let mut plan = memory_plan::plan(&lifetimes);
    plan.sub_tensor_layers = elided.iter().filter(|e| **e).count();
    let mut root_offset = vec![None; n];
    for (k, &t) in planned.iter().enumerate() {
        root_offset[t] = Some(plan.offsets[k]);
    }
    let offsets: Vec<Option<usize>> = (0..n)
        .map(|t| {
            if in_arena(TensorId(t)) {
                let (r, sub) = root(TensorId(t));
                root_offset[r.0].map(|o: usize| o + sub)
            } else {
                None
            }
        })
        .collect();
    let aliased = (0..n)
        .map(|t| parent[t].is_some() || has_children[t])
        .collect();
    Ok(HostLayout {
        offsets,
        plan,
        elided,
        aliased,
    })
}

/// The byte offset in its input of a Slice's output when that output is one contiguous range
/// of the input (every axis before the first sliced one of size 1, the sliced one read with
/// step 1, every later one whole); `None` otherwise.
fn contiguous_slice(desc: &backplane_core::ops::SliceDesc, x: &TensorInfo) -> Option<usize> {
    let dims = x.shape.dims();
    let ranges = desc.resolve(dims).ok()?;
    let partial = ranges
        .iter()
        .zip(dims)
        .position(|(r, &d)| !(r.start == 0 && r.step == 1 && r.len == d))
        .unwrap_or(dims.len());
    if dims[..partial].iter().any(|&d| d != 1) {
        return None;
    }
    let Some(cut) = ranges.get(partial) else {
        return Some(0);
    };
    let later_whole = ranges[partial + 1..]
        .iter()
        .zip(&dims[partial + 1..])
        .all(|(r, &d)| r.start == 0 && r.step == 1 && r.len == d);
    if !later_whole || (cut.step != 1 && cut.len > 1) || cut.start < 0 {
        return None;
    }
    let inner: usize = dims[partial + 1..].iter().product();
    (cut.start as usize)
        .checked_mul(inner)?
        .checked_mul(x.dtype.size())
}

/// What `LoadedNetwork::new` needs besides the workloads.
pub(crate) struct LoadParts {
    pub id: NetworkId,
    pub network: Network,
    pub assignment: Vec<BackendId>,
    pub steps: Vec<Step>,
    pub memory_managers: Vec<(BackendId, Arc<dyn MemoryManager>)>,
    pub backends_used: Vec<BackendId>,
    pub factories: Vec<FactoryId>,
    pub registry: TensorHandleFactoryRegistry,
    /// The host-memory plan the optimizer made for this network.
    pub layout: HostLayout,
}

impl LoadedNetwork {
    pub(crate) fn new(parts: LoadParts) -> Result<Self> {
        let LoadParts {
            id,
            network,
            assignment,
            steps,
            memory_managers,
            backends_used,
            factories,
            registry,
            layout,
        } = parts;
        let HostLayout {
            offsets,
            plan,
            elided,
            aliased,
        } = layout;
        // Outputs nothing else reads, in plain arena memory, can be written straight into a
        // caller's buffer.
        let consumers = network.consumers();
        let direct_output: Vec<Option<usize>> = (0..network.tensors().len())
            .map(|t| {
                let k = network.outputs().iter().position(|o| o.0 == t)?;
                let plain = offsets[t].is_some() && !aliased[t] && consumers[t].is_empty();
                let produced_once = network.outputs().iter().filter(|o| o.0 == t).count() == 1;
                (plain && produced_once).then_some(k)
            })
            .collect();
        let host = FactoryId::host();
        let mut slots = Vec::with_capacity(network.tensors().len());
        let mut handle_specs = Vec::new();
        for (t, e) in network.tensors().iter().enumerate() {
            let slot = match &e.kind {
                TensorKind::Input => {
                    let pos = network.inputs().iter().position(|i| i.0 == t).unwrap_or(0);
                    Slot::Input(pos)
                }
                TensorKind::Constant(_) => Slot::Constant(TensorId(t)),
                TensorKind::Released => Slot::Released,
                TensorKind::Produced { layer, .. } if network.layer(*layer).op == Op::MemImport => {
                    // Same memory as the input: resolved below, once that slot exists.
                    let src = network.layer(*layer).inputs[0];
                    slots.get(src.0).cloned().unwrap_or(Slot::Constant(src))
                }
                TensorKind::Produced { .. } => match offsets[t] {
                    Some(offset) => Slot::Arena {
                        offset,
                        len: e.info.num_bytes()?,
                    },
                    None => {
                        let f = factories.get(t).cloned().unwrap_or_else(|| host.clone());
                        if registry.get(&f).is_none() {
                            return Err(RuntimeError::NoTensorStrategy {
                                tensor: e.name.clone(),
                                reason: format!("its factory '{f}' is not registered"),
                            });
                        }
                        handle_specs.push((f, TensorId(t)));
                        Slot::Handle(handle_specs.len() - 1)
                    }
                },
            };
            slots.push(slot);
        }
        Ok(LoadedNetwork {
            id,
            network,
            assignment,
            steps,
            memory_managers,
            backends_used,
            slots,
            elided,
            direct_output,
            arena_bytes: plan.arena_bytes,
            plan,
            handle_specs,
            factories: registry,
            pool: Mutex::new(Vec::new()),
            allocations: std::sync::atomic::AtomicUsize::new(0),
            subgraphs: Vec::new(),
            max_execution_time: None,
        })
    }

    pub(super) fn allocate(&self) -> Result<WorkingMemory> {
        self.allocations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut handles = Vec::with_capacity(self.handle_specs.len());
        for (f, t) in &self.handle_specs {
            let factory = self
                .factories
                .get(f)
                .ok_or_else(|| RuntimeError::NoTensorStrategy {
                    tensor: self.network.tensor(*t).name.clone(),
                    reason: format!("its factory '{f}' is not registered"),
                })?;
            let handle = factory
                .create_tensor_handle(&self.network.tensor(*t).info)
                .map_err(|e| RuntimeError::Backend {
                    backend: self
                        .assignment
                        .first()
                        .cloned()
                        .unwrap_or_else(crate::BuiltinBackend::backend_id),
                    layer: None,
                    source: Box::new(e),
                })?;
            handles.push(Some(handle));
        }
        let line_words = crate::memory_plan::ALIGNMENT / 8;
        let words = self.arena_bytes.div_ceil(8).saturating_add(line_words);
        let mut arena = Vec::new();
        arena
            .try_reserve_exact(words)
            .map_err(|_| RuntimeError::OutOfMemory {
                what: format!("the working memory of network {}", self.id.0),
                bytes: self.arena_bytes,
            })?;
        arena.resize(words, 0u64);
        let misaligned = arena.as_ptr() as usize % crate::memory_plan::ALIGNMENT;
        let arena_start =
            (crate::memory_plan::ALIGNMENT - misaligned) % crate::memory_plan::ALIGNMENT / 8;
        Ok(WorkingMemory {
            arena,
            arena_start,
            handles,
        })
    }
}

fn bytemuck_bytes(words: &mut [u64]) -> &mut [u8] {
    bytemuck::cast_slice_mut(words)
}

fn bytemuck_bytes_ref(words: &[u64]) -> &[u8] {
    bytemuck::cast_slice(words)
}
