//! The C ABI of a dynamic backend: every type that crosses the boundary, `#[repr(C)]`.
//!
//! `include/backplane/backend.h` declares the same types for C authors; a test compiles it and
//! checks that sizes and field offsets agree with these.
//!
//! # Shape
//!
//! A shared object exports three functions with C linkage:
//!
//! * `GetBackendId() -> const char*`: the backend's id (ASCII letters and digits).
//! * `GetVersion(uint32_t* major, uint32_t* minor)`: the ABI version it was built against.
//! * `BackendFactory() -> const BackendVTable*`: its table of functions, static for the life
//!   of the library.
//!
//! The host creates one [`Instance`] per runtime through the table; everything else (layer
//! support, workload factories, workloads, memory managers, contexts) hangs off an instance
//! and is destroyed before it.
//!
//! # Rules
//!
//! * **Versioning.** The major number changes on any incompatible change, the minor number on
//!   additions. A plugin built against `a.b` loads on a host speaking `a.c` when `b <= c`. At
//!   creation the host passes its version in [`HostInfo`]; the plugin answers with the minor
//!   it will speak, `min(its minor, host minor)`.
//! * **Growth.** Every struct starts with `struct_size`, filled in by whoever creates the
//!   struct. Fields are only ever appended; a reader uses a field only when `struct_size`
//!   covers it. Arrays of structs are passed as arrays of pointers, so that an element can
//!   grow without changing the stride.
//! * **Ownership.** Memory is freed on the side that allocated it. Everything the host passes
//!   is borrowed for the duration of the call. Text the plugin reports (errors, reasons,
//!   version) is copied into a host-owned [`Message`] buffer, so no plugin allocation ever
//!   outlives a call. Objects the plugin creates are opaque pointers the host hands back to
//!   the matching `destroy_*` function exactly once.
//! * **Errors.** Fallible functions return a [`Status`] and write a message on failure. A
//!   panic (or C++ exception) must never cross: the Rust SDK turns it into
//!   [`STATUS_PANICKED`], after which the host treats the instance as poisoned.
//! * **Threads.** Every function may be called from any thread and concurrently, except that
//!   `destroy_*` is called once, after every other call on that object has returned.
//!   `execute_workload` is called concurrently on the same workload with different buffers.
//!
//! # 1.2: tensor memory and subgraph optimization
//!
//! * **Tensor-handle factories.** `tensor_handle_factories` reports the plugin's own kinds of
//!   memory ([`TensorHandleFactoryDesc`]: id, `FACTORY_*` properties, import/export
//!   `MEMORY_*` kinds, layout); `handle_factory_preferences` lists, best first, the factories
//!   its workloads can read and write. The runtime's tensor-handle strategy treats them as a
//!   static backend's. It creates handles with `create_tensor_handle` (by factory id) and
//!   destroys each once. In `execute_workload`, a tensor in one of the instance's own handles
//!   arrives as a [`TensorView`] with `handle` set and `data` null; any other tensor arrives
//!   as host memory, as before.
//! * **Mapping.** The host maps a handle (`map_tensor_handle`) when it needs its bytes: copies
//!   to and from host memory, network outputs. It keeps a read-only mapping while it may
//!   still read through it, and it ends every mapping (`unmap_tensor_handle`) before the
//!   plugin writes the handle as a workload output, before the plugin reads a handle the host
//!   wrote through a mapping, and before destroying it. Map and unmap are never called
//!   during a workload that uses the handle. Import and export are declared by the memory
//!   kinds: an export→import edge hands the consumer the producer's handle itself.
//! * **Subgraphs.** `optimize_subgraph` receives the layers the runtime assigned to the
//!   backend ([`Subgraph`]: layers as [`LayerDesc`]s with tensor ids, each tensor once with
//!   its `TENSOR_*` flags) and answers through an [`OptimizationSink`], during the call:
//!   substitutions (new layers as [`LayerDesc`]s reading [`ValueRef`]s), failed layers (the
//!   runtime gives them to the next backends) and untouched layers; layers it does not
//!   mention are untouched. The host checks every id; an answer naming a layer outside the
//!   subgraph or a layer twice is discarded (the subgraph stays untouched), and a panic
//!   marks the subgraph failed. Layers whose op cannot be described by attributes (ops that
//!   run nested networks: If, Loop, Scan) are never shown to a plugin: layer support refuses
//!   them on the host side, and `optimize_subgraph` gets the runs between them.

