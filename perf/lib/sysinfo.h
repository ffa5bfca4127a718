/* weft-perf: the clock, CPU placement, and the facts every preamble
 * states (library version, host, CPUs, WEFT_* settings). */
#ifndef WEFT_PERF_SYSINFO_H
#define WEFT_PERF_SYSINFO_H

#include <stdint.h>
#include <stdio.h>

/* CLOCK_MONOTONIC in ns: one clock for every process of the machine, so
 * that a timestamp taken in one process can be subtracted in another. */
uint64_t perf_now_ns(void);

/* Busy-waits until perf_now_ns() >= deadline_ns. Precise to the clock's
 * read cost, unlike nanosleep (timer slack, wake-up latency). */
void perf_spin_until_ns(uint64_t deadline_ns);

/* Sleeps for us microseconds (EINTR resumes the sleep). */
void perf_sleep_us(uint64_t us);

/* Number of CPUs this process may run on (at least 1). When it is 2 or
 * more, cpu[0] and cpu[1] get two distinct allowed CPUs; otherwise both
 * get the one CPU. */
int perf_cpus_allowed(int cpu[2]);

/* Pins the calling process to one CPU; prints why not and returns -1 on
 * failure. */
int perf_pin_cpu(int cpu);

/* The value in force of a WEFT_* variable, as libweft reports it (NULL
 * when libweft does not know the name). Reads libweft's configuration:
 * in a process that will fork children which must see another value,
 * call it only after those forks. */
const char *perf_config_value(const char *name);

/* Prints "# libweft V, host H, N CPUs online (M allowed)": M from
 * perf_cpus_allowed() before the process pinned itself. */
void perf_print_host(FILE *out, int cpus_allowed);

/* Host name into buf ("unknown" when it cannot be read). */
void perf_host_name(char *buf, size_t size);

#endif
