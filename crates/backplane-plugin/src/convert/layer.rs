//! Tensor descriptions, attributes, constants and layer descriptions across the ABI: owned
//! C structs built on the sending side, checked reads on the receiving side.

use super::{c_string, covers, dtype, slice, text};
use crate::abi;
use backplane_backend_api::LayerDesc;
use backplane_core::ops::{onnx_dtype_code, AttrValue};
use backplane_core::{Op, Quantization, Shape, Tensor, TensorInfo};
use std::ffi::CString;
use std::sync::Arc;

/// A C [`abi::TensorInfo`] with the arrays it points into.
pub(crate) struct OwnedTensorInfo {
    _dims: Vec<u64>,
    _scales: Vec<f32>,
    _zero_points: Vec<i32>,
    /// The struct (boxed, so its address is stable).
    pub(crate) c: Box<abi::TensorInfo>,
}

// SAFETY: the raw pointers inside point into the vectors this struct owns, which are never
// mutated after construction; sharing or sending them is as safe as sharing the vectors.
unsafe impl Send for OwnedTensorInfo {}
// SAFETY: as above; the struct is immutable after construction.
unsafe impl Sync for OwnedTensorInfo {}

impl OwnedTensorInfo {
    /// Describe `info` in C.
    pub(crate) fn new(info: &TensorInfo) -> Self {
        let dims: Vec<u64> = info.shape.dims().iter().map(|&d| d as u64).collect();
        let (kind, scales, zero_points, axis) = match &info.quant {
            Quantization::None => (abi::QUANT_NONE, vec![], vec![], 0u64),
            Quantization::PerTensor { scale, zero_point } => {
                (abi::QUANT_PER_TENSOR, vec![*scale], vec![*zero_point], 0)
            }
            Quantization::PerAxis {
                axis,
                scales,
                zero_points,
            } => (
                abi::QUANT_PER_AXIS,
                scales.clone(),
                zero_points.clone(),
                *axis as u64,
            ),
        };
        let c = Box::new(abi::TensorInfo {
            struct_size: abi::size_u32::<abi::TensorInfo>(),
            dtype: onnx_dtype_code(info.dtype) as i32,
            rank: dims.len() as u32,
            quant_kind: kind,
            dims: dims.as_ptr(),
            scales: scales.as_ptr(),
            zero_points: zero_points.as_ptr(),
            num_scales: scales.len().min(zero_points.len()),
            quant_axis: axis,
        });
        OwnedTensorInfo {
            _dims: dims,
            _scales: scales,
            _zero_points: zero_points,
            c,
        }
    }

    /// Pointer to the struct.
    pub(crate) fn as_ptr(&self) -> *const abi::TensorInfo {
        &*self.c
    }
}

/// A C [`abi::Attribute`] with what it points into.
pub(super) struct OwnedAttribute {
    pub(super) _name: CString,
    pub(super) _string: Option<CString>,
    pub(super) _ints: Vec<i64>,
    pub(super) _floats: Vec<f32>,
    pub(super) c: Box<abi::Attribute>,
}

impl OwnedAttribute {
    pub(super) fn new(name: &str, value: &AttrValue) -> Self {
        let name = c_string(name);
        let mut c = Box::new(abi::Attribute {
            struct_size: abi::size_u32::<abi::Attribute>(),
            kind: 0,
            name: name.as_ptr(),
            int_value: 0,
            float_value: 0.0,
            string_value: std::ptr::null(),
            ints: std::ptr::null(),
            floats: std::ptr::null(),
            count: 0,
        });
        let (mut string, mut ints, mut floats) = (None, Vec::new(), Vec::new());
        match value {
            AttrValue::Int(v) => {
                c.kind = abi::ATTR_INT;
                c.int_value = *v;
            }
            AttrValue::Float(v) => {
                c.kind = abi::ATTR_FLOAT;
                c.float_value = f64::from(*v);
            }
            AttrValue::Double(v) => {
                c.kind = abi::ATTR_DOUBLE;
                c.float_value = *v;
            }
            AttrValue::String(s) => {
                c.kind = abi::ATTR_STRING;
                let s = c_string(s);
                c.string_value = s.as_ptr();
                string = Some(s);
            }
            AttrValue::Ints(v) => {
                c.kind = abi::ATTR_INTS;
                ints = v.clone();
                c.ints = ints.as_ptr();
                c.count = ints.len();
            }
            AttrValue::Floats(v) => {
                c.kind = abi::ATTR_FLOATS;
                floats = v.clone();
                c.floats = floats.as_ptr();
                c.count = floats.len();
            }
        }
        OwnedAttribute {
            _name: name,
            _string: string,
            _ints: ints,
            _floats: floats,
            c,
        }
    }
}

