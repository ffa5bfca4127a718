/* The verifiable payload behind weft-perf stress. */
#include "pattern.h"

#include <string.h>

#define STEP UINT64_C(0x9e3779b97f4a7c15) /* odd: i × STEP is a bijection */

/* splitmix64's finalizer: a bijection of 64-bit words. */
static uint64_t mix(uint64_t x)
{
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

static uint64_t seed(uint64_t version, uint32_t tensor)
{
    return mix(mix(version) ^ tensor);
}

void perf_pattern_fill(void *data, uint64_t bytes, uint64_t version, uint32_t tensor)
{
    uint64_t  words = bytes / 8, base = seed(version, tensor);
    uint64_t *word = data;

    for (uint64_t i = 0; i < words; i++) {
        word[i] = base + i * STEP;
    }
    if (bytes % 8 != 0) {
        uint64_t last = base + words * STEP;

        memcpy((char *)data + words * 8, &last, bytes % 8);
    }
}

uint64_t perf_pattern_check(const void *data, uint64_t bytes, uint64_t version, uint32_t tensor)
{
    uint64_t        words = bytes / 8, base = seed(version, tensor);
    const uint64_t *word = data;

    for (uint64_t i = 0; i < words; i++) {
        if (word[i] != base + i * STEP) {
            uint64_t expected = base + i * STEP;

            for (unsigned b = 0; b < 8; b++) {
                if (((const unsigned char *)&word[i])[b] != ((const unsigned char *)&expected)[b]) {
                    return i * 8 + b;
                }
            }
        }
    }
    if (bytes % 8 != 0) {
        uint64_t             last = base + words * STEP;
        const unsigned char *tail = (const unsigned char *)data + words * 8;

        for (unsigned b = 0; b < bytes % 8; b++) {
            if (tail[b] != ((const unsigned char *)&last)[b]) {
                return words * 8 + b;
            }
        }
    }
    return bytes;
}
