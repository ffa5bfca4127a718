/* The typed readers of the WEFT_* variables, the check of their values and
 * the public configuration calls; above the logger (env_config.h). */
#include "env_config.h"

#include "compiler.h"
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static pthread_once_t config_warn_once = PTHREAD_ONCE_INIT;

static void config_warn_unknown(void)
{
    const char *unknown = weft_env_unknown();

    if (unknown != NULL) {
        weft_log_warn("unknown environment variable(s) ignored: %s (weft-perf info lists the known ones)",
                      unknown);
    }
}

const char *weft_config_value(weft_config_id_t id)
{
    const char *value = weft_config_value_quiet(id);

    pthread_once(&config_warn_once, config_warn_unknown);
    return value;
}

int weft_config_is_set(weft_config_id_t id)
{
    (void)weft_config_value(id);
    return weft_env_is_set(id);
}

static weft_status_t config_parse_failed(weft_config_id_t id, const char *what)
{
    weft_log_error("%s=\"%s\" is not %s; unset it or give a valid value", weft_env_entry(id)->name,
                   weft_config_value_quiet(id), what);
    return WEFT_ERR_INVALID_PARAM;
}

weft_status_t weft_parse_long(const char *text, long min, long max, long *out)
{
    char *end;
    long  value;

    if (text == NULL || *text == '\0' || isspace((unsigned char)*text)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    errno = 0;
    value = strtol(text, &end, 0);
    if (errno != 0 || *end != '\0' || value < min || value > max) {
        return WEFT_ERR_INVALID_PARAM;
    }
    *out = value;
    return WEFT_OK;
}

weft_status_t weft_parse_bool(const char *text, int *out)
{
    static const char *const yes[] = {"1", "y", "yes", "on", "true"};
    static const char *const no[] = {"0", "n", "no", "off", "false"};

    if (text == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    for (size_t i = 0; i < WEFT_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out = 1;
            return WEFT_OK;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out = 0;
            return WEFT_OK;
        }
    }
    return WEFT_ERR_INVALID_PARAM;
}

weft_status_t weft_parse_size(const char *text, uint64_t *out)
{
    unsigned long long value;
    unsigned           shift = 0;
    char              *end;

    if (text == NULL || !isdigit((unsigned char)*text)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    errno = 0;
    value = strtoull(text, &end, 10);
    if (errno != 0) {
        return WEFT_ERR_INVALID_PARAM;
    }
    switch (toupper((unsigned char)*end)) {
    case '\0':
        break;
    case 'K':
        shift = 10;
        break;
    case 'M':
        shift = 20;
        break;
    case 'G':
        shift = 30;
        break;
    case 'T':
        shift = 40;
        break;
    default:
        return WEFT_ERR_INVALID_PARAM;
    }
    if (*end != '\0') {
        end++;
        /* Accept "64K", "64KB" and "64KiB". */
        if (strcasecmp(end, "b") == 0 || strcasecmp(end, "ib") == 0) {
            end += strlen(end);
        }
        if (*end != '\0') {
            return WEFT_ERR_INVALID_PARAM;
        }
    }
    if (shift > 0 && value > (UINT64_MAX >> shift)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    *out = (uint64_t)value << shift;
    return WEFT_OK;
}

weft_status_t weft_config_long(weft_config_id_t id, long min, long max, long *out)
{
    char what[96];

    if (weft_env_entry(id) == NULL || out == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (weft_parse_long(weft_config_value(id), min, max, out) != WEFT_OK) {
        snprintf(what, sizeof(what), "an integer in [%ld, %ld]", min, max);
        return config_parse_failed(id, what);
    }
    return WEFT_OK;
}

weft_status_t weft_config_bool(weft_config_id_t id, int *out)
{
    if (weft_env_entry(id) == NULL || out == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (weft_parse_bool(weft_config_value(id), out) != WEFT_OK) {
        return config_parse_failed(id, "a boolean (yes/no, on/off, true/false, 1/0)");
    }
    return WEFT_OK;
}

weft_status_t weft_config_size(weft_config_id_t id, uint64_t *out)
{
    if (weft_env_entry(id) == NULL || out == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (weft_parse_size(weft_config_value(id), out) != WEFT_OK) {
        return config_parse_failed(id, "a size in bytes (suffixes K, M, G, T)");
    }
    return WEFT_OK;
}

WEFT_API size_t weft_config_count(void)
{
    return WEFT_CONFIG_COUNT;
}

WEFT_API weft_status_t weft_config_describe(size_t index, weft_config_var_t *var)
{
    if (index >= WEFT_CONFIG_COUNT || var == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    const weft_env_entry_t *entry = weft_env_entry((weft_config_id_t)index);

    var->name = entry->name;
    var->module = entry->module;
    var->default_value = entry->default_value;
    var->help = entry->help;
    var->value = weft_config_value((weft_config_id_t)index);
    var->is_set = weft_env_is_set((weft_config_id_t)index);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_config_check(size_t index, char *why, size_t why_size)
{
    if (index >= WEFT_CONFIG_COUNT) {
        return WEFT_ERR_INVALID_PARAM;
    }
    return weft_config_check_id((weft_config_id_t)index, why, why_size);
}

weft_verify_mode_t weft_verify_mode(void)
{
    static int mode = -1; /* read once: the setting does not change */

    if (__atomic_load_n(&mode, __ATOMIC_RELAXED) < 0) {
        const char *value = weft_config_value(WEFT_CONFIG_VERIFY);
        int         m = WEFT_VERIFY_TRANSFERS;

        if (strcasecmp(value, "none") == 0) {
            m = WEFT_VERIFY_NONE;
        } else if (strcasecmp(value, "all") == 0) {
            m = WEFT_VERIFY_ALL;
        } else if (strcasecmp(value, "transfers") != 0) {
            weft_log_warn("WEFT_VERIFY=%s: none, transfers or all; taken as transfers", value);
        }
        __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
    }
    return (weft_verify_mode_t)__atomic_load_n(&mode, __ATOMIC_RELAXED);
}

/* 1 when value is one of the comma-separated words (any case). */
static int config_word_in(const char *value, const char *words, size_t words_len)
{
    const char *w = words, *end = words + words_len;

    while (w < end) {
        const char  *comma = memchr(w, ',', (size_t)(end - w));
        const size_t len = comma ? (size_t)(comma - w) : (size_t)(end - w);

        if (strlen(value) == len && strncasecmp(value, w, len) == 0) {
            return 1;
        }
        w += len + 1;
    }
    return 0;
}

/* 1 when value satisfies one alternative of the spec ("kind:args"). */
static int config_accepts(const char *value, const char *alt, size_t len)
{
    char        args[64];
    const char *colon = memchr(alt, ':', len);
    const size_t kind = colon ? (size_t)(colon - alt) : len;

    if (kind == 3 && strncmp(alt, "any", 3) == 0) {
        return 1;
    }
    if (colon == NULL || len - kind - 1 >= sizeof(args)) {
        return 0;
    }
    memcpy(args, colon + 1, len - kind - 1);
    args[len - kind - 1] = '\0';
    if (kind == 5 && strncmp(alt, "words", 5) == 0) {
        return config_word_in(value, args, strlen(args));
    }
    if (kind == 4 && strncmp(alt, "long", 4) == 0) {
        long min = 0, max = 0, v;
        return sscanf(args, "%ld:%ld", &min, &max) == 2 && weft_parse_long(value, min, max, &v) == WEFT_OK;
    }
    if (kind == 4 && strncmp(alt, "size", 4) == 0) {
        unsigned long long min = 0, max = UINT64_MAX;
        uint64_t           v;
        const int          fields = sscanf(args, "%llu:%llu", &min, &max);
        return fields >= 1 && weft_parse_size(value, &v) == WEFT_OK && v >= min && v <= max;
    }
    return 0;
}

weft_status_t weft_config_check_id(weft_config_id_t id, char *why, size_t why_size)
{
    const char *value, *spec, *alt;

    if (weft_env_entry(id) == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    value = weft_config_value_quiet(id);
    spec  = weft_env_entry(id)->accepted;
    for (alt = spec; *alt != '\0';) {
        const char  *bar = strchr(alt, '|');
        const size_t len = bar ? (size_t)(bar - alt) : strlen(alt);

        if (config_accepts(value, alt, len)) {
            return WEFT_OK;
        }
        alt += len + (bar ? 1 : 0);
    }
    if (why != NULL && why_size > 0) {
        snprintf(why, why_size, "\"%s\" is not accepted (%s)", value, spec);
    }
    return WEFT_ERR_INVALID_PARAM;
}