/// A C [`abi::TensorView`] of a constant, with its description.
pub(super) struct OwnedConstant {
    pub(super) _tensor: Arc<Tensor>,
    pub(super) _info: OwnedTensorInfo,
    pub(super) c: Box<abi::TensorView>,
}

/// A C [`abi::LayerDesc`] with everything it points into.
pub(crate) struct OwnedLayerDesc {
    _name: CString,
    _op_type: CString,
    _attrs: Vec<OwnedAttribute>,
    _attr_ptrs: Vec<*const abi::Attribute>,
    /// Input descriptions (kept for the workload's views).
    pub(crate) inputs: Vec<OwnedTensorInfo>,
    _input_ptrs: Vec<*const abi::TensorInfo>,
    /// Output descriptions.
    pub(crate) outputs: Vec<OwnedTensorInfo>,
    _output_ptrs: Vec<*const abi::TensorInfo>,
    _constants: Vec<Option<OwnedConstant>>,
    _constant_ptrs: Vec<*const abi::TensorView>,
    c: Box<abi::LayerDesc>,
}

// SAFETY: every raw pointer inside points into data this struct owns (boxes, vectors, C
// strings, the constant tensors' Arcs), never mutated after construction.
unsafe impl Send for OwnedLayerDesc {}
// SAFETY: as above; immutable after construction.
unsafe impl Sync for OwnedLayerDesc {}

impl OwnedLayerDesc {
    /// Describe `layer` in C.
    pub(crate) fn new(layer: &LayerDesc) -> Self {
        let name = c_string(&layer.name);
        let (op_type, attrs) = layer.op.to_attributes();
        let op_type = c_string(&op_type);
        let attrs: Vec<OwnedAttribute> = attrs
            .iter()
            .map(|(n, v)| OwnedAttribute::new(n, v))
            .collect();
        let attr_ptrs: Vec<*const abi::Attribute> = attrs
            .iter()
            .map(|a| &*a.c as *const abi::Attribute)
            .collect();
        let inputs: Vec<OwnedTensorInfo> = layer.inputs.iter().map(OwnedTensorInfo::new).collect();
        let input_ptrs: Vec<*const abi::TensorInfo> = inputs.iter().map(|i| i.as_ptr()).collect();
        let outputs: Vec<OwnedTensorInfo> =
            layer.outputs.iter().map(OwnedTensorInfo::new).collect();
        let output_ptrs: Vec<*const abi::TensorInfo> = outputs.iter().map(|i| i.as_ptr()).collect();
        let constants: Vec<Option<OwnedConstant>> = (0..layer.inputs.len())
            .map(|slot| {
                layer.constants.get(slot).cloned().flatten().map(|t| {
                    let info = OwnedTensorInfo::new(t.info());
                    let c = Box::new(abi::TensorView {
                        struct_size: abi::size_u32::<abi::TensorView>(),
                        reserved: 0,
                        info: info.as_ptr(),
                        // The plugin only reads constants; the pointer is mutable in the C
                        // struct because the same struct describes outputs.
                        data: t.bytes().as_ptr() as *mut std::ffi::c_void,
                        num_bytes: t.bytes().len(),
                        handle: std::ptr::null_mut(),
                    });
                    OwnedConstant {
                        _tensor: t,
                        _info: info,
                        c,
                    }
                })
            })
            .collect();
        let constant_ptrs: Vec<*const abi::TensorView> = constants
            .iter()
            .map(|c| {
                c.as_ref()
                    .map_or(std::ptr::null(), |c| &*c.c as *const abi::TensorView)
            })
            .collect();
        let c = Box::new(abi::LayerDesc {
            struct_size: abi::size_u32::<abi::LayerDesc>(),
            reserved: 0,
            name: name.as_ptr(),
            op_type: op_type.as_ptr(),
            attributes: attr_ptrs.as_ptr(),
            num_attributes: attr_ptrs.len(),
            inputs: input_ptrs.as_ptr(),
            num_inputs: input_ptrs.len(),
            outputs: output_ptrs.as_ptr(),
            num_outputs: output_ptrs.len(),
            constants: constant_ptrs.as_ptr(),
        });
        OwnedLayerDesc {
            _name: name,
            _op_type: op_type,
            _attrs: attrs,
            _attr_ptrs: attr_ptrs,
            inputs,
            _input_ptrs: input_ptrs,
            outputs,
            _output_ptrs: output_ptrs,
            _constants: constants,
            _constant_ptrs: constant_ptrs,
            c,
        }
    }

