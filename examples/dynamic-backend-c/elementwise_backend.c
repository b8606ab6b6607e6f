/*
 * An example dynamic backend written in C against include/backplane/backend.h.
 *
 * Id "ElementwiseC": f32 Add, Mul (with numpy broadcasting) and Relu. It also shows the 1.1
 * parts of the ABI: a memory manager (counts acquisitions), a context (counts loaded
 * networks and, with ABI 1.3, ended executions) and capabilities that report the counts.
 *
 * Build:
 *   cc -std=c11 -O2 -fPIC -shared -fvisibility=hidden -I include \
 *      -o Acme_ElementwiseC_backend.so examples/dynamic-backend-c/elementwise_backend.c
 *
 * Define BACKPLANE_ABI_TARGET_MINOR=0 to build it as a plugin of ABI 1.0 (no memory manager,
 * context or capabilities), as a vendor targeting older runtimes would.
 */
#include "backplane/backend.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANK 8

enum op_kind { OP_ADD, OP_MUL, OP_RELU };

typedef struct instance {
    atomic_long acquired;        /* memory managers currently acquired */
    atomic_long loaded_networks; /* networks loaded (context hooks) */
    atomic_long executions;      /* executions ended (1.3 context hook) */
} instance_t;

/* The opaque types the header declares are defined here. */
struct backplane_instance {
    instance_t state;
};

struct backplane_workload_factory {
    struct backplane_instance* instance;
};

struct backplane_workload {
    /* The factory that made it: the runtime keeps a factory alive as long as any workload it
     * created, so a workload may use it (this one reads it on every execution, which
     * valgrind would report if the factory were freed first). */
    const struct backplane_workload_factory* factory;
    enum op_kind op;
    uint32_t out_rank;
    uint64_t out_dims[MAX_RANK];
    uint64_t in_strides[2][MAX_RANK]; /* broadcast strides (0 on broadcast axes) */
    uint64_t elements;
};

struct backplane_memory_manager {
    struct backplane_instance* instance;
};

struct backplane_context {
    struct backplane_instance* instance;
};

static int op_of(const char* op_type, enum op_kind* out) {
    if (strcmp(op_type, "Add") == 0) {
        *out = OP_ADD;
    } else if (strcmp(op_type, "Mul") == 0) {
        *out = OP_MUL;
    } else if (strcmp(op_type, "Relu") == 0) {
        *out = OP_RELU;
    } else {
        return 0;
    }
    return 1;
}

/* Check a layer; on refusal write why into `why` and return 0. */
static int check_layer(const backplane_layer_desc_t* layer, enum op_kind* op,
                       backplane_message_t* why) {
    char text[256];
    size_t i;
    size_t want_inputs;
    if (!op_of(layer->op_type, op)) {
        snprintf(text, sizeof text, "ElementwiseC runs Add, Mul and Relu, not %s", layer->op_type);
        backplane_message_set(why, text);
        return 0;
    }
    want_inputs = *op == OP_RELU ? 1 : 2;
    if (layer->num_inputs != want_inputs || layer->num_outputs != 1) {
        backplane_message_set(why, "unexpected number of inputs or outputs");
        return 0;
    }
    for (i = 0; i < layer->num_inputs; ++i) {
        const backplane_tensor_info_t* t = layer->inputs[i];
        if (t->dtype != BACKPLANE_DTYPE_F32 || t->quant_kind != BACKPLANE_QUANT_NONE) {
            snprintf(text, sizeof text, "input %zu of %s is not plain f32", i, layer->name);
            backplane_message_set(why, text);
            return 0;
        }
        if (t->rank > MAX_RANK) {
            backplane_message_set(why, "rank above 8");
            return 0;
        }
    }
    if (layer->outputs[0]->rank > MAX_RANK) {
        backplane_message_set(why, "rank above 8");
        return 0;
    }
    return 1;
}

static backplane_status_t create_instance(const backplane_host_info_t* host,
                                          backplane_instance_t** out_instance,
                                          uint32_t* out_abi_minor, backplane_message_t* error) {
    struct backplane_instance* inst;
    if (host == NULL || host->abi_major != BACKPLANE_ABI_VERSION_MAJOR) {
        backplane_message_set(error, "unsupported host ABI major version");
        return BACKPLANE_STATUS_INVALID_ARGUMENT;
    }
    inst = calloc(1, sizeof *inst);
    if (inst == NULL) {
        backplane_message_set(error, "out of memory");
        return BACKPLANE_STATUS_FAILED;
    }
    *out_instance = inst;
    /* Speak the lower of the two minor versions. */
    {
        uint32_t mine = BACKPLANE_ABI_TARGET_MINOR;
        *out_abi_minor = host->abi_minor < mine ? host->abi_minor : mine;
    }
    return BACKPLANE_STATUS_OK;
}

static void destroy_instance(backplane_instance_t* instance) { free(instance); }

static backplane_status_t backend_version(backplane_instance_t* instance,
                                          backplane_message_t* out) {
    (void)instance;
    backplane_message_set(out, "1.0.0");
    return BACKPLANE_STATUS_OK;
}

