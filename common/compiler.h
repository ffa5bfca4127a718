/* Small compiler helpers shared by every part of libweft. Internal. */
#ifndef WEFT_COMMON_COMPILER_H
#define WEFT_COMMON_COMPILER_H

#define WEFT_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define WEFT_LIKELY(x)   __builtin_expect(!!(x), 1)
#define WEFT_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define WEFT_PRINTF(fmt_index, first_arg) \
    __attribute__((format(printf, fmt_index, first_arg)))

/* Round x up to a multiple of align, a power of two. */
#define WEFT_ALIGN_UP(x, align) (((x) + ((align) - 1)) & ~((__typeof__(x))(align) - 1))

#endif