use std::ffi::{c_char, c_void};

/// The ABI major version this crate speaks.
pub const ABI_VERSION_MAJOR: u32 = 1;
/// The ABI minor version this crate speaks. 1.0: instances, layer support, workload
/// factories and workloads. 1.1: memory managers, backend contexts and capabilities. 1.2:
/// tensor-handle factories (the plugin's own memory) and subgraph optimization. 1.3: the
/// context's end-of-execution hook (`context_after_execute`).
pub const ABI_VERSION_MINOR: u32 = 3;

/// A status code: [`STATUS_OK`] or one of the error codes below.
pub type Status = i32;
/// Success (for layer support: the layer is supported).
pub const STATUS_OK: Status = 0;
/// The layer is not supported (layer support, workload creation); the message says why.
pub const STATUS_UNSUPPORTED: Status = 1;
/// An argument was invalid (e.g. a descriptor the plugin cannot read).
pub const STATUS_INVALID_ARGUMENT: Status = 2;
/// Execution failed.
pub const STATUS_EXECUTION_FAILED: Status = 3;
/// The plugin panicked (or threw); the host poisons the instance.
pub const STATUS_PANICKED: Status = 4;
/// Any other failure.
pub const STATUS_FAILED: Status = 5;

/// Element types are ONNX `TensorProto.DataType` numbers: FLOAT.
pub const DTYPE_F32: i32 = 1;
/// UINT8.
pub const DTYPE_U8: i32 = 2;
/// INT8.
pub const DTYPE_I8: i32 = 3;
/// INT32.
pub const DTYPE_I32: i32 = 6;
/// INT64.
pub const DTYPE_I64: i32 = 7;
/// BOOL.
pub const DTYPE_BOOL: i32 = 9;
/// FLOAT16.
pub const DTYPE_F16: i32 = 10;
/// UINT16.
pub const DTYPE_U16: i32 = 4;
/// INT16.
pub const DTYPE_I16: i32 = 5;
/// DOUBLE.
pub const DTYPE_F64: i32 = 11;
/// UINT32.
pub const DTYPE_U32: i32 = 12;
/// UINT64.
pub const DTYPE_U64: i32 = 13;
/// BFLOAT16 (two bytes per element).
pub const DTYPE_BF16: i32 = 16;
/// FLOAT8E4M3FN (one byte per element, the bit pattern).
pub const DTYPE_F8E4M3FN: i32 = 17;
/// FLOAT8E4M3FNUZ (one byte per element, the bit pattern).
pub const DTYPE_F8E4M3FNUZ: i32 = 18;
/// FLOAT8E5M2 (one byte per element, the bit pattern).
pub const DTYPE_F8E5M2: i32 = 19;
/// FLOAT8E5M2FNUZ (one byte per element, the bit pattern).
pub const DTYPE_F8E5M2FNUZ: i32 = 20;
/// UINT4, stored unpacked: one element per byte (0..=15), unlike ONNX's packed files.
pub const DTYPE_U4: i32 = 21;
/// INT4, stored unpacked: one element per byte (-8..=7, two's complement).
pub const DTYPE_I4: i32 = 22;

/// Not quantized.
pub const QUANT_NONE: u32 = 0;
/// One scale and zero point.
pub const QUANT_PER_TENSOR: u32 = 1;
/// One scale and zero point per slice along `quant_axis`.
pub const QUANT_PER_AXIS: u32 = 2;

/// Attribute kinds.
pub const ATTR_INT: i32 = 1;
/// A float (carried in `float_value`, exactly representable as f32).
pub const ATTR_FLOAT: i32 = 2;
/// A double (carried in `float_value`).
pub const ATTR_DOUBLE: i32 = 3;
/// A string (`string_value`).
pub const ATTR_STRING: i32 = 4;
/// A list of integers (`ints`, `count`).
pub const ATTR_INTS: i32 = 5;
/// A list of floats (`floats`, `count`).
pub const ATTR_FLOATS: i32 = 6;

/// Capability kinds.
pub const CAP_BOOL: i32 = 1;
/// An integer capability (`int_value`).
pub const CAP_INT: i32 = 2;
/// A text capability (`text`).
pub const CAP_TEXT: i32 = 3;

