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
    void          *segment = NULL;

    /* A segment is page aligned, and the validator reads its header and
     * tables through structs aligned to at most 64 bytes (reg_header_t's
     * _Alignas(64) fields; table offsets are checked relative to the
     * start). posix_memalign gives that alignment for any size, unlike
     * aligned_alloc (a multiple of 64 only), and ASan poisons from
     * segment + size on: a read one byte past the input is reported. */
    if (posix_memalign(&segment, 64, size) != 0 || segment == NULL) {
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
