/*
 * Validation of a registry segment read from shared memory. Nothing in a
 * segment is trusted: a corrupt, truncated, foreign or hostile segment is
 * refused with a reason, never read out of bounds. Internal.
 */
#ifndef WEFT_REGISTRY_VALIDATE_H
#define WEFT_REGISTRY_VALIDATE_H

#include "layout.h"

#include <stddef.h>
#include <weft/weft.h>

/* The geometry of a segment that passed validation. */
typedef struct reg_geometry {
    uint32_t slot_count;
    uint32_t tensor_count;
    uint32_t tensor_capacity;
    uint32_t lease_capacity;
    uint32_t consumer_capacity;
    uint64_t tensor_table_offset;
    uint64_t slot_table_offset;
    uint64_t lease_table_offset;
    uint64_t consumer_table_offset;
    uint64_t data_offset;
    uint64_t slot_stride;
    uint64_t slot_bytes;
    uint64_t segment_size;
    uint32_t memory;             /* REG_MEMORY_HOST or REG_MEMORY_CUDA */
    uint32_t arena_count;        /* GPU registries: slot_count */
    uint64_t arena_table_offset;
    uint8_t  device_uuid[16];
    uint32_t checksums;             /* REG_CHECKSUMS_* (1.3) */
    uint64_t checksum_table_offset; /* 0: no checksums */
} reg_geometry_t;

/*
 * Validates the size bytes at segment: header, tables, every tensor
 * record (name, role, dtype, shape, strides, bytes, offset; no overlap, no
 * duplicate name) and the slot words. Returns WEFT_OK and fills *geometry,
 * or WEFT_ERR_CORRUPT / WEFT_ERR_VERSION / WEFT_ERR_STATE (being created:
 * its header's state still 0; or not sealed)
 * with the reason in reason[reason_size]. Reads segment with plain loads:
 * the caller copies what it keeps (another process may change it).
 */
weft_status_t weft_registry_validate(const void *segment, size_t size, reg_geometry_t *geometry,
                                     char *reason, size_t reason_size);

/*
 * Checks one tensor record (also used when declaring). Returns WEFT_OK or
 * WEFT_ERR_INVALID_PARAM with the reason.
 */
weft_status_t weft_registry_check_tensor(const reg_tensor_t *tensor, char *reason, size_t reason_size);

/* The span in bytes of a tensor's elements, or 0 on overflow or bad input. */
uint64_t weft_tensor_span_bytes(uint32_t ndim, const uint64_t *shape, const uint64_t *strides,
                                size_t element_size);

/* 1 when no two elements of the layout share memory. */
int weft_tensor_strides_disjoint(uint32_t ndim, const uint64_t *shape, const uint64_t *strides);

/* 1 when name is a valid tensor name: 1..127 printable ASCII, no space. */
int weft_tensor_name_valid(const char *name, size_t max);

/* 1 when name is a registry name: [A-Za-z0-9._-], 1 to 63 bytes, not "."
 * or "..". */
int weft_registry_name_valid(const char *name);

#endif
