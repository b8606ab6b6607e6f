/*
 * backplane/backend.h: the C ABI of a backplane dynamic backend.
 *
 * A dynamic backend is a shared object named <vendor>_<name>_backend.so[.<version>] that
 * exports, with C linkage:
 *
 *   const char* GetBackendId(void);                      the backend's id: [A-Za-z0-9]+
 *   void GetVersion(uint32_t* major, uint32_t* minor);   the ABI version it was built against
 *   const backplane_backend_vtable_t* BackendFactory(void);  its function table (static)
 *
 * This header is complete: a backend needs nothing else to build. (It mirrors the runtime's
 * Rust definitions, and a test checks every size and offset against them.)
 *
 * Rules:
 *  - Versioning: the major changes on incompatible changes, the minor on additions. A plugin
 *    built against a.b loads on a host speaking a.c when b <= c. create_instance answers the
 *    minor it will speak: min(its minor, host minor).
 *  - Growth: every struct starts with struct_size, set by whoever fills the struct. Fields are
 *    only appended; read a field only when struct_size covers it. Arrays of structs are
 *    arrays of pointers.
 *  - Ownership: everything the host passes is borrowed for the call. Text the plugin reports
 *    is copied into a host-owned backplane_message_t (use backplane_message_set). Objects the
 *    plugin creates are opaque pointers handed back exactly once to the matching destroy_*.
 *  - Errors: fallible functions return a status; on failure they write a message. Nothing
 *    may unwind across the boundary (no C++ exceptions, no Rust panics).
 *  - Threads: every function may be called from any thread, concurrently, except destroy_*,
 *    called once after every other call on that object has returned. execute_workload runs
 *    concurrently on the same workload with different buffers.
 *  - Lifetimes: an object outlives what it made. A workload factory is destroyed only after
 *    every workload it created (so a workload may keep a pointer to its factory, and to the
 *    memory manager the factory was given); an instance after all of its objects.
 *  - Loading: GetBackendId is called first; a backend whose id is already registered, or
 *    longer than 64 bytes, is skipped before BackendFactory is called. A status code the
 *    host does not know counts as a refusal with the message written.
 *
 * To build against an older minor version of this header (e.g. to support older runtimes),
 * define BACKPLANE_ABI_TARGET_MINOR before including it: the table then ends where that minor
 * version's did, and BACKPLANE_ABI_TARGET_MINOR is what GetVersion should report.
 */
#ifndef BACKPLANE_BACKEND_H
#define BACKPLANE_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The ABI version this header describes. */
#define BACKPLANE_ABI_VERSION_MAJOR 1
#define BACKPLANE_ABI_VERSION_MINOR 3

/** The minor version a plugin targets (defaults to this header's). */
#ifndef BACKPLANE_ABI_TARGET_MINOR
#define BACKPLANE_ABI_TARGET_MINOR BACKPLANE_ABI_VERSION_MINOR
#endif

/** Status codes. */
typedef int32_t backplane_status_t;
#define BACKPLANE_STATUS_OK 0               /* success; for layer support: supported */
#define BACKPLANE_STATUS_UNSUPPORTED 1      /* the layer is not supported; message says why */
#define BACKPLANE_STATUS_INVALID_ARGUMENT 2 /* an argument could not be used */
#define BACKPLANE_STATUS_EXECUTION_FAILED 3 /* execution failed */
#define BACKPLANE_STATUS_PANICKED 4         /* the plugin panicked; the host disables it */
#define BACKPLANE_STATUS_FAILED 5           /* anything else */

