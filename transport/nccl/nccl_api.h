/*
 * NCCL, loaded at run time: libweft links no NCCL, so it loads and runs on
 * a host without it, and the nccl backend says so instead. As with UCX
 * (ucx/ucx_api.h): NCCL's own header, each function the backend calls a
 * pointer in weft_nccl_api filled by weft_nccl_api_load(), and macros
 * that route this backend's calls through it. Include this instead of
 * <nccl.h>. Internal.
 */
#ifndef WEFT_TRANSPORT_NCCL_NCCL_API_H
#define WEFT_TRANSPORT_NCCL_NCCL_API_H

#include <cuda_runtime_api.h>
#include <weft/types.h>

/* nccl.h declares functions without prototypes. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#define WEFT_NCCL_FUNCTIONS(X)                                                                   \
    X(ncclGetVersion) X(ncclGetErrorString) X(ncclGetLastError) X(ncclGetUniqueId)               \
    X(ncclCommInitRankConfig) X(ncclCommAbort) X(ncclCommGetAsyncError) X(ncclGroupStart)        \
    X(ncclGroupEnd) X(ncclSend) X(ncclRecv)

typedef struct weft_nccl_api {
#define WEFT_NCCL_API_SLOT_(name) __typeof__(name) *name;
    WEFT_NCCL_FUNCTIONS(WEFT_NCCL_API_SLOT_)
#undef WEFT_NCCL_API_SLOT_
} weft_nccl_api_t;

extern weft_nccl_api_t weft_nccl_api;

/*
 * Loads NCCL once per process; later calls return the first one's
 * result. WEFT_OK, or WEFT_ERR_UNSUPPORTED with the loader's reason in
 * *why (static; NULL allowed). Thread-safe. Every entry into the backend
 * calls it before any NCCL function.
 */
weft_status_t weft_nccl_api_load(const char **why);

/* From here on, this backend's NCCL calls go through weft_nccl_api. */
#define ncclGetVersion         weft_nccl_api.ncclGetVersion
#define ncclGetErrorString     weft_nccl_api.ncclGetErrorString
#define ncclGetLastError       weft_nccl_api.ncclGetLastError
#define ncclGetUniqueId        weft_nccl_api.ncclGetUniqueId
#define ncclCommInitRankConfig weft_nccl_api.ncclCommInitRankConfig
#define ncclCommAbort          weft_nccl_api.ncclCommAbort
#define ncclCommGetAsyncError  weft_nccl_api.ncclCommGetAsyncError
#define ncclGroupStart         weft_nccl_api.ncclGroupStart
#define ncclGroupEnd           weft_nccl_api.ncclGroupEnd
#define ncclSend               weft_nccl_api.ncclSend
#define ncclRecv               weft_nccl_api.ncclRecv

#endif