    /// Pointer to the struct.
    pub(crate) fn as_ptr(&self) -> *const abi::LayerDesc {
        &*self.c
    }
}

/// Read a C tensor description.
///
/// # Safety
/// `ptr` is null or points to a valid [`abi::TensorInfo`] whose arrays are valid.
pub(crate) unsafe fn read_tensor_info(ptr: *const abi::TensorInfo) -> Result<TensorInfo, String> {
    // SAFETY: null or valid per the caller.
    let c = unsafe { ptr.as_ref() }.ok_or("tensor info is null")?;
    if !covers(c.struct_size, field_end!(abi::TensorInfo, quant_axis)) {
        return Err(format!(
            "tensor info struct_size {} is too small",
            c.struct_size
        ));
    }
    // SAFETY: `dims` has `rank` entries per the ABI.
    let dims = unsafe { slice(c.dims, c.rank as usize) }?;
    let dims = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("dimension {d} is too large")))
        .collect::<Result<Vec<usize>, String>>()?;
    let quant = match c.quant_kind {
        abi::QUANT_NONE => Quantization::None,
        kind @ (abi::QUANT_PER_TENSOR | abi::QUANT_PER_AXIS) => {
            // SAFETY: `scales` and `zero_points` have `num_scales` entries per the ABI.
            let scales = unsafe { slice(c.scales, c.num_scales) }?.to_vec();
            // SAFETY: as above.
            let zero_points = unsafe { slice(c.zero_points, c.num_scales) }?.to_vec();
            if kind == abi::QUANT_PER_TENSOR {
                match (scales.as_slice(), zero_points.as_slice()) {
                    ([scale], [zero_point]) => Quantization::PerTensor {
                        scale: *scale,
                        zero_point: *zero_point,
                    },
                    _ => return Err("per-tensor quantization needs one scale".into()),
                }
            } else {
                Quantization::PerAxis {
                    axis: usize::try_from(c.quant_axis).map_err(|_| "quantized axis too large")?,
                    scales,
                    zero_points,
                }
            }
        }
        other => return Err(format!("unknown quantization kind {other}")),
    };
    let info = TensorInfo {
        dtype: dtype(c.dtype)?,
        shape: Shape::new(dims),
        quant,
    };
    info.num_bytes().map_err(|e| e.to_string())?;
    Ok(info)
}

/// Read a C attribute.
///
/// # Safety
/// `ptr` is null or points to a valid [`abi::Attribute`].
pub(super) unsafe fn read_attribute(
    ptr: *const abi::Attribute,
) -> Result<(String, AttrValue), String> {
    // SAFETY: null or valid per the caller.
    let c = unsafe { ptr.as_ref() }.ok_or("attribute is null")?;
    if !covers(c.struct_size, field_end!(abi::Attribute, count)) {
        return Err(format!(
            "attribute struct_size {} is too small",
            c.struct_size
        ));
    }
    // SAFETY: `name` is a NUL-terminated string per the ABI.
    let name = unsafe { text(c.name, "attribute name") }?.to_string();
    let value = match c.kind {
        abi::ATTR_INT => AttrValue::Int(c.int_value),
        abi::ATTR_FLOAT => AttrValue::Float(c.float_value as f32),
        abi::ATTR_DOUBLE => AttrValue::Double(c.float_value),
        // SAFETY: a string attribute's value is NUL-terminated per the ABI.
        abi::ATTR_STRING => AttrValue::String(unsafe { text(c.string_value, &name) }?.to_string()),
        // SAFETY: `ints` has `count` entries per the ABI.
        abi::ATTR_INTS => AttrValue::Ints(unsafe { slice(c.ints, c.count) }?.to_vec()),
        // SAFETY: `floats` has `count` entries per the ABI.
        abi::ATTR_FLOATS => AttrValue::Floats(unsafe { slice(c.floats, c.count) }?.to_vec()),
        other => return Err(format!("attribute '{name}' has unknown kind {other}")),
    };
    Ok((name, value))
}

