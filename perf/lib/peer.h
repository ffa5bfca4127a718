/*
 * weft-perf's peers: a baseline that is another program (the PyTorch
 * script beside each GPU subcommand) run through the shell, whose answers
 * are the lines of its output that are JSON objects (compiler and library
 * chatter in between is skipped).
 */
#ifndef WEFT_PERF_LIB_PEER_H
#define WEFT_PERF_LIB_PEER_H

/* Gets each JSON line as read, its end of line included. */
typedef void (*perf_peer_line_fn)(void *arg, const char *line);

/* Runs cmd with popen() (stdio flushed first, so that nothing is written
 * twice) and hands every line that starts with '{' to fn. Returns 0 and
 * *status the command's wait status from pclose() (-1 when that failed),
 * or -1 when the command could not be started. */
int perf_peer_run(const char *cmd, perf_peer_line_fn fn, void *arg, int *status);

#endif
