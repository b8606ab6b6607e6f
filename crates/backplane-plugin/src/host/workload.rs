//! The plugin's workload factories and workloads: views or handles passed across, the
//! factory kept alive as long as any workload it made.

use super::adapters::DynamicMemoryManager;
use super::instance::{backend_error, PluginInstance};
use super::tensor_handle::DynamicTensorHandle;
use crate::abi::{self};
use crate::convert::{OwnedLayerDesc, OwnedTensorInfo};
use backplane_backend_api::{BackendError, LayerDesc, TensorHandle, Workload, WorkloadFactory};
use backplane_core::{TensorView, TensorViewMut};
use std::ffi::c_void;
use std::sync::Arc;

/// factory (and to the memory manager it was given).
pub(super) struct RawWorkloadFactory {
    pub(super) instance: Arc<PluginInstance>,
    pub(super) raw: *mut abi::WorkloadFactory,
    pub(super) _memory_manager: Option<Arc<DynamicMemoryManager>>,
}

// SAFETY: the ABI makes plugin objects usable from any thread; the pointer is only handed back.
unsafe impl Send for RawWorkloadFactory {}
// SAFETY: as above.
unsafe impl Sync for RawWorkloadFactory {}

impl Drop for RawWorkloadFactory {
    fn drop(&mut self) {
        if let Some(f) = self.instance.table().destroy_workload_factory {
            // SAFETY: made by this instance's `create_workload_factory`, destroyed once, after
            // every workload it created (each holds this object).
            unsafe { f(self.raw) };
        }
    }
}

/// A workload factory of the plugin.
pub(super) struct DynamicWorkloadFactory {
    pub(super) factory: Arc<RawWorkloadFactory>,
}

impl WorkloadFactory for DynamicWorkloadFactory {
    fn create_workload(
        &self,
        layer: &LayerDesc,
    ) -> backplane_backend_api::Result<Box<dyn Workload>> {
        let f = self
            .factory
            .instance
            .table()
            .create_workload
            .ok_or_else(|| BackendError::Other("create_workload is null".into()))?;
        let desc = OwnedLayerDesc::new(layer);
        let factory = self.factory.raw;
        let mut raw: *mut abi::Workload = std::ptr::null_mut();
        self.factory
            .instance
            // SAFETY: a live factory, a description valid for the call, a local out-pointer
            // and a valid buffer.
            .call(|msg| unsafe { f(factory, desc.as_ptr(), &mut raw, msg) })
            .map_err(|e| backend_error(e, Some(layer)))?;
        if raw.is_null() {
            return Err(BackendError::Other(
                "create_workload succeeded but returned no workload".into(),
            ));
        }
        Ok(Box::new(DynamicWorkload {
            instance: self.factory.instance.clone(),
            _factory: self.factory.clone(),
            raw,
            layer: layer.clone(),
            inputs: desc.inputs,
            outputs: desc.outputs,
        }))
    }
}

/// Views on the stack for up to this many tensors per side; more spill to the heap.
pub(super) const INLINE_VIEWS: usize = 8;

/// A workload of the plugin, with the C descriptions of its tensors.
pub(super) struct DynamicWorkload {
    pub(super) instance: Arc<PluginInstance>,
    /// The factory that made it, destroyed only after this workload (its `Drop` runs
    /// `destroy_workload` before the fields are dropped).
    pub(super) _factory: Arc<RawWorkloadFactory>,
    pub(super) raw: *mut abi::Workload,
    pub(super) layer: LayerDesc,
    pub(super) inputs: Vec<OwnedTensorInfo>,
    pub(super) outputs: Vec<OwnedTensorInfo>,
}

// SAFETY: the ABI requires `execute_workload` to be callable concurrently from any thread;
// the pointer is only handed back to the plugin.
unsafe impl Send for DynamicWorkload {}
// SAFETY: as above.
unsafe impl Sync for DynamicWorkload {}

/// A placeholder view, overwritten before use.
pub(super) const EMPTY_VIEW: abi::TensorView = abi::TensorView {
    struct_size: abi::size_u32::<abi::TensorView>(),
    reserved: 0,
    info: std::ptr::null(),
    data: std::ptr::null_mut(),
    num_bytes: 0,
    handle: std::ptr::null_mut(),
};

