/* Status helpers for libweft's own code. Internal. */
#ifndef WEFT_COMMON_STATUS_H
#define WEFT_COMMON_STATUS_H

#include <weft/weft.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The weft_status_t closest to an errno value; 0 gives WEFT_OK. */
weft_status_t weft_status_from_errno(int err);

#ifdef __cplusplus
}
#endif

#endif
