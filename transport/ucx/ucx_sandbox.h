/*
 * UCX's first look at what a peer sent, in a process of its own. UCX
 * parses a worker address and a packed memory key without lengths or
 * checks of its own: from a peer that holds the token (the control
 * channel authenticates everything else), a mutated one has killed the
 * process that unpacked it (SIGSEGV over shared memory, SIGABRT over
 * cma, UCX 1.13). So before the server or a consumer hands such bytes to
 * its own UCX, weft-ucx-sandbox (a small program installed beside the
 * library) creates an endpoint to each address and unpacks each key on
 * it, with the same UCX configuration, lets the connections run for a
 * moment (a port where another service answers makes UCX assert), and
 * says whether it survived.
 * What survives there is then used here: the parse is the same.
 *
 * The program is $WEFT_UCX_SANDBOX, or the installed one; WEFT_UCX_SANDBOX
 * =off skips the check (the risk above comes back). Where the program is
 * not found, the check is skipped with a warning, once.
 */
#ifndef WEFT_TRANSPORT_UCX_UCX_SANDBOX_H
#define WEFT_TRANSPORT_UCX_UCX_SANDBOX_H

#include "transport/ctl/ucx_views.h"

#include <stdint.h>
#include <weft/types.h>

/* A check running in the sandbox (the server's thread polls it between
 * turns rather than waiting ~10 ms, UCX's start in the sandbox, per
 * connecting consumer). */
typedef struct weft_ucx_probe weft_ucx_probe_t;

/*
 * Starts checking `addresses` (worker addresses: an endpoint is made to
 * each) and `keys` (each unpacked on each endpoint) in the sandbox, to end
 * by deadline_ns. The request is copied: the arguments may go once this
 * returns. WEFT_INPROGRESS with *probe to poll; WEFT_OK with *probe NULL
 * when no sandbox runs (WEFT_UCX_SANDBOX=off, or not found: warned once);
 * WEFT_ERR_NO_MEMORY or WEFT_ERR_IO (it could not start) with `why`.
 * Never blocks. Thread-safe.
 */
weft_status_t weft_ucx_probe_start(const weft_ucx_blob_t *addresses, uint32_t address_count,
                                   const weft_ucx_blob_t *keys, uint32_t key_count, uint64_t deadline_ns,
                                   weft_ucx_probe_t **probe, char *why, size_t why_size);

/*
 * Looks at a probe without waiting. WEFT_INPROGRESS while it runs; once it
 * ended, the probe is freed and the answer returned: WEFT_OK when the
 * sandbox survived everything, WEFT_ERR_INVALID_PARAM with `why` when UCX
 * refused or died on something there, WEFT_ERR_TIMEOUT when the deadline
 * passed first (the sandbox is killed). One thread at a time per probe.
 */
weft_status_t weft_ucx_probe_poll(weft_ucx_probe_t *probe, char *why, size_t why_size);

/* The descriptor that becomes readable when the probe may have ended. */
int weft_ucx_probe_fd(const weft_ucx_probe_t *probe);

/* Ends a probe that is still running (its sandbox killed and reaped) and
 * frees it. NULL is a no-op. */
void weft_ucx_probe_cancel(weft_ucx_probe_t *probe);

/*
 * The same check, waited for: start, then poll until it ends. For a
 * caller that blocks anyway (a consumer checking the server's address
 * while it connects). Thread-safe.
 */
weft_status_t weft_ucx_sandbox_check(const weft_ucx_blob_t *addresses, uint32_t address_count,
                                     const weft_ucx_blob_t *keys, uint32_t key_count, uint64_t deadline_ns,
                                     char *why, size_t why_size);

/* The sandbox program's side: reads the request on stdin, answers "ok" on
 * descriptor 3 and exits 0, or exits otherwise (a message on stderr). */
int weft_ucx_sandbox_main(void);

#endif
