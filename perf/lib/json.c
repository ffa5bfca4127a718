/* A JSON writer just large enough for weft-perf's flat result objects,
 * and the reader of its peers' one-line answers. */
#include "json.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_string(FILE *out, const char *text)
{
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)text; *c != '\0'; c++) {
        if (*c == '"' || *c == '\\') {
            fprintf(out, "\\%c", *c);
        } else if (*c < 0x20) {
            fprintf(out, "\\u%04x", *c);
        } else {
            fputc(*c, out);
        }
    }
    fputc('"', out);
}

static void put_key(perf_json_t *json, const char *key)
{
    fputs(json->fields++ > 0 ? ", " : "", json->out);
    put_string(json->out, key);
    fputs(": ", json->out);
}

void perf_json_begin(perf_json_t *json, FILE *out)
{
    json->out = out;
    json->fields = 0;
    fputc('{', out);
}

void perf_json_str(perf_json_t *json, const char *key, const char *value)
{
    put_key(json, key);
    put_string(json->out, value);
}

void perf_json_uint(perf_json_t *json, const char *key, uint64_t value)
{
    put_key(json, key);
    fprintf(json->out, "%" PRIu64, value);
}

void perf_json_int(perf_json_t *json, const char *key, int64_t value)
{
    put_key(json, key);
    fprintf(json->out, "%" PRId64, value);
}

void perf_json_double(perf_json_t *json, const char *key, double value)
{
    put_key(json, key);
    if (isfinite(value)) {
        fprintf(json->out, "%.3f", value);
    } else {
        fputs("null", json->out);
    }
}

void perf_json_bool(perf_json_t *json, const char *key, int value)
{
    put_key(json, key);
    fputs(value ? "true" : "false", json->out);
}

void perf_json_end(perf_json_t *json)
{
    fputs("}\n", json->out);
}

void perf_json_number_g(perf_json_t *json, const char *key, double value)
{
    fprintf(json->out, "%s\"%s\": ", json->fields++ > 0 ? ", " : "", key);
    if (isfinite(value)) {
        fprintf(json->out, "%.6g", value);
    } else {
        fputs("null", json->out);
    }
}

/* The number after "key": in a JSON line; NaN when absent or null. */
double perf_json_find_number(const char *line, const char *key)
{
    char        pat[64], *end;
    const char *p;
    double      value;

    snprintf(pat, sizeof(pat), "\"%s\":", key);
    p = strstr(line, pat);
    if (p == NULL) {
        return NAN;
    }
    value = strtod(p + strlen(pat), &end);
    return end == p + strlen(pat) ? NAN : value;
}

/* The string after "key": in a JSON line (escapes kept); 0 when found. */
int perf_json_find_string(const char *line, const char *key, char *buf, size_t size)
{
    char        pat[64];
    const char *p;
    size_t      n = 0;

    snprintf(pat, sizeof(pat), "\"%s\":", key);
    p = strstr(line, pat);
    if (p == NULL) {
        return -1;
    }
    p += strlen(pat);
    p += strspn(p, " ");
    if (*p++ != '"') {
        return -1;
    }
    for (; p[n] != '\0' && p[n] != '"'; n++) {
        if (p[n] == '\\' && p[n + 1] != '\0') {
            n++;
        }
    }
    snprintf(buf, size, "%.*s", (int)n, p);
    return 0;
}
