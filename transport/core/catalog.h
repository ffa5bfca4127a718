/*
 * The catalog of backends: the one place that names them (catalog.c).
 * Lookups by backend (weft_backend_query) and by transport (plans,
 * servers, remote consumers). Internal.
 */
#ifndef WEFT_TRANSPORT_CORE_CATALOG_H
#define WEFT_TRANSPORT_CORE_CATALOG_H

#include "transport/core/desc.h"

/* The descriptor of a backend; NULL for an unknown one. Never NULL for
 * 0 <= backend < WEFT_BACKEND_LAST: a backend not built in has its
 * stand-in, compiled = 0. */
const weft_transport_desc_t *weft_catalog_backend(weft_backend_t backend);

/* The descriptor of the backend that provides a transport; NULL for an
 * unknown transport. */
const weft_transport_desc_t *weft_catalog_transport(weft_transport_t transport);

#endif
