/*
 * Naming processes in shared records so that the records of a process
 * that died can be taken back. A pid alone is not enough: pids are reused;
 * pid plus the process's start time is. Internal.
 */
#ifndef WEFT_REGISTRY_PROCESS_H
#define WEFT_REGISTRY_PROCESS_H

#include <stdint.h>

/* The owner word of the calling process (see layout.h); 0 on failure. */
uint64_t weft_process_self(void);

/*
 * 1 when the process named by owner is running (not exited, not a zombie,
 * pid not reused). Processes in another pid namespace are not visible:
 * every user of a registry must share one.
 */
int weft_process_alive(uint64_t owner);

/* The pid in an owner word. */
static inline int weft_process_pid(uint64_t owner)
{
    return (int)(owner >> 32);
}

#endif
