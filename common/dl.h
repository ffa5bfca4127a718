/*
 * Loading an optional dependency at run time (dlopen), so that libweft
 * itself needs none of UCX, NCCL or libibverbs to load: a backend loads
 * its library the first time it is used, and says why when it cannot.
 * Internal; thread-safe.
 */
#ifndef WEFT_COMMON_DL_H
#define WEFT_COMMON_DL_H

#include <weft/types.h>

#include <stddef.h>

/*
 * Opens the first of `names` (sonames, NULL-terminated) that loads, each
 * tried first in the directories of `libdirs` (colon-separated, may be
 * empty: where configure found the library), then where the dynamic
 * loader looks; then resolves every
 * symbol of `symbols` (NULL-terminated) into slots[i]. On failure
 * why[why_size] says what was missing (dlerror's words): WEFT_OK or
 * WEFT_ERR_UNSUPPORTED. A library that loaded stays loaded for the life of
 * the process (its functions are used until exit; and one that lacked a
 * symbol may have started threads, which closing it would not stop).
 */
weft_status_t weft_dl_load(const char *const names[], const char *libdirs, const char *const symbols[],
                           void *slots[], char *why, size_t why_size);

#endif