/// Tensor-handle factory flags (1.2): handles can be mapped to host memory.
pub const FACTORY_MAPPABLE: u32 = 1;
/// Sub-tensor handles are supported.
pub const FACTORY_SUB_TENSORS: u32 = 2;
/// A workload may write its output over one of its inputs.
pub const FACTORY_IN_PLACE: u32 = 4;

/// Memory kinds (a set of flags), as [`backplane_backend_api::MemorySources`]: none.
pub const MEMORY_NONE: u32 = 0;
/// Ordinary CPU memory.
pub const MEMORY_HOST: u32 = 1;
/// A Linux dma-buf file descriptor.
pub const MEMORY_DMA_BUF: u32 = 2;
/// Protected memory.
pub const MEMORY_PROTECTED: u32 = 4;

/// Element layouts: row-major in the logical axis order.
pub const LAYOUT_STANDARD: u32 = 0;
/// Channels last for rank-4 tensors.
pub const LAYOUT_CHANNELS_LAST: u32 = 1;

/// Subgraph tensor flags (1.2): computed outside the subgraph (a network input, a constant or
/// another backend's output).
pub const TENSOR_EXTERNAL: u32 = 1;
/// A constant (its value is in the `constants` of the layers that read it).
pub const TENSOR_CONSTANT: u32 = 2;
/// Computed inside and used outside the subgraph, or a network output: a substitution must
/// keep computing it.
pub const TENSOR_USED_OUTSIDE: u32 = 4;

/// Value kinds of a replacement layer's input (1.2): a tensor of the host's network (`tensor`).
pub const VALUE_EXISTING: u32 = 1;
/// A new constant (`constant`).
pub const VALUE_CONSTANT: u32 = 2;
/// Output `slot` of an earlier layer (`layer`, an index) of the same replacement.
pub const VALUE_PRODUCED: u32 = 3;

/// A replacement output that takes over no original tensor (an internal one).
pub const NEW_TENSOR: u64 = u64::MAX;

/// A plugin's backend instance (opaque; one per runtime).
#[repr(C)]
pub struct Instance {
    _private: [u8; 0],
}

/// A plugin's workload factory (opaque; one per loaded network).
#[repr(C)]
pub struct WorkloadFactory {
    _private: [u8; 0],
}

/// A plugin's workload (opaque; one per layer).
#[repr(C)]
pub struct Workload {
    _private: [u8; 0],
}

/// A plugin's memory manager (opaque; one per loaded network).
#[repr(C)]
pub struct MemoryManager {
    _private: [u8; 0],
}

/// A plugin's backend context (opaque; one per runtime).
#[repr(C)]
pub struct Context {
    _private: [u8; 0],
}

/// A plugin's tensor handle (opaque; made by one of its tensor-handle factories, 1.2).
#[repr(C)]
pub struct TensorHandle {
    _private: [u8; 0],
}

/// A host-owned text buffer the plugin writes a NUL-terminated UTF-8 message into (at most
/// `capacity - 1` bytes, truncated).
#[repr(C)]
#[derive(Debug)]
pub struct Message {
    /// Size of this struct.
    pub struct_size: u32,
    /// Zero.
    pub reserved: u32,
    /// The buffer (never null).
    pub data: *mut c_char,
    /// Its size in bytes (at least 1).
    pub capacity: usize,
}

/// One backend option (name → value), as the application set it.
#[repr(C)]
#[derive(Debug)]
pub struct BackendOption {
    /// Size of this struct.
    pub struct_size: u32,
    /// Zero.
    pub reserved: u32,
    /// NUL-terminated UTF-8 name.
    pub name: *const c_char,
    /// NUL-terminated UTF-8 value.
    pub value: *const c_char,
}

/// What the host tells a plugin when it creates an instance. Borrowed for the call.
#[repr(C)]
#[derive(Debug)]
pub struct HostInfo {
    /// Size of this struct.
    pub struct_size: u32,
    /// The host's ABI major version.
    pub abi_major: u32,
    /// The host's ABI minor version.
    pub abi_minor: u32,
    /// Zero.
    pub reserved: u32,
    /// NUL-terminated path of the plugin's own file (to find data files beside it).
    pub plugin_path: *const c_char,
    /// The backend options the application set for this backend.
    pub options: *const *const BackendOption,
    /// Number of options.
    pub num_options: usize,
}