pub(super) fn view(info: &OwnedTensorInfo, data: *mut c_void, num_bytes: usize) -> abi::TensorView {
    abi::TensorView {
        struct_size: abi::size_u32::<abi::TensorView>(),
        reserved: 0,
        info: info.as_ptr(),
        data,
        num_bytes,
        handle: std::ptr::null_mut(),
    }
}

impl Workload for DynamicWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> backplane_backend_api::Result<()> {
        let f = self
            .instance
            .table()
            .execute_workload
            .ok_or_else(|| BackendError::Other("execute_workload is null".into()))?;
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(BackendError::Other(format!(
                "layer '{}' takes {} inputs and {} outputs, got {} and {}",
                self.layer.name,
                self.inputs.len(),
                self.outputs.len(),
                inputs.len(),
                outputs.len()
            )));
        }
        // The views and the pointer arrays live on the stack for up to INLINE_VIEWS tensors
        // per side (every standard op), on the heap beyond.
        let mut in_inline = [EMPTY_VIEW; INLINE_VIEWS];
        let mut out_inline = [EMPTY_VIEW; INLINE_VIEWS];
        let mut in_heap = Vec::new();
        let mut out_heap = Vec::new();
        let in_views: &mut [abi::TensorView] = if inputs.len() <= INLINE_VIEWS {
            &mut in_inline[..inputs.len()]
        } else {
            in_heap.resize(inputs.len(), EMPTY_VIEW);
            &mut in_heap
        };
        for ((slot, v), info) in in_views.iter_mut().zip(inputs).zip(&self.inputs) {
            *slot = view(info, v.data.as_ptr() as *mut c_void, v.data.len());
        }
        let out_views: &mut [abi::TensorView] = if outputs.len() <= INLINE_VIEWS {
            &mut out_inline[..outputs.len()]
        } else {
            out_heap.resize(outputs.len(), EMPTY_VIEW);
            &mut out_heap
        };
        for ((slot, v), info) in out_views
            .iter_mut()
            .zip(outputs.iter_mut())
            .zip(&self.outputs)
        {
            *slot = view(info, v.data.as_mut_ptr().cast::<c_void>(), v.data.len());
        }
        let mut in_ptrs = [std::ptr::null::<abi::TensorView>(); INLINE_VIEWS];
        let mut out_ptrs = [std::ptr::null::<abi::TensorView>(); INLINE_VIEWS];
        let in_ptr_heap: Vec<*const abi::TensorView>;
        let out_ptr_heap: Vec<*const abi::TensorView>;
        let in_list: &[*const abi::TensorView] = if in_views.len() <= INLINE_VIEWS {
            for (p, v) in in_ptrs.iter_mut().zip(in_views.iter()) {
                *p = v;
            }
            &in_ptrs[..in_views.len()]
        } else {
            in_ptr_heap = in_views
                .iter()
                .map(|v| v as *const abi::TensorView)
                .collect();
            &in_ptr_heap
        };
        let out_list: &[*const abi::TensorView] = if out_views.len() <= INLINE_VIEWS {
            for (p, v) in out_ptrs.iter_mut().zip(out_views.iter()) {
                *p = v;
            }
            &out_ptrs[..out_views.len()]
        } else {
            out_ptr_heap = out_views
                .iter()
                .map(|v| v as *const abi::TensorView)
                .collect();
            &out_ptr_heap
        };
        let raw = self.raw;
        self.instance
            .call(|msg| {
                // SAFETY: a live workload; the views describe the layer's tensors as at
                // creation and point into the caller's buffers, which outlive the call; the
                // output buffers are exclusively borrowed (`&mut`) and so overlap nothing.
                unsafe {
                    f(
                        raw,
                        in_list.as_ptr(),
                        in_list.len(),
                        out_list.as_ptr(),
                        out_list.len(),
                        msg,
                    )
                }
            })
            .map_err(|e| backend_error(e, Some(&self.layer)))
    }

    /// Handles of this instance's own factories go to the plugin as handles (1.2); any other
    /// handle is mapped and goes as host memory.
    fn execute_handles(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
    ) -> backplane_backend_api::Result<()> {
        let f = self
            .instance
            .table()
            .execute_workload
            .ok_or_else(|| BackendError::Other("execute_workload is null".into()))?;
        if self.instance.table().create_tensor_handle.is_none() {
            return self.execute_mapped(inputs, outputs);
        }
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(BackendError::Other(format!(
                "layer '{}' takes {} inputs and {} outputs, got {} and {}",
                self.layer.name,
                self.inputs.len(),
                self.outputs.len(),
                inputs.len(),
                outputs.len()
            )));
        }
        let not_mapped = |what: &str, i: usize| {
            BackendError::Other(format!(
                "{what} {i} of layer '{}' is in memory that cannot be mapped",
                self.layer.name
            ))
        };
        // Host views that must outlive the call.
        let mut in_maps: Vec<Option<TensorView<'_>>> = Vec::with_capacity(inputs.len());
        let mut in_views = Vec::with_capacity(inputs.len());
        for (i, (h, info)) in inputs.iter().zip(&self.inputs).enumerate() {
            match self.own(*h) {
                Some(d) => {
                    let mut v = view(info, std::ptr::null_mut(), d.num_bytes);
                    v.handle = d.release_for_read();
                    in_views.push(v);
                    in_maps.push(None);
                }
                None => {
                    let m = h.map().ok_or_else(|| not_mapped("input", i))?;
                    in_views.push(view(info, m.data.as_ptr() as *mut c_void, m.data.len()));
                    in_maps.push(Some(m));
                }
            }
        }
        let mut out_views = Vec::with_capacity(outputs.len());
        let mut out_maps: Vec<TensorViewMut<'_>> = Vec::new();
        for (i, (h, info)) in outputs.iter_mut().zip(&self.outputs).enumerate() {
            let own = self.own(&**h).is_some();
            if own {
                let d = h
                    .as_any_mut()
                    .and_then(|a| a.downcast_mut::<DynamicTensorHandle>())
                    .ok_or_else(|| not_mapped("output", i))?;
                let mut v = view(info, std::ptr::null_mut(), d.num_bytes);
                v.handle = d.release_for_write();
                out_views.push(v);
            } else {
                let m = h.map_mut().ok_or_else(|| not_mapped("output", i))?;
                out_views.push(view(
                    info,
                    m.data.as_mut_ptr().cast::<c_void>(),
                    m.data.len(),
                ));
                out_maps.push(m);
            }
        }
        let in_list: Vec<*const abi::TensorView> = in_views
            .iter()
            .map(|v| v as *const abi::TensorView)
            .collect();
        let out_list: Vec<*const abi::TensorView> = out_views
            .iter()
            .map(|v| v as *const abi::TensorView)
            .collect();
        let raw = self.raw;
        let result = self
            .instance
            .call(|msg| {
                // SAFETY: a live workload; each view describes the layer's tensor as at
                // creation and holds either host memory (mapped views kept alive in
                // `in_maps`/`out_maps`, outputs exclusively borrowed) or a live handle of this
                // instance, unmapped (outputs) or not mapped for writing (inputs); outputs are
                // exclusive borrows, so no handle or buffer appears twice among them.
                unsafe {
                    f(
                        raw,
                        in_list.as_ptr(),
                        in_list.len(),
                        out_list.as_ptr(),
                        out_list.len(),
                        msg,
                    )
                }
            })
            .map_err(|e| backend_error(e, Some(&self.layer)));
        drop(out_maps);
        drop(in_maps);
        result
    }
}

