/* weft-perf info: what this libweft is, what it was built with, what it
 * finds on this machine, and the WEFT_* settings in force. */
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

int perf_cmd_info(int argc, char **argv)
{
    if (argc > 1) {
        int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        fprintf(help ? stdout : stderr, "usage: weft-perf info\n");
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

        if (weft_config_describe(i, &var) != WEFT_OK) {
            continue;
        }
        printf("  %s=%s%s\n", var.name, var.value, var.is_set ? "" : "  (default)");
        printf("    %s [%s]\n", var.help, var.module);
    }
    return 0;
}