/// A tensor description: element type, shape and quantization.
#[repr(C)]
#[derive(Debug)]
pub struct TensorInfo {
    /// Size of this struct.
    pub struct_size: u32,
    /// Element type (`DTYPE_*`, ONNX numbering).
    pub dtype: i32,
    /// Number of dimensions.
    pub rank: u32,
    /// `QUANT_*`.
    pub quant_kind: u32,
    /// `rank` dimensions (may be null when `rank` is 0).
    pub dims: *const u64,
    /// `num_scales` scales (per-tensor: 1).
    pub scales: *const f32,
    /// `num_scales` zero points.
    pub zero_points: *const i32,
    /// Number of scales and zero points.
    pub num_scales: usize,
    /// The quantized axis (per-axis only).
    pub quant_axis: u64,
}

/// A tensor's bytes with its description: dense, row-major.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TensorView {
    /// Size of this struct.
    pub struct_size: u32,
    /// Zero.
    pub reserved: u32,
    /// The description.
    pub info: *const TensorInfo,
    /// The bytes (read-only for inputs and constants).
    pub data: *mut c_void,
    /// Number of bytes.
    pub num_bytes: usize,
    /// 1.2: when non-null, the tensor is in this handle of the plugin's own memory and `data`
    /// is null. The host sets it only for handles the same instance created, only in
    /// `execute_workload`, and only with instances speaking 1.2. Read it only when
    /// `struct_size` covers it.
    pub handle: *mut TensorHandle,
}

/// One attribute of a layer's operator.
#[repr(C)]
#[derive(Debug)]
pub struct Attribute {
    /// Size of this struct.
    pub struct_size: u32,
    /// `ATTR_*`.
    pub kind: i32,
    /// NUL-terminated name (ONNX attribute names where ONNX has them).
    pub name: *const c_char,
    /// `ATTR_INT`.
    pub int_value: i64,
    /// `ATTR_FLOAT`, `ATTR_DOUBLE`.
    pub float_value: f64,
    /// `ATTR_STRING`: NUL-terminated.
    pub string_value: *const c_char,
    /// `ATTR_INTS`: `count` values.
    pub ints: *const i64,
    /// `ATTR_FLOATS`: `count` values.
    pub floats: *const f32,
    /// Length of the list.
    pub count: usize,
}

/// Everything about one layer: what layer support and workload creation see.
#[repr(C)]
#[derive(Debug)]
pub struct LayerDesc {
    /// Size of this struct.
    pub struct_size: u32,
    /// Zero.
    pub reserved: u32,
    /// NUL-terminated layer name.
    pub name: *const c_char,
    /// NUL-terminated op type: the ONNX name (`Conv`, `Add`, ...), or `domain:type` for a
    /// custom op.
    pub op_type: *const c_char,
    /// The op's attributes.
    pub attributes: *const *const Attribute,
    /// Number of attributes.
    pub num_attributes: usize,
    /// Input descriptions, by slot.
    pub inputs: *const *const TensorInfo,
    /// Number of inputs.
    pub num_inputs: usize,
    /// Output descriptions, by slot.
    pub outputs: *const *const TensorInfo,
    /// Number of outputs.
    pub num_outputs: usize,
    /// `num_inputs` entries: the value of each input that is a constant (weights), else null.
    pub constants: *const *const TensorView,
}

/// One capability, handed to a [`CapabilitySink`].
#[repr(C)]
#[derive(Debug)]
pub struct Capability {
    /// Size of this struct.
    pub struct_size: u32,
    /// `CAP_*`.
    pub kind: i32,
    /// NUL-terminated name.
    pub name: *const c_char,
    /// `CAP_BOOL` (0 or 1) and `CAP_INT`.
    pub int_value: i64,
    /// `CAP_TEXT`: NUL-terminated.
    pub text: *const c_char,
}

/// Receives capabilities one at a time; `user` is the host's pointer, passed back.
pub type CapabilitySink = unsafe extern "C" fn(user: *mut c_void, capability: *const Capability);