/** Element types: ONNX TensorProto.DataType numbers. */
#define BACKPLANE_DTYPE_F32 1
#define BACKPLANE_DTYPE_U8 2
#define BACKPLANE_DTYPE_I8 3
#define BACKPLANE_DTYPE_I32 6
#define BACKPLANE_DTYPE_I64 7
#define BACKPLANE_DTYPE_BOOL 9
#define BACKPLANE_DTYPE_F16 10
#define BACKPLANE_DTYPE_U16 4
#define BACKPLANE_DTYPE_I16 5
#define BACKPLANE_DTYPE_F64 11
#define BACKPLANE_DTYPE_U32 12
#define BACKPLANE_DTYPE_U64 13
/* Storage-only low-precision types; hosts send them only to ops that accept them (Cast,
 * QuantizeLinear, DequantizeLinear, data movement). A plugin that does not know a code must
 * refuse the layer. */
#define BACKPLANE_DTYPE_BF16 16       /* 2 bytes per element */
#define BACKPLANE_DTYPE_F8E4M3FN 17   /* 1 byte per element: the bit pattern */
#define BACKPLANE_DTYPE_F8E4M3FNUZ 18 /* 1 byte per element: the bit pattern */
#define BACKPLANE_DTYPE_F8E5M2 19     /* 1 byte per element: the bit pattern */
#define BACKPLANE_DTYPE_F8E5M2FNUZ 20 /* 1 byte per element: the bit pattern */
#define BACKPLANE_DTYPE_U4 21         /* unpacked: 1 byte per element, 0..15 */
#define BACKPLANE_DTYPE_I4 22         /* unpacked: 1 byte per element, -8..7 */

/** Quantization kinds. */
#define BACKPLANE_QUANT_NONE 0u
#define BACKPLANE_QUANT_PER_TENSOR 1u
#define BACKPLANE_QUANT_PER_AXIS 2u

/** Attribute kinds. */
#define BACKPLANE_ATTR_INT 1
#define BACKPLANE_ATTR_FLOAT 2 /* in float_value, exactly representable as float */
#define BACKPLANE_ATTR_DOUBLE 3
#define BACKPLANE_ATTR_STRING 4
#define BACKPLANE_ATTR_INTS 5
#define BACKPLANE_ATTR_FLOATS 6

/** Capability kinds. */
#define BACKPLANE_CAP_BOOL 1
#define BACKPLANE_CAP_INT 2
#define BACKPLANE_CAP_TEXT 3

/** 1.2: tensor-handle factory flags. */
#define BACKPLANE_FACTORY_MAPPABLE 1u    /* handles can be mapped to host memory */
#define BACKPLANE_FACTORY_SUB_TENSORS 2u /* sub-tensor handles are supported */
#define BACKPLANE_FACTORY_IN_PLACE 4u    /* an output may be written over an input */

/** 1.2: memory kinds (flags). */
#define BACKPLANE_MEMORY_NONE 0u
#define BACKPLANE_MEMORY_HOST 1u
#define BACKPLANE_MEMORY_DMA_BUF 2u
#define BACKPLANE_MEMORY_PROTECTED 4u

/** 1.2: element layouts. */
#define BACKPLANE_LAYOUT_STANDARD 0u      /* row-major, logical axis order */
#define BACKPLANE_LAYOUT_CHANNELS_LAST 1u /* NHWC for rank-4 tensors */

/** 1.2: subgraph tensor flags. */
#define BACKPLANE_TENSOR_EXTERNAL 1u     /* computed outside the subgraph */
#define BACKPLANE_TENSOR_CONSTANT 2u     /* a constant (value in the layers' constants) */
#define BACKPLANE_TENSOR_USED_OUTSIDE 4u /* a substitution must keep computing it */

/** 1.2: what a replacement layer's input reads. */
#define BACKPLANE_VALUE_EXISTING 1u /* tensor: a host tensor id */
#define BACKPLANE_VALUE_CONSTANT 2u /* constant: a new constant value */
#define BACKPLANE_VALUE_PRODUCED 3u /* layer, slot: an earlier replacement layer's output */

/** 1.2: a replacement output that takes over no original tensor. */
#define BACKPLANE_NEW_TENSOR UINT64_MAX

