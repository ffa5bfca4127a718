/*
 * UCX's first look at what a peer sent, in a process of its own. UCX
 * parses a worker address and a packed memory key without lengths or
 * checks of its own: from a peer that holds the token (the control
 * channel authenticates everything else), a mutated one has killed the
 * process that unpacked it (SIGSEGV over shared memory, SIGABRT over
 * cma, UCX 1.13). So before the server or a consumer hands such bytes to
 * its own UCX, weft-ucx-sandbox (a small program installed beside the
 * library) creates an endpoint to each address and unpacks each key on
 * it, with the same UCX configuration, and says whether it survived.
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

/*
 * Checks `addresses` (worker addresses, endpoints made to each) and `keys`
 * (unpacked on each endpoint) in the sandbox, by deadline_ns. WEFT_OK when
 * the sandbox survived them or no sandbox runs; WEFT_ERR_INVALID_PARAM
 * with `why` when UCX refused them or died on them there; WEFT_ERR_TIMEOUT
 * when it did not answer in time (it is killed). Blocks the caller.
 * Thread-safe.
 */
weft_status_t weft_ucx_sandbox_check(const weft_ucx_blob_t *addresses, uint32_t address_count,
                                     const weft_ucx_blob_t *keys, uint32_t key_count, uint64_t deadline_ns,
                                     char *why, size_t why_size);

/* The sandbox program's side: reads the request on stdin, answers "ok" on
 * descriptor 3 and exits 0, or exits otherwise (a message on stderr). */
int weft_ucx_sandbox_main(void);

#endif
