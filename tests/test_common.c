/* common/: status codes, version, dtypes, WEFT_* configuration, logging. */
#include "config.h"

#include "common/env_config.h"
#include "common/log.h"
#include "common/pool.h"
#include "common/status.h"
#include "common/text.h"
#include "lib/harness.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

/*
 * Configuration is read once per process, so every test that sets WEFT_*
 * variables relies on running in its own forked process (CK_FORK, forced
 * in main), with the runner itself never reading them.
 */

static char log_path[256];

/* Points WEFT_LOG_FILE at a fresh file; returns its path. */
static const char *use_log_file(void)
{
    snprintf(log_path, sizeof(log_path), "/tmp/weft-test-common-%d.log", (int)getpid());
    unlink(log_path);
    setenv("WEFT_LOG_FILE", log_path, 1);
    return log_path;
}

/* The whole log file, NUL-terminated; "" when missing. Static buffer. */
static const char *read_log(void)
{
    static char buf[65536];
    FILE       *f = fopen(log_path, "r");
    size_t      n = 0;

    if (f != NULL) {
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    return buf;
}

/* Checked teardown: runs in the test's process, which owns the file. */
static void remove_log_file(void)
{
    if (log_path[0] != '\0') {
        unlink(log_path);
    }
}

static int count_occurrences(const char *haystack, const char *needle)
{
    int count = 0;

    for (const char *p = strstr(haystack, needle); p != NULL; p = strstr(p + 1, needle)) {
        count++;
    }
    return count;
}

/* Every WEFT_* variable out of the environment (the tests' environment
 * sets some: WEFT_UCX_SANDBOX, say), before the first read. */
static void clear_weft_environment(void)
{
    /* From the table itself: describing a variable would read them all. */
#define UNSET_(name, module, dflt, help, accepted) unsetenv("WEFT_" #name);
    WEFT_CONFIG_TABLE(UNSET_)
#undef UNSET_
}

START_TEST(status_strings_are_distinct_and_never_null)
{
    for (int s = WEFT_INPROGRESS; s > WEFT_ERR_LAST; s--) {
        const char *text = weft_status_string((weft_status_t)s);

        ck_assert_ptr_nonnull(text);
        ck_assert_str_ne(text, "unknown status");
        for (int t = s - 1; t > WEFT_ERR_LAST; t--) {
            ck_assert_str_ne(text, weft_status_string((weft_status_t)t));
        }
    }
    ck_assert_str_eq(weft_status_string(WEFT_OK), "success");
    ck_assert_str_eq(weft_status_string(WEFT_ERR_LAST), "unknown status");
    ck_assert_str_eq(weft_status_string((weft_status_t)2), "unknown status");
    ck_assert_str_eq(weft_status_string((weft_status_t)-1000), "unknown status");
}
END_TEST

START_TEST(status_from_errno)
{
    ck_assert_int_eq(weft_status_from_errno(0), WEFT_OK);
    ck_assert_int_eq(weft_status_from_errno(ENOMEM), WEFT_ERR_NO_MEMORY);
    ck_assert_int_eq(weft_status_from_errno(ENOENT), WEFT_ERR_NOT_FOUND);
    ck_assert_int_eq(weft_status_from_errno(EEXIST), WEFT_ERR_EXISTS);
    ck_assert_int_eq(weft_status_from_errno(EACCES), WEFT_ERR_PERMISSION);
    ck_assert_int_eq(weft_status_from_errno(ETIMEDOUT), WEFT_ERR_TIMEOUT);
    ck_assert_int_eq(weft_status_from_errno(ECONNRESET), WEFT_ERR_CONNECTION);
    ck_assert_int_eq(weft_status_from_errno(EIO), WEFT_ERR_IO);
}
END_TEST

START_TEST(version_matches_headers_and_configure)
{
    char expected[32];

    snprintf(expected, sizeof(expected), "%d.%d.%d", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR,
             WEFT_VERSION_PATCH);
    ck_assert_str_eq(weft_version(), expected);
    ck_assert_str_eq(weft_version(), PACKAGE_VERSION);
    ck_assert_uint_eq(weft_version_number(), WEFT_VERSION);
    ck_assert_uint_eq(WEFT_VERSION_NUMBER(1, 2, 3), 10203);
}
END_TEST

START_TEST(dtype_sizes_and_names)
{
    ck_assert_uint_eq(weft_dtype_size(WEFT_DTYPE_FP32), 4);
    ck_assert_uint_eq(weft_dtype_size(WEFT_DTYPE_BF16), 2);
    ck_assert_uint_eq(weft_dtype_size(WEFT_DTYPE_FP16), 2);
    ck_assert_uint_eq(weft_dtype_size(WEFT_DTYPE_FP8_E4M3), 1);
    ck_assert_uint_eq(weft_dtype_size(WEFT_DTYPE_FP8_E5M2), 1);
    ck_assert_uint_eq(weft_dtype_size(WEFT_DTYPE_UE8M0), 1);
    ck_assert_uint_eq(weft_dtype_size(WEFT_DTYPE_INT64), 8);
    ck_assert_uint_eq(weft_dtype_size(WEFT_DTYPE_INVALID), 0);
    ck_assert_uint_eq(weft_dtype_size(WEFT_DTYPE_LAST), 0);
    ck_assert_uint_eq(weft_dtype_size((weft_dtype_t)-3), 0);
    ck_assert_str_eq(weft_dtype_name(WEFT_DTYPE_FP8_E4M3), "fp8_e4m3");
    ck_assert_str_eq(weft_dtype_name((weft_dtype_t)999), "invalid");

    for (int d = WEFT_DTYPE_INVALID + 1; d < WEFT_DTYPE_LAST; d++) {
        weft_dtype_t parsed = WEFT_DTYPE_INVALID;

        ck_assert_uint_gt(weft_dtype_size((weft_dtype_t)d), 0);
        ck_assert_int_eq(weft_dtype_from_name(weft_dtype_name((weft_dtype_t)d), &parsed), WEFT_OK);
        ck_assert_int_eq(parsed, d);
    }
}
END_TEST

START_TEST(dtype_from_name_rejects_unknown)
{
    weft_dtype_t parsed = WEFT_DTYPE_FP32;

    ck_assert_int_eq(weft_dtype_from_name("invalid", &parsed), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_dtype_from_name("FP32", &parsed), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_dtype_from_name("", &parsed), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_dtype_from_name(NULL, &parsed), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_dtype_from_name("fp32", NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(parsed, WEFT_DTYPE_FP32); /* untouched on failure */
}
END_TEST

START_TEST(config_defaults_and_describe)
{
    weft_config_var_t var;
    int               found_level = 0;

    clear_weft_environment();
    ck_assert_uint_eq(weft_config_count(), WEFT_CONFIG_COUNT);
    ck_assert_uint_ge(weft_config_count(), 2);
    for (size_t i = 0; i < weft_config_count(); i++) {
        ck_assert_int_eq(weft_config_describe(i, &var), WEFT_OK);
        ck_assert_ptr_nonnull(var.name);
        ck_assert_int_eq(strncmp(var.name, "WEFT_", 5), 0);
        ck_assert_ptr_nonnull(var.help);
        ck_assert_uint_gt(strlen(var.help), 10);
        ck_assert_ptr_nonnull(var.module);
        ck_assert_str_eq(var.value, var.default_value);
        ck_assert_int_eq(var.is_set, 0);
        if (strcmp(var.name, "WEFT_LOG_LEVEL") == 0) {
            found_level = 1;
            ck_assert_str_eq(var.value, "warn");
        }
    }
    ck_assert(found_level);
    ck_assert_int_eq(weft_config_describe(weft_config_count(), &var), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_config_describe(0, NULL), WEFT_ERR_INVALID_PARAM);
}
END_TEST

START_TEST(config_reads_environment_once)
{
    weft_config_var_t var;

    clear_weft_environment();
    setenv("WEFT_LOG_LEVEL", "debug", 1);
    ck_assert_str_eq(weft_config_value(WEFT_CONFIG_LOG_LEVEL), "debug");
    ck_assert_int_eq(weft_config_is_set(WEFT_CONFIG_LOG_LEVEL), 1);
    ck_assert_int_eq(weft_config_is_set(WEFT_CONFIG_LOG_FILE), 0);

    /* Read once: a later change of the environment is not seen. */
    setenv("WEFT_LOG_LEVEL", "trace", 1);
    ck_assert_str_eq(weft_config_value(WEFT_CONFIG_LOG_LEVEL), "debug");
    ck_assert_int_eq(weft_config_describe(WEFT_CONFIG_LOG_LEVEL, &var), WEFT_OK);
    ck_assert_str_eq(var.value, "debug");
    ck_assert_int_eq(var.is_set, 1);
}
END_TEST

START_TEST(config_warns_once_about_unknown_variables)
{
    const char *log;

    clear_weft_environment();
    use_log_file();
    setenv("WEFT_NO_SUCH_SETTING", "1", 1);
    setenv("WEFT_ALSO_UNKNOWN", "x", 1);
    setenv("WEFT_PERF_DELTA_TRACE", "1", 1); /* weft-perf's own */
    (void)weft_config_value(WEFT_CONFIG_LOG_LEVEL);
    (void)weft_config_value(WEFT_CONFIG_LOG_FILE);
    (void)weft_config_is_set(WEFT_CONFIG_LOG_LEVEL);
    log = read_log();
    ck_assert_int_eq(count_occurrences(log, "WEFT_NO_SUCH_SETTING"), 1);
    ck_assert_int_eq(count_occurrences(log, "WEFT_ALSO_UNKNOWN"), 1);
    ck_assert_int_eq(count_occurrences(log, "WEFT_LOG_FILE"), 0); /* known: not reported */
    ck_assert_int_eq(count_occurrences(log, "WEFT_PERF_DELTA_TRACE"), 0);
    ck_assert_int_eq(count_occurrences(log, "\n"), 1);            /* one warning line */
    ck_assert_ptr_nonnull(strstr(log, " warn "));
}
END_TEST

/* weft_config_check: every default is accepted (the table agrees with
 * itself), and values outside what each reader takes are flagged. */
START_TEST(config_check_accepts_defaults)
{
    char why[256];

    clear_weft_environment();
    for (size_t i = 0; i < weft_config_count(); i++) {
        ck_assert_msg(weft_config_check(i, why, sizeof(why)) == WEFT_OK, "default of variable %zu: %s", i, why);
    }
    ck_assert_int_eq(weft_config_check(weft_config_count(), NULL, 0), WEFT_ERR_INVALID_PARAM);
}
END_TEST

START_TEST(config_check_flags_bad_values)
{
    /* Each setting: a bad value, and the reader's bound just inside. */
    /* The names are spelled out: the configuration is read once, so every
     * variable must be in the environment before the first call reads it. */
    static const struct {
        weft_config_id_t id;
        const char      *name;
        const char      *value;
        int              ok;
    } cases[] = {
        {WEFT_CONFIG_UCX_LANES, "WEFT_UCX_LANES", "17", 0},
        {WEFT_CONFIG_VERIFY, "WEFT_VERIFY", "sometimes", 0},
        {WEFT_CONFIG_REGISTRY_SPIN_US, "WEFT_REGISTRY_SPIN_US", "-1", 0},
        {WEFT_CONFIG_UCX_STAGE_BYTES, "WEFT_UCX_STAGE_BYTES", "127K", 0},
        {WEFT_CONFIG_CUDA_IPC_KERNEL_MAX, "WEFT_CUDA_IPC_KERNEL_MAX", "big", 0},
        {WEFT_CONFIG_CUDA_IPC_STREAMS, "WEFT_CUDA_IPC_STREAMS", "0", 0},
        {WEFT_CONFIG_UCX_CUDA, "WEFT_UCX_CUDA", "gpudirect", 0},
        {WEFT_CONFIG_UCX_ERR_MODE, "WEFT_UCX_ERR_MODE", "", 0},
        {WEFT_CONFIG_LOG_LEVEL, "WEFT_LOG_LEVEL", "loud", 0},
        {WEFT_CONFIG_LOG_FILE, "WEFT_LOG_FILE", "", 1},
    };
    char why[256];

    clear_weft_environment();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        setenv(cases[i].name, cases[i].value, 1);
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        weft_config_var_t var;
        ck_assert_int_eq(weft_config_describe(cases[i].id, &var), WEFT_OK);
        ck_assert_str_eq(var.name, cases[i].name);
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        why[0] = '\0';
        const weft_status_t want = cases[i].ok ? WEFT_OK : WEFT_ERR_INVALID_PARAM;
        ck_assert_msg(weft_config_check(cases[i].id, why, sizeof(why)) == want, "case %zu (\"%s\"): %s", i,
                      cases[i].value, why);
        if (!cases[i].ok) {
            ck_assert_msg(strstr(why, "is not accepted") != NULL, "%s", why);
        }
    }
}
END_TEST

/* The choices that fall back rather than fail (<weft/weft.h>): a
 * WEFT_VERIFY it does not take is flagged by weft_config_check, logged,
 * and taken as transfers; so is WEFT_DELTA_WT_REWRITE's flagged (the GPU
 * apply takes it as off). */
START_TEST(config_choices_fall_back_to_the_safe_one)
{
    clear_weft_environment();
    setenv("WEFT_VERIFY", "sometimes", 1);
    setenv("WEFT_DELTA_WT_REWRITE", "on", 1);
    ck_assert_int_eq(weft_config_check(WEFT_CONFIG_VERIFY, NULL, 0), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_config_check(WEFT_CONFIG_DELTA_WT_REWRITE, NULL, 0), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_verify_mode(), WEFT_VERIFY_TRANSFERS);
}
END_TEST

START_TEST(config_check_takes_the_bounds)
{
    clear_weft_environment();
    setenv("WEFT_UCX_LANES", "16", 1);
    setenv("WEFT_UCX_STAGE_BYTES", "128K", 1);
    setenv("WEFT_CUDA_IPC_KERNEL_MAX", "0", 1);
    setenv("WEFT_REGISTRY_SPIN_US", "10000000", 1);
    setenv("WEFT_LOG_LEVEL", "TRACE", 1);
    ck_assert_int_eq(weft_config_check(WEFT_CONFIG_UCX_LANES, NULL, 0), WEFT_OK);
    ck_assert_int_eq(weft_config_check(WEFT_CONFIG_UCX_STAGE_BYTES, NULL, 0), WEFT_OK);
    ck_assert_int_eq(weft_config_check(WEFT_CONFIG_CUDA_IPC_KERNEL_MAX, NULL, 0), WEFT_OK);
    ck_assert_int_eq(weft_config_check(WEFT_CONFIG_REGISTRY_SPIN_US, NULL, 0), WEFT_OK);
    ck_assert_int_eq(weft_config_check(WEFT_CONFIG_LOG_LEVEL, NULL, 0), WEFT_OK);
}
END_TEST

START_TEST(config_typed_reader_rejects_bad_value)
{
    long value = 7;

    clear_weft_environment();
    use_log_file();
    setenv("WEFT_LOG_LEVEL", "error", 1);
    /* Any variable can be read as a number; "error" is not one. */
    ck_assert_int_eq(weft_config_long(WEFT_CONFIG_LOG_LEVEL, 0, 10, &value), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(value, 7);
    ck_assert_ptr_nonnull(strstr(read_log(), "WEFT_LOG_LEVEL=\"error\" is not an integer in [0, 10]"));
}
END_TEST

START_TEST(parse_long_values)
{
    long v = 0;

    ck_assert_int_eq(weft_parse_long("42", 0, 100, &v), WEFT_OK);
    ck_assert_int_eq(v, 42);
    ck_assert_int_eq(weft_parse_long("-5", -10, 10, &v), WEFT_OK);
    ck_assert_int_eq(v, -5);
    ck_assert_int_eq(weft_parse_long("0x10", 0, 100, &v), WEFT_OK);
    ck_assert_int_eq(v, 16);
    v = 1;
    ck_assert_int_eq(weft_parse_long("101", 0, 100, &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_parse_long("-1", 0, 100, &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_parse_long("", 0, 100, &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_parse_long(" 5", 0, 100, &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_parse_long("5x", 0, 100, &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_parse_long("99999999999999999999999", 0, 100, &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_parse_long(NULL, 0, 100, &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(v, 1);
}
END_TEST

START_TEST(parse_bool_values)
{
    int v = -1;

    ck_assert_int_eq(weft_parse_bool("yes", &v), WEFT_OK);
    ck_assert_int_eq(v, 1);
    ck_assert_int_eq(weft_parse_bool("OFF", &v), WEFT_OK);
    ck_assert_int_eq(v, 0);
    ck_assert_int_eq(weft_parse_bool("True", &v), WEFT_OK);
    ck_assert_int_eq(v, 1);
    ck_assert_int_eq(weft_parse_bool("0", &v), WEFT_OK);
    ck_assert_int_eq(v, 0);
    ck_assert_int_eq(weft_parse_bool("2", &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_parse_bool("", &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(v, 0);
}
END_TEST

START_TEST(parse_size_values)
{
    uint64_t v = 0;

    ck_assert_int_eq(weft_parse_size("4096", &v), WEFT_OK);
    ck_assert_uint_eq(v, 4096);
    ck_assert_int_eq(weft_parse_size("64K", &v), WEFT_OK);
    ck_assert_uint_eq(v, 65536);
    ck_assert_int_eq(weft_parse_size("3MiB", &v), WEFT_OK);
    ck_assert_uint_eq(v, 3u << 20);
    ck_assert_int_eq(weft_parse_size("2gb", &v), WEFT_OK);
    ck_assert_uint_eq(v, 2ull << 30);
    ck_assert_int_eq(weft_parse_size("1T", &v), WEFT_OK);
    ck_assert_uint_eq(v, 1ull << 40);
    v = 9;
    ck_assert_int_eq(weft_parse_size("99999999999T", &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_parse_size("-1", &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_parse_size("12Q", &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_parse_size("12KX", &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_parse_size("K", &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_uint_eq(v, 9);
}
END_TEST

START_TEST(log_filters_by_level_and_writes_whole_lines)
{
    const char *log;
    char        long_message[5000];

    clear_weft_environment();
    use_log_file();
    setenv("WEFT_LOG_LEVEL", "info", 1);
    ck_assert_int_eq(weft_log_level(), WEFT_LOG_INFO);
    weft_log_info("registry \"%s\": published version %d", "/w", 42);
    weft_log_debug("this debug line must not appear");
    memset(long_message, 'x', sizeof(long_message) - 1);
    long_message[sizeof(long_message) - 1] = '\0';
    weft_log_error("%s", long_message);

    log = read_log();
    ck_assert_ptr_nonnull(strstr(log, " info  registry \"/w\": published version 42\n"));
    ck_assert_ptr_nonnull(strstr(log, "test_common.c:"));
    ck_assert_ptr_null(strstr(log, "must not appear"));
    ck_assert_int_eq(count_occurrences(log, "\n"), 2);   /* the long line is cut, not split */
    ck_assert_ptr_nonnull(strstr(log, "xxx...\n"));
}
END_TEST

START_TEST(log_rejects_unknown_level)
{
    clear_weft_environment();
    use_log_file();
    setenv("WEFT_LOG_LEVEL", "loud", 1);
    ck_assert_int_eq(weft_log_level(), WEFT_LOG_WARN);
    ck_assert_ptr_nonnull(strstr(read_log(), "WEFT_LOG_LEVEL=\"loud\" is not one of"));
}
END_TEST

START_TEST(log_off_writes_nothing)
{
    clear_weft_environment();
    use_log_file();
    setenv("WEFT_LOG_LEVEL", "off", 1);
    weft_log_error("nothing");
    ck_assert_str_eq(read_log(), "");
}
END_TEST

START_TEST(log_file_pattern_expands_pid)
{
    char pattern[256], expected[256];
    FILE *f;

    clear_weft_environment();
    snprintf(pattern, sizeof(pattern), "/tmp/weft-test-pattern-%%p.log");
    snprintf(expected, sizeof(expected), "/tmp/weft-test-pattern-%d.log", (int)getpid());
    unlink(expected);
    setenv("WEFT_LOG_FILE", pattern, 1);
    weft_log_error("to the expanded path");
    f = fopen(expected, "r");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    unlink(expected);
}
END_TEST

START_TEST(text_append_cuts_and_marks)
{
    char buf[16] = "";

    ck_assert_int_eq(weft_text_append(buf, sizeof(buf), "%s", "abc"), 0);
    ck_assert_int_eq(weft_text_append(buf, sizeof(buf), "-%d", 12), 0);
    ck_assert_str_eq(buf, "abc-12");
    ck_assert_int_eq(weft_text_append(buf, sizeof(buf), "%s", "0123456789"), -1);
    ck_assert_uint_eq(strlen(buf), sizeof(buf) - 1);
    ck_assert_str_eq(buf + strlen(buf) - 3, "...");
    ck_assert_int_eq(weft_text_append(buf, sizeof(buf), "more"), -1);
}
END_TEST

/* ------------------------------------------------------------ the pool */

enum { POOL_MAX_PARTS = 64 };

typedef struct pool_marks {
    uint32_t hits[POOL_MAX_PARTS];
    uint32_t slow_part; /* this part sleeps first (POOL_MAX_PARTS: none) */
} pool_marks_t;

static void pool_mark(void *arg, uint32_t part)
{
    pool_marks_t *m = arg;

    if (part == m->slow_part) {
        usleep(20000); /* the others finish first: the run must still wait for it */
    }
    __atomic_fetch_add(&m->hits[part], 1, __ATOMIC_RELAXED);
}

/* Every part of a run exactly once, none beyond, all done on return. */
static int pool_run_checked(uint32_t parts, uint32_t slow_part)
{
    pool_marks_t m = {.slow_part = slow_part};

    weft_pool_run(parts, pool_mark, &m);
    for (uint32_t p = 0; p < POOL_MAX_PARTS; p++) {
        if (__atomic_load_n(&m.hits[p], __ATOMIC_RELAXED) != (p < parts ? 1u : 0u)) {
            return 0;
        }
    }
    return 1;
}

START_TEST(pool_runs_every_part_once)
{
    static const uint32_t parts[] = {0, 1, 2, 3, 7, 8, 9, POOL_MAX_PARTS};

    ck_assert_uint_ge(weft_pool_width(), 1);
    ck_assert_uint_le(weft_pool_width(), 8);
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        ck_assert_msg(pool_run_checked(parts[i], POOL_MAX_PARTS), "a run of %u parts", parts[i]);
        ck_assert_msg(pool_run_checked(parts[i], parts[i] / 2), "a run of %u parts, one slow", parts[i]);
    }
}
END_TEST

static void *pool_caller(void *arg)
{
    int *ok = arg;

    for (int r = 0; r < 200 && *ok; r++) {
        *ok = pool_run_checked(5 + (uint32_t)(r % 7), POOL_MAX_PARTS);
    }
    return NULL;
}

/* Callers on several threads at once: their jobs take turns, each whole. */
START_TEST(pool_serves_concurrent_callers)
{
    pthread_t threads[4];
    int       ok[4] = {1, 1, 1, 1};

    for (int t = 0; t < 4; t++) {
        ck_assert_int_eq(pthread_create(&threads[t], NULL, pool_caller, &ok[t]), 0);
    }
    for (int t = 0; t < 4; t++) {
        ck_assert_int_eq(pthread_join(threads[t], NULL), 0);
        ck_assert_msg(ok[t], "caller %d saw a part run twice or not at all", t);
    }
}
END_TEST

/* A child forked after the workers started runs jobs with workers of its
 * own. (Not under ThreadSanitizer, which ends a child that starts threads
 * after a multi-threaded fork.) */
START_TEST(pool_works_after_fork)
{
    pid_t pid;
    int   status = 0;

#ifdef __SANITIZE_THREAD__
    return;
#endif
    ck_assert(pool_run_checked(8, POOL_MAX_PARTS)); /* the parent's workers exist */
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        _exit(pool_run_checked(8, 3) && pool_run_checked(POOL_MAX_PARTS, POOL_MAX_PARTS) ? 0 : 1);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert(pool_run_checked(8, POOL_MAX_PARTS));
}
END_TEST

static Suite *common_suite(void)
{
    Suite *s = suite_create("common");
    TCase *tc;

    tc = tcase_create("status");
    tcase_add_test(tc, status_strings_are_distinct_and_never_null);
    tcase_add_test(tc, status_from_errno);
    tcase_add_test(tc, version_matches_headers_and_configure);
    suite_add_tcase(s, tc);

    tc = tcase_create("dtype");
    tcase_add_test(tc, dtype_sizes_and_names);
    tcase_add_test(tc, dtype_from_name_rejects_unknown);
    suite_add_tcase(s, tc);

    tc = tcase_create("config");
    tcase_add_checked_fixture(tc, NULL, remove_log_file);
    tcase_add_test(tc, config_defaults_and_describe);
    tcase_add_test(tc, config_reads_environment_once);
    tcase_add_test(tc, config_warns_once_about_unknown_variables);
    tcase_add_test(tc, config_typed_reader_rejects_bad_value);
    tcase_add_test(tc, config_check_accepts_defaults);
    tcase_add_test(tc, config_check_flags_bad_values);
    tcase_add_test(tc, config_check_takes_the_bounds);
    tcase_add_test(tc, config_choices_fall_back_to_the_safe_one);
    tcase_add_test(tc, parse_long_values);
    tcase_add_test(tc, parse_bool_values);
    tcase_add_test(tc, parse_size_values);
    suite_add_tcase(s, tc);

    tc = tcase_create("log");
    tcase_add_checked_fixture(tc, NULL, remove_log_file);
    tcase_add_test(tc, log_filters_by_level_and_writes_whole_lines);
    tcase_add_test(tc, log_rejects_unknown_level);
    tcase_add_test(tc, log_off_writes_nothing);
    tcase_add_test(tc, log_file_pattern_expands_pid);
    tcase_add_test(tc, text_append_cuts_and_marks);
    suite_add_tcase(s, tc);

    tc = tcase_create("pool");
    tcase_add_test(tc, pool_runs_every_part_once);
    tcase_add_test(tc, pool_serves_concurrent_callers);
    tcase_add_test(tc, pool_works_after_fork);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(common_suite)