/// One tensor-handle factory of the plugin, handed to a [`FactorySink`] (1.2).
#[repr(C)]
#[derive(Debug)]
pub struct TensorHandleFactoryDesc {
    /// Size of this struct.
    pub struct_size: u32,
    /// `FACTORY_*` flags.
    pub flags: u32,
    /// NUL-terminated globally unique id, `Vendor/Backend/Factory`.
    pub id: *const c_char,
    /// `MEMORY_*` kinds the factory can wrap without copying.
    pub import_sources: u32,
    /// `MEMORY_*` kinds its handles can hand out without copying.
    pub export_sources: u32,
    /// `LAYOUT_*`.
    pub layout: u32,
    /// Zero.
    pub reserved: u32,
}

/// Receives tensor-handle factories one at a time; `user` is the host's pointer.
pub type FactorySink =
    unsafe extern "C" fn(user: *mut c_void, factory: *const TensorHandleFactoryDesc);

/// Receives strings one at a time (factory ids); `user` is the host's pointer.
pub type TextSink = unsafe extern "C" fn(user: *mut c_void, text: *const c_char);

/// One tensor a subgraph reads or computes (1.2).
#[repr(C)]
#[derive(Debug)]
pub struct SubgraphTensor {
    /// Size of this struct.
    pub struct_size: u32,
    /// `TENSOR_*` flags.
    pub flags: u32,
    /// The host's id of the tensor: what [`SubgraphLayer`] and the answer refer to.
    pub id: u64,
    /// NUL-terminated name.
    pub name: *const c_char,
    /// Its description.
    pub info: *const TensorInfo,
}

/// One layer of a subgraph (1.2).
#[repr(C)]
#[derive(Debug)]
pub struct SubgraphLayer {
    /// Size of this struct.
    pub struct_size: u32,
    /// Zero.
    pub reserved: u32,
    /// The host's id of the layer: what the answer refers to.
    pub id: u64,
    /// The layer, exactly as layer support and workload creation see it.
    pub desc: *const LayerDesc,
    /// Tensor id of each input slot (`desc.num_inputs` entries).
    pub inputs: *const u64,
    /// Tensor id of each output slot (`desc.num_outputs` entries).
    pub outputs: *const u64,
}

/// The part of a network assigned to the plugin, handed to `optimize_subgraph` (1.2).
#[repr(C)]
#[derive(Debug)]
pub struct Subgraph {
    /// Size of this struct.
    pub struct_size: u32,
    /// Zero.
    pub reserved: u32,
    /// The layers, in topological order.
    pub layers: *const *const SubgraphLayer,
    /// Number of layers.
    pub num_layers: usize,
    /// Every tensor the layers read or compute, each once.
    pub tensors: *const *const SubgraphTensor,
    /// Number of tensors.
    pub num_tensors: usize,
}

/// What a replacement layer reads (1.2).
#[repr(C)]
#[derive(Debug)]
pub struct ValueRef {
    /// Size of this struct.
    pub struct_size: u32,
    /// `VALUE_*`.
    pub kind: u32,
    /// `VALUE_EXISTING`: the host's tensor id.
    pub tensor: u64,
    /// `VALUE_CONSTANT`: the value (the host copies it).
    pub constant: *const TensorView,
    /// `VALUE_PRODUCED`: index of an earlier layer of the same replacement.
    pub layer: u64,
    /// `VALUE_PRODUCED`: which of its outputs.
    pub slot: u64,
}

/// One layer of a replacement (1.2).
#[repr(C)]
#[derive(Debug)]
pub struct ReplacementLayer {
    /// Size of this struct.
    pub struct_size: u32,
    /// Zero.
    pub reserved: u32,
    /// Name, op type and attributes of the new layer; `outputs` describe its outputs (a custom
    /// op's output descriptions come from there). `inputs` and `constants` are not read:
    /// values come through `inputs` below.
    pub desc: *const LayerDesc,
    /// What each input slot reads.
    pub inputs: *const *const ValueRef,
    /// Number of inputs.
    pub num_inputs: usize,
    /// For each output (`desc.num_outputs` entries): the host tensor id it takes over, or
    /// [`NEW_TENSOR`].
    pub outputs: *const u64,
}

/// A substitution: layers of the subgraph replaced by new ones (1.2).
#[repr(C)]
#[derive(Debug)]
pub struct Substitution {
    /// Size of this struct.
    pub struct_size: u32,
    /// Zero.
    pub reserved: u32,
    /// Host ids of the replaced layers.
    pub replaced: *const u64,
    /// Number of replaced layers.
    pub num_replaced: usize,
    /// The replacement, in execution order.
    pub layers: *const *const ReplacementLayer,
    /// Number of replacement layers.
    pub num_layers: usize,
}

