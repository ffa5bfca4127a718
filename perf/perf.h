/* weft-perf: the subcommands. Each takes the arguments after its name. */
#ifndef WEFT_PERF_PERF_H
#define WEFT_PERF_PERF_H

typedef struct perf_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} perf_command_t;

int perf_cmd_info(int argc, char **argv);
int perf_cmd_publish_lat(int argc, char **argv);
int perf_cmd_stress(int argc, char **argv);
int perf_cmd_update(int argc, char **argv);
int perf_cmd_quant(int argc, char **argv);
int perf_cmd_ipc(int argc, char **argv);
int perf_cmd_ucx(int argc, char **argv);
int perf_cmd_optim(int argc, char **argv);
int perf_cmd_hostile(int argc, char **argv);
int perf_cmd_registries(int argc, char **argv);
int perf_cmd_delta(int argc, char **argv);

#endif