/// Copy the tensor a C view describes (a constant).
///
/// # Safety
/// `ptr` is null or points to a valid [`abi::TensorView`] with host memory (`data`).
pub(crate) unsafe fn read_constant(ptr: *const abi::TensorView) -> Result<Tensor, String> {
    // SAFETY: null or valid per the caller.
    let view = unsafe { ptr.as_ref() }.ok_or("a constant is null")?;
    if !covers(view.struct_size, field_end!(abi::TensorView, num_bytes)) {
        return Err(format!(
            "tensor view struct_size {} is too small",
            view.struct_size
        ));
    }
    // SAFETY: the view's info is valid per the caller.
    let info = unsafe { read_tensor_info(view.info) }?;
    // SAFETY: `data` has `num_bytes` readable bytes per the caller.
    let bytes = unsafe { slice(view.data.cast::<u8>().cast_const(), view.num_bytes) }?;
    Tensor::from_bytes(info, bytes).map_err(|e| e.to_string())
}

/// Whether `op` can cross the ABI: it has an attribute form that reads back. Ops that run
/// nested networks (If, Loop, Scan) have none, so a plugin never sees them.
pub(crate) fn crosses_the_abi(op: &Op) -> bool {
    let (op_type, attrs) = op.to_attributes();
    Op::from_attributes(&op_type, &attrs).is_ok()
}

/// Read a C layer description into the [`LayerDesc`] a Rust backend sees.
///
/// # Safety
/// `ptr` is null or points to a valid [`abi::LayerDesc`] (with valid arrays and strings)
/// that stays valid for the call.
pub(crate) unsafe fn read_layer_desc(ptr: *const abi::LayerDesc) -> Result<LayerDesc, String> {
    // SAFETY: null or valid per the caller.
    let c = unsafe { ptr.as_ref() }.ok_or("layer description is null")?;
    if !covers(c.struct_size, field_end!(abi::LayerDesc, constants)) {
        return Err(format!(
            "layer description struct_size {} is too small",
            c.struct_size
        ));
    }
    // SAFETY: strings are NUL-terminated per the ABI.
    let name = unsafe { text(c.name, "layer name") }?.to_string();
    // SAFETY: as above.
    let op_type = unsafe { text(c.op_type, "op type") }?;
    // SAFETY: `attributes` has `num_attributes` entries per the ABI.
    let attrs = unsafe { slice(c.attributes, c.num_attributes) }?
        .iter()
        // SAFETY: each entry is a valid attribute per the ABI.
        .map(|&a| unsafe { read_attribute(a) })
        .collect::<Result<Vec<_>, String>>()?;
    // SAFETY: `inputs` has `num_inputs` entries per the ABI.
    let inputs = unsafe { slice(c.inputs, c.num_inputs) }?
        .iter()
        // SAFETY: each entry is a valid tensor info per the ABI.
        .map(|&i| unsafe { read_tensor_info(i) })
        .collect::<Result<Vec<_>, String>>()?;
    // SAFETY: `outputs` has `num_outputs` entries per the ABI.
    let outputs = unsafe { slice(c.outputs, c.num_outputs) }?
        .iter()
        // SAFETY: each entry is a valid tensor info per the ABI.
        .map(|&i| unsafe { read_tensor_info(i) })
        .collect::<Result<Vec<_>, String>>()?;
    // SAFETY: `constants` has `num_inputs` entries per the ABI.
    let constants = unsafe { slice(c.constants, c.num_inputs) }?
        .iter()
        .map(|&v| {
            if v.is_null() {
                return Ok(None);
            }
            // SAFETY: a non-null entry is a valid view per the ABI.
            unsafe { read_constant(v) }.map(|t| Some(Arc::new(t)))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut op = Op::from_attributes(op_type, &attrs).map_err(|e| e.to_string())?;
    if let Op::Custom(custom) = &mut op {
        if custom.outputs.is_empty() {
            custom.outputs = outputs.clone();
        }
    }
    Ok(LayerDesc {
        name,
        op,
        inputs,
        outputs,
        constants,
    })
}
