/*
 * Logging. The level and the destination come from WEFT_LOG_LEVEL and
 * WEFT_LOG_FILE, read once. A message below the level costs one load and a
 * compare. Messages are lower case and say what failed on which object:
 * "registry \"/w\": slot 2 is leased by pid 123". Internal.
 */
#ifndef WEFT_COMMON_LOG_H
#define WEFT_COMMON_LOG_H

#include "compiler.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum weft_log_level {
    WEFT_LOG_OFF = 0,
    WEFT_LOG_ERROR,
    WEFT_LOG_WARN,
    WEFT_LOG_INFO,
    WEFT_LOG_DEBUG,
    WEFT_LOG_TRACE
} weft_log_level_t;

/* The level in force (reads the environment on first use). */
weft_log_level_t weft_log_level(void);

/* Writes one line, whole, with time, host, pid, thread, file and line. */
void weft_log_write(weft_log_level_t level, const char *file, int line, const char *fmt, ...)
    WEFT_PRINTF(4, 5);

/* The name of a level, "warn"; "?" for none. */
const char *weft_log_level_name(weft_log_level_t level);

#define weft_log(_level, ...)                                          \
    do {                                                               \
        if (WEFT_UNLIKELY((_level) <= weft_log_level())) {             \
            weft_log_write((_level), __FILE__, __LINE__, __VA_ARGS__); \
        }                                                              \
    } while (0)

#define weft_log_error(...) weft_log(WEFT_LOG_ERROR, __VA_ARGS__)
#define weft_log_warn(...)  weft_log(WEFT_LOG_WARN, __VA_ARGS__)
#define weft_log_info(...)  weft_log(WEFT_LOG_INFO, __VA_ARGS__)
#define weft_log_debug(...) weft_log(WEFT_LOG_DEBUG, __VA_ARGS__)
#define weft_log_trace(...) weft_log(WEFT_LOG_TRACE, __VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif
