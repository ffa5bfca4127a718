/* Where a remote consumer's views live: host, or one GPU. */
#include "config.h"

#include "transport/core/view_memory.h"

#include "common/gpu.h"
#include "common/log.h"

static weft_memory_kind_t view_kind(const weft_recv_view_t *view)
{
    return (view->field_mask & WEFT_RECV_VIEW_FIELD_MEMORY) ? view->memory : WEFT_MEMORY_HOST;
}

/* The GPU holding a device view's memory. */
static weft_status_t view_device(const weft_recv_view_t *view, size_t i, const char *who, int *device)
{
    weft_status_t status = weft_gpu_pointer_device(view->data, device);

    if (status == WEFT_ERR_INVALID_PARAM) {
        weft_log_error("%s: view %zu (\"%s\") at %p is not device memory of this process", who, i,
                       view->name != NULL ? view->name : "?", view->data);
    } else if (status == WEFT_ERR_UNSUPPORTED) {
        weft_log_error("%s: view %zu (\"%s\") is in device memory, but libweft was built without CUDA",
                       who, i, view->name != NULL ? view->name : "?");
    }
    return status;
}

weft_status_t weft_views_memory(const weft_recv_view_t *views, size_t count, const char *who,
                                weft_memory_kind_t *memory, int *device)
{
    weft_memory_kind_t kind = view_kind(&views[0]);
    int                gpu = -1;

    for (size_t i = 0; i < count; i++) {
        weft_memory_kind_t k = view_kind(&views[i]);
        int                dev;
        weft_status_t      status;

        if (k != WEFT_MEMORY_HOST && k != WEFT_MEMORY_CUDA) {
            weft_log_error("%s: view %zu (\"%s\"): unknown memory kind %d", who, i,
                           views[i].name != NULL ? views[i].name : "?", (int)k);
            return WEFT_ERR_INVALID_PARAM;
        }
        if (k != kind) {
            weft_log_error("%s: view %zu (\"%s\") is in %s memory, view 0 in %s memory: one "
                           "consumer's views are all host memory or all device memory",
                           who, i, views[i].name != NULL ? views[i].name : "?",
                           k == WEFT_MEMORY_CUDA ? "device" : "host",
                           kind == WEFT_MEMORY_CUDA ? "device" : "host");
            return WEFT_ERR_INVALID_PARAM;
        }
        if (k != WEFT_MEMORY_CUDA) {
            continue;
        }
        status = view_device(&views[i], i, who, &dev);
        if (status != WEFT_OK) {
            return status;
        }
        if (gpu >= 0 && dev != gpu) {
            weft_log_error("%s: view %zu is on GPU %d, earlier views on GPU %d: one consumer "
                           "receives into one GPU",
                           who, i, dev, gpu);
            return WEFT_ERR_INVALID_PARAM;
        }
        gpu = dev;
    }
    *memory = kind;
    *device = gpu;
    return WEFT_OK;
}
