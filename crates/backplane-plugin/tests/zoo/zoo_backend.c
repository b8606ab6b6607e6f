/*
 * The zoo: one small C backend (f32 Relu, id "Zoo") that the tests compile many times with
 * -D flags, each turning it into a differently broken dynamic backend.
 *
 *   -DZOO_ID='"Name"'          another id (e.g. with invalid characters)
 *   -DZOO_NULL_ID              GetBackendId returns NULL
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
 */
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
