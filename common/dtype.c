/* Element types: sizes and names. */
#include <weft/weft.h>

#include "compiler.h"

#include <string.h>

static const struct {
    const char *name;
    size_t      size;
} dtype_table[] = {
    [WEFT_DTYPE_INVALID]  = {"invalid", 0},
    [WEFT_DTYPE_FP32]     = {"fp32", 4},
    [WEFT_DTYPE_BF16]     = {"bf16", 2},
    [WEFT_DTYPE_FP16]     = {"fp16", 2},
    [WEFT_DTYPE_FP8_E4M3] = {"fp8_e4m3", 1},
    [WEFT_DTYPE_FP8_E5M2] = {"fp8_e5m2", 1},
    [WEFT_DTYPE_UE8M0]    = {"ue8m0", 1},
    [WEFT_DTYPE_UINT8]    = {"uint8", 1},
    [WEFT_DTYPE_INT32]    = {"int32", 4},
    [WEFT_DTYPE_INT64]    = {"int64", 8},
};

_Static_assert(WEFT_ARRAY_SIZE(dtype_table) == WEFT_DTYPE_LAST, "every dtype needs a table entry");

static int dtype_valid(weft_dtype_t dtype)
{
    return (unsigned)dtype > WEFT_DTYPE_INVALID && (unsigned)dtype < WEFT_DTYPE_LAST;
}

WEFT_API size_t weft_dtype_size(weft_dtype_t dtype)
{
    return dtype_valid(dtype) ? dtype_table[dtype].size : 0;
}

WEFT_API const char *weft_dtype_name(weft_dtype_t dtype)
{
    return dtype_valid(dtype) ? dtype_table[dtype].name : dtype_table[WEFT_DTYPE_INVALID].name;
}

WEFT_API weft_status_t weft_dtype_from_name(const char *name, weft_dtype_t *dtype)
{
    if (name == NULL || dtype == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    for (unsigned i = WEFT_DTYPE_INVALID + 1; i < WEFT_DTYPE_LAST; i++) {
        if (strcmp(name, dtype_table[i].name) == 0) {
            *dtype = (weft_dtype_t)i;
            return WEFT_OK;
        }
    }
    return WEFT_ERR_INVALID_PARAM;
}
