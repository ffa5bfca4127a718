/* The logger: one write(2) per line, so that lines of several threads and
 * processes appending to one file do not interleave. */
#include "log.h"

#include "env_table.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

static const char *const level_names[] = {
    [WEFT_LOG_OFF] = "off",     [WEFT_LOG_ERROR] = "error", [WEFT_LOG_WARN] = "warn",
    [WEFT_LOG_INFO] = "info",   [WEFT_LOG_DEBUG] = "debug", [WEFT_LOG_TRACE] = "trace",
};

static struct {
    pthread_once_t   once;
    weft_log_level_t level;
    int              fd;
    char             host[64];
} logger = {PTHREAD_ONCE_INIT, WEFT_LOG_WARN, STDERR_FILENO, ""};

const char *weft_log_level_name(weft_log_level_t level)
{
    return (unsigned)level < WEFT_ARRAY_SIZE(level_names) ? level_names[level] : "?";
}

/* Expands %p (pid) and %h (host name) in a WEFT_LOG_FILE pattern. */
static int log_expand_path(const char *pattern, char *path, size_t size)
{
    size_t used = 0;

    for (const char *p = pattern; *p != '\0'; p++) {
        int n;

        if (p[0] == '%' && p[1] == 'p') {
            n = snprintf(path + used, size - used, "%d", (int)getpid());
            p++;
        } else if (p[0] == '%' && p[1] == 'h') {
            n = snprintf(path + used, size - used, "%s", logger.host);
            p++;
        } else {
            n = snprintf(path + used, size - used, "%c", *p);
        }
        if (n < 0 || (size_t)n >= size - used) {
            return -1;
        }
        used += (size_t)n;
    }
    return 0;
}

static void log_emit(weft_log_level_t level, const char *file, int line, const char *fmt, va_list ap);

static void log_emit_now(weft_log_level_t level, const char *file, int line, const char *fmt, ...)
    WEFT_PRINTF(4, 5);

static void log_emit_now(weft_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_emit(level, file, line, fmt, ap);
    va_end(ap);
}

static void log_init(void)
{
    const char *level = weft_config_value_quiet(WEFT_CONFIG_LOG_LEVEL);
    const char *file = weft_config_value_quiet(WEFT_CONFIG_LOG_FILE);
    int         level_known = 0;
    char        path[4096];

    if (gethostname(logger.host, sizeof(logger.host)) != 0) {
        strcpy(logger.host, "?");
    }
    logger.host[sizeof(logger.host) - 1] = '\0';

    for (size_t i = 0; i < WEFT_ARRAY_SIZE(level_names); i++) {
        if (strcasecmp(level, level_names[i]) == 0) {
            logger.level = (weft_log_level_t)i;
            level_known = 1;
        }
    }

    if (*file != '\0') {
        int fd = -1;

        if (log_expand_path(file, path, sizeof(path)) == 0) {
            fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        }
        if (fd >= 0) {
            logger.fd = fd;
        } else {
            dprintf(STDERR_FILENO, "[weft] cannot open WEFT_LOG_FILE \"%s\": %s; logging to stderr\n",
                    file, strerror(errno));
        }
    }
    if (!level_known) {
        logger.level = WEFT_LOG_WARN;
        /* Inside the once-routine: emit directly, weft_log_write would wait on itself. */
        log_emit_now(WEFT_LOG_WARN, __FILE__, __LINE__,
                       "WEFT_LOG_LEVEL=\"%s\" is not one of off, error, warn, info, debug, trace; "
                       "using warn",
                       level);
    }
}

weft_log_level_t weft_log_level(void)
{
    pthread_once(&logger.once, log_init);
    return logger.level;
}

void weft_log_write(weft_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    pthread_once(&logger.once, log_init);
    va_start(ap, fmt);
    log_emit(level, file, line, fmt, ap);
    va_end(ap);
}

static void log_emit(weft_log_level_t level, const char *file, int line, const char *fmt, va_list ap)
{
    char           buf[2048];
    struct timeval tv;
    const char    *base = strrchr(file, '/');
    int            len, n;

    gettimeofday(&tv, NULL);
    len = snprintf(buf, sizeof(buf), "[%ld.%06ld] [%s:%d:%ld] %s:%d %-5s ", (long)tv.tv_sec,
                   (long)tv.tv_usec, logger.host, (int)getpid(), (long)syscall(SYS_gettid),
                   base ? base + 1 : file, line, weft_log_level_name(level));
    if (len < 0) {
        return;
    }
    n = vsnprintf(buf + len, sizeof(buf) - (size_t)len, fmt, ap);
    if (n < 0) {
        return;
    }
    len += n;
    if ((size_t)len >= sizeof(buf) - 1) {
        /* Truncated: keep the line a line. */
        len = (int)sizeof(buf) - 2;
        memcpy(buf + len - 3, "...", 3);
    }
    buf[len++] = '\n';
    /* Nothing useful can be done when the log itself cannot be written. */
    if (write(logger.fd, buf, (size_t)len) < 0) {
        return;
    }
}
