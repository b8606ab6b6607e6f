/*
 * The zoo: one small C backend (f32 Relu, id "Zoo") that the tests compile many times with
 * -D flags, each turning it into a differently broken dynamic backend.
 *
 *   -DZOO_ID='"Name"'          another id (e.g. with invalid characters)
 *   -DZOO_NULL_ID              GetBackendId returns NULL
 *   -DZOO_HUGE_ID              GetBackendId returns a 1 MiB id of letters
 *   -DZOO_NO_GET_BACKEND_ID    GetBackendId is not exported
 *   -DZOO_NO_GET_VERSION       GetVersion is not exported
 *   -DZOO_NO_BACKEND_FACTORY   BackendFactory is not exported
 *   -DZOO_MANGLED              the entry points are exported under C++-mangled names only
 *   -DZOO_MAJOR=n -DZOO_MINOR=n  the version GetVersion reports (and the table declares)
 *   -DZOO_NULL_FACTORY         BackendFactory returns NULL
 *   -DZOO_NULL_ENTRY           the table's required execute_workload entry is NULL
 *   -DZOO_SMALL_TABLE          the table's struct_size is too small
 *   -DZOO_FAIL_CREATE          create_instance fails
 *   -DZOO_FAIL_EXECUTE         every workload fails at run time
 *   -DZOO_BAD_NEGOTIATION      create_instance answers a minor newer than both sides
 *   -DZOO_OPTIMIZE=n           ABI 1.2 optimize_subgraph: 1 rejects every layer (failed),
 *                              2 answers with a layer id not in the subgraph, 3 replaces each
 *                              Relu by a new Relu layer named "<name>_zoo", 4 fails
 */
#include <stdio.h>
#include "backplane/backend.h"

#include <stdlib.h>
#include <string.h>

#ifndef ZOO_ID
#define ZOO_ID "Zoo"
#endif
#ifndef ZOO_MAJOR
#define ZOO_MAJOR BACKPLANE_ABI_VERSION_MAJOR
#endif
#ifndef ZOO_MINOR
#define ZOO_MINOR BACKPLANE_ABI_TARGET_MINOR
#endif

struct backplane_instance {
    int unused;
};
struct backplane_workload_factory {
    int unused;
};
struct backplane_workload {
    uint64_t elements;
};

static backplane_status_t create_instance(const backplane_host_info_t* host,
                                          backplane_instance_t** out_instance,
                                          uint32_t* out_abi_minor, backplane_message_t* error) {
#ifdef ZOO_FAIL_CREATE
    (void)host;
    (void)out_instance;
    (void)out_abi_minor;
    backplane_message_set(error, "the zoo backend refuses to be created");
    return BACKPLANE_STATUS_FAILED;
#else
    uint32_t mine = ZOO_MINOR;
    (void)error;
    *out_instance = calloc(1, sizeof(struct backplane_instance));
    *out_abi_minor = host->abi_minor < mine ? host->abi_minor : mine;
#ifdef ZOO_BAD_NEGOTIATION
    *out_abi_minor = 99;
#endif
    return BACKPLANE_STATUS_OK;
#endif
}

static void destroy_instance(backplane_instance_t* instance) { free(instance); }

static backplane_status_t is_layer_supported(backplane_instance_t* instance,
                                             const backplane_layer_desc_t* layer,
                                             backplane_message_t* reason) {
    (void)instance;
    if (strcmp(layer->op_type, "Relu") != 0 || layer->inputs[0]->dtype != BACKPLANE_DTYPE_F32) {
        backplane_message_set(reason, "the zoo backend runs f32 Relu only");
        return BACKPLANE_STATUS_UNSUPPORTED;
    }
    return BACKPLANE_STATUS_OK;
}

