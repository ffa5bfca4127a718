/*
 * Receive memory that UCX allocates (weft_ucx_memory_alloc in
 * weft/transport.h): a UCX context of its own and one mapping made with
 * UCP_MEM_MAP_ALLOCATE. A remote consumer whose views lie in it makes its
 * workers on that context and sends the mapping's key: UCX's shared-memory
 * transports put into memory they allocated with one copy by the sender,
 * where into other memory UCX 1.13 emulates the put. Internal.
 */
#ifndef WEFT_TRANSPORT_UCX_UCX_MEMORY_H
#define WEFT_TRANSPORT_UCX_UCX_MEMORY_H

#include "ucx_common.h"

#include <stdatomic.h>
#include <stdint.h>

struct weft_ucx_memory {
    weft_ucx_t       ucx;  /* the context; no worker of its own */
    ucp_mem_h        memh; /* the mapping, [base, base + bytes) */
    uint8_t         *base;
    uint64_t         bytes;
    _Atomic uint32_t users; /* consumers connected with it and not yet closed */
};

/* Whether every span (ctl/wire.h) lies inside the memory. */
int weft_ucx_memory_holds(const struct weft_ucx_memory *memory, const weft_wire_span_t *spans,
                          uint32_t count);

/* A consumer starts and stops using the memory: weft_ucx_memory_free
 * refuses while any does. use returns 0 (and does nothing) when a free
 * has taken the memory. */
int  weft_ucx_memory_use(struct weft_ucx_memory *memory);
void weft_ucx_memory_release(struct weft_ucx_memory *memory);

#endif
