/* weft_backend_query: which backends were built, and what each finds. */
#include "config.h"

#include "common/compiler.h"
#include "common/text.h"
#include "transport/core/probe.h"

#include <string.h>

#ifdef HAVE_CUDA
#include "common/cuda_util.h"
#define CUDA_PROBE weft_cuda_probe
#else
#define CUDA_PROBE NULL
#endif
#ifdef HAVE_UCX
#define UCX_PROBE weft_ucx_probe
#else
#define UCX_PROBE NULL
#endif
#ifdef HAVE_NCCL
#define NCCL_PROBE weft_nccl_probe
#else
#define NCCL_PROBE NULL
#endif
#ifdef HAVE_VERBS
#define VERBS_PROBE weft_verbs_probe
#else
#define VERBS_PROBE NULL
#endif

static void host_probe(weft_backend_info_t *info)
{
    info->available = 1;
    weft_text_append(info->detail, sizeof(info->detail), "POSIX shared memory and memcpy\n");
}

/* A NULL probe means the backend was not compiled in. */
static const struct {
    const char *name;
    void (*probe)(weft_backend_info_t *info);
} backends[] = {
    [WEFT_BACKEND_HOST] = {"host", host_probe},   [WEFT_BACKEND_CUDA] = {"cuda", CUDA_PROBE},
    [WEFT_BACKEND_UCX] = {"ucx", UCX_PROBE},      [WEFT_BACKEND_NCCL] = {"nccl", NCCL_PROBE},
    [WEFT_BACKEND_VERBS] = {"verbs", VERBS_PROBE},
};

_Static_assert(WEFT_ARRAY_SIZE(backends) == WEFT_BACKEND_LAST, "every backend needs an entry");

WEFT_API weft_status_t weft_backend_query(weft_backend_t backend, weft_backend_info_t *info)
{
    if ((unsigned)backend >= WEFT_BACKEND_LAST || info == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    memset(info, 0, sizeof(*info));
    info->name = backends[backend].name;
    if (backends[backend].probe == NULL) {
        weft_text_append(info->detail, sizeof(info->detail), "not compiled in\n");
        return WEFT_OK;
    }
    info->compiled = 1;
    backends[backend].probe(info);
    return WEFT_OK;
}
