/*
 * Which of a registry's WT tensors their W's delta can patch, transposed
 * (<weft/delta.h>'s transposed targets; docs/protocol.md, "Delta
 * versions on the wire"): libweft's FP8 writer lays WT out as W's bytes
 * transposed, so where both are in the registry a server sends W's delta
 * once for the two. Only the declarations decide here (roles, layer,
 * expert, shapes); whether the bytes really are transposed is checked by
 * the consumer against WT's own checksum. On the server's thread.
 * Internal.
 */
#ifndef WEFT_TRANSPORT_SERVER_DELTA_PAIRS_H
#define WEFT_TRANSPORT_SERVER_DELTA_PAIRS_H

#include <stdint.h>
#include <weft/registry.h>

/*
 * For each of reg's `count` tensors: pair[t] is the index of t's W when t
 * is a WT whose layer and expert hold exactly one W and one WT, the W
 * declared first (its delta is made before the WT comes), both dense in
 * the registry (dense[], as the delta cache found them) and FP8 bytes of
 * transposed shapes ([..., N, K] and [..., K, N]); then rows[t] = N and
 * cols[t] = K. pair[t] is -1 otherwise. A registry error as it came.
 */
weft_status_t weft_delta_pairs_find(weft_registry_h reg, const uint8_t *dense, uint32_t count, int32_t *pair,
                                    uint64_t *rows, uint64_t *cols);

#endif
