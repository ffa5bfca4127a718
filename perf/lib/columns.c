/* weft-perf's result columns: see columns.h. */
#include "columns.h"

#include "stats.h"

#include <inttypes.h>
#include <math.h>

void perf_columns_header(FILE *out, const char *lead, const perf_column_t *columns, size_t n)
{
    const char *sep = "";

    fputs(lead, out);
    for (size_t i = 0; i < n; i++) {
        if (columns[i].header != NULL) {
            fprintf(out, "%s%*s", sep, columns[i].width, columns[i].header);
            sep = " ";
        }
    }
}

void perf_columns_row(FILE *out, const char *lead, const perf_column_t *columns, size_t n,
                      const perf_cell_t *cells)
{
    const char *sep = "";

    fputs(lead, out);
    for (size_t i = 0; i < n; i++) {
        const perf_column_t *c = &columns[i];
        char                 num[64];

        if (c->header == NULL) {
            continue;
        }
        if (cells[i].null) {
            fprintf(out, "%s%*s", sep, c->width, "-");
            sep = " ";
            continue;
        }
        switch (c->type) {
        case PERF_COLUMN_UINT: fprintf(out, "%s%*" PRIu64, sep, c->width, cells[i].u); break;
        case PERF_COLUMN_DOUBLE:
            fprintf(out, "%s%*s", sep, c->width, perf_num(num, sizeof(num), cells[i].d, c->decimals));
            break;
        case PERF_COLUMN_TEXT: fprintf(out, "%s%*s", sep, c->width, cells[i].text); break;
        case PERF_COLUMN_INT: fprintf(out, "%s%*" PRId64, sep, c->width, cells[i].i); break;
        case PERF_COLUMN_BOOL: fprintf(out, "%s%*s", sep, c->width, cells[i].u ? "yes" : "NO"); break;
        case PERF_COLUMN_G: fprintf(out, "%s%*.*g", sep, c->width, c->decimals, cells[i].d); break;
        }
        sep = " ";
    }
}

void perf_columns_json(perf_json_t *json, const char *prefix, const perf_column_t *columns, size_t n,
                       const perf_cell_t *cells)
{
    for (size_t i = 0; i < n; i++) {
        const perf_column_t *c = &columns[i];
        char                 key[128];

        if (c->key == NULL) {
            continue;
        }
        snprintf(key, sizeof(key), "%s%s", prefix, c->key);
        if (cells[i].null) {
            perf_json_number_g(json, key, NAN);
            continue;
        }
        switch (c->type) {
        case PERF_COLUMN_UINT: perf_json_uint(json, key, cells[i].u); break;
        case PERF_COLUMN_DOUBLE: perf_json_double(json, key, cells[i].d); break;
        case PERF_COLUMN_TEXT: perf_json_str(json, key, cells[i].text); break;
        case PERF_COLUMN_INT: perf_json_int(json, key, cells[i].i); break;
        case PERF_COLUMN_BOOL: perf_json_bool(json, key, cells[i].u != 0); break;
        case PERF_COLUMN_G: perf_json_number_g(json, key, cells[i].d); break;
        }
    }
}
