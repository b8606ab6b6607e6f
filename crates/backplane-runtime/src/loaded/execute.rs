//! Executing a loaded network: binding the caller's inputs, running each workload on views
//! of its slots (catching panics, checking the deadline, timing layers on request), and
//! delivering the outputs.

use super::deadline::{DeadlineGuard, DEADLINE};
use super::plan::{arena_mut, Slot, WorkingMemory};
use super::{LayerTiming, LoadedNetwork, Step};
use crate::host_memory::{HostView, HostViewMut};
use crate::{NamedTensors, Result, RuntimeError};
use backplane_backend_api::{BackendError, TensorHandle};
use backplane_core::{Op, Tensor, TensorId, TensorView, TensorViewMut};
use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

/// How an output reached the caller's buffer in `Runtime::execute_into`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputWrite {
    /// The output's name.
    pub name: String,
    /// Written in place by the layer that computes it (true), or copied once at the end.
    pub in_place: bool,
}

impl LoadedNetwork {
    /// Check the inputs and run every workload in order; outputs come back in the network's
    /// output order, named.
    pub(crate) fn execute(
        &self,
        inputs: &[(&str, &Tensor)],
        profile: Option<&mut Vec<LayerTiming>>,
    ) -> Result<NamedTensors> {
        let _deadline = DeadlineGuard::start(self.max_execution_time);
        let bound = self.bind_inputs(inputs)?;
        let taken = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut mem = match taken {
            Some(m) => m,
            None => self.allocate()?,
        };
        let outputs = self
            .run(&bound, &mut mem, profile, &mut [])
            .and_then(|()| self.collect_outputs(&bound, &mem));
        if outputs.is_ok() {
            self.pool
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(mem);
        }
        outputs
    }

    /// Like `execute`, writing the outputs into the caller's tensors. Outputs that no layer
    /// reads are written in place by the layer that computes them; the others are copied once
    /// at the end. On error, the caller's tensors hold unspecified values: the error is the
    /// mark that they are invalid.
    pub(crate) fn execute_into(
        &self,
        inputs: &[(&str, &Tensor)],
        outputs: &mut [(&str, &mut Tensor)],
    ) -> Result<Vec<OutputWrite>> {
        let _deadline = DeadlineGuard::start(self.max_execution_time);
        let bound = self.bind_inputs(inputs)?;
        // Every output, once, with its exact description, in the network's order.
        let mut order = Vec::with_capacity(self.network.outputs().len());
        for &t in self.network.outputs() {
            let e = self.network.tensor(t);
            let pos = outputs
                .iter()
                .position(|(n, _)| *n == e.name)
                .ok_or_else(|| RuntimeError::MissingInput {
                    name: e.name.clone(),
                    expected: e.info.to_string(),
                    all: "output buffers for every network output".into(),
                })?;
            if !outputs[pos].1.info().same_layout(&e.info) {
                return Err(RuntimeError::InputMismatch {
                    name: e.name.clone(),
                    expected: e.info.to_string(),
                    actual: outputs[pos].1.info().to_string(),
                });
            }
            order.push(pos);
        }
        if outputs.len() != order.len() {
            return Err(RuntimeError::UnknownInput {
                name: "an output buffer".into(),
                all: "one buffer per network output".into(),
            });
        }
        let mut buffers: Vec<Option<&mut [u8]>> = Vec::with_capacity(order.len());
        let mut taken_out: Vec<Option<&mut Tensor>> =
            outputs.iter_mut().map(|(_, t)| Some(&mut **t)).collect();
        for &pos in &order {
            buffers.push(taken_out[pos].take().map(|t| t.bytes_mut()));
        }
        let in_place = self.run_into(&bound, buffers)?;
        Ok(self
            .network
            .outputs()
            .iter()
            .zip(in_place)
            .map(|(t, in_place)| OutputWrite {
                name: self.network.tensor(*t).name.clone(),
                in_place,
            })
            .collect())
    }

