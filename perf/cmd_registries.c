/* weft-perf registries: the registries in /dev/shm, who uses each, and
 * (--remove-stale) the removal of those nobody running uses: a producer
 * SIGKILLed before its unlink leaves its segment, gigabytes of tmpfs. */
#include "lib/json.h"
#include "perf.h"

#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft/weft.h>

#define SHM_DIR    "/dev/shm"
#define SHM_PREFIX "weft."

static int registries_usage(FILE *out)
{
    fprintf(out, "usage: weft-perf registries [--remove-stale] [--json] [NAME...]\n"
                 "  Lists libweft's registries (the " SHM_DIR "/" SHM_PREFIX "<name> segments): size, memory\n"
                 "  they hold, producer pid and whether it runs, consumers and leases of running\n"
                 "  processes, latest version. A registry no running process uses is stale.\n"
                 "  NAME...          only these registries\n"
                 "  --remove-stale   remove the stale ones (weft_registry_unlink)\n"
                 "  --json           one JSON object a registry\n");
    return out == stdout ? 0 : 2;
}

static const char *condition_name(weft_registry_condition_t c)
{
    return c == WEFT_REGISTRY_SEALED ? "sealed" : c == WEFT_REGISTRY_DECLARING ? "declaring" : "damaged";
}

static const char *producer_state(const weft_registry_summary_t *s)
{
    return s->producer_pid == 0 ? "none" : s->producer_alive ? "running" : "dead";
}

static void print_json(const char *name, const weft_registry_summary_t *s, int removed)
{
    perf_json_t j;

    perf_json_begin(&j, stdout);
    perf_json_str(&j, "command", "registries");
    perf_json_str(&j, "name", name);
    perf_json_str(&j, "condition", condition_name(s->condition));
    perf_json_str(&j, "memory", s->memory == WEFT_MEMORY_CUDA ? "cuda" : s->memory == WEFT_MEMORY_HOST ? "host" : "");
    perf_json_uint(&j, "segment_bytes", s->segment_bytes);
    perf_json_uint(&j, "memory_bytes", s->memory_bytes);
    perf_json_uint(&j, "owner_uid", s->owner_uid);
    perf_json_int(&j, "producer_pid", s->producer_pid);
    perf_json_str(&j, "producer", producer_state(s));
    perf_json_uint(&j, "consumers", s->consumers);
    perf_json_uint(&j, "leases", s->leases);
    perf_json_uint(&j, "latest_version", s->latest_version);
    perf_json_bool(&j, "stale", s->stale);
    perf_json_bool(&j, "removed", removed);
    perf_json_str(&j, "problem", s->problem);
    perf_json_end(&j);
}

/* 1 when no NAME was given, or name is one of them (argv[optind…]). */
static int named(const char *name, int argc, char **argv)
{
    for (int i = optind; i < argc; i++) {
        if (strcmp(argv[i], name) == 0) {
            return 1;
        }
    }
    return optind == argc;
}

int perf_cmd_registries(int argc, char **argv)
{
    static const struct option options[] = {{"remove-stale", no_argument, NULL, 'r'},
                                            {"json", no_argument, NULL, 'j'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
    int            remove_stale = 0, json = 0, rc = 0, c, listed = 0;
    uint64_t       stale_bytes = 0;
    DIR           *dir;
    struct dirent *entry;

    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case 'r': remove_stale = 1; break;
        case 'j': json = 1; break;
        case 'h': return registries_usage(stdout);
        default: return registries_usage(stderr);
        }
    }
    dir = opendir(SHM_DIR);
    if (dir == NULL) {
        perror("weft-perf registries: " SHM_DIR);
        return 1;
    }
    if (!json) {
        printf("# weft-perf registries: libweft %s, %s%s\n", weft_version(), SHM_DIR "/" SHM_PREFIX "*",
               remove_stale ? "; removing the stale ones" : "");
        printf("%-28s %-9s %-5s %10s %10s %-16s %9s %6s %8s %-6s\n", "name", "condition", "mem", "size_MB",
               "in_mem_MB", "producer", "consumers", "leases", "latest", "stale");
    }
    while ((entry = readdir(dir)) != NULL) {
        const char             *name = entry->d_name + strlen(SHM_PREFIX);
        weft_registry_summary_t s;
        char                    producer[32];
        int                     removed = 0;
        weft_status_t           st;

        if (strncmp(entry->d_name, SHM_PREFIX, strlen(SHM_PREFIX)) != 0 || !named(name, argc, argv)) {
            continue;
        }
        st = weft_registry_inspect(name, &s);
        if (st != WEFT_OK) {
            /* Gone since readdir, or another user's: say so and go on. */
            if (st != WEFT_ERR_NOT_FOUND) {
                fprintf(stderr, "weft-perf registries: %s: %s\n", name, weft_status_string(st));
            }
            continue;
        }
        listed++;
        if (remove_stale && s.stale) {
            st = weft_registry_unlink(name);
            removed = st == WEFT_OK;
            if (removed) {
                stale_bytes += s.memory_bytes;
            } else {
                fprintf(stderr, "weft-perf registries: removing %s: %s\n", name, weft_status_string(st));
                rc = 1;
            }
        }
        if (json) {
            print_json(name, &s, removed);
            continue;
        }
        if (s.producer_pid == 0) {
            snprintf(producer, sizeof(producer), "none");
        } else {
            snprintf(producer, sizeof(producer), "%d %s", (int)s.producer_pid, producer_state(&s));
        }
        printf("%-28s %-9s %-5s %10.1f %10.1f %-16s %9u %6u %8llu %-6s\n", name, condition_name(s.condition),
               s.memory == WEFT_MEMORY_CUDA ? "cuda" : s.memory == WEFT_MEMORY_HOST ? "host" : "-",
               (double)s.segment_bytes / 1e6, (double)s.memory_bytes / 1e6, producer, s.consumers, s.leases,
               (unsigned long long)s.latest_version, removed ? "removed" : s.stale ? "yes" : "no");
        if (s.problem[0] != '\0') {
            printf("#   %s: %s\n", name, s.problem);
        }
    }
    closedir(dir);
    if (!json) {
        printf("# %d registr%s%s", listed, listed == 1 ? "y" : "ies",
               remove_stale ? "" : "; stale: no running process uses it (--remove-stale removes those)");
        if (remove_stale) {
            printf("; %.1f MB of memory given back", (double)stale_bytes / 1e6);
        }
        printf("\n");
    }
    return rc;
}