impl DynamicWorkload {
    /// The trait's default: every handle mapped to host memory.
    pub(super) fn execute_mapped(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
    ) -> backplane_backend_api::Result<()> {
        let not_mapped = || {
            BackendError::Other("a tensor of this layer is in memory that cannot be mapped".into())
        };
        let ins = inputs
            .iter()
            .map(|h| h.map().ok_or_else(not_mapped))
            .collect::<backplane_backend_api::Result<Vec<_>>>()?;
        let mut outs = outputs
            .iter_mut()
            .map(|h| h.map_mut().ok_or_else(not_mapped))
            .collect::<backplane_backend_api::Result<Vec<_>>>()?;
        self.execute(&ins, &mut outs)
    }

    /// The handle behind `h` if this instance made it.
    pub(super) fn own<'h>(&self, h: &'h dyn TensorHandle) -> Option<&'h DynamicTensorHandle> {
        h.as_any()?
            .downcast_ref::<DynamicTensorHandle>()
            .filter(|d| Arc::ptr_eq(&d.instance, &self.instance))
    }
}

impl Drop for DynamicWorkload {
    fn drop(&mut self) {
        if let Some(f) = self.instance.table().destroy_workload {
            // SAFETY: made by this instance's `create_workload`, destroyed once.
            unsafe { f(self.raw) };
        }
    }
}
