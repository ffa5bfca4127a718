/*
 * weft-perf's result columns, nccl-tests' habit: one table of column specs
 * (JSON key, table header with its unit, width, decimals) prints the
 * table's '#' header line, its rows and the --json fields, so that the
 * table and the JSON cannot drift apart. A column may be the table's only
 * (no key) or the JSON's only (no header); the JSON fields come in the
 * table's order.
 */
#ifndef WEFT_PERF_LIB_COLUMNS_H
#define WEFT_PERF_LIB_COLUMNS_H

#include "json.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum perf_column_type {
    PERF_COLUMN_UINT,   /* cell.u */
    PERF_COLUMN_DOUBLE, /* cell.d: the table with `decimals`, the JSON with perf_json_double; NaN as "-", null */
    PERF_COLUMN_TEXT,   /* cell.text */
    PERF_COLUMN_INT,    /* cell.i */
    PERF_COLUMN_BOOL,   /* cell.u != 0: the table's "yes" or "NO", the JSON's true or false */
    PERF_COLUMN_G,      /* cell.d: the table with %.<decimals>g, the JSON with perf_json_number_g (small errors) */
} perf_column_type_t;

typedef struct perf_column {
    const char        *key;    /* the --json key; NULL: the table's only */
    const char        *header; /* the table's header, unit included ("verified_GB_per_s"); NULL: the JSON's only */
    int                width;  /* in the table; negative: left-aligned */
    int                decimals;
    perf_column_type_t type;
} perf_column_t;

/* One row's value of a column, as its type says; null: none (the table's
 * "-", the JSON's null), whatever the type. */
typedef struct perf_cell {
    uint64_t    u;
    int64_t     i;
    int         null;
    double      d;
    const char *text;
} perf_cell_t;

/* `lead` (a "# ", say), then the headers of the table's columns, one space
 * apart; no end of line, for the caller's last words. */
void perf_columns_header(FILE *out, const char *lead, const perf_column_t *columns, size_t n);

/* The same for one row's cells. */
void perf_columns_row(FILE *out, const char *lead, const perf_column_t *columns, size_t n,
                      const perf_cell_t *cells);

/* The JSON fields of one row's cells, each key after `prefix` ("futex_":
 * one object holding several rows; "" for one row). */
void perf_columns_json(perf_json_t *json, const char *prefix, const perf_column_t *columns, size_t n,
                       const perf_cell_t *cells);

#endif
