/*
 * Run-time probes of the optional backends, one per backend, each built
 * only with its dependency. They fill a weft_backend_info_t whose name and
 * compiled fields are already set. Internal.
 */
#ifndef WEFT_TRANSPORT_PROBE_H
#define WEFT_TRANSPORT_PROBE_H

#include <weft/weft.h>

void weft_ucx_probe(weft_backend_info_t *info);
void weft_nccl_probe(weft_backend_info_t *info);
void weft_verbs_probe(weft_backend_info_t *info);

#endif
