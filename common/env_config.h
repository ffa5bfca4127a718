/*
 * The typed readers of the WEFT_* variables (env_table.h holds the table and
 * the values in force): a value that does not parse is logged with the
 * variable's name. Internal.
 */
#ifndef WEFT_COMMON_ENV_CONFIG_H
#define WEFT_COMMON_ENV_CONFIG_H

#include "env_table.h"

#include <weft/weft.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The value in force for a variable: the environment's when set (even to
 * ""), else the default. Never NULL; valid until the process exits.
 * The first call of any weft_config_* reader also warns, once, about
 * WEFT_* variables that are not in the table.
 */
const char *weft_config_value(weft_config_id_t id);

/* 1 when the environment sets the variable. */
int weft_config_is_set(weft_config_id_t id);

/*
 * Typed readers. Each parses the value in force; a value that does not
 * parse or lies outside [min, max] is logged with the variable's name and
 * gives WEFT_ERR_INVALID_PARAM, *out untouched.
 */
weft_status_t weft_config_long(weft_config_id_t id, long min, long max, long *out);

/* 1/0 from y, yes, on, true, 1 / n, no, off, false, 0 (any case). */
weft_status_t weft_config_bool(weft_config_id_t id, int *out);

/* Bytes, with an optional K, M, G or T suffix (powers of 1024). */
weft_status_t weft_config_size(weft_config_id_t id, uint64_t *out);

/* The parsers behind the typed readers; also used for command-line values. */
weft_status_t weft_parse_long(const char *text, long min, long max, long *out);
weft_status_t weft_parse_bool(const char *text, int *out);
weft_status_t weft_parse_size(const char *text, uint64_t *out);

/*
 * Whether the value in force of variable `id` is one its table entry
 * accepts: WEFT_OK, or WEFT_ERR_INVALID_PARAM with what is accepted in
 * why[why_size] (nothing logged). Behind weft_config_check().
 */
weft_status_t weft_config_check_id(weft_config_id_t id, char *why, size_t why_size);

/* WEFT_VERIFY, read once: an unknown value is logged and read as the
 * default, transfers. */
typedef enum weft_verify_mode {
    WEFT_VERIFY_NONE = 0,
    WEFT_VERIFY_TRANSFERS = 1,
    WEFT_VERIFY_ALL = 2
} weft_verify_mode_t;
weft_verify_mode_t weft_verify_mode(void);

#ifdef __cplusplus
}
#endif

#endif
