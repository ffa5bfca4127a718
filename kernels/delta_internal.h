/*
 * The host delta encoder with the new bytes' checksum already known: a
 * registry version stores each tensor's checksum at publish, so a server
 * encoding from it need not sum the tensor again (the sum is a fifth of
 * an encode's time on the host). The delta carries `checksum` as given:
 * a consumer compares what applying gave with it, so a wrong one is
 * caught there, never trusted. Otherwise weft_delta_encode_host's
 * contract. Internal.
 */
#ifndef WEFT_KERNELS_DELTA_INTERNAL_H
#define WEFT_KERNELS_DELTA_INTERNAL_H

#include <stdint.h>
#include <weft/delta.h>

weft_status_t weft_delta_encode_host_summed(const void *old_data, const void *new_data, uint64_t bytes, void *out,
                                            uint64_t out_capacity, uint64_t *out_bytes, uint64_t checksum);

#endif
