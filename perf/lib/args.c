/* Strict parsing of option values: no sign, no trailing garbage, range
 * checked, so that a typo is an error rather than a surprising run. */
#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int parse_u64(const char *text, uint64_t *value, char **end)
{
    if (!isdigit((unsigned char)text[0])) {
        return -1;
    }
    errno = 0;
    *value = strtoull(text, end, 10);
    return errno == 0 ? 0 : -1;
}

int perf_arg_u64(const char *option, const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    uint64_t value;
    char    *end;

    if (parse_u64(text, &value, &end) != 0 || *end != '\0' || value < min || value > max) {
        fprintf(stderr, "weft-perf: %s '%s': expected an integer from %" PRIu64 " to %" PRIu64 "\n",
                option, text, min, max);
        return -1;
    }
    *out = value;
    return 0;
}

int perf_arg_size(const char *option, const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    uint64_t value, shift = 0;
    char    *end;

    if (parse_u64(text, &value, &end) == 0) {
        switch (*end) {
        case 'K': case 'k': shift = 10; end++; break;
        case 'M': case 'm': shift = 20; end++; break;
        case 'G': case 'g': shift = 30; end++; break;
        default: break;
        }
        if (*end == '\0' && value <= (UINT64_MAX >> shift)) {
            value <<= shift;
            if (value >= min && value <= max) {
                *out = value;
                return 0;
            }
        }
    }
    fprintf(stderr, "weft-perf: %s '%s': expected a size from %" PRIu64 " to %" PRIu64
            " bytes (K, M, G suffixes allowed)\n", option, text, min, max);
    return -1;
}

int perf_arg_double(const char *option, const char *text, double min, double max, double *out)
{
    double value;
    char  *end;

    errno = 0;
    value = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(value >= min && value <= max)) {
        fprintf(stderr, "weft-perf: %s '%s': expected a number from %g to %g\n", option, text, min, max);
        return -1;
    }
    *out = value;
    return 0;
}

int perf_arg_word(const char *option, const char *text, const perf_arg_word_t *words, int *out)
{
    for (const perf_arg_word_t *w = words; w->name != NULL; w++) {
        if (strcmp(text, w->name) == 0) {
            *out = w->value;
            return 0;
        }
    }
    fprintf(stderr, "weft-perf: %s '%s': expected", option, text);
    for (const perf_arg_word_t *w = words; w->name != NULL; w++) {
        fprintf(stderr, "%s%s", w == words ? " " : w[1].name == NULL ? " or " : ", ", w->name);
    }
    fputc('\n', stderr);
    return -1;
}

#ifndef WEFT_PERF_SRCDIR
#define WEFT_PERF_SRCDIR "."
#endif
#ifndef WEFT_PERF_BUILDDIR
#define WEFT_PERF_BUILDDIR "."
#endif
#ifndef WEFT_PERF_PEERDIR
#define WEFT_PERF_PEERDIR "."
#endif

/* 1 when this process's executable lies in the build tree it was built in
 * (libtool runs it from .libs/ there), 0 once installed elsewhere. */
static int running_from_build_tree(void)
{
    char         exe[4096];
    const size_t dir_len = strlen(WEFT_PERF_BUILDDIR);
    ssize_t      n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (n <= 0) {
        return 0;
    }
    exe[n] = '\0';
    return strncmp(exe, WEFT_PERF_BUILDDIR, dir_len) == 0 && exe[dir_len] == '/';
}

const char *perf_peer_script(const char *file)
{
    /* One path a script; weft-perf names four. */
    static char paths[8][4096];
    static int  used;

    for (int i = 0; i < used; i++) {
        const char *slash = strrchr(paths[i], '/');
        if (slash != NULL && strcmp(slash + 1, file) == 0) {
            return paths[i];
        }
    }
    if (used == (int)(sizeof(paths) / sizeof(paths[0]))) {
        return file;
    }
    snprintf(paths[used], sizeof(paths[used]), "%s/%s",
             running_from_build_tree() ? WEFT_PERF_SRCDIR : WEFT_PERF_PEERDIR, file);
    return paths[used++];
}
