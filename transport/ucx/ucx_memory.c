/* Receive memory that UCX allocates (ucx_memory.h). */
#include "config.h"

#include "ucx_memory.h"

#include "common/log.h"

#include <inttypes.h>
#include <stdlib.h>

/* `users` while weft_ucx_memory_free takes the memory: no connect may. */
#define USERS_FREEING UINT32_MAX

WEFT_API weft_status_t weft_ucx_memory_alloc(uint64_t bytes, weft_ucx_memory_h *out, void **base)
{
    struct weft_ucx_memory *m;
    ucp_mem_map_params_t    params = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                                    UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                                                    UCP_MEM_MAP_PARAM_FIELD_FLAGS,
                                      .address = NULL,
                                      .length = bytes,
                                      .flags = UCP_MEM_MAP_ALLOCATE};
    ucp_mem_attr_t          attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS |
                                                  UCP_MEM_ATTR_FIELD_LENGTH};
    weft_status_t           status;

    if (out == NULL || base == NULL || bytes == 0 || bytes > SIZE_MAX) {
        weft_log_error("ucx: weft_ucx_memory_alloc: %s",
                       bytes == 0 ? "no bytes asked" : "a NULL pointer or too many bytes");
        return WEFT_ERR_INVALID_PARAM;
    }
    *out = NULL;
    *base = NULL;
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    /* Shared: each consumer, and each of its receive lanes, drives a
     * worker of its own on this context. */
    status = weft_ucx_open_context(&m->ucx, "receive memory", 1);
    if (status == WEFT_OK) {
        status = weft_ucx_status(ucp_mem_map(m->ucx.context, &params, &m->memh),
                                 "allocating receive memory");
        if (status != WEFT_OK) {
            m->memh = NULL;
        }
    }
    if (status == WEFT_OK) {
        status = weft_ucx_status(ucp_mem_query(m->memh, &attr), "ucp_mem_query");
    }
    if (status == WEFT_OK && attr.length < bytes) {
        weft_log_error("ucx: UCX allocated %zu bytes of the %" PRIu64 " asked", attr.length, bytes);
        status = WEFT_ERR_UCX;
    }
    if (status != WEFT_OK) {
        if (m->memh != NULL) {
            (void)ucp_mem_unmap(m->ucx.context, m->memh);
        }
        weft_ucx_close(&m->ucx);
        free(m);
        return status;
    }
    m->base = attr.address;
    m->bytes = bytes;
    weft_log_info("ucx: allocated %" PRIu64 " bytes of receive memory at %p", bytes, attr.address);
    *out = m;
    *base = attr.address;
    return WEFT_OK;
}

WEFT_API weft_status_t weft_ucx_memory_free(weft_ucx_memory_h m)
{
    uint32_t users;

    if (m == NULL) {
        return WEFT_OK;
    }
    users = 0;
    if (!atomic_compare_exchange_strong(&m->users, &users, USERS_FREEING)) {
        weft_log_error("ucx: receive memory at %p still has %u consumer%s; not freed",
                       (void *)m->base, users, users == 1 ? "" : "s");
        return WEFT_ERR_BUSY;
    }
    (void)ucp_mem_unmap(m->ucx.context, m->memh);
    weft_ucx_close(&m->ucx);
    free(m);
    return WEFT_OK;
}

int weft_ucx_memory_holds(const struct weft_ucx_memory *m, const weft_wire_span_t *spans,
                          uint32_t count)
{
    const uint64_t begin = (uint64_t)(uintptr_t)m->base;

    for (uint32_t i = 0; i < count; i++) {
        if (spans[i].base < begin || spans[i].bytes > m->bytes ||
            spans[i].base - begin > m->bytes - spans[i].bytes) {
            return 0;
        }
    }
    return 1;
}

int weft_ucx_memory_use(struct weft_ucx_memory *m)
{
    uint32_t users = atomic_load(&m->users);

    do {
        if (users == USERS_FREEING || users == USERS_FREEING - 1) {
            return 0;
        }
    } while (!atomic_compare_exchange_weak(&m->users, &users, users + 1));
    return 1;
}

void weft_ucx_memory_release(struct weft_ucx_memory *m)
{
    atomic_fetch_sub(&m->users, 1);
}