/** Opaque objects a plugin creates. */
typedef struct backplane_instance backplane_instance_t;           /* one per runtime */
typedef struct backplane_workload_factory backplane_workload_factory_t; /* one per network */
typedef struct backplane_workload backplane_workload_t;           /* one per layer */
typedef struct backplane_memory_manager backplane_memory_manager_t; /* one per network */
typedef struct backplane_context backplane_context_t;             /* one per runtime */
typedef struct backplane_tensor_handle backplane_tensor_handle_t; /* 1.2: plugin memory */

/** A host-owned buffer for a NUL-terminated UTF-8 message (at most capacity - 1 bytes). */
typedef struct backplane_message {
    uint32_t struct_size;
    uint32_t reserved;
    char* data;      /* never NULL */
    size_t capacity; /* at least 1 */
} backplane_message_t;

/** One backend option, as the application set it. Borrowed. */
typedef struct backplane_option {
    uint32_t struct_size;
    uint32_t reserved;
    const char* name;
    const char* value;
} backplane_option_t;

/** What the host tells the plugin at creation. Borrowed for the call. */
typedef struct backplane_host_info {
    uint32_t struct_size;
    uint32_t abi_major; /* the host's ABI version */
    uint32_t abi_minor;
    uint32_t reserved;
    const char* plugin_path; /* the plugin's own file, to find data files beside it */
    const backplane_option_t* const* options;
    size_t num_options;
} backplane_host_info_t;

/** A tensor description. */
typedef struct backplane_tensor_info {
    uint32_t struct_size;
    int32_t dtype;       /* BACKPLANE_DTYPE_* */
    uint32_t rank;
    uint32_t quant_kind; /* BACKPLANE_QUANT_* */
    const uint64_t* dims; /* rank entries */
    const float* scales;  /* num_scales entries */
    const int32_t* zero_points;
    size_t num_scales;
    uint64_t quant_axis;
} backplane_tensor_info_t;

/** A dense, row-major tensor. Inputs and constants are read-only. */
typedef struct backplane_tensor_view {
    uint32_t struct_size;
    uint32_t reserved;
    const backplane_tensor_info_t* info;
    void* data;
    size_t num_bytes;
    /* 1.2 (read it only when struct_size covers it): when non-NULL, the tensor is in this
       handle of the instance's own memory and data is NULL. Only in execute_workload, only
       for handles the same instance created, only with instances speaking 1.2. */
    backplane_tensor_handle_t* handle;
} backplane_tensor_view_t;

/** One operator attribute (ONNX names where ONNX has them). */
typedef struct backplane_attribute {
    uint32_t struct_size;
    int32_t kind; /* BACKPLANE_ATTR_* */
    const char* name;
    int64_t int_value;
    double float_value;
    const char* string_value;
    const int64_t* ints;
    const float* floats;
    size_t count;
} backplane_attribute_t;

/** Everything about one layer. Borrowed for the call. */
typedef struct backplane_layer_desc {
    uint32_t struct_size;
    uint32_t reserved;
    const char* name;
    const char* op_type; /* ONNX op type ("Add", "Conv"...) or "domain:type" for custom ops */
    const backplane_attribute_t* const* attributes;
    size_t num_attributes;
    const backplane_tensor_info_t* const* inputs;
    size_t num_inputs;
    const backplane_tensor_info_t* const* outputs;
    size_t num_outputs;
    const backplane_tensor_view_t* const* constants; /* num_inputs entries, NULL if not constant */
} backplane_layer_desc_t;

/** One capability, passed to a backplane_capability_sink_t. */
typedef struct backplane_capability {
    uint32_t struct_size;
    int32_t kind; /* BACKPLANE_CAP_* */
    const char* name;
    int64_t int_value; /* BOOL (0/1) and INT */
    const char* text;  /* TEXT */
} backplane_capability_t;

typedef void (*backplane_capability_sink_t)(void* user, const backplane_capability_t* capability);