/// `add_substitution`: the host copies everything during the call.
pub type AddSubstitutionFn =
    unsafe extern "C" fn(user: *mut c_void, substitution: *const Substitution) -> Status;
/// `add_failed`, `add_untouched`: a set of layers by host id.
pub type AddLayersFn =
    unsafe extern "C" fn(user: *mut c_void, layers: *const u64, num_layers: usize) -> Status;

/// Where the plugin reports what it did with a subgraph (1.2). Each layer belongs to one
/// substitution, one failed set or one untouched set; layers it does not mention are untouched.
#[repr(C)]
#[derive(Debug)]
pub struct OptimizationSink {
    /// Size of this struct.
    pub struct_size: u32,
    /// Zero.
    pub reserved: u32,
    /// The host's pointer, passed back to each function.
    pub user: *mut c_void,
    /// Report a substitution.
    pub add_substitution: Option<AddSubstitutionFn>,
    /// Report layers the backend rejects (re-assigned to the next backends).
    pub add_failed: Option<AddLayersFn>,
    /// Report layers the backend runs as they are.
    pub add_untouched: Option<AddLayersFn>,
}

/// `create_instance`: make the plugin's backend for one runtime. On success writes the
/// instance and the minor version the plugin will speak.
pub type CreateInstanceFn = unsafe extern "C" fn(
    host: *const HostInfo,
    out_instance: *mut *mut Instance,
    out_abi_minor: *mut u32,
    error: *mut Message,
) -> Status;
/// `destroy_instance`.
pub type DestroyInstanceFn = unsafe extern "C" fn(instance: *mut Instance);
/// `backend_version`: write the backend's own version (e.g. `1.2.0`) into `out`.
pub type BackendVersionFn =
    unsafe extern "C" fn(instance: *mut Instance, out: *mut Message) -> Status;
/// `is_layer_supported`: [`STATUS_OK`] if supported, [`STATUS_UNSUPPORTED`] with a reason.
pub type IsLayerSupportedFn = unsafe extern "C" fn(
    instance: *mut Instance,
    layer: *const LayerDesc,
    reason: *mut Message,
) -> Status;
/// `create_workload_factory`: one per loaded network; `memory_manager` is one this instance
/// created for that network, or null.
pub type CreateWorkloadFactoryFn = unsafe extern "C" fn(
    instance: *mut Instance,
    memory_manager: *mut MemoryManager,
    out_factory: *mut *mut WorkloadFactory,
    error: *mut Message,
) -> Status;
/// `destroy_workload_factory`.
pub type DestroyWorkloadFactoryFn = unsafe extern "C" fn(factory: *mut WorkloadFactory);
/// `create_workload`: load-time work (weight packing) belongs here.
pub type CreateWorkloadFn = unsafe extern "C" fn(
    factory: *mut WorkloadFactory,
    layer: *const LayerDesc,
    out_workload: *mut *mut Workload,
    error: *mut Message,
) -> Status;
/// `execute_workload`: read `inputs`, write `outputs` (described as at creation).
pub type ExecuteWorkloadFn = unsafe extern "C" fn(
    workload: *mut Workload,
    inputs: *const *const TensorView,
    num_inputs: usize,
    outputs: *const *const TensorView,
    num_outputs: usize,
    error: *mut Message,
) -> Status;
/// `destroy_workload`.
pub type DestroyWorkloadFn = unsafe extern "C" fn(workload: *mut Workload);
/// `create_memory_manager`: writes null when the backend manages no memory.
pub type CreateMemoryManagerFn = unsafe extern "C" fn(
    instance: *mut Instance,
    out_manager: *mut *mut MemoryManager,
    error: *mut Message,
) -> Status;
/// `memory_manager_acquire`.
pub type MemoryManagerAcquireFn =
    unsafe extern "C" fn(manager: *mut MemoryManager, error: *mut Message) -> Status;
