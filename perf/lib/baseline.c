/* weft-perf's baselines behind one interface: see baseline.h. */
#include "config.h"

#include "baseline.h"

#include "stats.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int perf_baseline_run(const perf_baseline_t *b, void *arg, uint64_t bytes, perf_baseline_result_t *r)
{
    int rc;

    memset(r, 0, sizeof(*r));
    r->what = b->name;
    r->bytes = bytes;
    r->seconds = r->gbps = NAN;
    rc = b->run(arg, r);
    if (rc != 0) {
        r->seconds = r->gbps = NAN;
        return rc;
    }
    /* One figure, in the unit each printer wants. */
    if (isnan(r->gbps)) {
        r->gbps = perf_gbps(r->bytes, r->seconds);
    } else if (isnan(r->seconds) && r->gbps > 0) {
        r->seconds = (double)r->bytes / (r->gbps * 1e9);
    }
    return 0;
}

void perf_baseline_note(perf_baseline_result_t *r, const char *fmt, ...)
{
    size_t  used = strlen(r->note);
    va_list ap;

    if (used + 2 >= sizeof(r->note)) {
        return;
    }
    if (used > 0) {
        snprintf(r->note + used, sizeof(r->note) - used, "; ");
        used += 2;
    }
    va_start(ap, fmt);
    vsnprintf(r->note + used, sizeof(r->note) - used, fmt, ap);
    va_end(ap);
}

void perf_baseline_note_to(const perf_baseline_result_t *r, char *dst, size_t size)
{
    const size_t len = strnlen(r->note, size - 1);

    memcpy(dst, r->note, len);
    dst[len] = '\0';
}
