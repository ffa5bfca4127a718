/* The WEFT_* table and the values in force, read once (env_table.h). */
#include "env_table.h"

#include "compiler.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static const weft_env_entry_t config_table[] = {
#define WEFT_CONFIG_ENTRY_(name, module, dflt, help, accepted) {"WEFT_" #name, module, dflt, help, accepted},
    WEFT_CONFIG_TABLE(WEFT_CONFIG_ENTRY_)
#undef WEFT_CONFIG_ENTRY_
};

_Static_assert(WEFT_ARRAY_SIZE(config_table) == WEFT_CONFIG_COUNT, "table and ids disagree");

/* Values read once; copies, so that later setenv() calls cannot free them. */
static struct {
    pthread_once_t read_once;
    const char    *value[WEFT_CONFIG_COUNT];
    int            is_set[WEFT_CONFIG_COUNT];
    char          *unknown; /* "WEFT_A, WEFT_B" or NULL */
} config = {PTHREAD_ONCE_INIT, {NULL}, {0}, NULL};

static int config_known(const char *name, size_t len)
{
    for (size_t i = 0; i < WEFT_CONFIG_COUNT; i++) {
        if (strlen(config_table[i].name) == len && memcmp(config_table[i].name, name, len) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Appends the names of unknown WEFT_* variables to config.unknown. The
 * WEFT_PERF_* ones are weft-perf's own (read by the tool, not by the
 * library): not unknown, and not the library's to list. */
static void config_collect_unknown(void)
{
    size_t used = 0, capacity = 0;

    for (char **env = environ; env != NULL && *env != NULL; env++) {
        const char *eq = strchr(*env, '=');
        size_t      len = eq ? (size_t)(eq - *env) : strlen(*env);

        if (strncmp(*env, "WEFT_", 5) != 0 || strncmp(*env, "WEFT_PERF_", 10) == 0 || config_known(*env, len)) {
            continue;
        }
        if (used + len + 3 > capacity) {
            size_t new_capacity = (capacity + len + 3) * 2;
            char  *grown = realloc(config.unknown, new_capacity);
            if (grown == NULL) {
                return; /* the warning is best effort */
            }
            config.unknown = grown;
            capacity = new_capacity;
        }
        if (used > 0) {
            memcpy(config.unknown + used, ", ", 2);
            used += 2;
        }
        memcpy(config.unknown + used, *env, len);
        used += len;
        config.unknown[used] = '\0';
    }
}

static void config_read(void)
{
    for (size_t i = 0; i < WEFT_CONFIG_COUNT; i++) {
        const char *env = getenv(config_table[i].name);
        char       *copy = env ? strdup(env) : NULL;

        config.is_set[i] = env != NULL;
        config.value[i] = copy ? copy : config_table[i].default_value;
    }
    config_collect_unknown();
}

static int config_id_valid(weft_config_id_t id)
{
    return (unsigned)id < WEFT_CONFIG_COUNT;
}

const weft_env_entry_t *weft_env_entry(weft_config_id_t id)
{
    return config_id_valid(id) ? &config_table[id] : NULL;
}

const char *weft_config_value_quiet(weft_config_id_t id)
{
    pthread_once(&config.read_once, config_read);
    return config_id_valid(id) ? config.value[id] : "";
}

int weft_env_is_set(weft_config_id_t id)
{
    pthread_once(&config.read_once, config_read);
    return config_id_valid(id) ? config.is_set[id] : 0;
}

const char *weft_env_unknown(void)
{
    pthread_once(&config.read_once, config_read);
    return config.unknown;
}
