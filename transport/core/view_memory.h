/*
 * Where a remote consumer's views live: all in host memory, or all in
 * device memory of one GPU of this process. Shared by the consumers of
 * the transports across nodes. Internal.
 */
#ifndef WEFT_TRANSPORT_CORE_VIEW_MEMORY_H
#define WEFT_TRANSPORT_CORE_VIEW_MEMORY_H

#include <stddef.h>
#include <weft/transport.h>

/*
 * *memory gets the views' kind and *device their GPU (-1 for host).
 * Errors, logged with the view's index and name for `who`:
 * WEFT_ERR_INVALID_PARAM (host and device views mixed, views on two GPUs,
 * a device view that is not device memory of this process),
 * WEFT_ERR_UNSUPPORTED (a device view in a library built without CUDA),
 * WEFT_ERR_CUDA.
 */
weft_status_t weft_views_memory(const weft_recv_view_t *views, size_t count, const char *who,
                                weft_memory_kind_t *memory, int *device);

#endif
