//! A GPU layer's workload: its pipelines and parameter buffers made once, its weights
//! uploaded once, and per execution one command buffer holding every dispatch of the layer
//! (plus the read-back copies of outputs that leave the device), submitted without waiting
//! unless an output must reach host memory.
//!
//! Inputs arrive as device handles (used in place), staging handles (their device buffer,
//! uploaded first when the host wrote the mirror) or host memory (a weight, uploaded when the
//! workload was made, or a tensor imported from host memory, uploaded into a pooled buffer).

use crate::device::{padded, GpuDevice};
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

/// A GPU layer, ready to run.
pub struct GpuWorkload {
    device: Arc<GpuDevice>,
    name: String,
    dispatches: Vec<Dispatch>,
    /// Device copies of the constant inputs (weights), by input slot.
    constants: Vec<Option<wgpu::Buffer>>,
    /// Output sizes in bytes, by slot.
    output_bytes: Vec<usize>,
    /// Buffers for tensors in host memory (uploads and read-backs), reused across
    /// executions; concurrent executions take different ones.
    pool: Mutex<Vec<wgpu::Buffer>>,
    readbacks: Mutex<Vec<wgpu::Buffer>>,
}

impl GpuWorkload {
    /// Compile the steps' pipelines, upload their parameters and the layer's weights.
    pub fn new(
        device: Arc<GpuDevice>,
        layer: &LayerDesc,
        steps: Vec<Step>,
    ) -> std::result::Result<Self, GpuError> {
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
            pool: Mutex::new(Vec::new()),
            readbacks: Mutex::new(Vec::new()),
        })
    }

    fn take(pool: &Mutex<Vec<wgpu::Buffer>>, bytes: usize) -> Option<wgpu::Buffer> {
        let mut pool = pool.lock().unwrap_or_else(|p| p.into_inner());
        let at = pool.iter().position(|b| b.size() == padded(bytes))?;
        Some(pool.swap_remove(at))
    }

    fn give(pool: &Mutex<Vec<wgpu::Buffer>>, buffers: Vec<wgpu::Buffer>) {
        pool.lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(buffers);
    }

    fn scratch(
        &self,
        bytes: usize,
        taken: &mut Vec<wgpu::Buffer>,
    ) -> std::result::Result<wgpu::Buffer, GpuError> {
        let b = match Self::take(&self.pool, bytes) {
            Some(b) => b,
            None => self.device.storage("GpuAcc host-tensor buffer", bytes)?,
        };
        taken.push(b.clone());
        Ok(b)
    }

    fn readback(
        &self,
        bytes: usize,
        taken: &mut Vec<wgpu::Buffer>,
    ) -> std::result::Result<wgpu::Buffer, GpuError> {
        let b = match Self::take(&self.readbacks, bytes) {
            Some(b) => b,
            None => self
                .device
                .readback("GpuAcc host-tensor read-back", bytes)?,
        };
        taken.push(b.clone());
        Ok(b)
    }

    /// Run the layer: inputs and outputs resolved to device buffers, one command buffer.
    fn run(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
    ) -> std::result::Result<(), GpuError> {
        let mut taken = Vec::new();
        let mut taken_rb = Vec::new();
        let result = self.run_with(inputs, outputs, &mut taken, &mut taken_rb);
        Self::give(&self.pool, taken);
        Self::give(&self.readbacks, taken_rb);
        result
    }

    fn run_with(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
        taken: &mut Vec<wgpu::Buffer>,
        taken_rb: &mut Vec<wgpu::Buffer>,
    ) -> std::result::Result<(), GpuError> {
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
        // Outputs: the buffer written, and where its bytes go afterwards.
        enum Back {
            Stays,
            Staging(wgpu::Buffer),
            Host(wgpu::Buffer),
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
        let mut encoder = dev
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(&self.name),
                timestamp_writes: None,
            });
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
                    }
                    .ok_or_else(|| {
                        GpuError::Binding(format!("{} binds a missing tensor", self.name))
                    })?;
                    entries.push(wgpu::BindGroupEntry {
                        binding: k as u32 + 1,
                        resource: buffer.as_entire_binding(),
                    });
                }
                let group = dev.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &layout,
                    entries: &entries,
                });
                pass.set_pipeline(&d.pipeline);
                pass.set_bind_group(0, &group, &[]);
                pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
            }
        }
        for ((buffer, back), bytes) in out_buffers.iter().zip(&backs).zip(&self.output_bytes) {
            if let Back::Staging(rb) | Back::Host(rb) = back {
                encoder.copy_buffer_to_buffer(buffer, 0, rb, 0, padded(*bytes));
            }
        }
        dev.queue.submit(Some(encoder.finish()));
        dev.check()?;
        for (h, back) in outputs.iter_mut().zip(&backs) {
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
