/*
 * weft-perf: the payload of one tensor of one version. Word i of tensor t
 * of version v is seed(v, t) + i × an odd constant, seed a bijective mix:
 * within a tensor, no word of one version equals the same word of another,
 * so a byte left from another version (a torn read) is always seen.
 */
#ifndef WEFT_PERF_PATTERN_H
#define WEFT_PERF_PATTERN_H

#include <stdint.h>

/* Writes the payload of tensor `tensor` of `version` over bytes bytes
 * (any count: a tail shorter than a word gets the word's first bytes). */
void perf_pattern_fill(void *data, uint64_t bytes, uint64_t version, uint32_t tensor);

/* Offset of the first byte that differs from the payload; bytes when
 * every byte matches. */
uint64_t perf_pattern_check(const void *data, uint64_t bytes, uint64_t version, uint32_t tensor);

#endif
