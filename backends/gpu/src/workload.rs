//! A GPU layer's workload: its pipelines, parameter buffers and weights made once, its bind
//! groups once per set of tensor buffers. Executions record the layer's dispatches into the
//! device's pending command encoder, after those of the GPU layers before it; the work is
//! submitted when an output must reach host memory (a staging tensor at a border, or host
//! memory) and after every `submit_every` layers of a long run (so the GPU starts while the
//! host records the rest), with no CPU round trip inside a run of GPU layers.
//!
//! Inputs arrive as device handles (used in place), staging handles (their device buffer,
//! uploaded first when the host wrote the mirror) or host memory (a weight, uploaded when the
//! workload was made, or a tensor imported from host memory, uploaded into a pooled buffer).

use crate::device::{padded, BufferPool, GpuDevice};
use crate::error::GpuError;
use crate::kernels::{Bind, Step};
use crate::memory::{DeviceHandle, StagingHandle};
use backplane_backend_api::{BackendError, LayerDesc, Result, TensorHandle, Workload};
use backplane_core::{TensorView, TensorViewMut};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// One prepared dispatch.
struct Dispatch {
    pipeline: wgpu::ComputePipeline,
    params: wgpu::Buffer,
    binds: Vec<Bind>,
    groups: [u32; 3],
}

/// How many sets of tensor buffers a workload keeps bind groups for (the runtime pools a
/// few working memories per network; host tensors come in pooled buffers).
const BIND_GROUP_SETS: usize = 8;

/// The bind groups of every dispatch for one set of input and output buffers.
struct BoundSet {
    key: Vec<wgpu::Buffer>,
    groups: Vec<wgpu::BindGroup>,
}

/// A GPU layer, ready to run.
pub struct GpuWorkload {
    name: String,
    dispatches: Vec<Dispatch>,
    /// Device copies of the constant inputs (weights), by input slot.
    constants: Vec<Option<wgpu::Buffer>>,
    /// Device buffers for values between the layer's steps ([`Bind::Scratch`]), by slot.
    /// Safe to share across executions: a layer's steps are recorded together, and the
    /// device runs recorded dispatches in order.
    scratch: Vec<wgpu::Buffer>,
    /// The layer's status word ([`Bind::Status`]), when a step reports through one.
    status: Option<wgpu::Buffer>,
    /// Output sizes in bytes, by slot.
    output_bytes: Vec<usize>,
    /// Buffers for tensors in host memory (uploads and read-backs), reused across
    /// executions; a buffer returns here once the work using it is submitted.
    pool: BufferPool,
    readbacks: BufferPool,
    /// Bind groups made on first use of a set of tensor buffers, reused after.
    bound: Mutex<Vec<BoundSet>>,
    /// Declared last: the buffers above are dropped before the device they came from (whose
    /// last holder destroys it during its turn, see `device::LIFECYCLE`).
    device: Arc<GpuDevice>,
}

/// Where an output's bytes go after the layer's dispatches.
enum Back {
    /// A device tensor: nowhere.
    Stays,
    /// A staging tensor: into its read-back buffer, then its host mirror.
    Staging(wgpu::Buffer),
    /// Host memory: into a pooled read-back buffer, then the host view.
    Host(wgpu::Buffer),
}