static backplane_status_t create_workload_factory(backplane_instance_t* instance,
                                                  backplane_memory_manager_t* memory_manager,
                                                  backplane_workload_factory_t** out_factory,
                                                  backplane_message_t* error) {
    (void)instance;
    (void)memory_manager;
    (void)error;
    *out_factory = calloc(1, sizeof(struct backplane_workload_factory));
    return BACKPLANE_STATUS_OK;
}

static void destroy_workload_factory(backplane_workload_factory_t* factory) { free(factory); }

static backplane_status_t create_workload(backplane_workload_factory_t* factory,
                                          const backplane_layer_desc_t* layer,
                                          backplane_workload_t** out_workload,
                                          backplane_message_t* error) {
    struct backplane_workload* w;
    (void)factory;
    if (is_layer_supported(NULL, layer, error) != BACKPLANE_STATUS_OK) {
        return BACKPLANE_STATUS_UNSUPPORTED;
    }
    w = calloc(1, sizeof *w);
    w->elements = backplane_tensor_elements(layer->outputs[0]);
    *out_workload = w;
    return BACKPLANE_STATUS_OK;
}

__attribute__((unused)) static backplane_status_t execute_workload(backplane_workload_t* w,
                                           const backplane_tensor_view_t* const* inputs,
                                           size_t num_inputs,
                                           const backplane_tensor_view_t* const* outputs,
                                           size_t num_outputs, backplane_message_t* error) {
#ifdef ZOO_FAIL_EXECUTE
    (void)w;
    (void)inputs;
    (void)num_inputs;
    (void)outputs;
    (void)num_outputs;
    backplane_message_set(error, "the zoo workload failed on purpose");
    return BACKPLANE_STATUS_EXECUTION_FAILED;
#else
    const float* x = (const float*)inputs[0]->data;
    float* y = (float*)outputs[0]->data;
    uint64_t i;
    (void)num_inputs;
    (void)num_outputs;
    (void)error;
    for (i = 0; i < w->elements; ++i) {
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    }
    return BACKPLANE_STATUS_OK;
#endif
}

static void destroy_workload(backplane_workload_t* workload) { free(workload); }

#if defined(ZOO_OPTIMIZE) && BACKPLANE_ABI_TARGET_MINOR >= 2
static backplane_status_t optimize_subgraph(backplane_instance_t* instance,
                                            const backplane_subgraph_t* subgraph,
                                            const backplane_optimization_sink_t* sink,
                                            backplane_message_t* error) {
    size_t i;
    (void)instance;
    (void)error;
    for (i = 0; i < subgraph->num_layers; ++i) {
        const backplane_subgraph_layer_t* l = subgraph->layers[i];
        uint64_t id = l->id;
#if ZOO_OPTIMIZE == 1
        if (sink->add_failed(sink->user, &id, 1) != BACKPLANE_STATUS_OK) {
            return BACKPLANE_STATUS_FAILED;
        }
#elif ZOO_OPTIMIZE == 2
        uint64_t bogus = 1000000;
        (void)id;
        sink->add_untouched(sink->user, &bogus, 1);
#elif ZOO_OPTIMIZE == 3
        char name[256];
        backplane_layer_desc_t desc = *l->desc;
        backplane_value_ref_t input;
        const backplane_value_ref_t* inputs[1];
        backplane_replacement_layer_t layer;
        const backplane_replacement_layer_t* layers[1];
        backplane_substitution_t sub;
        snprintf(name, sizeof name, "%s_zoo", l->desc->name);
        desc.name = name;
        memset(&input, 0, sizeof input);
        input.struct_size = sizeof input;
        input.kind = BACKPLANE_VALUE_EXISTING;
        input.tensor = l->inputs[0];
        inputs[0] = &input;
        memset(&layer, 0, sizeof layer);
        layer.struct_size = sizeof layer;
        layer.desc = &desc;
        layer.inputs = inputs;
        layer.num_inputs = 1;
        layer.outputs = l->outputs; /* takes over the original output */
        layers[0] = &layer;
        memset(&sub, 0, sizeof sub);
        sub.struct_size = sizeof sub;
        sub.replaced = &id;
        sub.num_replaced = 1;
        sub.layers = layers;
        sub.num_layers = 1;
        if (sink->add_substitution(sink->user, &sub) != BACKPLANE_STATUS_OK) {
            backplane_message_set(error, "the host refused the substitution");
            return BACKPLANE_STATUS_FAILED;
        }
#else
        (void)id;
        (void)sink;
        backplane_message_set(error, "the zoo fails to optimize on purpose");
        return BACKPLANE_STATUS_FAILED;
#endif
    }
    return BACKPLANE_STATUS_OK;
}
#endif