    /// Run on `inputs` (checked), writing each network output into the buffer of the same
    /// position; returns, per output, whether its layer wrote it in place.
    fn run_into(
        &self,
        bound: &[TensorView<'_>],
        buffers: Vec<Option<&mut [u8]>>,
    ) -> Result<Vec<bool>> {
        let taken = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut mem = match taken {
            Some(m) => m,
            None => self.allocate()?,
        };
        let mut in_place = Vec::with_capacity(buffers.len());
        let result = {
            // Buffers the computing layers write into, by network output index.
            let mut direct: Vec<Option<&mut [u8]>> = Vec::with_capacity(buffers.len());
            let mut copy_later = Vec::new();
            for (k, buffer) in buffers.into_iter().enumerate() {
                let t = self.network.outputs()[k];
                match (self.direct_output[t.0], buffer) {
                    (Some(_), Some(buffer)) => {
                        direct.push(Some(buffer));
                        in_place.push(true);
                    }
                    (_, buffer) => {
                        direct.push(None);
                        copy_later.push((k, buffer));
                        in_place.push(false);
                    }
                }
            }
            self.run(bound, &mut mem, None, &mut direct).and_then(|()| {
                drop(direct);
                // Only the outputs not written in place are copied, once.
                for (k, buffer) in copy_later {
                    if let Some(buffer) = buffer {
                        let bytes = self.output_bytes(self.network.outputs()[k], bound, &mem)?;
                        if bytes.len() != buffer.len() {
                            return Err(RuntimeError::Core(
                                backplane_core::CoreError::InvalidNetwork(format!(
                                    "output '{}' has {} bytes, its buffer {}",
                                    self.network.tensor(self.network.outputs()[k]).name,
                                    bytes.len(),
                                    buffer.len()
                                )),
                            ));
                        }
                        buffer.copy_from_slice(bytes);
                    }
                }
                Ok(())
            })
        };
        if result.is_ok() {
            self.pool
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(mem);
        }
        result.map(|()| in_place)
    }

    /// Run on inputs and outputs given by position (the network's input and output order),
    /// each exactly matching its description: how nested networks (control-flow bodies)
    /// run, without names or new tensors.
    pub fn execute_views(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> Result<()> {
        let check = |what: &str, expected: &[TensorId], given: Vec<&backplane_core::TensorInfo>| {
            if expected.len() != given.len() {
                return Err(RuntimeError::InputMismatch {
                    name: what.to_string(),
                    expected: format!("{} tensors", expected.len()),
                    actual: format!("{} tensors", given.len()),
                });
            }
            for (t, info) in expected.iter().zip(given) {
                let e = self.network.tensor(*t);
                if !info.same_layout(&e.info) {
                    return Err(RuntimeError::InputMismatch {
                        name: e.name.clone(),
                        expected: e.info.to_string(),
                        actual: info.to_string(),
                    });
                }
            }
            Ok(())
        };
        check(
            "inputs",
            self.network.inputs(),
            inputs.iter().map(|v| v.info).collect(),
        )?;
        check(
            "outputs",
            self.network.outputs(),
            outputs.iter().map(|v| v.info).collect(),
        )?;
        let buffers = outputs.iter_mut().map(|v| Some(&mut *v.data)).collect();
        self.run_into(inputs, buffers).map(|_| ())
    }

    /// For each network input (in order), the caller's tensor, after checking names, types
    /// and shapes.
    fn bind_inputs<'a>(&self, given: &[(&str, &'a Tensor)]) -> Result<Vec<TensorView<'a>>> {
        let names: Vec<&str> = self
            .network
            .inputs()
            .iter()
            .map(|t| self.network.tensor(*t).name.as_str())
            .collect();
        // Built for the error messages only.
        let all = || names.join(", ");
        // The usual case, found without hashing: every input given, in the network's order.
        let in_order =
            given.len() == names.len() && given.iter().zip(&names).all(|((g, _), n)| g == n);
        let mut by_name: HashMap<&str, &'a Tensor> = HashMap::new();
        if !in_order {
            // By name: a network split at a data-dependent node may take hundreds of inputs.
            let known: HashSet<&str> = names.iter().copied().collect();
            by_name.reserve(given.len());
            for &(name, tensor) in given {
                if !known.contains(name) {
                    return Err(RuntimeError::UnknownInput {
                        name: name.to_string(),
                        all: all(),
                    });
                }
                if by_name.insert(name, tensor).is_some() {
                    return Err(RuntimeError::DuplicateInput(name.to_string()));
                }
            }
        }
        let mut bound = Vec::with_capacity(names.len());
        for (k, &t) in self.network.inputs().iter().enumerate() {
            let e = self.network.tensor(t);
            let found = if in_order {
                given.get(k).map(|(_, t)| *t)
            } else {
                by_name.get(e.name.as_str()).copied()
            };
            let Some(tensor) = found else {
                return Err(RuntimeError::MissingInput {
                    name: e.name.clone(),
                    expected: e.info.to_string(),
                    all: all(),
                });
            };
            if !tensor.info().same_layout(&e.info) {
                return Err(RuntimeError::InputMismatch {
                    name: e.name.clone(),
                    expected: e.info.to_string(),
                    actual: tensor.info().to_string(),
                });
            }
            bound.push(tensor.view());
        }
        Ok(bound)
    }

    fn constant(&self, t: TensorId) -> Option<&Tensor> {
        self.network.tensor(t).constant().map(|c| c.as_ref())
    }

    fn run(
        &self,
        inputs: &[TensorView<'_>],
        mem: &mut WorkingMemory,
        mut profile: Option<&mut Vec<LayerTiming>>,
        direct: &mut [Option<&mut [u8]>],
    ) -> Result<()> {
        let started = Instant::now();
        for step in &self.steps {
            let layer = &self.network.layers()[step.layer];
            if layer.op == Op::MemImport || self.elided.get(step.layer).copied().unwrap_or(false) {
                // Its outputs are the same memory as its inputs: nothing to do.
                continue;
            }
            if let Some((deadline, limit)) = DEADLINE.with(|d| d.get()) {
                if Instant::now() > deadline {
                    return Err(RuntimeError::TimeLimit {
                        limit,
                        layer: layer.name.clone(),
                    });
                }
            }
            let fail = |source: BackendError| RuntimeError::Backend {
                backend: self.assignment[step.layer].clone(),
                layer: Some(layer.name.clone()),
                source: Box::new(source),
            };
            let began = Instant::now();
            let outcome = self.run_step(step, inputs, mem, direct).map_err(fail)?;
            if let Some(p) = profile.as_deref_mut() {
                p.push(LayerTiming {
                    layer: layer.name.clone(),
                    op: layer.op.name().to_string(),
                    backend: self.assignment[step.layer].clone(),
                    start: began.duration_since(started),
                    duration: began.elapsed(),
                });
            }
            match outcome {
                Ok(()) => {}
                Err(panic) => {
                    return Err(fail(BackendError::Other(format!(
                        "the workload panicked: {panic}"
                    ))))
                }
            }
        }
        Ok(())
    }

    /// Run one step; the outer error is the backend's, the inner one a caught panic.
    fn run_step(
        &self,
        step: &Step,
        inputs: &[TensorView<'_>],
        mem: &mut WorkingMemory,
        direct: &mut [Option<&mut [u8]>],
    ) -> std::result::Result<std::result::Result<(), String>, BackendError> {
        let layer = &self.network.layers()[step.layer];
        // Carve the arena into disjoint slices, one per union of overlapping regions this
        // step touches. Outputs never overlap anything alive (the planner guarantees it); two
        // inputs may (a whole and one of its sub-tensors), and are only read.
        let mut spans: Vec<(usize, usize)> = layer
            .inputs
            .iter()
            .chain(&layer.outputs)
            .filter_map(|t| match self.slots[t.0] {
                Slot::Arena { offset, len } if len > 0 => Some((offset, offset + len)),
                _ => None,
            })
            .collect();
        spans.sort_unstable();
        let mut unions: Vec<(usize, usize)> = Vec::new();
        for (start, end) in spans {
            match unions.last_mut() {
                Some(u) if start < u.1 => u.1 = u.1.max(end),
                _ => unions.push((start, end)),
            }
        }
        let arena = arena_mut(&mut mem.arena, mem.arena_start);
        let mut pieces: Vec<Option<&mut [u8]>> = Vec::with_capacity(unions.len());
        let mut rest: &mut [u8] = arena;
        let mut consumed = 0usize;
        for &(start, end) in &unions {
            let skip = start.saturating_sub(consumed);
            if rest.len() < skip + (end - start) {
                return Err(BackendError::Other(
                    "an arena region lies outside the arena".into(),
                ));
            }
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(skip);
            let (piece, tail) = tail.split_at_mut(end - start);
            pieces.push(Some(piece));
            rest = tail;
            consumed = end;
        }
        let union_of = |offset: usize, len: usize| {
            unions
                .iter()
                .position(|u| u.0 <= offset && offset + len <= u.1)
        };

        // Outputs first: writable slices or handles taken out of the working memory.
        let mut out_arena: Vec<Option<&mut [u8]>> = Vec::with_capacity(layer.outputs.len());
        let mut out_handles: Vec<Option<(usize, Box<dyn TensorHandle>)>> =
            Vec::with_capacity(layer.outputs.len());
        for t in &layer.outputs {
            match self.slots[t.0] {
                Slot::Arena { len: 0, .. } => {
                    out_arena.push(Some(&mut []));
                    out_handles.push(None);
                }
                Slot::Arena { .. }
                    if self.direct_output[t.0]
                        .is_some_and(|k| direct.get(k).is_some_and(|d| d.is_some())) =>
                {
                    let k = self.direct_output[t.0].unwrap_or(0);
                    let buffer = direct.get_mut(k).and_then(|d| d.take());
                    out_arena.push(Some(buffer.ok_or_else(|| {
                        BackendError::Other("an output buffer is used twice".into())
                    })?));
                    out_handles.push(None);
                }
                Slot::Arena { offset, len } => {
                    // An output owns its whole union: nothing else it overlaps is alive.
                    let k = union_of(offset, len)
                        .filter(|&k| unions[k] == (offset, offset + len))
                        .ok_or_else(|| {
                            BackendError::Other(
                                "an output overlaps another tensor of its step".into(),
                            )
                        })?;
                    let piece = pieces[k].take().ok_or_else(|| {
                        BackendError::Other("an output region is used twice".into())
                    })?;
                    out_arena.push(Some(piece));
                    out_handles.push(None);
                }
                Slot::Handle(k) => {
                    let h = mem.handles[k].take().ok_or_else(|| {
                        BackendError::Other("an output handle is used twice".into())
                    })?;
                    out_arena.push(None);
                    out_handles.push(Some((k, h)));
                }
                _ => {
                    return Err(BackendError::Other(format!(
                        "output '{}' has no writable memory",
                        self.network.tensor(*t).name
                    )))
                }
            }
        }
        let shared: Vec<Option<&[u8]>> = pieces.into_iter().map(|p| p.map(|s| &*s)).collect();
        let all_host = layer
            .inputs
            .iter()
            .chain(&layer.outputs)
            .all(|t| !matches!(self.slots[t.0], Slot::Handle(_)));
        let outcome = if all_host {
            let mut in_views = Vec::with_capacity(layer.inputs.len());
            for t in &layer.inputs {
                in_views.push(self.host_view(*t, inputs, &shared, &unions)?);
            }
            let mut out_views: Vec<TensorViewMut<'_>> = Vec::with_capacity(layer.outputs.len());
            for (t, piece) in layer.outputs.iter().zip(out_arena.iter_mut()) {
                let data = piece
                    .take()
                    .ok_or_else(|| BackendError::Other("missing output region".into()))?;
                out_views.push(TensorViewMut {
                    info: &self.network.tensor(*t).info,
                    data,
                });
            }
            catch_unwind(AssertUnwindSafe(|| {
                step.workload.execute(&in_views, &mut out_views)
            }))
        } else {
            let mut in_handles: Vec<Box<dyn TensorHandle + '_>> =
                Vec::with_capacity(layer.inputs.len());
            for t in &layer.inputs {
                match self.slots[t.0] {
                    Slot::Handle(k) => {
                        let h = mem.handles[k].as_deref().ok_or_else(|| {
                            BackendError::Other("an input handle is missing".into())
                        })?;
                        in_handles.push(Box::new(Borrowed(h)));
                    }
                    _ => in_handles.push(Box::new(HostView(
                        self.host_view(*t, inputs, &shared, &unions)?,
                    ))),
                }
            }
            let mut outs: Vec<Box<dyn TensorHandle + '_>> = Vec::with_capacity(layer.outputs.len());
            for ((t, piece), handle) in layer
                .outputs
                .iter()
                .zip(out_arena.iter_mut())
                .zip(out_handles.iter_mut())
            {
                if let Some(data) = piece.take() {
                    outs.push(Box::new(HostViewMut(TensorViewMut {
                        info: &self.network.tensor(*t).info,
                        data,
                    })));
                } else if let Some((_, h)) = handle.as_mut() {
                    outs.push(Box::new(BorrowedMut(h.as_mut())));
                }
            }
            let in_refs: Vec<&dyn TensorHandle> = in_handles.iter().map(|b| b.as_ref()).collect();
            let mut out_refs: Vec<&mut dyn TensorHandle> = outs
                .iter_mut()
                .map(|b| b.as_mut() as &mut dyn TensorHandle)
                .collect();
            catch_unwind(AssertUnwindSafe(|| {
                step.workload.execute_handles(&in_refs, &mut out_refs)
            }))
        };
        for (k, h) in out_handles.into_iter().flatten() {
            mem.handles[k] = Some(h);
        }
        match outcome {
            Ok(Ok(())) => Ok(Ok(())),
            Ok(Err(e)) => Err(e),
            Err(panic) => Ok(Err(panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into()))),
        }
    }

    fn host_view<'a>(
        &'a self,
        t: TensorId,
        inputs: &[TensorView<'a>],
        shared: &[Option<&'a [u8]>],
        unions: &[(usize, usize)],
    ) -> std::result::Result<TensorView<'a>, BackendError> {
        let info = &self.network.tensor(t).info;
        let missing = || {
            BackendError::Other(format!(
                "input '{}' is not available",
                self.network.tensor(t).name
            ))
        };
        match self.slots[t.0] {
            Slot::Input(k) => inputs.get(k).copied().ok_or_else(missing),
            Slot::Constant(c) => self.constant(c).map(|x| x.view()).ok_or_else(missing),
            Slot::Arena { len: 0, .. } | Slot::Released => Ok(TensorView { info, data: &[] }),
            Slot::Arena { offset, len } => {
                let k = unions
                    .iter()
                    .position(|u| u.0 <= offset && offset + len <= u.1)
                    .ok_or_else(missing)?;
                let whole = shared.get(k).copied().flatten().ok_or_else(missing)?;
                let start = offset - unions[k].0;
                let data = whole.get(start..start + len).ok_or_else(missing)?;
                Ok(TensorView { info, data })
            }
            Slot::Handle(_) => Err(missing()),
        }
    }

    /// The bytes of output `t` after a run, wherever they are.
    fn output_bytes<'a>(
        &'a self,
        t: TensorId,
        inputs: &[TensorView<'a>],
        mem: &'a WorkingMemory,
    ) -> Result<&'a [u8]> {
        let not_computed = || {
            RuntimeError::Core(backplane_core::CoreError::InvalidNetwork(format!(
                "output '{}' was not computed",
                self.network.tensor(t).name
            )))
        };
        match self.slots[t.0] {
            Slot::Input(k) => inputs.get(k).map(|x| x.data).ok_or_else(not_computed),
            Slot::Constant(c) => self.constant(c).map(Tensor::bytes).ok_or_else(not_computed),
            Slot::Released => Err(not_computed()),
            Slot::Arena { offset, len } => mem
                .arena()
                .get(offset..offset + len)
                .ok_or_else(not_computed),
            Slot::Handle(k) => {
                let h = mem
                    .handles
                    .get(k)
                    .and_then(|h| h.as_deref())
                    .ok_or_else(not_computed)?;
                Ok(h.map().ok_or_else(not_computed)?.data)
            }
        }
    }

    fn collect_outputs(
        &self,
        inputs: &[TensorView<'_>],
        mem: &WorkingMemory,
    ) -> Result<NamedTensors> {
        let mut out = Vec::with_capacity(self.network.outputs().len());
        for &t in self.network.outputs() {
            let e = self.network.tensor(t);
            let tensor = Tensor::from_bytes(e.info.clone(), self.output_bytes(t, inputs, mem)?)?;
            out.push((e.name.clone(), tensor));
        }
        Ok(out)
    }
}

/// A borrowed handle, so that handles owned by the working memory can be passed by reference.
struct Borrowed<'a>(&'a dyn TensorHandle);

impl TensorHandle for Borrowed<'_> {
    fn info(&self) -> &backplane_core::TensorInfo {
        self.0.info()
    }
    fn map(&self) -> Option<TensorView<'_>> {
        self.0.map()
    }
    fn map_mut(&mut self) -> Option<TensorViewMut<'_>> {
        None
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        self.0.as_any()
    }
}

/// A writable borrowed handle.
struct BorrowedMut<'a>(&'a mut dyn TensorHandle);

impl TensorHandle for BorrowedMut<'_> {
    fn info(&self) -> &backplane_core::TensorInfo {
        self.0.info()
    }
    fn map(&self) -> Option<TensorView<'_>> {
        self.0.map()
    }
    fn map_mut(&mut self) -> Option<TensorViewMut<'_>> {
        self.0.map_mut()
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        self.0.as_any()
    }
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        self.0.as_any_mut()
    }
}

impl backplane_backend_api::NestedNetwork for LoadedNetwork {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> std::result::Result<(), BackendError> {
        self.execute_views(inputs, outputs)
            .map_err(|e| BackendError::Execution(e.to_string()))
    }
}
