/*
 * A program built the way a user builds against an installed libweft:
 *     cc consumer.c $(pkg-config --cflags --libs weft)
 * It checks that the headers and the library it loaded agree.
 */
#include <stdio.h>
#include <string.h>
#include <weft/weft.h>

int main(void)
{
    weft_backend_info_t host;

    if (weft_version_number() != WEFT_VERSION) {
        fprintf(stderr, "headers %d.%d.%d but library %s\n", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR,
                WEFT_VERSION_PATCH, weft_version());
        return 1;
    }
    if (weft_dtype_size(WEFT_DTYPE_FP8_E4M3) != 1 ||
        strcmp(weft_status_string(WEFT_ERR_BUSY), "resource busy") != 0) {
        fprintf(stderr, "unexpected answers from the library\n");
        return 1;
    }
    if (weft_backend_query(WEFT_BACKEND_HOST, &host) != WEFT_OK || !host.available) {
        fprintf(stderr, "host backend not available\n");
        return 1;
    }
    printf("consumer: libweft %s works\n", weft_version());
    return 0;
}
