/*
 * weft-perf update --kill-trainer V: the witness of a trainer that dies in
 * the middle of a step (see update_witness_main in update.h).
 *
 * The trainer cannot report its own death, so a process it forked before
 * any CUDA work does: it notices the death by being re-parented, then
 * looks at what the crash left. A host registry outlives its producer
 * (POSIX shared memory), so the last published version is read back
 * whole; a GPU registry's arena went with the trainer's CUDA context, so
 * there the engines' own copies (verified by them against the producer's
 * checksums before they acknowledged) are what is left to serve.
 */
#include "config.h"

#include "lib/json.h"
#include "lib/sysinfo.h"
#include "update.h"

#include <weft/checksum.h>

#include <signal.h>
#include <stdio.h>
#include <unistd.h>

/* How long consumers get to finish verifying V - 1 after the death (they
 * acknowledge before they verify). */
#define WITNESS_SETTLE_US 60000000ull

/* The host registry's latest version, every tensor of it checksummed
 * against what the producer computed when it wrote it: the wrong bytes
 * (a tensor whose sum differs counts whole), or -1 when it cannot be
 * read. *latest gets its version (0: none). */
static int64_t read_back(const char *name, const update_options_t *o, update_shared_t *shared, uint64_t *latest)
{
    tensor_kind_t   kinds[UPDATE_KINDS];
    weft_registry_h reg = NULL;
    weft_lease_t    lease;
    int64_t         wrong = 0;
    weft_status_t   status = weft_registry_open(name, WEFT_REGISTRY_OPEN_READ, &reg);

    *latest = 0;
    if (status == WEFT_OK) {
        status = weft_registry_acquire(reg, &lease);
    }
    if (status != WEFT_OK) {
        fprintf(stderr, "witness: the registry after the trainer's death: %s\n", weft_status_string(status));
        weft_registry_close(reg);
        return -1;
    }
    *latest = lease.version;
    update_kinds(o, kinds);
    for (uint64_t l = 0; l < o->layers && status == WEFT_OK; l++) {
        for (int k = 0; k < UPDATE_KINDS && status == WEFT_OK; k++) {
            const uint64_t  bytes = perf_expert_kind_bytes(&kinds[k]);
            const uint64_t *expect = update_checksums(shared, o, lease.version);
            for (uint64_t e = 0; e < o->experts && status == WEFT_OK; e++) {
                const uint32_t i = update_tensor_index(o, l, k, e);
                const void    *data;
                status = weft_registry_lease_tensor(reg, &lease, i, &data);
                if (status == WEFT_OK && weft_checksum_host(data, bytes) != expect[i]) {
                    wrong += (int64_t)bytes;
                }
            }
        }
    }
    weft_registry_release(reg, &lease);
    weft_registry_close(reg);
    return status == WEFT_OK ? wrong : -1;
}

int update_witness_main(const char *name, const update_options_t *o, update_shared_t *shared, pid_t trainer)
{
    const uint64_t v = o->kill_trainer_at, last = v - 1;
    uint64_t       latest = 0, at_last = 0, wrong = 0, start;
    int64_t        registry_wrong = 0;
    int            ok;

    /* Re-parented: the trainer is gone. A trainer that exits normally
     * (an error before V) kills this process first. */
    while (getppid() == trainer) {
        perf_sleep_us(10000);
    }
    start = perf_now_ns();
    for (uint64_t c = 0; c < o->consumers; c++) {
        while (shared->consumer[c].versions < last && kill(shared->consumer[c].pid, 0) == 0 &&
               perf_now_ns() - start < WITNESS_SETTLE_US * 1000) {
            perf_sleep_us(10000);
        }
    }
    if (!o->gpu) {
        registry_wrong = read_back(name, o, shared, &latest);
    }
    for (uint64_t c = 0; c < o->consumers; c++) {
        at_last += shared->consumer[c].versions == last;
        wrong += shared->consumer[c].wrong_bytes;
        /* They wait for V, which will never come. */
        kill(shared->consumer[c].pid, SIGKILL);
    }
    weft_registry_unlink(name);
    ok = at_last == o->consumers && wrong == 0 && (o->gpu || (latest == last && registry_wrong == 0));
    if (o->json) {
        perf_json_t j;
        perf_json_begin(&j, stdout);
        perf_json_str(&j, "command", "update");
        perf_json_str(&j, "case", "kill-trainer");
        perf_json_str(&j, "memory", o->gpu ? "cuda" : "host");
        perf_json_uint(&j, "trainer_killed_in_version", v);
        if (o->gpu) {
            perf_json_str(&j, "registry_latest", "gone with the trainer's GPU memory");
        } else {
            perf_json_uint(&j, "registry_latest", latest);
            perf_json_int(&j, "registry_wrong_bytes", registry_wrong);
        }
        perf_json_uint(&j, "consumers", o->consumers);
        perf_json_uint(&j, "consumers_holding_last_version", at_last);
        perf_json_uint(&j, "wrong_bytes", wrong);
        perf_json_bool(&j, "ok", ok);
        perf_json_end(&j);
    } else {
        printf("# weft-perf update --kill-trainer %llu: the trainer died writing version %llu; ",
               (unsigned long long)v, (unsigned long long)v);
        if (!o->gpu) {
            printf("the registry's latest is %llu, %lld bytes of it wrong; ", (unsigned long long)latest,
                   (long long)registry_wrong);
        }
        printf("%llu of %llu consumers hold version %llu, %llu wrong bytes: %s\n", (unsigned long long)at_last,
               (unsigned long long)o->consumers, (unsigned long long)last, (unsigned long long)wrong,
               ok ? "ok" : "FAILED");
    }
    fflush(stdout);
    return ok ? 0 : 1;
}
