//! Exported workloads: creation through the backend's factory, and execution with every view
//! or handle the host passes checked first.

use crate::abi;
use crate::convert::{read_layer_desc, slice};
use backplane_backend_api::{
    HostViewHandle, HostViewHandleMut, TensorHandle, Workload, WorkloadFactory,
};
use backplane_core::{TensorInfo, TensorView, TensorViewMut};

use super::memory::PluginTensorHandle;
use super::{destroy, guard, invalid, object, put, status_of};

/// A workload factory handed to the host.
pub(super) struct PluginFactory(pub(super) Box<dyn WorkloadFactory>);

/// A workload handed to the host, with the descriptions its views are checked against.
pub(super) struct PluginWorkload {
    pub(super) workload: Box<dyn Workload>,
    pub(super) inputs: Vec<(TensorInfo, usize)>,
    pub(super) outputs: Vec<(TensorInfo, usize)>,
}

/// # Safety
/// `factory` was made by `create_workload_factory` and is not used again.
pub(super) unsafe extern "C" fn destroy_workload_factory(factory: *mut abi::WorkloadFactory) {
    // SAFETY: per the caller.
    unsafe { destroy::<PluginFactory>(factory.cast()) }
}

/// # Safety
/// Pointers as the ABI documents.
pub(super) unsafe extern "C" fn create_workload(
    factory: *mut abi::WorkloadFactory,
    layer: *const abi::LayerDesc,
    out_workload: *mut *mut abi::Workload,
    error: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: a live factory per the ABI.
        let f = unsafe { object::<PluginFactory>(factory.cast(), "workload factory") }?;
        // SAFETY: a valid description per the ABI.
        let desc = unsafe { read_layer_desc(layer) }.map_err(invalid)?;
        let sized = |infos: &[TensorInfo]| {
            infos
                .iter()
                .map(|i| i.num_bytes().map(|n| (i.clone(), n)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(e.to_string()))
        };
        let inputs = sized(&desc.inputs)?;
        let outputs = sized(&desc.outputs)?;
        let workload = f.0.create_workload(&desc).map_err(status_of)?;
        let raw = Box::into_raw(Box::new(PluginWorkload {
            workload,
            inputs,
            outputs,
        }))
        .cast::<abi::Workload>();
        // SAFETY: valid for writes per the ABI.
        unsafe { put(out_workload, raw) }.inspect_err(|_| {
            // SAFETY: just made, not handed out.
            unsafe { destroy::<PluginWorkload>(raw.cast()) }
        })
    };
    // SAFETY: `error` is null or valid per the ABI.
    unsafe { guard(error, body) }
}

/// Where a host view's tensor is.
pub(super) enum Checked {
    /// Host memory.
    Data(*mut u8),
    /// One of this backend's tensor handles (1.2).
    Handle(*mut PluginTensorHandle),
}

/// Check a host view against the description it must match. The view is `what` number
/// `index` (for messages, formatted only on failure).
///
/// # Safety
/// `view` is null or a valid [`abi::TensorView`].
pub(super) unsafe fn checked_view(
    view: *const abi::TensorView,
    expected: &(TensorInfo, usize),
    what: &str,
    index: usize,
) -> Result<Checked, (abi::Status, String)> {
    // SAFETY: null or valid per the caller.
    let v = unsafe { view.as_ref() }.ok_or_else(|| invalid(format!("{what} {index} is null")))?;
    if (v.struct_size as usize) < field_end!(abi::TensorView, num_bytes) {
        return Err(invalid(format!("{what} {index}: struct_size is too small")));
    }
    if v.num_bytes != expected.1 {
        return Err(invalid(format!(
            "{what} {index} has {} bytes but {} needs {}",
            v.num_bytes, expected.0, expected.1
        )));
    }
    if (v.struct_size as usize) >= field_end!(abi::TensorView, handle) && !v.handle.is_null() {
        return Ok(Checked::Handle(v.handle.cast::<PluginTensorHandle>()));
    }
    if v.data.is_null() && expected.1 > 0 {
        return Err(invalid(format!("{what} {index} has no data")));
    }
    Ok(Checked::Data(v.data.cast::<u8>()))
}

