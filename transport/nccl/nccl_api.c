/* NCCL loaded at run time (nccl_api.h). */
#include "config.h"

#include "common/dl.h"
#include "transport/nccl/nccl_api.h"

weft_nccl_api_t weft_nccl_api;

/* NCCL 2's soname; the bare name is a development install's. */
static const char *const nccl_names[] = {"libnccl.so.2", "libnccl.so", NULL};

static const char *const nccl_symbols[] = {
#define WEFT_NCCL_API_NAME_(name) #name,
    WEFT_NCCL_FUNCTIONS(WEFT_NCCL_API_NAME_)
#undef WEFT_NCCL_API_NAME_
    NULL};

static weft_dl_library_t nccl_library = WEFT_DL_LIBRARY_INIT;

weft_status_t weft_nccl_api_load(const char **why)
{
    return weft_dl_load_once(&nccl_library, nccl_names, WEFT_NCCL_LIBDIRS, nccl_symbols, &weft_nccl_api,
                             sizeof(weft_nccl_api), why);
}
