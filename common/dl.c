/* Optional dependencies opened at run time (dl.h). */
#include "config.h"

#include "common/dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The library at `path`, or NULL with dlerror's words appended to why. */
static void *open_one(const char *path, char *why, size_t why_size)
{
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);

    if (handle == NULL) {
        const char *error = dlerror();
        size_t      used = strlen(why);

        snprintf(why + used, why_size - used, "%s%s", used > 0 ? "; " : "", error != NULL ? error : path);
    }
    return handle;
}

/* Opens the library and resolves the symbols into slots (dl.h says how);
 * why gets dlerror's words on failure. */
static weft_status_t dl_load(const char *const names[], const char *libdirs, const char *const symbols[],
                             void *slots[], char *why, size_t why_size)
{
    void *handle = NULL;

    why[0] = '\0';
    for (size_t i = 0; names[i] != NULL && handle == NULL; i++) {
        for (const char *dir = libdirs; dir != NULL && *dir != '\0' && handle == NULL;) {
            const char *end = strchr(dir, ':');
            const int   len = end != NULL ? (int)(end - dir) : (int)strlen(dir);
            char        path[4096];

            snprintf(path, sizeof(path), "%.*s/%s", len, dir, names[i]);
            /* Only where the file is: a directory without it adds nothing
             * to why. */
            if (len > 0 && access(path, F_OK) == 0) {
                handle = open_one(path, why, why_size);
            }
            dir = end != NULL ? end + 1 : NULL;
        }
        if (handle == NULL) {
            handle = open_one(names[i], why, why_size);
        }
    }
    if (handle == NULL) {
        return WEFT_ERR_UNSUPPORTED;
    }
    for (size_t i = 0; symbols[i] != NULL; i++) {
        (void)dlerror();
        slots[i] = dlsym(handle, symbols[i]);
        if (slots[i] == NULL) {
            const char *error = dlerror();

            snprintf(why, why_size, "%s", error != NULL ? error : symbols[i]);
            /* The handle stays open: closing a library UCX or NCCL may
             * have started threads in is not safe, and nothing of it was
             * used. */
            return WEFT_ERR_UNSUPPORTED;
        }
    }
    /* Kept open for the life of the process, as its functions are. */
    return WEFT_OK;
}

weft_status_t weft_dl_load_once(weft_dl_library_t *lib, const char *const names[], const char *libdirs,
                                const char *const symbols[], void *table, size_t table_bytes, const char **why)
{
    weft_status_t status;

    pthread_mutex_lock(&lib->lock);
    if (!lib->tried) {
        size_t count = 0;
        void **slots;

        while (symbols[count] != NULL) {
            count++;
        }
        /* A table of another size is the caller's mistake: refused, not
         * half filled. */
        slots = count * sizeof(void *) == table_bytes ? calloc(count, sizeof(void *)) : NULL;
        if (slots == NULL) {
            snprintf(lib->why, sizeof(lib->why), "%s",
                     count * sizeof(void *) != table_bytes ? "the table does not hold one pointer per symbol"
                                                           : "out of memory");
            lib->status = WEFT_ERR_UNSUPPORTED;
        } else {
            lib->status = dl_load(names, libdirs, symbols, slots, lib->why, sizeof(lib->why));
            if (lib->status == WEFT_OK) {
                /* dlsym's void * into the function pointers, as POSIX
                 * allows: filled only whole, so a half-loaded library is
                 * never called. */
                memcpy(table, slots, table_bytes);
            }
            free(slots);
        }
        lib->tried = 1;
    }
    status = lib->status;
    pthread_mutex_unlock(&lib->lock);
    if (why != NULL) {
        *why = lib->why;
    }
    return status;
}