impl GpuWorkload {
    /// Compile the steps' pipelines, upload their parameters and the layer's weights.
    pub fn new(
        device: Arc<GpuDevice>,
        layer: &LayerDesc,
        steps: Vec<Step>,
    ) -> std::result::Result<Self, GpuError> {
        let mut scratch_bytes: Vec<usize> = Vec::new();
        for b in steps.iter().flat_map(|s| &s.binds) {
            if let Bind::Scratch { slot, bytes } = *b {
                if scratch_bytes.len() <= slot {
                    scratch_bytes.resize(slot + 1, 0);
                }
                scratch_bytes[slot] = scratch_bytes[slot].max(bytes);
            }
        }
        let mut scratch = Vec::with_capacity(scratch_bytes.len());
        for bytes in scratch_bytes {
            scratch.push(device.storage(&format!("{} scratch", layer.name), bytes)?);
        }
        let status = if steps.iter().any(|s| s.binds.contains(&Bind::Status)) {
            Some(device.storage(&format!("{} status", layer.name), 4)?)
        } else {
            None
        };
        let mut dispatches = Vec::with_capacity(steps.len());
        for s in steps {
            let pipeline = device.pipeline(&s.source)?;
            let params =
                device.buffer_with("GpuAcc kernel parameters", bytemuck::cast_slice(&s.params))?;
            dispatches.push(Dispatch {
                pipeline,
                params,
                binds: s.binds,
                groups: s.groups,
            });
        }
        let mut constants = Vec::with_capacity(layer.inputs.len());
        for slot in 0..layer.inputs.len() {
            constants.push(match layer.constant(slot) {
                Some(t) => {
                    Some(device.buffer_with(&format!("{} weight {slot}", layer.name), t.bytes())?)
                }
                None => None,
            });
        }
        let bytes = |list: &[backplane_core::TensorInfo]| -> Vec<usize> {
            list.iter().map(|t| t.num_bytes().unwrap_or(0)).collect()
        };
        device.check()?;
        Ok(GpuWorkload {
            output_bytes: bytes(&layer.outputs),
            device,
            name: layer.name.clone(),
            dispatches,
            constants,
            scratch,
            status,
            pool: BufferPool::default(),
            readbacks: BufferPool::default(),
            bound: Mutex::new(Vec::new()),
        })
    }

    fn take(pool: &BufferPool, bytes: usize) -> Option<wgpu::Buffer> {
        let mut pool = pool.lock().unwrap_or_else(|p| p.into_inner());
        let at = pool.iter().position(|b| b.size() == padded(bytes))?;
        Some(pool.swap_remove(at))
    }

    /// A pooled buffer for a host tensor, held until the work using it is submitted.
    fn scratch(
        &self,
        bytes: usize,
        taken: &mut Vec<(BufferPool, wgpu::Buffer)>,
    ) -> std::result::Result<wgpu::Buffer, GpuError> {
        let b = match Self::take(&self.pool, bytes) {
            Some(b) => b,
            None => self.device.storage("GpuAcc host-tensor buffer", bytes)?,
        };
        taken.push((self.pool.clone(), b.clone()));
        Ok(b)
    }

    fn readback(
        &self,
        bytes: usize,
        taken: &mut Vec<(BufferPool, wgpu::Buffer)>,
    ) -> std::result::Result<wgpu::Buffer, GpuError> {
        let b = match Self::take(&self.readbacks, bytes) {
            Some(b) => b,
            None => self
                .device
                .readback("GpuAcc host-tensor read-back", bytes)?,
        };
        taken.push((self.readbacks.clone(), b.clone()));
        Ok(b)
    }

    /// A read-back buffer for the status word, from the pool (it returns there once read).
    fn readback_status(&self) -> std::result::Result<wgpu::Buffer, GpuError> {
        match Self::take(&self.readbacks, 4) {
            Some(b) => Ok(b),
            None => self.device.readback("GpuAcc status read-back", 4),
        }
    }