/// `memory_manager_release` and `destroy_memory_manager`.
pub type MemoryManagerFn = unsafe extern "C" fn(manager: *mut MemoryManager);
/// `create_context`: writes null when the backend keeps no context.
pub type CreateContextFn = unsafe extern "C" fn(
    instance: *mut Instance,
    options: *const *const BackendOption,
    num_options: usize,
    out_context: *mut *mut Context,
    error: *mut Message,
) -> Status;
/// `destroy_context`.
pub type DestroyContextFn = unsafe extern "C" fn(context: *mut Context);
/// `context_before_load`, `context_after_load`, `context_before_unload`,
/// `context_after_execute`.
pub type ContextHookFn =
    unsafe extern "C" fn(context: *mut Context, network: u64, error: *mut Message) -> Status;
/// `context_after_unload`.
pub type ContextAfterUnloadFn = unsafe extern "C" fn(context: *mut Context, network: u64);
/// `tensor_handle_factories` (1.2): call `sink` once per factory of the plugin's own.
pub type TensorHandleFactoriesFn =
    unsafe extern "C" fn(instance: *mut Instance, sink: FactorySink, user: *mut c_void) -> Status;
/// `handle_factory_preferences` (1.2): call `sink` with the ids of the factories the
/// backend's workloads can read and write, best first (its own and others', e.g.
/// `Backplane/Host/Cpu`). Reporting none means the host factory only.
pub type HandleFactoryPreferencesFn =
    unsafe extern "C" fn(instance: *mut Instance, sink: TextSink, user: *mut c_void) -> Status;
/// `create_tensor_handle` (1.2): a handle of the factory `factory_id` for a tensor of `info`.
pub type CreateTensorHandleFn = unsafe extern "C" fn(
    instance: *mut Instance,
    factory_id: *const c_char,
    info: *const TensorInfo,
    out_handle: *mut *mut TensorHandle,
    error: *mut Message,
) -> Status;
/// `destroy_tensor_handle` (1.2).
pub type DestroyTensorHandleFn = unsafe extern "C" fn(handle: *mut TensorHandle);
/// `map_tensor_handle` (1.2): the handle's bytes as host memory (dense, row-major, the
/// tensor's size), writable when `writable` is 1, valid until `unmap_tensor_handle`.
pub type MapTensorHandleFn = unsafe extern "C" fn(
    handle: *mut TensorHandle,
    writable: u32,
    out_data: *mut *mut c_void,
    out_num_bytes: *mut usize,
    error: *mut Message,
) -> Status;
/// `unmap_tensor_handle` (1.2): end the mapping made by `map_tensor_handle`.
pub type UnmapTensorHandleFn = unsafe extern "C" fn(handle: *mut TensorHandle);
/// `optimize_subgraph` (1.2): report substitutions, failed and untouched layers of
/// `subgraph` through `sink`, during the call.
pub type OptimizeSubgraphFn = unsafe extern "C" fn(
    instance: *mut Instance,
    subgraph: *const Subgraph,
    sink: *const OptimizationSink,
    error: *mut Message,
) -> Status;
/// `capabilities`: call `sink` once per capability.
pub type CapabilitiesFn = unsafe extern "C" fn(
    instance: *mut Instance,
    sink: CapabilitySink,
    user: *mut c_void,
) -> Status;

