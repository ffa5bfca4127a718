/* libibverbs in a library built without it: its descriptor says so
 * (core/catalog.c). */
#include "config.h"

#include "transport/core/desc.h"

const weft_transport_desc_t weft_verbs_desc = {
    .backend    = WEFT_BACKEND_VERBS,
    .name       = "verbs",
    .dependency = "libibverbs",
};