__attribute__((unused)) static const backplane_backend_vtable_t VTABLE = {
#ifdef ZOO_SMALL_TABLE
    8,
#else
    sizeof(backplane_backend_vtable_t),
#endif
    ZOO_MAJOR,
    ZOO_MINOR,
    0,
    create_instance,
    destroy_instance,
    NULL, /* backend_version: optional */
    is_layer_supported,
    create_workload_factory,
    destroy_workload_factory,
    create_workload,
#ifdef ZOO_NULL_ENTRY
    NULL,
#else
    execute_workload,
#endif
    destroy_workload,
#if BACKPLANE_ABI_TARGET_MINOR >= 1
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
#endif
#if BACKPLANE_ABI_TARGET_MINOR >= 2
    NULL, NULL, NULL, NULL, NULL, NULL,
#ifdef ZOO_OPTIMIZE
    optimize_subgraph,
#else
    NULL,
#endif
#endif
#if BACKPLANE_ABI_TARGET_MINOR >= 3
    NULL, /* context_after_execute */
#endif
};

#define ZOO_EXPORT BACKPLANE_EXPORT

#if defined(ZOO_MANGLED)
/* What a C++ compiler emits for these functions without extern "C". */
#define NAME_GET_BACKEND_ID _Z12GetBackendIdv
#define NAME_GET_VERSION _Z10GetVersionPjS_
#define NAME_BACKEND_FACTORY _Z14BackendFactoryv
#else
#define NAME_GET_BACKEND_ID GetBackendId
#define NAME_GET_VERSION GetVersion
#define NAME_BACKEND_FACTORY BackendFactory
#endif

#ifndef ZOO_NO_GET_BACKEND_ID
ZOO_EXPORT const char* NAME_GET_BACKEND_ID(void);
ZOO_EXPORT const char* NAME_GET_BACKEND_ID(void) {
#ifdef ZOO_NULL_ID
    return NULL;
#elif defined(ZOO_HUGE_ID)
    static char huge[(1 << 20) + 1];
    if (huge[0] == 0) {
        memset(huge, 'A', 1 << 20);
    }
    return huge;
#else
    return ZOO_ID;
#endif
}
#endif

#ifndef ZOO_NO_GET_VERSION
ZOO_EXPORT void NAME_GET_VERSION(uint32_t* major, uint32_t* minor);
ZOO_EXPORT void NAME_GET_VERSION(uint32_t* major, uint32_t* minor) {
    *major = ZOO_MAJOR;
    *minor = ZOO_MINOR;
}
#endif

#ifndef ZOO_NO_BACKEND_FACTORY
ZOO_EXPORT const backplane_backend_vtable_t* NAME_BACKEND_FACTORY(void);
ZOO_EXPORT const backplane_backend_vtable_t* NAME_BACKEND_FACTORY(void) {
#ifdef ZOO_NULL_FACTORY
    return NULL;
#else
    return &VTABLE;
#endif
}
#endif

/* Helpers for the handle-utility tests: one exported, one defined but not exported. */
BACKPLANE_EXPORT int ZooAddOne(int x);
BACKPLANE_EXPORT int ZooAddOne(int x) { return x + 1; }
__attribute__((visibility("hidden"))) int ZooHiddenHelper(int x);
__attribute__((visibility("hidden"))) int ZooHiddenHelper(int x) { return x - 1; }
