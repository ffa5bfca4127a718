/* Bounded string building. */
#include "text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int weft_text_append(char *buf, size_t size, const char *fmt, ...)
{
    size_t  used;
    va_list ap;
    int     n;

    if (size == 0) {
        return -1;
    }
    used = strnlen(buf, size);
    if (used >= size - 1) {
        return -1;
    }
    va_start(ap, fmt);
    n = vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size - used) {
        if (size >= 4) {
            memcpy(buf + size - 4, "...", 4);
        }
        return -1;
    }
    return 0;
}
