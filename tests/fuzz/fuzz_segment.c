/*
 * libFuzzer target: arbitrary bytes as a registry segment. The validator
 * must refuse what is wrong with an error, never crash or read out of
 * bounds (AddressSanitizer watches), and accept only what is consistent.
 *
 *   clang -fsanitize=fuzzer,address,undefined ... (see .ci/fuzz)
 */
#include "registry/validate.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reg_geometry_t geo;
    char           reason[256];
    /* A segment is page aligned; an exact-size copy keeps ASan's bounds. */
    uint8_t       *segment = aligned_alloc(64, (size + 63) & ~(size_t)63);

    if (segment == NULL) {
        return 0;
    }
    memcpy(segment, data, size);
    if (weft_registry_validate(segment, size, &geo, reason, sizeof(reason)) == WEFT_OK) {
        /* What passed must describe a segment that fits in what was given. */
        if (geo.data_offset + (uint64_t)geo.slot_count * geo.slot_stride > size ||
            geo.tensor_count > geo.tensor_capacity) {
            abort();
        }
    } else if (reason[0] == '\0') {
        abort(); /* a refusal always says why */
    }
    free(segment);
    return 0;
}
