/*
 * Loading an optional dependency at run time (dlopen), so that libweft
 * itself needs none of UCX, NCCL or libibverbs to load: a backend loads
 * its library the first time it is used, and says why when it cannot.
 * Internal; thread-safe.
 */
#ifndef WEFT_COMMON_DL_H
#define WEFT_COMMON_DL_H

#include <weft/types.h>

#include <pthread.h>
#include <stddef.h>

/*
 * A library loaded once per process into a table of function pointers:
 * a backend defines one, statically initialized with WEFT_DL_LIBRARY_INIT.
 */
typedef struct weft_dl_library {
    pthread_mutex_t lock;
    int             tried;  /* the first load ran; status and why hold its result */
    weft_status_t   status;
    char            why[512];
} weft_dl_library_t;

#define WEFT_DL_LIBRARY_INIT {PTHREAD_MUTEX_INITIALIZER, 0, WEFT_ERR_UNSUPPORTED, ""}

/*
 * Loads the library the first time: opens the first of `names` (sonames,
 * NULL-terminated) that loads, each tried first in the directories of
 * `libdirs` (colon-separated, may be empty: where configure found the
 * library), then where the dynamic loader looks; resolves every symbol of
 * `symbols` (NULL-terminated); and, only when every one was found, fills
 * `table`, a struct of table_bytes holding one function pointer per
 * symbol in their order. Later calls return the first one's result: WEFT_OK or
 * WEFT_ERR_UNSUPPORTED, with the loader's words (dlerror) in *why (may be
 * NULL; static). A library that loaded stays loaded for the life of the
 * process (its functions are used until exit; one that lacked a symbol may
 * have started threads, which closing it would not stop). Thread-safe.
 */
weft_status_t weft_dl_load_once(weft_dl_library_t *lib, const char *const names[], const char *libdirs,
                                const char *const symbols[], void *table, size_t table_bytes, const char **why);

#endif
