/*
 * libweft's leaf header: the version, the status codes, the element types
 * and the opaque handles of every module. Every other public header
 * includes it and nothing else of libweft's below itself, so the headers
 * form no cycle: <weft/types.h> <- module headers <- <weft/weft.h>.
 *
 * Conventions (all calls of libweft):
 *  - A call returns weft_status_t: WEFT_OK (0) on success, WEFT_INPROGRESS
 *    (1) where an operation was started and completes later, a negative
 *    WEFT_ERR_* otherwise. Details of a failure are logged (WEFT_LOG_LEVEL).
 *  - Output arguments come last and are written only on success.
 *  - Strings returned as `const char *` are static unless a call says
 *    otherwise: never free them.
 *  - Calls in this header are thread-safe.
 */
#ifndef WEFT_TYPES_H
#define WEFT_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the headers. configure reads these three lines. */
#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0

/* One number that orders versions: WEFT_VERSION_NUMBER(0, 1, 0) == 100. */
#define WEFT_VERSION_NUMBER(major, minor, patch) \
    ((major) * 10000 + (minor) * 100 + (patch))
#define WEFT_VERSION \
    WEFT_VERSION_NUMBER(WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH)

#if defined(__GNUC__) && defined(WEFT_BUILDING_LIBRARY)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

/*
 * Status codes. Values never change once released; new codes are added at
 * the end of the negative range.
 */
typedef enum weft_status {
    WEFT_OK                 = 0,
    WEFT_INPROGRESS         = 1,   /* started; completes later */
    WEFT_ERR_INVALID_PARAM  = -1,  /* an argument is out of its domain */
    WEFT_ERR_NO_MEMORY      = -2,  /* host memory could not be allocated */
    WEFT_ERR_NOT_FOUND      = -3,  /* no such object (name, tensor, device) */
    WEFT_ERR_EXISTS         = -4,  /* the object exists already */
    WEFT_ERR_BUSY           = -5,  /* a resource is in use; try again later */
    WEFT_ERR_TIMEOUT        = -6,  /* the wait ran out of time */
    WEFT_ERR_CORRUPT        = -7,  /* data read back fails validation */
    WEFT_ERR_VERSION        = -8,  /* an incompatible ABI or format version */
    WEFT_ERR_UNSUPPORTED    = -9,  /* not built in, or not possible here */
    WEFT_ERR_IO             = -10, /* a system call failed */
    WEFT_ERR_STATE          = -11, /* the call is not allowed in this state */
    WEFT_ERR_PERMISSION     = -12, /* the operating system refused access */
    WEFT_ERR_NO_DEVICE      = -13, /* no usable GPU or NIC */
    WEFT_ERR_CUDA           = -14, /* the CUDA runtime or driver failed */
    WEFT_ERR_UCX            = -15, /* UCX failed */
    WEFT_ERR_NCCL           = -16, /* NCCL failed */
    WEFT_ERR_CONNECTION     = -17, /* a peer is unreachable or went away */
    WEFT_ERR_AUTH           = -18, /* a peer failed authentication */
    WEFT_ERR_CANCELED       = -19, /* the operation was canceled */
    WEFT_ERR_NO_SPACE       = -20, /* a fixed-size table or buffer is full */
    WEFT_ERR_LAST           = -21  /* one past the last code; not returned */
} weft_status_t;

/*
 * A short English description of a status code. Never NULL: an unknown
 * code gives "unknown status". The string is static.
 */
WEFT_API const char *weft_status_string(weft_status_t status);

/* The library's version as "MAJOR.MINOR.PATCH"; static. */
WEFT_API const char *weft_version(void);

/*
 * The library's version as WEFT_VERSION_NUMBER(); compare it with
 * WEFT_VERSION to detect a program built against other headers.
 */
WEFT_API unsigned weft_version_number(void);

/*
 * Element types. 0 is never a valid type, so a zeroed struct is caught.
 * Values never change once released.
 */
typedef enum weft_dtype {
    WEFT_DTYPE_INVALID  = 0,
    WEFT_DTYPE_FP32     = 1,
    WEFT_DTYPE_BF16     = 2,
    WEFT_DTYPE_FP16     = 3,
    WEFT_DTYPE_FP8_E4M3 = 4,  /* OCP e4m3fn: no infinities, NaN = 0x7F/0xFF */
    WEFT_DTYPE_FP8_E5M2 = 5,
    WEFT_DTYPE_UE8M0    = 6,  /* unsigned power-of-two scale: exponent byte */
    WEFT_DTYPE_UINT8    = 7,
    WEFT_DTYPE_INT32    = 8,
    WEFT_DTYPE_INT64    = 9,
    WEFT_DTYPE_LAST     = 10  /* one past the last type */
} weft_dtype_t;

/* Bytes per element of a dtype; 0 for an invalid one. */
WEFT_API size_t weft_dtype_size(weft_dtype_t dtype);

/* Lower-case name ("fp32", "fp8_e4m3", …); "invalid" for an unknown one. */
WEFT_API const char *weft_dtype_name(weft_dtype_t dtype);

/*
 * Parses a name as printed by weft_dtype_name(). Returns
 * WEFT_ERR_INVALID_PARAM for an unknown name; *dtype is written on success.
 */
WEFT_API weft_status_t weft_dtype_from_name(const char *name, weft_dtype_t *dtype);

/*
 * The opaque handles, one per object; each module's header says what its
 * calls do with them.
 */
typedef struct weft_registry *weft_registry_h;         /* <weft/registry.h> */
typedef struct weft_plan *weft_plan_h;                 /* <weft/transport.h> */
typedef struct weft_server *weft_server_h;             /* <weft/transport.h> */
typedef struct weft_remote *weft_remote_h;             /* <weft/transport.h> */
typedef struct weft_ucx_memory *weft_ucx_memory_h;     /* <weft/transport.h> */
typedef struct weft_optim *weft_optim_h;               /* <weft/optim.h> */
typedef struct weft_optim_writer *weft_optim_writer_h; /* <weft/optim.h> */

#ifdef __cplusplus
}
#endif

#endif