static backplane_status_t is_layer_supported(backplane_instance_t* instance,
                                             const backplane_layer_desc_t* layer,
                                             backplane_message_t* reason) {
    enum op_kind op;
    (void)instance;
    return check_layer(layer, &op, reason) ? BACKPLANE_STATUS_OK : BACKPLANE_STATUS_UNSUPPORTED;
}

static backplane_status_t create_workload_factory(backplane_instance_t* instance,
                                                  backplane_memory_manager_t* memory_manager,
                                                  backplane_workload_factory_t** out_factory,
                                                  backplane_message_t* error) {
    struct backplane_workload_factory* f = calloc(1, sizeof *f);
    (void)memory_manager;
    if (f == NULL) {
        backplane_message_set(error, "out of memory");
        return BACKPLANE_STATUS_FAILED;
    }
    f->instance = instance;
    *out_factory = f;
    return BACKPLANE_STATUS_OK;
}

static void destroy_workload_factory(backplane_workload_factory_t* factory) { free(factory); }

static backplane_status_t create_workload(backplane_workload_factory_t* factory,
                                          const backplane_layer_desc_t* layer,
                                          backplane_workload_t** out_workload,
                                          backplane_message_t* error) {
    struct backplane_workload* w;
    enum op_kind op;
    const backplane_tensor_info_t* out;
    size_t i;
    uint32_t axis;
    if (!check_layer(layer, &op, error)) {
        return BACKPLANE_STATUS_UNSUPPORTED;
    }
    w = calloc(1, sizeof *w);
    if (w == NULL) {
        backplane_message_set(error, "out of memory");
        return BACKPLANE_STATUS_FAILED;
    }
    out = layer->outputs[0];
    w->factory = factory;
    w->op = op;
    w->out_rank = out->rank;
    w->elements = backplane_tensor_elements(out);
    for (axis = 0; axis < out->rank; ++axis) {
        w->out_dims[axis] = out->dims[axis];
    }
    /* Broadcast strides: inputs align to the right; size-1 (or missing) axes get stride 0. */
    for (i = 0; i < layer->num_inputs; ++i) {
        const backplane_tensor_info_t* in = layer->inputs[i];
        uint64_t stride = 1;
        int a;
        for (a = (int)out->rank - 1; a >= 0; --a) {
            int ia = a - (int)(out->rank - in->rank);
            uint64_t d = ia >= 0 ? in->dims[ia] : 1;
            w->in_strides[i][a] = d == 1 ? 0 : stride;
            stride *= d;
        }
    }
    *out_workload = w;
    return BACKPLANE_STATUS_OK;
}

static backplane_status_t execute_workload(backplane_workload_t* w,
                                           const backplane_tensor_view_t* const* inputs,
                                           size_t num_inputs,
                                           const backplane_tensor_view_t* const* outputs,
                                           size_t num_outputs, backplane_message_t* error) {
    float* y;
    uint64_t index[MAX_RANK] = {0};
    uint64_t n;
    const float* a;
    const float* b;
    if (w->factory == NULL || w->factory->instance == NULL) {
        backplane_message_set(error, "the workload lost its factory");
        return BACKPLANE_STATUS_FAILED;
    }
    if (num_outputs != 1 || num_inputs != (w->op == OP_RELU ? 1u : 2u)) {
        backplane_message_set(error, "wrong number of tensors");
        return BACKPLANE_STATUS_INVALID_ARGUMENT;
    }
    y = (float*)outputs[0]->data;
    a = (const float*)inputs[0]->data;
    if (w->op == OP_RELU) {
        for (n = 0; n < w->elements; ++n) {
            /* NaN stays NaN, as ONNX Relu (max(0, x)) propagates it. */
            y[n] = a[n] < 0.0f ? 0.0f : a[n];
        }
        return BACKPLANE_STATUS_OK;
    }
    b = (const float*)inputs[1]->data;
    for (n = 0; n < w->elements; ++n) {
        uint64_t ia = 0, ib = 0;
        int axis;
        for (axis = 0; axis < (int)w->out_rank; ++axis) {
            ia += index[axis] * w->in_strides[0][axis];
            ib += index[axis] * w->in_strides[1][axis];
        }
        y[n] = w->op == OP_ADD ? a[ia] + b[ib] : a[ia] * b[ib];
        /* Next index, row-major. */
        for (axis = (int)w->out_rank - 1; axis >= 0; --axis) {
            if (++index[axis] < w->out_dims[axis]) {
                break;
            }
            index[axis] = 0;
        }
    }
    return BACKPLANE_STATUS_OK;
}

static void destroy_workload(backplane_workload_t* workload) { free(workload); }

#if BACKPLANE_ABI_TARGET_MINOR >= 1
static backplane_status_t create_memory_manager(backplane_instance_t* instance,
                                                backplane_memory_manager_t** out_manager,
                                                backplane_message_t* error) {
    struct backplane_memory_manager* m = calloc(1, sizeof *m);
    if (m == NULL) {
        backplane_message_set(error, "out of memory");
        return BACKPLANE_STATUS_FAILED;
    }
    m->instance = instance;
    *out_manager = m;
    return BACKPLANE_STATUS_OK;
}

