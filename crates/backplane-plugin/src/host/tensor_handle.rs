//! The plugin's tensor-handle factories and handles, mapped lazily for the host.

use super::instance::{backend_error, PluginInstance};
use crate::abi;
use crate::convert::OwnedTensorInfo;
use backplane_backend_api::{
    BackendError, FactoryId, FactoryProperties, TensorHandle, TensorHandleFactory,
};
use backplane_core::{TensorInfo, TensorView, TensorViewMut};
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// A tensor-handle factory of the plugin.
pub(super) struct DynamicTensorHandleFactory {
    pub(super) instance: Arc<PluginInstance>,
    pub(super) id: FactoryId,
    pub(super) c_id: std::ffi::CString,
    pub(super) properties: FactoryProperties,
}

impl TensorHandleFactory for DynamicTensorHandleFactory {
    fn id(&self) -> FactoryId {
        self.id.clone()
    }

    fn properties(&self) -> FactoryProperties {
        self.properties.clone()
    }

    fn create_tensor_handle(
        &self,
        info: &TensorInfo,
    ) -> backplane_backend_api::Result<Box<dyn TensorHandle>> {
        let create = self
            .instance
            .table()
            .create_tensor_handle
            .ok_or_else(|| BackendError::Other("create_tensor_handle is null".into()))?;
        let num_bytes = info.num_bytes()?;
        let c_info = OwnedTensorInfo::new(info);
        let raw_inst = self.instance.raw;
        let mut raw: *mut abi::TensorHandle = std::ptr::null_mut();
        self.instance
            // SAFETY: a live instance, a NUL-terminated id and a description valid for the
            // call, a local out-pointer and a valid buffer.
            .call(|msg| unsafe {
                create(raw_inst, self.c_id.as_ptr(), c_info.as_ptr(), &mut raw, msg)
            })
            .map_err(|e| backend_error(e, None))?;
        if raw.is_null() {
            return Err(BackendError::Other(
                "create_tensor_handle succeeded but returned no handle".into(),
            ));
        }
        Ok(Box::new(DynamicTensorHandle {
            instance: self.instance.clone(),
            raw,
            info: info.clone(),
            num_bytes,
            mapping: Mutex::new(Mapping::default()),
        }))
    }
}

/// How a handle is mapped into host memory.
pub(super) struct Mapping {
    /// The mapped bytes (null: not mapped).
    pub(super) data: *mut u8,
    /// Mapped writable.
    pub(super) writable: bool,
    /// Views of the mapping may be alive: made by `map(&self)`, so they borrow the handle
    /// shared and only an exclusive borrow proves them gone.
    pub(super) shared: bool,
}

impl Default for Mapping {
    fn default() -> Self {
        Mapping {
            data: std::ptr::null_mut(),
            writable: false,
            shared: false,
        }
    }
}

/// A tensor handle of the plugin. It is mapped when the host first needs its bytes and stays
/// mapped until the host can prove no view of it is alive and the plugin is about to use it
/// (or it is destroyed): the host never writes through a mapping while a workload runs.
pub(super) struct DynamicTensorHandle {
    pub(super) instance: Arc<PluginInstance>,
    pub(super) raw: *mut abi::TensorHandle,
    pub(super) info: TensorInfo,
    pub(super) num_bytes: usize,
    pub(super) mapping: Mutex<Mapping>,
}

// SAFETY: the ABI makes plugin objects usable from any thread; the handle pointer is only
// handed back to the plugin, and the mapping pointer is guarded by the mutex and the borrow
// rules below.
unsafe impl Send for DynamicTensorHandle {}
// SAFETY: as above.
unsafe impl Sync for DynamicTensorHandle {}

