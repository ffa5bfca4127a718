/* weft_status_t: descriptions and the translation of errno. */
#include "status.h"

#include "compiler.h"

#include <errno.h>

/* Indexed by -status; designated initializers keep each text at its code. */
static const char *const status_strings[] = {
    [-WEFT_OK]                = "success",
    [-WEFT_ERR_INVALID_PARAM] = "invalid parameter",
    [-WEFT_ERR_NO_MEMORY]     = "out of host memory",
    [-WEFT_ERR_NOT_FOUND]     = "not found",
    [-WEFT_ERR_EXISTS]        = "already exists",
    [-WEFT_ERR_BUSY]          = "resource busy",
    [-WEFT_ERR_TIMEOUT]       = "timed out",
    [-WEFT_ERR_CORRUPT]       = "corrupt data",
    [-WEFT_ERR_VERSION]       = "incompatible version",
    [-WEFT_ERR_UNSUPPORTED]   = "not supported by this build or machine",
    [-WEFT_ERR_IO]            = "system call failed",
    [-WEFT_ERR_STATE]         = "not allowed in the current state",
    [-WEFT_ERR_PERMISSION]    = "permission denied",
    [-WEFT_ERR_NO_DEVICE]     = "no usable device",
    [-WEFT_ERR_CUDA]          = "CUDA error",
    [-WEFT_ERR_UCX]           = "UCX error",
    [-WEFT_ERR_NCCL]          = "NCCL error",
    [-WEFT_ERR_CONNECTION]    = "connection to a peer failed",
    [-WEFT_ERR_AUTH]          = "authentication failed",
    [-WEFT_ERR_CANCELED]      = "canceled",
    [-WEFT_ERR_NO_SPACE]      = "no space left in a fixed-size table or buffer",
};

_Static_assert(WEFT_ARRAY_SIZE(status_strings) == (size_t)-WEFT_ERR_LAST,
               "every status code needs a description");

WEFT_API const char *weft_status_string(weft_status_t status)
{
    if (status == WEFT_INPROGRESS) {
        return "operation in progress";
    }
    if (status > WEFT_OK || status <= WEFT_ERR_LAST || status_strings[-status] == NULL) {
        return "unknown status";
    }
    return status_strings[-status];
}

weft_status_t weft_status_from_errno(int err)
{
    switch (err) {
    case 0:
        return WEFT_OK;
    case EINVAL:
    case ENAMETOOLONG:
        return WEFT_ERR_INVALID_PARAM;
    case ENOMEM:
        return WEFT_ERR_NO_MEMORY;
    case ENOENT:
    case ESRCH:
        return WEFT_ERR_NOT_FOUND;
    case EEXIST:
        return WEFT_ERR_EXISTS;
    case EBUSY:
    case EAGAIN:
        return WEFT_ERR_BUSY;
    case ETIMEDOUT:
        return WEFT_ERR_TIMEOUT;
    case EACCES:
    case EPERM:
        return WEFT_ERR_PERMISSION;
    case ENOSPC:
    case EMFILE:
    case ENFILE:
        return WEFT_ERR_NO_SPACE;
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case ENOTCONN:
    case EHOSTUNREACH:
    case ENETUNREACH:
        return WEFT_ERR_CONNECTION;
    case ENOSYS:
    case EOPNOTSUPP:
        return WEFT_ERR_UNSUPPORTED;
    case ECANCELED:
        return WEFT_ERR_CANCELED;
    default:
        return WEFT_ERR_IO;
    }
}