static backplane_status_t memory_manager_acquire(backplane_memory_manager_t* m,
                                                 backplane_message_t* error) {
    (void)error;
    atomic_fetch_add(&m->instance->state.acquired, 1);
    return BACKPLANE_STATUS_OK;
}

static void memory_manager_release(backplane_memory_manager_t* m) {
    atomic_fetch_sub(&m->instance->state.acquired, 1);
}

static void destroy_memory_manager(backplane_memory_manager_t* m) { free(m); }

static backplane_status_t create_context(backplane_instance_t* instance,
                                         const backplane_option_t* const* options,
                                         size_t num_options, backplane_context_t** out_context,
                                         backplane_message_t* error) {
    struct backplane_context* c;
    size_t i;
    for (i = 0; i < num_options; ++i) {
        if (strcmp(options[i]->name, "fail_context") == 0) {
            backplane_message_set(error, "told to fail by the fail_context option");
            return BACKPLANE_STATUS_FAILED;
        }
    }
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        backplane_message_set(error, "out of memory");
        return BACKPLANE_STATUS_FAILED;
    }
    c->instance = instance;
    *out_context = c;
    return BACKPLANE_STATUS_OK;
}

static void destroy_context(backplane_context_t* c) { free(c); }

static backplane_status_t after_load(backplane_context_t* c, uint64_t network,
                                     backplane_message_t* error) {
    (void)network;
    (void)error;
    atomic_fetch_add(&c->instance->state.loaded_networks, 1);
    return BACKPLANE_STATUS_OK;
}

static void after_unload(backplane_context_t* c, uint64_t network) {
    (void)network;
    atomic_fetch_sub(&c->instance->state.loaded_networks, 1);
}

#if BACKPLANE_ABI_TARGET_MINOR >= 3
static backplane_status_t after_execute(backplane_context_t* c, uint64_t network,
                                        backplane_message_t* error) {
    (void)network;
    (void)error;
    atomic_fetch_add(&c->instance->state.executions, 1);
    return BACKPLANE_STATUS_OK;
}
#endif

static backplane_status_t capabilities(backplane_instance_t* instance,
                                       backplane_capability_sink_t sink, void* user) {
    backplane_capability_t cap;
    cap.struct_size = sizeof cap;
    cap.kind = BACKPLANE_CAP_INT;
    cap.text = NULL;
    cap.name = "AcquiredMemoryManagers";
    cap.int_value = atomic_load(&instance->state.acquired);
    sink(user, &cap);
    cap.name = "LoadedNetworks";
    cap.int_value = atomic_load(&instance->state.loaded_networks);
    sink(user, &cap);
    cap.name = "Executions";
    cap.int_value = atomic_load(&instance->state.executions);
    sink(user, &cap);
    cap.kind = BACKPLANE_CAP_BOOL;
    cap.name = "AsyncExecution";
    cap.int_value = 1;
    sink(user, &cap);
    return BACKPLANE_STATUS_OK;
}
#endif

static const backplane_backend_vtable_t VTABLE = {
    sizeof(backplane_backend_vtable_t),
    BACKPLANE_ABI_VERSION_MAJOR,
    BACKPLANE_ABI_TARGET_MINOR,
    0,
    create_instance,
    destroy_instance,
    backend_version,
    is_layer_supported,
    create_workload_factory,
    destroy_workload_factory,
    create_workload,
    execute_workload,
    destroy_workload,
#if BACKPLANE_ABI_TARGET_MINOR >= 1
    create_memory_manager,
    memory_manager_acquire,
    memory_manager_release,
    destroy_memory_manager,
    create_context,
    destroy_context,
    NULL, /* context_before_load */
    after_load,
    NULL, /* context_before_unload */
    after_unload,
    capabilities,
#endif
#if BACKPLANE_ABI_TARGET_MINOR >= 2
    /* 1.2: no tensor-handle factories of its own (it works on host memory) and no
       subgraph optimization (its layers run as they are). */
    NULL, /* tensor_handle_factories */
    NULL, /* handle_factory_preferences */
    NULL, /* create_tensor_handle */
    NULL, /* destroy_tensor_handle */
    NULL, /* map_tensor_handle */
    NULL, /* unmap_tensor_handle */
    NULL, /* optimize_subgraph */
#endif
#if BACKPLANE_ABI_TARGET_MINOR >= 3
    /* 1.3: counts the executions that ended (a capability, for tests). */
    after_execute,
#endif
};

BACKPLANE_EXPORT const char* GetBackendId(void) { return "ElementwiseC"; }

BACKPLANE_EXPORT void GetVersion(uint32_t* major, uint32_t* minor) {
    *major = BACKPLANE_ABI_VERSION_MAJOR;
    *minor = BACKPLANE_ABI_TARGET_MINOR;
}

BACKPLANE_EXPORT const backplane_backend_vtable_t* BackendFactory(void) { return &VTABLE; }
