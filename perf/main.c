/*
 * weft-perf: libweft's measurement tool. Each subcommand measures one thing
 * against its ceiling and its peer in the same run and prints a table with
 * a '#' preamble (or JSON with --json). Uses the public API only.
 */
#include "perf.h"

#include <stdio.h>
#include <string.h>
#include <weft/weft.h>

static const perf_command_t commands[] = {
    {"info", "library version, backends built and found, WEFT_* settings", perf_cmd_info},
    {"publish-lat", "publish -> waiting reader woken, vs a Unix-socket notify", perf_cmd_publish_lat},
    {"stress", "producer and reader processes, every read verified", perf_cmd_stress},
    {"update", "the main job: expert versions published, received, verified", perf_cmd_update},
    {"quant", "FP8 writer on the GPU vs a D2D copy and torch.compile", perf_cmd_quant},
    {"ipc", "GPU registry -> engine tensors over cuda_ipc vs peer copy, NCCL, torch", perf_cmd_ipc},
    {"optim", "staged AdamW step on a GPU vs the PCIe floor and a torch pipeline", perf_cmd_optim},
    {"ucx", "ucx transport put bandwidth, tcp across netns and shm, vs ucx_perftest", perf_cmd_ucx},
    {"hostile", "what hostile connections to a ucx server add to a consumer's latency", perf_cmd_hostile},
    {"registries", "the registries in /dev/shm, who uses them; --remove-stale", perf_cmd_registries},
    {"delta", "delta versions on the host: wire bytes, encode and apply vs memcpy", perf_cmd_delta},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: weft-perf COMMAND [OPTIONS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        fprintf(out, "  %-14s %s\n", commands[i].name, commands[i].summary);
    }
    fprintf(out, "\n'weft-perf COMMAND --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        printf("weft-perf %s\n", weft_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            return commands[i].run(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "weft-perf: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
