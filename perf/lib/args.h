/* weft-perf: command-line values. Each parser prints what is wrong with
 * the value, naming the option, and returns -1; 0 on success. */
#ifndef WEFT_PERF_ARGS_H
#define WEFT_PERF_ARGS_H

#include <stdint.h>

/* A decimal integer in [min, max]. */
int perf_arg_u64(const char *option, const char *text, uint64_t min, uint64_t max, uint64_t *out);

/* Bytes, with an optional K, M or G suffix (powers of 1024), in [min, max]. */
int perf_arg_size(const char *option, const char *text, uint64_t min, uint64_t max, uint64_t *out);

/* One of a fixed set of words: *out gets the value of the word that text
 * equals; the list ends with a NULL name. The error lists the words. */
typedef struct perf_arg_word {
    const char *name;
    int         value;
} perf_arg_word_t;

int perf_arg_word(const char *option, const char *text, const perf_arg_word_t *words, int *out);

/* A decimal number in [min, max]. */
int perf_arg_double(const char *option, const char *text, double min, double max, double *out);

/* Where the PyTorch peer script `file` ("optim_peer.py") is: the source
 * tree's copy when this weft-perf is the one in its build tree (an edit
 * there is what runs), otherwise the one `make install` put under
 * $(pkgdatadir). Never NULL; the string lives as long as the process. */
const char *perf_peer_script(const char *file);

#endif
