/* Bounded string building. Internal. */
#ifndef WEFT_COMMON_TEXT_H
#define WEFT_COMMON_TEXT_H

#include "compiler.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Appends formatted text to the NUL-terminated string in buf (size bytes).
 * Text that does not fit is cut, and the string ends in "..." to say so.
 * Returns 0, or -1 when the text was cut.
 */
int weft_text_append(char *buf, size_t size, const char *fmt, ...) WEFT_PRINTF(3, 4);

#ifdef __cplusplus
}
#endif

#endif
