/* weft-perf info: what this libweft is, what it was built with, what it
 * finds on this machine, and the WEFT_* settings in force. */
#include "lib/json.h"
#include "perf.h"

#include <stdio.h>
#include <string.h>
#include <weft/weft.h>

/* Prints each line of text indented, under its heading. */
static void print_indented(const char *text)
{
    const char *line = text;

    while (*line != '\0') {
        const char *end = strchr(line, '\n');
        int         len = end ? (int)(end - line) : (int)strlen(line);

        printf("    %.*s\n", len, line);
        line += len + (end ? 1 : 0);
    }
}

/* The same as one flat JSON object: backend_<name>_built, _found,
 * _version and _detail; each setting's value under its name, and
 * <name>_set. */
static int info_json(void)
{
    perf_json_t j;
    char        key[96];

    perf_json_begin(&j, stdout);
    perf_json_str(&j, "command", "info");
    perf_json_str(&j, "libweft", weft_version());
    perf_json_bool(&j, "headers_match", weft_version_number() == WEFT_VERSION);
    for (int b = 0; b < WEFT_BACKEND_LAST; b++) {
        weft_backend_info_t info;

        if (weft_backend_query((weft_backend_t)b, &info) != WEFT_OK) {
            continue;
        }
        snprintf(key, sizeof(key), "backend_%s_built", info.name);
        perf_json_bool(&j, key, info.compiled);
        snprintf(key, sizeof(key), "backend_%s_found", info.name);
        perf_json_bool(&j, key, info.available);
        snprintf(key, sizeof(key), "backend_%s_version", info.name);
        perf_json_str(&j, key, info.version);
        snprintf(key, sizeof(key), "backend_%s_detail", info.name);
        perf_json_str(&j, key, info.detail);
    }
    for (size_t i = 0; i < weft_config_count(); i++) {
        weft_config_var_t var;

        if (weft_config_describe(i, &var) != WEFT_OK) {
            continue;
        }
        perf_json_str(&j, var.name, var.value);
        snprintf(key, sizeof(key), "%s_set", var.name);
        perf_json_bool(&j, key, var.is_set);
        snprintf(key, sizeof(key), "%s_valid", var.name);
        perf_json_bool(&j, key, weft_config_check(i, NULL, 0) == WEFT_OK);
    }
    perf_json_end(&j);
    return 0;
}

int perf_cmd_info(int argc, char **argv)
{
    int invalid = 0;

    if (argc > 1) {
        int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        if (argc == 2 && strcmp(argv[1], "--json") == 0) {
            return info_json();
        }
        fprintf(help ? stdout : stderr, "usage: weft-perf info [--json]\n");
        return help ? 0 : 2;
    }

    printf("libweft %s (headers %d.%d.%d)\n", weft_version(), WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR,
           WEFT_VERSION_PATCH);
    if (weft_version_number() != WEFT_VERSION) {
        printf("warning: weft-perf was built against other headers than the library it loaded\n");
    }

    printf("\nbackends:\n");
    for (int b = 0; b < WEFT_BACKEND_LAST; b++) {
        weft_backend_info_t info;
        weft_status_t       status = weft_backend_query((weft_backend_t)b, &info);

        if (status != WEFT_OK) {
            printf("  backend %d: query failed: %s\n", b, weft_status_string(status));
            continue;
        }
        printf("  %-6s built: %-3s found: %-3s %s\n", info.name, info.compiled ? "yes" : "no",
               info.available ? "yes" : "no", info.version);
        print_indented(info.detail);
    }

    printf("\nsettings (environment > default):\n");
    for (size_t i = 0; i < weft_config_count(); i++) {
        weft_config_var_t var;
        char              why[256];

        if (weft_config_describe(i, &var) != WEFT_OK) {
            continue;
        }
        if (weft_config_check(i, why, sizeof(why)) != WEFT_OK) {
            printf("  %s=%s  INVALID: %s; calls that read it fail\n", var.name, var.value, why);
            invalid++;
        } else {
            printf("  %s=%s%s\n", var.name, var.value, var.is_set ? "" : "  (default)");
        }
        printf("    %s [%s]\n", var.help, var.module);
    }
    if (invalid != 0) {
        printf("\n%d invalid WEFT_* setting%s: unset %s or give a value listed above\n", invalid,
               invalid == 1 ? "" : "s", invalid == 1 ? "it" : "them");
    }
    return 0;
}
