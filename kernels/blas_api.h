/*
 * cuBLAS and cuBLASLt, loaded at run time: libweft links neither (they
 * are the largest of CUDA's libraries), and only Muon on a GPU, which
 * needs their batched GEMMs, loads them, failing with the loader's reason
 * where they are missing. As transport/ucx/ucx_api.h does for UCX: their
 * own headers, each function Muon calls a pointer in weft_blas_api filled
 * by weft_blas_api_load(), and macros that route the calls of the file
 * that includes this (kernels/muon_cuda.cu) through it. Internal.
 */
#ifndef WEFT_KERNELS_BLAS_API_H
#define WEFT_KERNELS_BLAS_API_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <weft/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The symbols; cublas_v2.h's cublasCreate is cublasCreate_v2, and so on.
 * The two batched GEMMs have C++ overloads (a cudaDataType compute type):
 * their pointers are typed as the C functions, spelled out below. */
#define WEFT_BLAS_FUNCTIONS(X)                                                                    \
    X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2)
#define WEFT_BLAS_GEMMS(X) X(cublasGemmBatchedEx) X(cublasGemmStridedBatchedEx)

typedef cublasStatus_t (*weft_blas_gemm_batched_ex_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                                      int, int, const void *, const void *const[], cudaDataType,
                                                      int, const void *const[], cudaDataType, int, const void *,
                                                      void *const[], cudaDataType, int, int, cublasComputeType_t,
                                                      cublasGemmAlgo_t);
typedef cublasStatus_t (*weft_blas_gemm_strided_batched_ex_t)(cublasHandle_t, cublasOperation_t,
                                                              cublasOperation_t, int, int, int, const void *,
                                                              const void *, cudaDataType, int, long long int,
                                                              const void *, cudaDataType, int, long long int,
                                                              const void *, void *, cudaDataType, int,
                                                              long long int, int, cublasComputeType_t,
                                                              cublasGemmAlgo_t);
#ifndef __cplusplus
/* Spelled out right: the C functions' own types (checked before the
 * macros below rename them). */
_Static_assert(__builtin_types_compatible_p(weft_blas_gemm_batched_ex_t, __typeof__(&cublasGemmBatchedEx)),
               "cublasGemmBatchedEx's type");
_Static_assert(__builtin_types_compatible_p(weft_blas_gemm_strided_batched_ex_t,
                                            __typeof__(&cublasGemmStridedBatchedEx)),
               "cublasGemmStridedBatchedEx's type");
#endif
#define WEFT_BLASLT_FUNCTIONS(X)                                                                  \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic)      \
    X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)    \
    X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                          \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate)                         \
    X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)

/* Two tables, one a library: each is filled whole or not at all. */
typedef struct weft_blas_api {
#define WEFT_BLAS_API_SLOT_(name) __typeof__(name) *name;
    WEFT_BLAS_FUNCTIONS(WEFT_BLAS_API_SLOT_)
    /* In WEFT_BLAS_GEMMS's order. */
    weft_blas_gemm_batched_ex_t         cublasGemmBatchedEx;
    weft_blas_gemm_strided_batched_ex_t cublasGemmStridedBatchedEx;
} weft_blas_api_t;

typedef struct weft_blaslt_api {
    WEFT_BLASLT_FUNCTIONS(WEFT_BLAS_API_SLOT_)
#undef WEFT_BLAS_API_SLOT_
} weft_blaslt_api_t;

extern weft_blas_api_t   weft_blas_api;
extern weft_blaslt_api_t weft_blaslt_api;

/*
 * Loads libcublas and libcublasLt of the toolkit libweft was built with
 * once per process; later calls return the first one's result. WEFT_OK,
 * or WEFT_ERR_UNSUPPORTED with the loader's reason in *why (static; NULL
 * allowed). Thread-safe.
 */
weft_status_t weft_blas_api_load(const char **why);

#ifdef __cplusplus
}
#endif

/* From here on, the includer's cuBLAS calls go through the tables. */
#define cublasCreate_v2                      weft_blas_api.cublasCreate_v2
#define cublasDestroy_v2                     weft_blas_api.cublasDestroy_v2
#define cublasSetStream_v2                   weft_blas_api.cublasSetStream_v2
#define cublasGemmBatchedEx                  weft_blas_api.cublasGemmBatchedEx
#define cublasGemmStridedBatchedEx           weft_blas_api.cublasGemmStridedBatchedEx
#define cublasLtCreate                       weft_blaslt_api.cublasLtCreate
#define cublasLtDestroy                      weft_blaslt_api.cublasLtDestroy
#define cublasLtMatmul                       weft_blaslt_api.cublasLtMatmul
#define cublasLtMatmulAlgoGetHeuristic       weft_blaslt_api.cublasLtMatmulAlgoGetHeuristic
#define cublasLtMatmulDescCreate             weft_blaslt_api.cublasLtMatmulDescCreate
#define cublasLtMatmulDescDestroy            weft_blaslt_api.cublasLtMatmulDescDestroy
#define cublasLtMatmulDescSetAttribute       weft_blaslt_api.cublasLtMatmulDescSetAttribute
#define cublasLtMatmulPreferenceCreate       weft_blaslt_api.cublasLtMatmulPreferenceCreate
#define cublasLtMatmulPreferenceDestroy      weft_blaslt_api.cublasLtMatmulPreferenceDestroy
#define cublasLtMatmulPreferenceSetAttribute weft_blaslt_api.cublasLtMatmulPreferenceSetAttribute
#define cublasLtMatrixLayoutCreate           weft_blaslt_api.cublasLtMatrixLayoutCreate
#define cublasLtMatrixLayoutDestroy          weft_blaslt_api.cublasLtMatrixLayoutDestroy
#define cublasLtMatrixLayoutSetAttribute     weft_blaslt_api.cublasLtMatrixLayoutSetAttribute

#endif