/** 1.2: one tensor-handle factory of the plugin, passed to a backplane_factory_sink_t. */
typedef struct backplane_tensor_handle_factory {
    uint32_t struct_size;
    uint32_t flags;          /* BACKPLANE_FACTORY_* */
    const char* id;          /* globally unique: "Vendor/Backend/Factory" */
    uint32_t import_sources; /* BACKPLANE_MEMORY_* it can wrap without copying */
    uint32_t export_sources; /* BACKPLANE_MEMORY_* its handles hand out without copying */
    uint32_t layout;         /* BACKPLANE_LAYOUT_* */
    uint32_t reserved;
} backplane_tensor_handle_factory_t;

typedef void (*backplane_factory_sink_t)(void* user,
                                         const backplane_tensor_handle_factory_t* factory);
typedef void (*backplane_text_sink_t)(void* user, const char* text);

/** 1.2: one tensor a subgraph reads or computes. */
typedef struct backplane_subgraph_tensor {
    uint32_t struct_size;
    uint32_t flags; /* BACKPLANE_TENSOR_* */
    uint64_t id;    /* the host's tensor id */
    const char* name;
    const backplane_tensor_info_t* info;
} backplane_subgraph_tensor_t;

/** 1.2: one layer of a subgraph. */
typedef struct backplane_subgraph_layer {
    uint32_t struct_size;
    uint32_t reserved;
    uint64_t id;                        /* the host's layer id */
    const backplane_layer_desc_t* desc; /* as layer support sees it */
    const uint64_t* inputs;             /* desc->num_inputs tensor ids */
    const uint64_t* outputs;            /* desc->num_outputs tensor ids */
} backplane_subgraph_layer_t;

/** 1.2: the part of a network assigned to the plugin. Borrowed for the call. */
typedef struct backplane_subgraph {
    uint32_t struct_size;
    uint32_t reserved;
    const backplane_subgraph_layer_t* const* layers; /* topological order */
    size_t num_layers;
    const backplane_subgraph_tensor_t* const* tensors; /* each tensor once */
    size_t num_tensors;
} backplane_subgraph_t;

/** 1.2: what a replacement layer's input reads. */
typedef struct backplane_value_ref {
    uint32_t struct_size;
    uint32_t kind;                            /* BACKPLANE_VALUE_* */
    uint64_t tensor;                          /* EXISTING */
    const backplane_tensor_view_t* constant;  /* CONSTANT (the host copies it) */
    uint64_t layer;                           /* PRODUCED: an earlier replacement layer */
    uint64_t slot;                            /* PRODUCED: which of its outputs */
} backplane_value_ref_t;

/** 1.2: one layer of a replacement. */
typedef struct backplane_replacement_layer {
    uint32_t struct_size;
    uint32_t reserved;
    /* name, op_type, attributes; outputs describe its outputs (a custom op's come from
       there); inputs and constants are not read. */
    const backplane_layer_desc_t* desc;
    const backplane_value_ref_t* const* inputs;
    size_t num_inputs;
    const uint64_t* outputs; /* desc->num_outputs: host tensor id taken over, or NEW_TENSOR */
} backplane_replacement_layer_t;

/** 1.2: layers of the subgraph replaced by new ones. */
typedef struct backplane_substitution {
    uint32_t struct_size;
    uint32_t reserved;
    const uint64_t* replaced; /* host layer ids */
    size_t num_replaced;
    const backplane_replacement_layer_t* const* layers; /* in execution order */
    size_t num_layers;
} backplane_substitution_t;

/** 1.2: where optimize_subgraph reports, during the call. Layers it does not mention are
    untouched. The host copies everything it is given. */