/// The table `BackendFactory` returns. Entries marked required must be non-null; the others
/// may be null (the host then behaves as for a static backend that does not override the
/// method). Fields are appended in minor versions; the host reads a field only when both
/// `struct_size` and `abi_minor` cover it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BackendVTable {
    /// Size of this struct as the plugin compiled it.
    pub struct_size: u32,
    /// ABI major version (must equal the host's).
    pub abi_major: u32,
    /// ABI minor version the table was built against.
    pub abi_minor: u32,
    /// Zero.
    pub reserved: u32,
    // --- 1.0 ---
    /// Required.
    pub create_instance: Option<CreateInstanceFn>,
    /// Required.
    pub destroy_instance: Option<DestroyInstanceFn>,
    /// Optional: the version is shown as `0.0.0` without it.
    pub backend_version: Option<BackendVersionFn>,
    /// Required.
    pub is_layer_supported: Option<IsLayerSupportedFn>,
    /// Required.
    pub create_workload_factory: Option<CreateWorkloadFactoryFn>,
    /// Required.
    pub destroy_workload_factory: Option<DestroyWorkloadFactoryFn>,
    /// Required.
    pub create_workload: Option<CreateWorkloadFn>,
    /// Required.
    pub execute_workload: Option<ExecuteWorkloadFn>,
    /// Required.
    pub destroy_workload: Option<DestroyWorkloadFn>,
    // --- 1.1 ---
    /// Optional (with the three below).
    pub create_memory_manager: Option<CreateMemoryManagerFn>,
    /// Required with `create_memory_manager`.
    pub memory_manager_acquire: Option<MemoryManagerAcquireFn>,
    /// Required with `create_memory_manager`.
    pub memory_manager_release: Option<MemoryManagerFn>,
    /// Required with `create_memory_manager`.
    pub destroy_memory_manager: Option<MemoryManagerFn>,
    /// Optional (with `destroy_context`).
    pub create_context: Option<CreateContextFn>,
    /// Required with `create_context`.
    pub destroy_context: Option<DestroyContextFn>,
    /// Optional.
    pub context_before_load: Option<ContextHookFn>,
    /// Optional.
    pub context_after_load: Option<ContextHookFn>,
    /// Optional.
    pub context_before_unload: Option<ContextHookFn>,
    /// Optional.
    pub context_after_unload: Option<ContextAfterUnloadFn>,
    /// Optional.
    pub capabilities: Option<CapabilitiesFn>,
    // --- 1.2 ---
    /// Optional (with `create_tensor_handle` and `destroy_tensor_handle`).
    pub tensor_handle_factories: Option<TensorHandleFactoriesFn>,
    /// Optional: without it the backend uses host memory only.
    pub handle_factory_preferences: Option<HandleFactoryPreferencesFn>,
    /// Required with `tensor_handle_factories`.
    pub create_tensor_handle: Option<CreateTensorHandleFn>,
    /// Required with `tensor_handle_factories`.
    pub destroy_tensor_handle: Option<DestroyTensorHandleFn>,
    /// Optional (with `unmap_tensor_handle`): without it no handle can be mapped.
    pub map_tensor_handle: Option<MapTensorHandleFn>,
    /// Required with `map_tensor_handle`.
    pub unmap_tensor_handle: Option<UnmapTensorHandleFn>,
    /// Optional: without it the backend's subgraphs are left as they are.
    pub optimize_subgraph: Option<OptimizeSubgraphFn>,
    // --- 1.3 ---
    /// Optional: called after every execution of a loaded network that used the backend
    /// (also one that failed), so work a backend deferred (a GPU's recorded commands) is
    /// finished; an error fails an execution that had otherwise succeeded.
    pub context_after_execute: Option<ContextHookFn>,
}

/// Size of the 1.0 part of [`BackendVTable`]: a 1.0 plugin's table is at least this long.
pub const VTABLE_SIZE_1_0: usize = std::mem::offset_of!(BackendVTable, create_memory_manager);
/// Size of the 1.1 table.
pub const VTABLE_SIZE_1_1: usize = std::mem::offset_of!(BackendVTable, tensor_handle_factories);
/// Size of the 1.2 table.
pub const VTABLE_SIZE_1_2: usize = std::mem::offset_of!(BackendVTable, context_after_execute);
/// Size of the 1.3 table.
pub const VTABLE_SIZE_1_3: usize = std::mem::size_of::<BackendVTable>();

impl BackendVTable {
    /// The least `struct_size` a table declaring `minor` must have, if the minor is known.
    pub fn min_size_for_minor(minor: u32) -> usize {
        match minor {
            0 => VTABLE_SIZE_1_0,
            1 => VTABLE_SIZE_1_1,
            2 => VTABLE_SIZE_1_2,
            _ => VTABLE_SIZE_1_3,
        }
    }
}

/// `GetBackendId`.
pub type GetBackendIdFn = unsafe extern "C" fn() -> *const c_char;
/// `GetVersion`.
pub type GetVersionFn = unsafe extern "C" fn(major: *mut u32, minor: *mut u32);
/// `BackendFactory`.
pub type BackendFactoryFn = unsafe extern "C" fn() -> *const BackendVTable;

/// Entry-point names, NUL-terminated for symbol lookup.
pub const GET_BACKEND_ID_SYMBOL: &[u8] = b"GetBackendId\0";
/// `GetVersion`.
pub const GET_VERSION_SYMBOL: &[u8] = b"GetVersion\0";
/// `BackendFactory`.
pub const BACKEND_FACTORY_SYMBOL: &[u8] = b"BackendFactory\0";

/// The size of `T` as a `struct_size` value.
pub const fn size_u32<T>() -> u32 {
    std::mem::size_of::<T>() as u32
}
