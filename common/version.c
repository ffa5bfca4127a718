/* The library's version, from the macros of <weft/weft.h>. */
#include <weft/weft.h>

#define WEFT_STRINGIFY_(x) #x
#define WEFT_STRINGIFY(x)  WEFT_STRINGIFY_(x)

WEFT_API const char *weft_version(void)
{
    return WEFT_STRINGIFY(WEFT_VERSION_MAJOR) "." WEFT_STRINGIFY(WEFT_VERSION_MINOR) "." WEFT_STRINGIFY(
        WEFT_VERSION_PATCH);
}

WEFT_API unsigned weft_version_number(void)
{
    return WEFT_VERSION;
}
