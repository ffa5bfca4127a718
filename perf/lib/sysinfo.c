/* Clock, CPU placement and host facts for weft-perf's subcommands. */
#include "config.h" /* _GNU_SOURCE, for sched_setaffinity and CPU_* */

#include "sysinfo.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <weft/weft.h>

uint64_t perf_now_ns(void)
{
    struct timespec ts;

    /* CLOCK_MONOTONIC cannot fail with a valid pointer. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void perf_spin_until_ns(uint64_t deadline_ns)
{
    while (perf_now_ns() < deadline_ns) {
        __asm__ __volatile__("" ::: "memory");
    }
}

void perf_sleep_us(uint64_t us)
{
    struct timespec left = {.tv_sec = (time_t)(us / 1000000u), .tv_nsec = (long)(us % 1000000u) * 1000};

    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

int perf_cpus_allowed(int cpu[2])
{
    cpu_set_t set;
    int       found = 0;

    cpu[0] = cpu[1] = 0;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        return 1;
    }
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set)) {
            continue;
        }
        if (found < 2) {
            cpu[found] = c;
        }
        found++;
    }
    if (found < 2) {
        cpu[1] = cpu[0];
    }
    return found > 0 ? found : 1;
}

int perf_pin_cpu(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        fprintf(stderr, "weft-perf: cannot pin process %d to CPU %d: %s\n", (int)getpid(), cpu,
                strerror(errno));
        return -1;
    }
    return 0;
}

const char *perf_config_value(const char *name)
{
    for (size_t i = 0; i < weft_config_count(); i++) {
        weft_config_var_t var;

        if (weft_config_describe(i, &var) == WEFT_OK && strcmp(var.name, name) == 0) {
            return var.value;
        }
    }
    return NULL;
}

void perf_host_name(char *buf, size_t size)
{
    if (gethostname(buf, size) != 0 || size == 0) {
        snprintf(buf, size, "unknown");
        return;
    }
    buf[size - 1] = '\0';
}

void perf_print_host(FILE *out, int cpus_allowed)
{
    char host[256];

    perf_host_name(host, sizeof(host));
    fprintf(out, "# libweft %s, host %s, %ld CPUs online (%d allowed)\n", weft_version(), host,
            sysconf(_SC_NPROCESSORS_ONLN), cpus_allowed);
}