typedef struct backplane_optimization_sink {
    uint32_t struct_size;
    uint32_t reserved;
    void* user; /* pass it back */
    backplane_status_t (*add_substitution)(void* user,
                                           const backplane_substitution_t* substitution);
    backplane_status_t (*add_failed)(void* user, const uint64_t* layers, size_t num_layers);
    backplane_status_t (*add_untouched)(void* user, const uint64_t* layers, size_t num_layers);
} backplane_optimization_sink_t;

/** The function table. Entries marked required must be non-NULL. */
typedef struct backplane_backend_vtable {
    uint32_t struct_size; /* sizeof(backplane_backend_vtable_t) as compiled */
    uint32_t abi_major;   /* BACKPLANE_ABI_VERSION_MAJOR */
    uint32_t abi_minor;   /* BACKPLANE_ABI_TARGET_MINOR */
    uint32_t reserved;
    /* --- 1.0 --- */
    /* Required. Writes the instance and the minor version the plugin will speak. */
    backplane_status_t (*create_instance)(const backplane_host_info_t* host,
                                          backplane_instance_t** out_instance,
                                          uint32_t* out_abi_minor, backplane_message_t* error);
    /* Required. */
    void (*destroy_instance)(backplane_instance_t* instance);
    /* Optional: write the backend's own version (e.g. "1.2.0") into out. */
    backplane_status_t (*backend_version)(backplane_instance_t* instance, backplane_message_t* out);
    /* Required: OK if supported, UNSUPPORTED with a reason. */
    backplane_status_t (*is_layer_supported)(backplane_instance_t* instance,
                                             const backplane_layer_desc_t* layer,
                                             backplane_message_t* reason);
    /* Required. memory_manager is one this instance created for the network, or NULL. */
    backplane_status_t (*create_workload_factory)(backplane_instance_t* instance,
                                                  backplane_memory_manager_t* memory_manager,
                                                  backplane_workload_factory_t** out_factory,
                                                  backplane_message_t* error);
    /* Required. Called after every workload the factory created has been destroyed. */
    void (*destroy_workload_factory)(backplane_workload_factory_t* factory);
    /* Required. */
    backplane_status_t (*create_workload)(backplane_workload_factory_t* factory,
                                          const backplane_layer_desc_t* layer,
                                          backplane_workload_t** out_workload,
                                          backplane_message_t* error);
    /* Required. Views describe the tensors as at creation; outputs overlap nothing. */
    backplane_status_t (*execute_workload)(backplane_workload_t* workload,
                                           const backplane_tensor_view_t* const* inputs,
                                           size_t num_inputs,
                                           const backplane_tensor_view_t* const* outputs,
                                           size_t num_outputs, backplane_message_t* error);
    /* Required. */
    void (*destroy_workload)(backplane_workload_t* workload);
#if BACKPLANE_ABI_TARGET_MINOR >= 1
    /* --- 1.1 --- */
    /* Optional (with the three below). Writes NULL when the backend manages no memory. */
    backplane_status_t (*create_memory_manager)(backplane_instance_t* instance,
                                                backplane_memory_manager_t** out_manager,
                                                backplane_message_t* error);
    backplane_status_t (*memory_manager_acquire)(backplane_memory_manager_t* manager,
                                                 backplane_message_t* error);
    void (*memory_manager_release)(backplane_memory_manager_t* manager);
    void (*destroy_memory_manager)(backplane_memory_manager_t* manager);
    /* Optional (with destroy_context). Writes NULL when the backend keeps no context. */
    backplane_status_t (*create_context)(backplane_instance_t* instance,
                                         const backplane_option_t* const* options,
                                         size_t num_options, backplane_context_t** out_context,
                                         backplane_message_t* error);
    void (*destroy_context)(backplane_context_t* context);
    /* Optional. An error from a before_* hook stops that load or unload. */
    backplane_status_t (*context_before_load)(backplane_context_t* context, uint64_t network,
                                              backplane_message_t* error);
    backplane_status_t (*context_after_load)(backplane_context_t* context, uint64_t network,
                                             backplane_message_t* error);
    backplane_status_t (*context_before_unload)(backplane_context_t* context, uint64_t network,
                                                backplane_message_t* error);
    void (*context_after_unload)(backplane_context_t* context, uint64_t network);
    /* Optional: call sink(user, &capability) once per capability. */
    backplane_status_t (*capabilities)(backplane_instance_t* instance,
                                       backplane_capability_sink_t sink, void* user);
#endif
#if BACKPLANE_ABI_TARGET_MINOR >= 2
    /* --- 1.2 --- */
    /* Optional (with create/destroy_tensor_handle): sink(user, &f) per factory of its own. */
    backplane_status_t (*tensor_handle_factories)(backplane_instance_t* instance,
                                                  backplane_factory_sink_t sink, void* user);
    /* Optional: sink(user, id) per factory its workloads read and write, best first (its own
       and others', e.g. "Backplane/Host/Cpu"). None or NULL: host memory only. */
    backplane_status_t (*handle_factory_preferences)(backplane_instance_t* instance,
                                                     backplane_text_sink_t sink, void* user);
    backplane_status_t (*create_tensor_handle)(backplane_instance_t* instance,
                                               const char* factory_id,
                                               const backplane_tensor_info_t* info,
                                               backplane_tensor_handle_t** out_handle,
                                               backplane_message_t* error);
    void (*destroy_tensor_handle)(backplane_tensor_handle_t* handle);
    /* Optional (with unmap): the bytes as host memory (dense, row-major), writable when
       writable is 1, valid until unmap. Never called during a workload using the handle. */
    backplane_status_t (*map_tensor_handle)(backplane_tensor_handle_t* handle, uint32_t writable,
                                            void** out_data, size_t* out_num_bytes,
                                            backplane_message_t* error);
    void (*unmap_tensor_handle)(backplane_tensor_handle_t* handle);
    /* Optional: report substitutions / failed / untouched layers through sink. */
    backplane_status_t (*optimize_subgraph)(backplane_instance_t* instance,
                                            const backplane_subgraph_t* subgraph,
                                            const backplane_optimization_sink_t* sink,
                                            backplane_message_t* error);
#endif
#if BACKPLANE_ABI_TARGET_MINOR >= 3
    /* --- 1.3 --- */
    /* Optional: after every execution of a network that used the backend (also a failed
       one), to finish deferred work; an error fails an execution that otherwise succeeded. */
    backplane_status_t (*context_after_execute)(backplane_context_t* context, uint64_t network,
                                                backplane_message_t* error);
#endif
} backplane_backend_vtable_t;

