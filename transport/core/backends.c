/* weft_backend_query: which backends were built, and what each finds (the
 * probe of its descriptor, core/catalog.h). */
#include "config.h"

#include "common/text.h"
#include "transport/core/catalog.h"

#include <string.h>

WEFT_API weft_status_t weft_backend_query(weft_backend_t backend, weft_backend_info_t *info)
{
    const weft_transport_desc_t *desc = weft_catalog_backend(backend);

    if (desc == NULL || info == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    memset(info, 0, sizeof(*info));
    info->name = desc->name;
    if (!desc->compiled || desc->probe == NULL) {
        weft_text_append(info->detail, sizeof(info->detail), "not compiled in\n");
        return WEFT_OK;
    }
    info->compiled = 1;
    desc->probe(info);
    return WEFT_OK;
}
