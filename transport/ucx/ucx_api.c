/* UCX loaded at run time (ucx_api.h). */
#include "config.h"

#include "common/dl.h"
#include "transport/ucx/ucx_api.h"

#include <pthread.h>

weft_ucx_api_t weft_ucx_api;

/* libucp loads libuct and libucs, and dlsym on its handle finds theirs
 * too. The soname has been .0 since UCX 1.0; the bare name is a
 * development install's. */
static const char *const ucx_names[] = {"libucp.so.0", "libucp.so", NULL};

static const char *const ucx_symbols[] = {
#define WEFT_UCX_API_NAME_(name) #name,
    WEFT_UCX_FUNCTIONS(WEFT_UCX_API_NAME_)
#undef WEFT_UCX_API_NAME_
    NULL};

static struct {
    pthread_once_t once;
    weft_status_t  status;
    char           why[512];
} ucx_load = {PTHREAD_ONCE_INIT, WEFT_ERR_UNSUPPORTED, ""};

static void load_once(void)
{
    void *slots[sizeof(ucx_symbols) / sizeof(ucx_symbols[0])];
    /* The slots of weft_ucx_api, in the list's order: filled only when
     * every symbol was found, so a half-loaded UCX is never called. */
    void **api = (void **)&weft_ucx_api;

    _Static_assert(sizeof(weft_ucx_api) == (sizeof(ucx_symbols) / sizeof(ucx_symbols[0]) - 1) * sizeof(void *),
                   "one pointer per function");
    ucx_load.status = weft_dl_load(ucx_names, WEFT_UCX_LIBDIRS, ucx_symbols, slots, ucx_load.why,
                                   sizeof(ucx_load.why));
    if (ucx_load.status == WEFT_OK) {
        for (size_t i = 0; ucx_symbols[i] != NULL; i++) {
            api[i] = slots[i];
        }
    }
}

weft_status_t weft_ucx_api_load(const char **why)
{
    pthread_once(&ucx_load.once, load_once);
    if (why != NULL) {
        *why = ucx_load.why;
    }
    return ucx_load.status;
}