/** Copy text into a host message buffer, truncated to fit. Tolerates NULL. */
static inline void backplane_message_set(backplane_message_t* message, const char* text) {
    size_t n;
    if (message == NULL || message->data == NULL || message->capacity == 0) {
        return;
    }
    n = text == NULL ? 0 : strlen(text);
    if (n > message->capacity - 1) {
        n = message->capacity - 1;
    }
    if (n > 0) {
        memcpy(message->data, text, n);
    }
    message->data[n] = '\0';
}

/** The number of elements of a tensor description. */
static inline uint64_t backplane_tensor_elements(const backplane_tensor_info_t* info) {
    uint64_t n = 1;
    uint32_t i;
    for (i = 0; i < info->rank; ++i) {
        n *= info->dims[i];
    }
    return n;
}

/* The entry points a dynamic backend exports. */
#if defined(_WIN32)
#define BACKPLANE_EXPORT __declspec(dllexport)
#else
#define BACKPLANE_EXPORT __attribute__((visibility("default")))
#endif

BACKPLANE_EXPORT const char* GetBackendId(void);
BACKPLANE_EXPORT void GetVersion(uint32_t* major, uint32_t* minor);
BACKPLANE_EXPORT const backplane_backend_vtable_t* BackendFactory(void);

#ifdef __cplusplus
}
#endif

#endif /* BACKPLANE_BACKEND_H */