/// One input of a workload that takes handles.
pub(super) enum InputArg<'a> {
    Host(HostViewHandle<'a>),
    Handle(&'a PluginTensorHandle),
}

/// One output of a workload that takes handles.
pub(super) enum OutputArg<'a> {
    Host(HostViewHandleMut<'a>),
    Handle(&'a mut PluginTensorHandle),
}

/// # Safety
/// Pointers as the ABI documents: views of the sizes the workload's layer describes, outputs
/// writable and not overlapping each other or the inputs; handles are live handles of this
/// backend, none of them an output twice or both an input and an output.
pub(super) unsafe extern "C" fn execute_workload(
    workload: *mut abi::Workload,
    inputs: *const *const abi::TensorView,
    num_inputs: usize,
    outputs: *const *const abi::TensorView,
    num_outputs: usize,
    error: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: a live workload per the ABI.
        let w = unsafe { object::<PluginWorkload>(workload.cast(), "workload") }?;
        if num_inputs != w.inputs.len() || num_outputs != w.outputs.len() {
            return Err(invalid(format!(
                "expected {} inputs and {} outputs, got {num_inputs} and {num_outputs}",
                w.inputs.len(),
                w.outputs.len()
            )));
        }
        // SAFETY: `num_inputs` entries per the ABI.
        let ins = unsafe { slice(inputs, num_inputs) }.map_err(invalid)?;
        // SAFETY: `num_outputs` entries per the ABI.
        let outs = unsafe { slice(outputs, num_outputs) }.map_err(invalid)?;
        let mut in_checked = Vec::with_capacity(num_inputs);
        for (i, (&v, expected)) in ins.iter().zip(&w.inputs).enumerate() {
            // SAFETY: a valid view per the ABI.
            in_checked.push(unsafe { checked_view(v, expected, "input", i) }?);
        }
        let mut out_checked = Vec::with_capacity(num_outputs);
        for (i, (&v, expected)) in outs.iter().zip(&w.outputs).enumerate() {
            // SAFETY: a valid view per the ABI.
            out_checked.push(unsafe { checked_view(v, expected, "output", i) }?);
        }
        let handles = in_checked
            .iter()
            .chain(&out_checked)
            .any(|c| matches!(c, Checked::Handle(_)));
        if !handles {
            let mut in_views = Vec::with_capacity(num_inputs);
            for (c, expected) in in_checked.iter().zip(&w.inputs) {
                let Checked::Data(data) = *c else {
                    return Err(invalid("unreachable: a handle"));
                };
                in_views.push(TensorView {
                    info: &expected.0,
                    // SAFETY: checked non-null (or empty) with `expected.1` readable bytes.
                    data: unsafe { slice(data.cast_const(), expected.1) }.map_err(invalid)?,
                });
            }
            let mut out_views = Vec::with_capacity(num_outputs);
            for (c, expected) in out_checked.iter().zip(&w.outputs) {
                let Checked::Data(data) = *c else {
                    return Err(invalid("unreachable: a handle"));
                };
                out_views.push(TensorViewMut {
                    info: &expected.0,
                    // SAFETY: non-null (or empty), `expected.1` writable bytes that nothing
                    // else references during the call (outputs never overlap), per the ABI.
                    data: unsafe { slice_mut(data, expected.1) },
                });
            }
            return w
                .workload
                .execute(&in_views, &mut out_views)
                .map_err(status_of);
        }
        // Some tensors are in the backend's own handles: the workload gets handles.
        let out_handles: Vec<*mut PluginTensorHandle> = out_checked
            .iter()
            .filter_map(|c| match c {
                Checked::Handle(h) => Some(*h),
                Checked::Data(_) => None,
            })
            .collect();
        for (i, h) in out_handles.iter().enumerate() {
            let twice = out_handles[..i].contains(h)
                || in_checked
                    .iter()
                    .any(|c| matches!(c, Checked::Handle(x) if x == h));
            if twice {
                return Err(invalid(
                    "an output handle is also another output or an input",
                ));
            }
        }
        let mut in_args = Vec::with_capacity(num_inputs);
        for (c, expected) in in_checked.iter().zip(&w.inputs) {
            in_args.push(match *c {
                Checked::Data(data) => InputArg::Host(HostViewHandle(TensorView {
                    info: &expected.0,
                    // SAFETY: checked non-null (or empty) with `expected.1` readable bytes.
                    data: unsafe { slice(data.cast_const(), expected.1) }.map_err(invalid)?,
                })),
                Checked::Handle(h) => InputArg::Handle(
                    // SAFETY: a live handle of this backend per the ABI, only read here.
                    unsafe { h.as_ref() }.ok_or_else(|| invalid("null handle"))?,
                ),
            });
        }
        let mut out_args = Vec::with_capacity(num_outputs);
        for (c, expected) in out_checked.iter().zip(&w.outputs) {
            out_args.push(match *c {
                Checked::Data(data) => OutputArg::Host(HostViewHandleMut(TensorViewMut {
                    info: &expected.0,
                    // SAFETY: as in the host-memory path above.
                    data: unsafe { slice_mut(data, expected.1) },
                })),
                Checked::Handle(h) => OutputArg::Handle(
                    // SAFETY: a live handle of this backend per the ABI, checked above to
                    // appear once among the tensors of this call: this is its only reference.
                    unsafe { h.as_mut() }.ok_or_else(|| invalid("null handle"))?,
                ),
            });
        }
        let in_refs: Vec<&dyn TensorHandle> = in_args
            .iter()
            .map(|a| match a {
                InputArg::Host(h) => h as &dyn TensorHandle,
                InputArg::Handle(h) => h.handle.as_ref(),
            })
            .collect();
        let mut out_refs: Vec<&mut dyn TensorHandle> = out_args
            .iter_mut()
            .map(|a| match a {
                OutputArg::Host(h) => h as &mut dyn TensorHandle,
                OutputArg::Handle(h) => h.handle.as_mut(),
            })
            .collect();
        w.workload
            .execute_handles(&in_refs, &mut out_refs)
            .map_err(status_of)
    };
    // SAFETY: `error` is null or valid per the ABI.
    unsafe { guard(error, body) }
}

/// A writable slice from a C pointer; empty when `len` is 0.
///
/// # Safety
/// When `len > 0`, `data` is non-null with `len` writable bytes that nothing else references
/// for `'a`.
pub(super) unsafe fn slice_mut<'a>(data: *mut u8, len: usize) -> &'a mut [u8] {
    if len == 0 || data.is_null() {
        &mut []
    } else {
        // SAFETY: per the caller.
        unsafe { std::slice::from_raw_parts_mut(data, len) }
    }
}

/// # Safety
/// `workload` was made by `create_workload` and is not used again.
pub(super) unsafe extern "C" fn destroy_workload(workload: *mut abi::Workload) {
    // SAFETY: per the caller.
    unsafe { destroy::<PluginWorkload>(workload.cast()) }
}