    /// The bind groups of every dispatch for these tensor buffers, made on first use.
    fn bind_groups(
        &self,
        in_buffers: &[wgpu::Buffer],
        out_buffers: &[wgpu::Buffer],
    ) -> std::result::Result<Vec<wgpu::BindGroup>, GpuError> {
        let key: Vec<wgpu::Buffer> = in_buffers.iter().chain(out_buffers).cloned().collect();
        let mut bound = self.bound.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = bound.iter().position(|b| b.key == key) {
            return Ok(bound[at].groups.clone());
        }
        let mut groups = Vec::with_capacity(self.dispatches.len());
        for d in &self.dispatches {
            let layout = d.pipeline.get_bind_group_layout(0);
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: d.params.as_entire_binding(),
            }];
            for (k, b) in d.binds.iter().enumerate() {
                let buffer = match b {
                    Bind::Input(s) => in_buffers.get(*s),
                    Bind::Output(s) => out_buffers.get(*s),
                    Bind::Scratch { slot, .. } => self.scratch.get(*slot),
                    Bind::Status => self.status.as_ref(),
                }
                .ok_or_else(|| {
                    GpuError::Binding(format!("{} binds a missing tensor", self.name))
                })?;
                entries.push(wgpu::BindGroupEntry {
                    binding: k as u32 + 1,
                    resource: buffer.as_entire_binding(),
                });
            }
            groups.push(
                self.device
                    .device
                    .create_bind_group(&wgpu::BindGroupDescriptor {
                        label: None,
                        layout: &layout,
                        entries: &entries,
                    }),
            );
            self.device.bind_groups.fetch_add(1, Ordering::Relaxed);
        }
        if bound.len() >= BIND_GROUP_SETS {
            bound.remove(0);
        }
        bound.push(BoundSet {
            key,
            groups: groups.clone(),
        });
        Ok(groups)
    }

    /// Run the layer: inputs and outputs resolved to device buffers, its dispatches recorded
    /// into the device's pending encoder after the GPU layers before it. The work is
    /// submitted when an output must reach host memory (then this layer waits for it and
    /// reads those outputs back) or when the run has recorded `submit_every` layers.
    fn run(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
    ) -> std::result::Result<(), GpuError> {
        let mut taken = Vec::new();
        let mut taken_rb = Vec::new();
        let result = self.record(inputs, outputs, &mut taken, &mut taken_rb);
        // Buffers not recorded (an error before recording) go straight back; recorded work
        // took its buffers into the pending state.
        for (pool, b) in taken {
            pool.lock().unwrap_or_else(|p| p.into_inner()).push(b);
        }
        let read = result.and_then(|backs| {
            self.read_back(outputs, &backs)?;
            // Work that reached the host ran: its status words are ready to read.
            if backs.iter().any(|b| !matches!(b, Back::Stays)) {
                self.device.check_statuses()?;
            }
            Ok(())
        });
        // Read-back buffers return only after this layer read them.
        for (pool, b) in taken_rb {
            pool.lock().unwrap_or_else(|p| p.into_inner()).push(b);
        }
        read
    }

    /// Copy the outputs that leave the device into host memory (their work was submitted).
    fn read_back(
        &self,
        outputs: &mut [&mut dyn TensorHandle],
        backs: &[Back],
    ) -> std::result::Result<(), GpuError> {
        let dev = &self.device;
        for (h, back) in outputs.iter_mut().zip(backs) {
            match back {
                Back::Stays => {}
                Back::Staging(rb) => {
                    let s = h
                        .as_any_mut()
                        .and_then(|a| a.downcast_mut::<StagingHandle>())
                        .ok_or_else(|| GpuError::Binding("a staging output changed kind".into()))?;
                    dev.read_into(rb, s.mirror.bytes_mut())?;
                    s.device_stale.store(false, Ordering::Release);
                }
                Back::Host(rb) => {
                    let view = h.map_mut().ok_or_else(|| {
                        GpuError::Binding("a host output cannot be mapped".into())
                    })?;
                    dev.read_into(rb, view.data)?;
                }
            }
        }
        Ok(())
    }

    /// Record the layer; answers where each output's bytes go. `taken` holds the pooled
    /// buffers used, emptied once they belong to the pending (or submitted) work;
    /// `taken_rb` the read-back buffers, which the caller returns after reading them.
    fn record(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
        taken: &mut Vec<(BufferPool, wgpu::Buffer)>,
        taken_rb: &mut Vec<(BufferPool, wgpu::Buffer)>,
    ) -> std::result::Result<Vec<Back>, GpuError> {
        let dev = &self.device;
        let mut in_buffers = Vec::with_capacity(inputs.len());
        for (slot, h) in inputs.iter().enumerate() {
            if let Some(Some(c)) = self.constants.get(slot) {
                in_buffers.push(c.clone());
                continue;
            }
            let any = h.as_any();
            if let Some(d) = any.and_then(|a| a.downcast_ref::<DeviceHandle>()) {
                in_buffers.push(d.buffer.clone());
            } else if let Some(s) = any.and_then(|a| a.downcast_ref::<StagingHandle>()) {
                in_buffers.push(s.device_buffer(dev).clone());
            } else if let Some(view) = h.map() {
                let b = self.scratch(view.data.len(), taken)?;
                dev.upload(&b, view.data);
                in_buffers.push(b);
            } else {
                return Err(GpuError::Binding(format!(
                    "input {slot} of {} is in memory GpuAcc cannot read",
                    self.name
                )));
            }
        }
        let mut out_buffers = Vec::with_capacity(outputs.len());
        let mut backs = Vec::with_capacity(outputs.len());
        for (slot, h) in outputs.iter_mut().enumerate() {
            let bytes = self.output_bytes.get(slot).copied().unwrap_or(0);
            let any = h.as_any();
            if let Some(d) = any.and_then(|a| a.downcast_ref::<DeviceHandle>()) {
                out_buffers.push(d.buffer.clone());
                backs.push(Back::Stays);
            } else if let Some(s) = any.and_then(|a| a.downcast_ref::<StagingHandle>()) {
                out_buffers.push(s.buffer.clone());
                backs.push(Back::Staging(s.readback.clone()));
            } else if h.map_mut().is_some() {
                out_buffers.push(self.scratch(bytes, taken)?);
                backs.push(Back::Host(self.readback(bytes, taken_rb)?));
            } else {
                return Err(GpuError::Binding(format!(
                    "output {slot} of {} is in memory GpuAcc cannot write",
                    self.name
                )));
            }
        }
        let groups = self.bind_groups(&in_buffers, &out_buffers)?;
        let mut pending = dev.pending.lock().unwrap_or_else(|p| p.into_inner());
        let crate::device::Pending {
            encoder, stamps, ..
        } = &mut *pending;
        let encoder = encoder.get_or_insert_with(|| {
            dev.device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("GpuAcc run of layers"),
                })
        });
        if let Some(status) = &self.status {
            encoder.clear_buffer(status, 0, None);
        }
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(&self.name),
                timestamp_writes: stamps.as_mut().and_then(|s| s.writes(&self.name)),
            });
            for (d, group) in self.dispatches.iter().zip(&groups) {
                pass.set_pipeline(&d.pipeline);
                pass.set_bind_group(0, group, &[]);
                pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
            }
        }
        for ((buffer, back), bytes) in out_buffers.iter().zip(&backs).zip(&self.output_bytes) {
            if let Back::Staging(rb) | Back::Host(rb) = back {
                encoder.copy_buffer_to_buffer(buffer, 0, rb, 0, padded(*bytes));
            }
        }
        if let Some(status) = &self.status {
            let rb = self.readback_status()?;
            encoder.copy_buffer_to_buffer(status, 0, &rb, 0, 4);
            pending.statuses.push(crate::device::StatusCheck {
                layer: self.name.clone(),
                buffer: rb,
                pool: self.readbacks.clone(),
            });
        }
        dev.layers.fetch_add(1, Ordering::Relaxed);
        pending.layers += 1;
        dev.dispatches
            .fetch_add(self.dispatches.len() as u64, Ordering::Relaxed);
        pending.held.append(taken);
        if dev.sync_each_layer {
            dev.submit_pending(&mut pending)?;
            drop(pending);
            dev.wait()?;
        } else if backs.iter().any(|b| !matches!(b, Back::Stays))
            || (dev.submit_every > 0 && pending.layers >= dev.submit_every)
        {
            dev.submit_pending(&mut pending)?;
        }
        Ok(backs)
    }
}

impl Workload for GpuWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        use backplane_backend_api::{HostViewHandle, HostViewHandleMut};
        let ins: Vec<HostViewHandle<'_>> = inputs.iter().map(|v| HostViewHandle(*v)).collect();
        let in_refs: Vec<&dyn TensorHandle> = ins.iter().map(|h| h as &dyn TensorHandle).collect();
        let mut outs: Vec<HostViewHandleMut<'_>> = outputs
            .iter_mut()
            .map(|v| {
                HostViewHandleMut(TensorViewMut {
                    info: v.info,
                    data: &mut *v.data,
                })
            })
            .collect();
        let mut out_refs: Vec<&mut dyn TensorHandle> = outs
            .iter_mut()
            .map(|h| h as &mut dyn TensorHandle)
            .collect();
        self.execute_handles(&in_refs, &mut out_refs)
    }

    fn execute_handles(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
    ) -> Result<()> {
        self.run(inputs, outputs).map_err(BackendError::from)
    }
}
