/* weft-ucx-sandbox: the program in which UCX first parses a peer's worker
 * addresses and keys (ucx_sandbox.h). Installed beside the library; never
 * run by hand. */
#include "config.h"

#include "transport/ucx/ucx_sandbox.h"

#include <signal.h>

int main(void)
{
    /* A peer that went away while UCX wires up to it must not end the
     * check: its answer is what counts. */
    (void)signal(SIGPIPE, SIG_IGN);
    return weft_ucx_sandbox_main();
}
