/* cuBLAS and cuBLASLt loaded at run time (blas_api.h). */
#include "config.h"

#include "common/dl.h"
#include "kernels/blas_api.h"

weft_blas_api_t   weft_blas_api;
weft_blaslt_api_t weft_blaslt_api;

#define WEFT_STR_(x) #x
#define WEFT_STR(x)  WEFT_STR_(x)

/* The toolkit's major version names the sonames (libcublas.so.13): the
 * headers libweft was built with are that version's. */
static const char *const blas_names[] = {"libcublas.so." WEFT_STR(CUBLAS_VER_MAJOR), "libcublas.so", NULL};
static const char *const blaslt_names[] = {"libcublasLt.so." WEFT_STR(CUBLAS_VER_MAJOR), "libcublasLt.so", NULL};

#define WEFT_BLAS_API_NAME_(name) #name,
static const char *const blas_symbols[] = {WEFT_BLAS_FUNCTIONS(WEFT_BLAS_API_NAME_)
                                               WEFT_BLAS_GEMMS(WEFT_BLAS_API_NAME_) NULL};
static const char *const blaslt_symbols[] = {WEFT_BLASLT_FUNCTIONS(WEFT_BLAS_API_NAME_) NULL};
#undef WEFT_BLAS_API_NAME_

static weft_dl_library_t blas_library = WEFT_DL_LIBRARY_INIT;
static weft_dl_library_t blaslt_library = WEFT_DL_LIBRARY_INIT;

weft_status_t weft_blas_api_load(const char **why)
{
    weft_status_t status = weft_dl_load_once(&blas_library, blas_names, WEFT_CUDA_LIBDIRS, blas_symbols,
                                             &weft_blas_api, sizeof(weft_blas_api), why);

    if (status == WEFT_OK) {
        status = weft_dl_load_once(&blaslt_library, blaslt_names, WEFT_CUDA_LIBDIRS, blaslt_symbols,
                                   &weft_blaslt_api, sizeof(weft_blaslt_api), why);
    }
    return status;
}
