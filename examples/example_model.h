/*
 * The model the producer and consumer examples share: one MoE layer of
 * EXPERTS experts, each with gate (w1) and up (w3) projections of
 * [INTER, HIDDEN], published as FP8 W and block scales (no WT), and the
 * FP32 master of version v that a real trainer's optimizer would produce.
 */
#ifndef WEFT_EXAMPLE_MODEL_H
#define WEFT_EXAMPLE_MODEL_H

#include <stdio.h>
#include <weft/weft.h>

#define EXPERTS 4
#define INTER   256
#define HIDDEN  512
#define BLOCK   128

#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        weft_status_t s_ = (call);                                                                                     \
        if (s_ != WEFT_OK) {                                                                                           \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, weft_status_string(s_));                     \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

/* "L0.experts.<e>.<proj>.weight" or ".weight_scale_inv" into buf. */
static inline const char *tensor_name(char *buf, size_t size, int expert, int proj, int scale)
{
    snprintf(buf, size, "L0.experts.%d.%s.%s", expert, proj == 0 ? "w1" : "w3",
             scale ? "weight_scale_inv" : "weight");
    return buf;
}

/* Element i of expert e's projection proj at version v. */
static inline float master_at(uint64_t v, int e, int proj, uint64_t i)
{
    const uint64_t h = (i + 1) * 2654435761u ^ (uint64_t)(e * 2 + proj) * 40503u ^ v * 97u;
    return (float)(h % 2001 - 1000) * 1e-5f * (float)(1 + v % 3);
}

#endif
