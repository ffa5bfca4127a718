/* weft-perf's peers: see peer.h. */
#include "config.h"

#include "peer.h"

#include <stdio.h>
#include <stdlib.h>

int perf_peer_run(const char *cmd, perf_peer_line_fn fn, void *arg, int *status)
{
    FILE   *pipe;
    char   *line = NULL;
    size_t  cap = 0;
    ssize_t len;

    fflush(NULL);
    pipe = popen(cmd, "r");
    if (pipe == NULL) {
        return -1;
    }
    while ((len = getline(&line, &cap, pipe)) >= 0) {
        if (len > 0 && line[0] == '{') {
            fn(arg, line);
        }
    }
    free(line);
    *status = pclose(pipe);
    return 0;
}
