/* The NCCL probe: the version of the library loaded at run time. */
#include "common/text.h"
#include "transport/nccl/nccl_common.h"

#include <stdlib.h>

void weft_nccl_probe(weft_backend_info_t *info)
{
    int          version = 0;
    ncclResult_t res;
    const char  *nvls = getenv("NCCL_NVLS_ENABLE");
    const char  *why;

    if (weft_nccl_api_load(&why) != WEFT_OK) {
        weft_text_append(info->detail, sizeof(info->detail), "NCCL could not be loaded: %s\n", why);
        return;
    }
    res = ncclGetVersion(&version);
    if (res != ncclSuccess) {
        weft_text_append(info->detail, sizeof(info->detail), "ncclGetVersion failed: %s\n",
                         ncclGetErrorString(res));
        return;
    }
    /* NCCL >= 2.9 encodes major*10000 + minor*100 + patch. */
    weft_text_append(info->version, sizeof(info->version), "%d.%d.%d", version / 10000,
                     (version % 10000) / 100, version % 100);
    weft_text_append(info->detail, sizeof(info->detail), "headers %d.%d.%d, NCCL_NVLS_ENABLE=%s\n",
                     NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, nvls ? nvls : "(unset)");
    info->available = 1;
}
