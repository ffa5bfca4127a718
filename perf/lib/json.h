/* weft-perf: one flat JSON object, written field by field (--json). */
#ifndef WEFT_PERF_JSON_H
#define WEFT_PERF_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct perf_json {
    FILE *out;
    int   fields; /* written so far: decides the comma */
} perf_json_t;

void perf_json_begin(perf_json_t *json, FILE *out);
void perf_json_str(perf_json_t *json, const char *key, const char *value);
void perf_json_uint(perf_json_t *json, const char *key, uint64_t value);
void perf_json_int(perf_json_t *json, const char *key, int64_t value);
/* NaN and infinities, which JSON lacks, are written as null. */
void perf_json_double(perf_json_t *json, const char *key, double value);
void perf_json_bool(perf_json_t *json, const char *key, int value);
/* A number with %.6g (seconds need more than perf_json_double's 3
 * decimals); NaN and infinities as null. */
void perf_json_number_g(perf_json_t *json, const char *key, double value);
/* Closes the object and ends the line. */
void perf_json_end(perf_json_t *json);

/* Reading a peer's JSON line (one flat object, as weft-perf writes them):
 * the number after "key": (NaN when absent or null), and the string after
 * it (escapes kept; 0 when found, -1 otherwise). */
double perf_json_find_number(const char *line, const char *key);
int    perf_json_find_string(const char *line, const char *key, char *buf, size_t size);

#endif
