/* NCCL loaded at run time (nccl_api.h). */
#include "config.h"

#include "common/dl.h"
#include "transport/nccl/nccl_api.h"

#include <pthread.h>

weft_nccl_api_t weft_nccl_api;

/* NCCL 2's soname; the bare name is a development install's. */
static const char *const nccl_names[] = {"libnccl.so.2", "libnccl.so", NULL};

static const char *const nccl_symbols[] = {
#define WEFT_NCCL_API_NAME_(name) #name,
    WEFT_NCCL_FUNCTIONS(WEFT_NCCL_API_NAME_)
#undef WEFT_NCCL_API_NAME_
    NULL};

static struct {
    pthread_once_t once;
    weft_status_t  status;
    char           why[512];
} nccl_load = {PTHREAD_ONCE_INIT, WEFT_ERR_UNSUPPORTED, ""};

static void load_once(void)
{
    void *slots[sizeof(nccl_symbols) / sizeof(nccl_symbols[0])];
    /* weft_nccl_api's slots in the list's order (dlsym gives function
     * addresses as void *, as POSIX guarantees they convert). */
    void **api = (void **)&weft_nccl_api;

    _Static_assert(sizeof(weft_nccl_api) == (sizeof(nccl_symbols) / sizeof(nccl_symbols[0]) - 1) * sizeof(void *),
                   "one pointer per function");
    nccl_load.status = weft_dl_load(nccl_names, WEFT_NCCL_LIBDIRS, nccl_symbols, slots, nccl_load.why,
                                    sizeof(nccl_load.why));
    if (nccl_load.status == WEFT_OK) {
        for (size_t i = 0; nccl_symbols[i] != NULL; i++) {
            api[i] = slots[i];
        }
    }
}

weft_status_t weft_nccl_api_load(const char **why)
{
    pthread_once(&nccl_load.once, load_once);
    if (why != NULL) {
        *why = nccl_load.why;
    }
    return nccl_load.status;
}
