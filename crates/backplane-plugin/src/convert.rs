//! Conversions between backplane's Rust types and the C structs of [`crate::abi`]: building
//! them (owned, on the side that passes them) and reading them (on the side that receives).

use crate::abi;
use backplane_backend_api::{LayerDesc, ReplacementLayer, Substitution, ValueRef};
use backplane_core::ops::{dtype_from_onnx_code, onnx_dtype_code, AttrValue};
use backplane_core::{
    DataType, LayerId, Network, Op, Quantization, Shape, Tensor, TensorId, TensorInfo, TensorKind,
};
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, CStr, CString};
use std::sync::Arc;

/// A C string from Rust text; interior NULs (which C cannot carry) are dropped.
pub(crate) fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

/// Call `f` with a host-owned message buffer of `N` bytes on the stack; returns its status
/// and, when the status is not [`abi::STATUS_OK`], the text the plugin wrote.
pub(crate) fn with_message<const N: usize>(
    f: impl FnOnce(*mut abi::Message) -> abi::Status,
) -> (abi::Status, String) {
    let (status, text) = with_message_text::<N>(f);
    if status == abi::STATUS_OK {
        (status, String::new())
    } else {
        (status, text)
    }
}

/// Like [`with_message`], always returning the text (for calls that report through it).
pub(crate) fn with_message_text<const N: usize>(
    f: impl FnOnce(*mut abi::Message) -> abi::Status,
) -> (abi::Status, String) {
    let mut buf = [0u8; N];
    let mut msg = abi::Message {
        struct_size: abi::size_u32::<abi::Message>(),
        reserved: 0,
        data: buf.as_mut_ptr().cast::<c_char>(),
        capacity: N,
    };
    let status = f(&mut msg);
    let end = buf.iter().position(|&b| b == 0).unwrap_or(N);
    (status, String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Write `text` into a plugin-side view of a host [`abi::Message`], truncated to fit.
///
/// # Safety
/// `msg` is null or points to a valid [`abi::Message`] whose `data` has `capacity` writable
/// bytes.
pub(crate) unsafe fn write_message(msg: *mut abi::Message, text: &str) {
    // SAFETY: the caller guarantees `msg` is null or valid.
    let Some(m) = (unsafe { msg.as_mut() }) else {
        return;
    };
    if m.data.is_null() || m.capacity == 0 {
        return;
    }
    let mut n = text.len().min(m.capacity - 1);
    while !text.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: `data` has `capacity` writable bytes and `n + 1 <= capacity`; the source is a
    // distinct Rust string.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), m.data.cast::<u8>(), n);
        *m.data.add(n) = 0;
    }
}

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
struct OwnedAttribute {
    _name: CString,
    _string: Option<CString>,
    _ints: Vec<i64>,
    _floats: Vec<f32>,
    c: Box<abi::Attribute>,
}

impl OwnedAttribute {
    fn new(name: &str, value: &AttrValue) -> Self {
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
struct OwnedConstant {
    _tensor: Arc<Tensor>,
    _info: OwnedTensorInfo,
    c: Box<abi::TensorView>,
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

/// Whether a struct that declares `struct_size` covers the field ending at `end`.
fn covers(struct_size: u32, end: usize) -> bool {
    struct_size as usize >= end
}

/// A slice from a C pointer and length; null with length 0 is the empty slice.
///
/// # Safety
/// When `len > 0`, `ptr` points to `len` valid, initialized `T`s that outlive `'a`.
pub(crate) unsafe fn slice<'a, T>(ptr: *const T, len: usize) -> Result<&'a [T], String> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(format!("null array of {len} entries"));
    }
    // SAFETY: non-null, and the caller guarantees `len` valid entries.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Rust text from a C string.
///
/// # Safety
/// `ptr` is null or a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn text<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, String> {
    if ptr.is_null() {
        return Err(format!("{what} is null"));
    }
    // SAFETY: non-null and NUL-terminated per the caller.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|_| format!("{what} is not UTF-8"))
}

fn dtype(code: i32) -> Result<DataType, String> {
    dtype_from_onnx_code(i64::from(code)).ok_or_else(|| format!("unknown element type {code}"))
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
unsafe fn read_attribute(ptr: *const abi::Attribute) -> Result<(String, AttrValue), String> {
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

/// A C [`abi::Subgraph`] of some layers of a network, with everything it points into.
pub(crate) struct OwnedSubgraph {
    _names: Vec<CString>,
    _infos: Vec<OwnedTensorInfo>,
    _tensors: Vec<abi::SubgraphTensor>,
    _tensor_ptrs: Vec<*const abi::SubgraphTensor>,
    _descs: Vec<OwnedLayerDesc>,
    _ids: Vec<(Vec<u64>, Vec<u64>)>,
    _layers: Vec<abi::SubgraphLayer>,
    _layer_ptrs: Vec<*const abi::SubgraphLayer>,
    c: Box<abi::Subgraph>,
}

impl OwnedSubgraph {
    /// Describe `layers` (in topological order) of `network` in C.
    pub(crate) fn new(network: &Network, layers: &[LayerId]) -> Self {
        let inside: HashSet<LayerId> = layers.iter().copied().collect();
        let consumers = network.consumers();
        let mut order: Vec<TensorId> = Vec::new();
        let mut seen: HashSet<TensorId> = HashSet::new();
        for &l in layers {
            let layer = network.layer(l);
            for &t in layer.inputs.iter().chain(&layer.outputs) {
                if seen.insert(t) {
                    order.push(t);
                }
            }
        }
        let mut names = Vec::with_capacity(order.len());
        let mut infos = Vec::with_capacity(order.len());
        let mut tensors = Vec::with_capacity(order.len());
        for &t in &order {
            let e = network.tensor(t);
            let mut flags = 0;
            match &e.kind {
                TensorKind::Produced { layer, .. } if inside.contains(layer) => {
                    let outside = consumers
                        .get(t.0)
                        .is_some_and(|c| c.iter().any(|(l, _)| !inside.contains(l)));
                    if outside || network.outputs().contains(&t) {
                        flags |= abi::TENSOR_USED_OUTSIDE;
                    }
                }
                TensorKind::Constant(_) => flags |= abi::TENSOR_EXTERNAL | abi::TENSOR_CONSTANT,
                _ => flags |= abi::TENSOR_EXTERNAL,
            }
            let name = c_string(&e.name);
            let info = OwnedTensorInfo::new(&e.info);
            tensors.push(abi::SubgraphTensor {
                struct_size: abi::size_u32::<abi::SubgraphTensor>(),
                flags,
                id: t.0 as u64,
                name: name.as_ptr(),
                info: info.as_ptr(),
            });
            names.push(name);
            infos.push(info);
        }
        let tensor_ptrs: Vec<*const abi::SubgraphTensor> = tensors
            .iter()
            .map(|t| t as *const abi::SubgraphTensor)
            .collect();
        let mut descs = Vec::with_capacity(layers.len());
        let mut ids = Vec::with_capacity(layers.len());
        let mut c_layers = Vec::with_capacity(layers.len());
        for &l in layers {
            let layer = network.layer(l);
            let desc = OwnedLayerDesc::new(&LayerDesc::from_layer(network, layer));
            let ins: Vec<u64> = layer.inputs.iter().map(|t| t.0 as u64).collect();
            let outs: Vec<u64> = layer.outputs.iter().map(|t| t.0 as u64).collect();
            c_layers.push(abi::SubgraphLayer {
                struct_size: abi::size_u32::<abi::SubgraphLayer>(),
                reserved: 0,
                id: l.0 as u64,
                desc: desc.as_ptr(),
                inputs: ins.as_ptr(),
                outputs: outs.as_ptr(),
            });
            descs.push(desc);
            ids.push((ins, outs));
        }
        let layer_ptrs: Vec<*const abi::SubgraphLayer> = c_layers
            .iter()
            .map(|l| l as *const abi::SubgraphLayer)
            .collect();
        let c = Box::new(abi::Subgraph {
            struct_size: abi::size_u32::<abi::Subgraph>(),
            reserved: 0,
            layers: layer_ptrs.as_ptr(),
            num_layers: layer_ptrs.len(),
            tensors: tensor_ptrs.as_ptr(),
            num_tensors: tensor_ptrs.len(),
        });
        OwnedSubgraph {
            _names: names,
            _infos: infos,
            _tensors: tensors,
            _tensor_ptrs: tensor_ptrs,
            _descs: descs,
            _ids: ids,
            _layers: c_layers,
            _layer_ptrs: layer_ptrs,
            c,
        }
    }

    /// Pointer to the struct.
    pub(crate) fn as_ptr(&self) -> *const abi::Subgraph {
        &*self.c
    }
}

/// A subgraph the plugin received, rebuilt as a network of its own: external tensors are its
/// inputs and constants, tensors used outside are its outputs.
pub(crate) struct ReadSubgraph {
    /// The rebuilt network.
    pub(crate) network: Network,
    /// The host's id of each layer, by local layer index.
    pub(crate) layer_ids: Vec<u64>,
    /// The host's id of each tensor, by local tensor index.
    pub(crate) tensor_ids: Vec<u64>,
}

fn id_usize(id: u64) -> Result<usize, String> {
    usize::try_from(id).map_err(|_| format!("id {id} is too large"))
}

/// Read a C subgraph and rebuild it as a network.
///
/// # Safety
/// `ptr` is null or points to a valid [`abi::Subgraph`] (valid arrays, layers and tensors).
pub(crate) unsafe fn read_subgraph(ptr: *const abi::Subgraph) -> Result<ReadSubgraph, String> {
    // SAFETY: null or valid per the caller.
    let c = unsafe { ptr.as_ref() }.ok_or("the subgraph is null")?;
    if !covers(c.struct_size, field_end!(abi::Subgraph, num_tensors)) {
        return Err(format!(
            "subgraph struct_size {} is too small",
            c.struct_size
        ));
    }
    // Tensors by host id: flags, name, description; and the ids in the host's order.
    let mut tensors: HashMap<u64, (u32, String, TensorInfo)> = HashMap::new();
    let mut order: Vec<u64> = Vec::new();
    // SAFETY: `num_tensors` entries per the caller.
    for &t in unsafe { slice(c.tensors, c.num_tensors) }? {
        // SAFETY: each entry is null or valid per the caller.
        let t = unsafe { t.as_ref() }.ok_or("a subgraph tensor is null")?;
        if !covers(t.struct_size, field_end!(abi::SubgraphTensor, info)) {
            return Err("a subgraph tensor's struct_size is too small".into());
        }
        // SAFETY: NUL-terminated per the caller.
        let name = unsafe { text(t.name, "tensor name") }?.to_string();
        // SAFETY: valid per the caller.
        let info = unsafe { read_tensor_info(t.info) }?;
        if tensors.insert(t.id, (t.flags, name, info)).is_none() {
            order.push(t.id);
        }
    }
    let mut network = Network::new();
    let mut local: HashMap<u64, TensorId> = HashMap::new();
    let mut tensor_ids: Vec<u64> = Vec::new();
    let mut layer_ids = Vec::new();
    fn record(ids: &mut Vec<u64>, local: TensorId, host: u64) {
        if ids.len() <= local.0 {
            ids.resize(local.0 + 1, abi::NEW_TENSOR);
        }
        ids[local.0] = host;
    }
    // SAFETY: `num_layers` entries per the caller.
    for &l in unsafe { slice(c.layers, c.num_layers) }? {
        // SAFETY: each entry is null or valid per the caller.
        let l = unsafe { l.as_ref() }.ok_or("a subgraph layer is null")?;
        if !covers(l.struct_size, field_end!(abi::SubgraphLayer, outputs)) {
            return Err("a subgraph layer's struct_size is too small".into());
        }
        // SAFETY: valid per the caller.
        let desc = unsafe { read_layer_desc(l.desc) }?;
        // SAFETY: one id per input slot per the caller.
        let in_ids = unsafe { slice(l.inputs, desc.inputs.len()) }?;
        // SAFETY: one id per output slot per the caller.
        let out_ids = unsafe { slice(l.outputs, desc.outputs.len()) }?;
        let mut inputs = Vec::with_capacity(in_ids.len());
        for (slot, &id) in in_ids.iter().enumerate() {
            if let Some(&t) = local.get(&id) {
                inputs.push(t);
                continue;
            }
            let (_, name, info) = tensors
                .get(&id)
                .ok_or_else(|| format!("layer '{}' reads unknown tensor {id}", desc.name))?;
            let t = match desc.constants.get(slot).cloned().flatten() {
                Some(value) => network.add_shared_constant(name, value),
                None => network.add_input(name, info.clone()),
            }
            .map_err(|e| e.to_string())?;
            record(&mut tensor_ids, t, id);
            local.insert(id, t);
            inputs.push(t);
        }
        let names: Vec<String> = out_ids
            .iter()
            .enumerate()
            .map(|(slot, id)| {
                tensors
                    .get(id)
                    .map_or_else(|| format!("{}:{slot}", desc.name), |t| t.1.clone())
            })
            .collect();
        let outs = network
            .add_layer_named(&desc.name, desc.op, &inputs, &names)
            .map_err(|e| e.to_string())?;
        for (&t, &id) in outs.iter().zip(out_ids) {
            record(&mut tensor_ids, t, id);
            local.insert(id, t);
        }
        layer_ids.push(l.id);
    }
    for id in &order {
        let used_outside = tensors
            .get(id)
            .is_some_and(|t| t.0 & abi::TENSOR_USED_OUTSIDE != 0);
        if used_outside {
            if let Some(&t) = local.get(id) {
                network.mark_output(t).map_err(|e| e.to_string())?;
            }
        }
    }
    tensor_ids.resize(network.tensors().len(), abi::NEW_TENSOR);
    Ok(ReadSubgraph {
        network,
        layer_ids,
        tensor_ids,
    })
}

/// A C [`abi::ValueRef`] with what it points into.
struct OwnedValueRef {
    _constant: Option<(Arc<Tensor>, OwnedTensorInfo, Box<abi::TensorView>)>,
    c: Box<abi::ValueRef>,
}

/// A C [`abi::ReplacementLayer`] with what it points into.
struct OwnedReplacementLayer {
    _desc: OwnedLayerDesc,
    _inputs: Vec<OwnedValueRef>,
    _input_ptrs: Vec<*const abi::ValueRef>,
    _outputs: Vec<u64>,
    c: Box<abi::ReplacementLayer>,
}

/// A C [`abi::Substitution`] (plugin side), in the host's ids.
pub(crate) struct OwnedSubstitution {
    _replaced: Vec<u64>,
    _layers: Vec<OwnedReplacementLayer>,
    _layer_ptrs: Vec<*const abi::ReplacementLayer>,
    c: Box<abi::Substitution>,
}

impl OwnedSubstitution {
    /// Describe `sub` of the rebuilt subgraph `read` in the host's ids.
    pub(crate) fn new(read: &ReadSubgraph, sub: &Substitution) -> Result<Self, String> {
        let host_tensor = |t: TensorId| -> Result<u64, String> {
            read.tensor_ids
                .get(t.0)
                .copied()
                .filter(|&id| id != abi::NEW_TENSOR)
                .ok_or_else(|| format!("the substitution refers to unknown tensor #{}", t.0))
        };
        let replaced = sub
            .replaced
            .iter()
            .map(|l| {
                read.layer_ids
                    .get(l.0)
                    .copied()
                    .ok_or_else(|| format!("the substitution replaces unknown layer #{}", l.0))
            })
            .collect::<Result<Vec<u64>, String>>()?;
        let mut produced: Vec<Vec<TensorInfo>> = Vec::with_capacity(sub.replacement.len());
        let mut layers = Vec::with_capacity(sub.replacement.len());
        for r in &sub.replacement {
            let mut in_infos = Vec::with_capacity(r.inputs.len());
            let mut refs = Vec::with_capacity(r.inputs.len());
            for v in &r.inputs {
                let mut c = Box::new(abi::ValueRef {
                    struct_size: abi::size_u32::<abi::ValueRef>(),
                    kind: 0,
                    tensor: 0,
                    constant: std::ptr::null(),
                    layer: 0,
                    slot: 0,
                });
                let mut constant = None;
                match v {
                    ValueRef::Existing(t) => {
                        c.kind = abi::VALUE_EXISTING;
                        c.tensor = host_tensor(*t)?;
                        let e = read.network.tensors().get(t.0).ok_or_else(|| {
                            format!("the substitution refers to unknown tensor #{}", t.0)
                        })?;
                        in_infos.push(e.info.clone());
                    }
                    ValueRef::NewConstant(value) => {
                        c.kind = abi::VALUE_CONSTANT;
                        let info = OwnedTensorInfo::new(value.info());
                        let view = Box::new(abi::TensorView {
                            struct_size: abi::size_u32::<abi::TensorView>(),
                            reserved: 0,
                            info: info.as_ptr(),
                            // The host only reads it.
                            data: value.bytes().as_ptr() as *mut std::ffi::c_void,
                            num_bytes: value.bytes().len(),
                            handle: std::ptr::null_mut(),
                        });
                        c.constant = &*view;
                        in_infos.push(value.info().clone());
                        constant = Some((value.clone(), info, view));
                    }
                    ValueRef::Produced { layer, slot } => {
                        c.kind = abi::VALUE_PRODUCED;
                        c.layer = *layer as u64;
                        c.slot = *slot as u64;
                        let info = produced
                            .get(*layer)
                            .and_then(|o| o.get(*slot))
                            .ok_or_else(|| {
                                format!(
                                    "replacement layer '{}' reads output {slot} of layer {layer}, which does not come before it",
                                    r.name
                                )
                            })?;
                        in_infos.push(info.clone());
                    }
                }
                refs.push(OwnedValueRef {
                    _constant: constant,
                    c,
                });
            }
            let in_refs: Vec<&TensorInfo> = in_infos.iter().collect();
            let out_infos = r
                .op
                .infer(&in_refs)
                .map_err(|e| format!("replacement layer '{}' ({}): {e}", r.name, r.op.name()))?;
            if out_infos.len() != r.outputs.len() {
                return Err(format!(
                    "replacement layer '{}' has {} outputs but names {}",
                    r.name,
                    out_infos.len(),
                    r.outputs.len()
                ));
            }
            let outputs = r
                .outputs
                .iter()
                .map(|o| o.map_or(Ok(abi::NEW_TENSOR), host_tensor))
                .collect::<Result<Vec<u64>, String>>()?;
            let desc = OwnedLayerDesc::new(&LayerDesc {
                name: r.name.clone(),
                op: r.op.clone(),
                inputs: in_infos,
                outputs: out_infos.clone(),
                constants: vec![None; r.inputs.len()],
            });
            let input_ptrs: Vec<*const abi::ValueRef> =
                refs.iter().map(|v| &*v.c as *const abi::ValueRef).collect();
            let c = Box::new(abi::ReplacementLayer {
                struct_size: abi::size_u32::<abi::ReplacementLayer>(),
                reserved: 0,
                desc: desc.as_ptr(),
                inputs: input_ptrs.as_ptr(),
                num_inputs: input_ptrs.len(),
                outputs: outputs.as_ptr(),
            });
            produced.push(out_infos);
            layers.push(OwnedReplacementLayer {
                _desc: desc,
                _inputs: refs,
                _input_ptrs: input_ptrs,
                _outputs: outputs,
                c,
            });
        }
        let layer_ptrs: Vec<*const abi::ReplacementLayer> = layers
            .iter()
            .map(|l| &*l.c as *const abi::ReplacementLayer)
            .collect();
        let c = Box::new(abi::Substitution {
            struct_size: abi::size_u32::<abi::Substitution>(),
            reserved: 0,
            replaced: replaced.as_ptr(),
            num_replaced: replaced.len(),
            layers: layer_ptrs.as_ptr(),
            num_layers: layer_ptrs.len(),
        });
        Ok(OwnedSubstitution {
            _replaced: replaced,
            _layers: layers,
            _layer_ptrs: layer_ptrs,
            c,
        })
    }

    /// Pointer to the struct.
    pub(crate) fn as_ptr(&self) -> *const abi::Substitution {
        &*self.c
    }
}

/// Read a substitution the plugin reported (host side), checking every id: replaced layers
/// must be in `allowed`, existing tensors in `network`.
///
/// # Safety
/// `ptr` is null or points to a valid [`abi::Substitution`] for the call.
pub(crate) unsafe fn read_substitution(
    ptr: *const abi::Substitution,
    network: &Network,
    allowed: &HashSet<LayerId>,
) -> Result<Substitution, String> {
    // SAFETY: null or valid per the caller.
    let c = unsafe { ptr.as_ref() }.ok_or("the substitution is null")?;
    if !covers(c.struct_size, field_end!(abi::Substitution, num_layers)) {
        return Err(format!(
            "substitution struct_size {} is too small",
            c.struct_size
        ));
    }
    // SAFETY: `num_replaced` entries per the caller.
    let replaced = unsafe { slice(c.replaced, c.num_replaced) }?
        .iter()
        .map(|&id| {
            let l = LayerId(id_usize(id)?);
            if allowed.contains(&l) {
                Ok(l)
            } else {
                Err(format!(
                    "it replaces layer {id}, which is not in its subgraph"
                ))
            }
        })
        .collect::<Result<Vec<LayerId>, String>>()?;
    let tensor = |id: u64| -> Result<TensorId, String> {
        let t = id_usize(id)?;
        if t < network.tensors().len() {
            Ok(TensorId(t))
        } else {
            Err(format!("it refers to tensor {id}, which does not exist"))
        }
    };
    let mut replacement = Vec::new();
    // SAFETY: `num_layers` entries per the caller.
    for &r in unsafe { slice(c.layers, c.num_layers) }? {
        // SAFETY: null or valid per the caller.
        let r = unsafe { r.as_ref() }.ok_or("a replacement layer is null")?;
        if !covers(r.struct_size, field_end!(abi::ReplacementLayer, outputs)) {
            return Err("a replacement layer's struct_size is too small".into());
        }
        // SAFETY: valid per the caller.
        let desc = unsafe { read_layer_desc(r.desc) }?;
        let mut inputs = Vec::new();
        // SAFETY: `num_inputs` entries per the caller.
        for &v in unsafe { slice(r.inputs, r.num_inputs) }? {
            // SAFETY: null or valid per the caller.
            let v = unsafe { v.as_ref() }.ok_or("a value reference is null")?;
            if !covers(v.struct_size, field_end!(abi::ValueRef, slot)) {
                return Err("a value reference's struct_size is too small".into());
            }
            inputs.push(match v.kind {
                abi::VALUE_EXISTING => ValueRef::Existing(tensor(v.tensor)?),
                abi::VALUE_CONSTANT => {
                    // SAFETY: a valid view with host memory per the caller.
                    let value = unsafe { read_constant(v.constant) }?;
                    ValueRef::NewConstant(Arc::new(value))
                }
                abi::VALUE_PRODUCED => ValueRef::Produced {
                    layer: id_usize(v.layer)?,
                    slot: id_usize(v.slot)?,
                },
                other => return Err(format!("unknown value kind {other}")),
            });
        }
        // SAFETY: one entry per output per the caller.
        let outputs = unsafe { slice(r.outputs, desc.outputs.len()) }?
            .iter()
            .map(|&id| {
                if id == abi::NEW_TENSOR {
                    Ok(None)
                } else {
                    tensor(id).map(Some)
                }
            })
            .collect::<Result<Vec<_>, String>>()?;
        replacement.push(ReplacementLayer {
            name: desc.name,
            op: desc.op,
            inputs,
            outputs,
        });
    }
    Ok(Substitution {
        replaced,
        replacement,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use backplane_core::ops::{ConvDesc, CustomOp, Window};

    #[test]
    fn element_type_codes_cover_every_type_and_refuse_unknown_ones() {
        for d in DataType::ALL {
            assert_eq!(dtype(onnx_dtype_code(d) as i32), Ok(d));
        }
        assert_eq!(dtype(crate::abi::DTYPE_I4), Ok(DataType::I4));
        assert_eq!(
            dtype(crate::abi::DTYPE_F8E5M2FNUZ),
            Ok(DataType::F8E5M2Fnuz)
        );
        for unknown in [0, 8, 14, 23, -1, i32::MAX] {
            assert!(dtype(unknown).is_err(), "{unknown}");
        }
    }

    #[test]
    fn layer_descriptions_round_trip_through_c() {
        let w = Tensor::from_vec(vec![2, 1, 3, 3], (0..18).map(|v| v as f32).collect()).unwrap();
        let desc = LayerDesc {
            name: "conv1".into(),
            op: Op::Conv(ConvDesc {
                window: Window {
                    kernel: vec![3, 3],
                    pads: vec![1, 1, 1, 1],
                    ..Default::default()
                },
                group: 1,
            }),
            inputs: vec![
                TensorInfo::new(DataType::F32, vec![1, 1, 8, 8]),
                w.info().clone(),
            ],
            outputs: vec![TensorInfo {
                dtype: DataType::U8,
                shape: Shape::new(vec![1, 2, 8, 8]),
                quant: Quantization::PerAxis {
                    axis: 1,
                    scales: vec![0.5, 0.25],
                    zero_points: vec![3, 4],
                },
            }],
            constants: vec![None, Some(Arc::new(w))],
        };
        let owned = OwnedLayerDesc::new(&desc);
        // SAFETY: `owned` is a valid description for the duration of the call.
        let back = unsafe { read_layer_desc(owned.as_ptr()) }.unwrap();
        assert_eq!(back.name, desc.name);
        assert_eq!(back.op, desc.op);
        assert_eq!(back.inputs, desc.inputs);
        assert_eq!(back.outputs, desc.outputs);
        assert!(back.constants[0].is_none());
        assert_eq!(
            back.constants[1].as_ref().unwrap().bytes(),
            desc.constants[1].as_ref().unwrap().bytes()
        );
    }

    #[test]
    fn custom_ops_get_their_outputs_from_the_layer() {
        let out = TensorInfo::new(DataType::F32, vec![4]);
        let desc = LayerDesc {
            name: "fused".into(),
            op: Op::Custom(CustomOp {
                domain: "Acme".into(),
                op_type: "Fused".into(),
                attributes: vec![("alpha".into(), AttrValue::Double(0.1))],
                outputs: vec![out.clone()],
            }),
            inputs: vec![out.clone()],
            outputs: vec![out],
            constants: vec![None],
        };
        let owned = OwnedLayerDesc::new(&desc);
        // SAFETY: valid for the call.
        let back = unsafe { read_layer_desc(owned.as_ptr()) }.unwrap();
        assert_eq!(back.op, desc.op);
    }

    /// x + c → Add → Relu → y, with c a constant.
    fn add_relu() -> Network {
        use backplane_core::ops::{BinaryOp, UnaryOp};
        let mut n = Network::new();
        let x = n
            .add_input("x", TensorInfo::new(DataType::F32, vec![2]))
            .unwrap();
        let c = n
            .add_constant("c", Tensor::from_vec(vec![2], vec![1.0f32, -1.0]).unwrap())
            .unwrap();
        let s = n
            .add_layer_named("add", Op::Binary(BinaryOp::Add), &[x, c], &["s".into()])
            .unwrap()[0];
        let y = n
            .add_layer_named("relu", Op::Unary(UnaryOp::Relu), &[s], &["y".into()])
            .unwrap()[0];
        n.mark_output(y).unwrap();
        n
    }

    #[test]
    fn subgraphs_and_substitutions_round_trip_through_c() {
        let host = add_relu();
        let layers = vec![LayerId(0), LayerId(1)];
        let c = OwnedSubgraph::new(&host, &layers);
        // SAFETY: valid for the call.
        let read = unsafe { read_subgraph(c.as_ptr()) }.unwrap();
        let n = &read.network;
        assert_eq!(n.layers().len(), 2);
        assert_eq!(n.layers()[0].name, "add");
        assert_eq!(n.inputs().len(), 1, "x is an input, c a constant");
        let c_id = n.find_tensor("c").unwrap();
        assert!(n.tensor(c_id).constant().is_some());
        let y = n.find_tensor("y").unwrap();
        assert_eq!(n.outputs(), [y], "only y is used outside");
        assert_eq!(read.layer_ids, [0, 1]);
        for (local, &h) in read.tensor_ids.iter().enumerate() {
            assert_eq!(n.tensors()[local].name, host.tensors()[h as usize].name);
        }
        // The plugin's answer, in its own ids, back in the host's.
        let fused = Op::Custom(backplane_core::ops::CustomOp {
            domain: "Acme".into(),
            op_type: "AddRelu".into(),
            attributes: vec![],
            outputs: vec![n.tensor(y).info.clone()],
        });
        let extra = Arc::new(Tensor::from_vec(vec![2], vec![0.0f32, 0.0]).unwrap());
        let sub = Substitution {
            replaced: vec![LayerId(0), LayerId(1)],
            replacement: vec![
                ReplacementLayer {
                    name: "pre".into(),
                    op: Op::Binary(backplane_core::ops::BinaryOp::Add),
                    inputs: vec![
                        ValueRef::Existing(n.find_tensor("x").unwrap()),
                        ValueRef::NewConstant(extra.clone()),
                    ],
                    outputs: vec![None],
                },
                ReplacementLayer {
                    name: "add+relu".into(),
                    op: fused.clone(),
                    inputs: vec![
                        ValueRef::Produced { layer: 0, slot: 0 },
                        ValueRef::Existing(c_id),
                    ],
                    outputs: vec![Some(y)],
                },
            ],
        };
        let owned = OwnedSubstitution::new(&read, &sub).unwrap();
        let allowed: HashSet<LayerId> = layers.iter().copied().collect();
        // SAFETY: valid for the call.
        let back = unsafe { read_substitution(owned.as_ptr(), &host, &allowed) }.unwrap();
        assert_eq!(back.replaced, layers);
        assert_eq!(back.replacement.len(), 2);
        assert_eq!(back.replacement[1].name, "add+relu");
        assert_eq!(back.replacement[1].op, fused);
        let host_y = host.find_tensor("y").unwrap();
        assert_eq!(back.replacement[1].outputs, [Some(host_y)]);
        assert_eq!(back.replacement[0].outputs, [None]);
        match &back.replacement[0].inputs[..] {
            [ValueRef::Existing(x), ValueRef::NewConstant(k)] => {
                assert_eq!(*x, host.find_tensor("x").unwrap());
                assert_eq!(k.bytes(), extra.bytes());
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            back.replacement[1].inputs[0],
            ValueRef::Produced { layer: 0, slot: 0 }
        ));
        // Replacing a layer outside the subgraph is refused.
        let only_add: HashSet<LayerId> = [LayerId(0)].into_iter().collect();
        // SAFETY: valid for the call.
        let err = unsafe { read_substitution(owned.as_ptr(), &host, &only_add) }.unwrap_err();
        assert!(err.contains("not in its subgraph"), "{err}");
    }

    #[test]
    fn every_standard_op_crosses_the_abi() {
        assert!(crosses_the_abi(&Op::Unary(
            backplane_core::ops::UnaryOp::Relu
        )));
        assert!(crosses_the_abi(&Op::Custom(
            backplane_core::ops::CustomOp {
                domain: "Acme".into(),
                op_type: "X".into(),
                attributes: vec![],
                outputs: vec![],
            }
        )));
    }

    #[test]
    fn messages_are_truncated_on_a_char_boundary() {
        let (status, text) = with_message::<5>(|m| {
            // SAFETY: the message is valid for the call.
            unsafe { write_message(m, "héllo") };
            abi::STATUS_FAILED
        });
        assert_eq!((status, text.as_str()), (abi::STATUS_FAILED, "hél"));
        let (status, text) = with_message::<5>(|_| abi::STATUS_OK);
        assert_eq!((status, text.as_str()), (abi::STATUS_OK, ""));
        // SAFETY: null is allowed.
        unsafe { write_message(std::ptr::null_mut(), "x") };
    }
}
