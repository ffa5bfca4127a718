/* Which backend serves each weft_transport_t. Optional backends get their
 * entry under their HAVE_* here, and nowhere else. */
#include "config.h"

#include "common/compiler.h"
#include "transport/core/catalog.h"

#include <stddef.h>

static const weft_transport_ops_t *const transports[] = {
    [WEFT_TRANSPORT_HOST] = &weft_transport_host_ops,
#if HAVE_CUDA
    [WEFT_TRANSPORT_CUDA_IPC] = &weft_transport_cuda_ipc_ops,
#endif
};

const weft_transport_ops_t *weft_transport_ops_find(weft_transport_t transport)
{
    if ((int)transport < 0 || (size_t)transport >= WEFT_ARRAY_SIZE(transports)) {
        return NULL;
    }
    return transports[transport];
}
