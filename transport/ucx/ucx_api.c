/* UCX loaded at run time (ucx_api.h). */
#include "config.h"

#include "common/dl.h"
#include "transport/ucx/ucx_api.h"

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

static weft_dl_library_t ucx_library = WEFT_DL_LIBRARY_INIT;

weft_status_t weft_ucx_api_load(const char **why)
{
    return weft_dl_load_once(&ucx_library, ucx_names, WEFT_UCX_LIBDIRS, ucx_symbols, &weft_ucx_api,
                             sizeof(weft_ucx_api), why);
}
