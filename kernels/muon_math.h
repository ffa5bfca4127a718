/*
 * Muon's element-wise arithmetic, written once for the host reference and
 * the CUDA kernels with explicitly rounded operations (see adamw_math.h).
 * Internal.
 */
#ifndef WEFT_KERNELS_MUON_MATH_H
#define WEFT_KERNELS_MUON_MATH_H

#include "adamw_math.h"
#include "muon.h"

/* m = fma(1−β, g − m, m); u = nesterov ? fma(−(1−β), m − g, m) : m. */
WEFT_ADAMW_FN float weft_muon_momentum_element(const weft_muon_scalars_t *s, float *m, float g)
{
    const float mm = WEFT_FMA(s->one_minus_beta, WEFT_FSUB(g, *m), *m);

    *m = weft_canonical_nan(mm);
    return s->nesterov ? WEFT_FMA(-s->one_minus_beta, WEFT_FSUB(mm, g), mm) : mm;
}

/* θ = θ·decay (when there is one), then fma(−lr_scaled, x, θ). */
WEFT_ADAMW_FN float weft_muon_apply_element(const weft_muon_scalars_t *s, float theta, float x)
{
    if (s->has_decay) {
        theta = WEFT_FMUL(theta, s->decay);
    }
    return weft_canonical_nan(WEFT_FMA(-s->lr_scaled, x, theta));
}

#endif