impl DynamicTensorHandle {
    /// Map (or reuse the mapping) and return its address.
    pub(super) fn mapped(&self, m: &mut Mapping, writable: bool) -> Option<*mut u8> {
        if !m.data.is_null() && (m.writable || !writable) {
            return Some(m.data);
        }
        let t = self.instance.table();
        let (map, unmap) = (t.map_tensor_handle?, t.unmap_tensor_handle?);
        if !m.data.is_null() {
            // Mapped read-only and now wanted writable: only reached with an exclusive
            // borrow (from `map_mut`), so no view of the old mapping is alive.
            let raw = self.raw;
            let _ = self.instance.call(|_| {
                // SAFETY: a live, mapped handle of this instance.
                unsafe { unmap(raw) };
                abi::STATUS_OK
            });
            self.instance
                .lib
                .counts
                .mapped
                .fetch_sub(1, Ordering::SeqCst);
            *m = Mapping::default();
        }
        let mut data: *mut c_void = std::ptr::null_mut();
        let mut len = usize::MAX;
        let raw = self.raw;
        // SAFETY: a live handle of this instance, local out-pointers and a valid buffer.
        let ok = self
            .instance
            .call(|msg| unsafe { map(raw, u32::from(writable), &mut data, &mut len, msg) })
            .is_ok();
        if !ok {
            return None;
        }
        if len != self.num_bytes || (data.is_null() && len > 0) {
            if !data.is_null() {
                let _ = self.instance.call(|_| {
                    // SAFETY: just mapped.
                    unsafe { unmap(raw) };
                    abi::STATUS_OK
                });
            }
            return None;
        }
        self.instance
            .lib
            .counts
            .mapped
            .fetch_add(1, Ordering::SeqCst);
        m.data = data.cast::<u8>();
        m.writable = writable;
        Some(m.data)
    }

    /// Unmap if mapped. Only called with proof that no view is alive.
    pub(super) fn unmap(m: &mut Mapping, instance: &PluginInstance, raw: *mut abi::TensorHandle) {
        if m.data.is_null() {
            return;
        }
        if let Some(unmap) = instance.table().unmap_tensor_handle {
            let _ = instance.call(|_| {
                // SAFETY: a live, mapped handle of this instance.
                unsafe { unmap(raw) };
                abi::STATUS_OK
            });
        }
        instance.lib.counts.mapped.fetch_sub(1, Ordering::SeqCst);
        *m = Mapping::default();
    }

    /// Before the plugin reads the handle (an input): end a mapping made by `map_mut`, whose
    /// view is gone since the caller borrows the handle.
    pub(super) fn release_for_read(&self) -> *mut abi::TensorHandle {
        let mut m = self.mapping.lock().unwrap_or_else(|e| e.into_inner());
        if !m.shared {
            Self::unmap(&mut m, &self.instance, self.raw);
        }
        self.raw
    }

    /// Before the plugin writes the handle (an output): end any mapping; the exclusive
    /// borrow proves that no view is alive.
    pub(super) fn release_for_write(&mut self) -> *mut abi::TensorHandle {
        let m = self.mapping.get_mut().unwrap_or_else(|e| e.into_inner());
        Self::unmap(m, &self.instance, self.raw);
        self.raw
    }
}

impl TensorHandle for DynamicTensorHandle {
    fn info(&self) -> &TensorInfo {
        &self.info
    }

    fn map(&self) -> Option<TensorView<'_>> {
        let mut m = self.mapping.lock().unwrap_or_else(|e| e.into_inner());
        let data = self.mapped(&mut m, false)?;
        m.shared = true;
        let data: &[u8] = if self.num_bytes == 0 {
            &[]
        } else {
            // SAFETY: the plugin mapped `num_bytes` readable bytes, valid until unmap, which
            // happens only under an exclusive borrow of this handle or with `shared` unset;
            // `shared` is set, so the mapping outlives this shared borrow. The plugin writes
            // the handle only as a workload output, also under an exclusive borrow.
            unsafe { std::slice::from_raw_parts(data, self.num_bytes) }
        };
        Some(TensorView {
            info: &self.info,
            data,
        })
    }

    fn map_mut(&mut self) -> Option<TensorViewMut<'_>> {
        let mut m = std::mem::take(self.mapping.get_mut().unwrap_or_else(|e| e.into_inner()));
        let data = self.mapped(&mut m, true);
        // The exclusive borrow ends every earlier view: this mapping is the only one.
        m.shared = false;
        *self.mapping.get_mut().unwrap_or_else(|e| e.into_inner()) = m;
        let data = data?;
        let data: &mut [u8] = if self.num_bytes == 0 {
            &mut []
        } else {
            // SAFETY: the plugin mapped `num_bytes` writable bytes, valid until unmap, which
            // needs a later borrow of this handle; this exclusive borrow makes the slice the
            // only access.
            unsafe { std::slice::from_raw_parts_mut(data, self.num_bytes) }
        };
        Some(TensorViewMut {
            info: &self.info,
            data,
        })
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

impl Drop for DynamicTensorHandle {
    fn drop(&mut self) {
        let m = self.mapping.get_mut().unwrap_or_else(|e| e.into_inner());
        Self::unmap(m, &self.instance, self.raw);
        if let Some(f) = self.instance.table().destroy_tensor_handle {
            // SAFETY: made by this instance's `create_tensor_handle`, destroyed once.
            unsafe { f(self.raw) };
        }
    }
}
