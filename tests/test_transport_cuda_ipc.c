/*
 * The cuda_ipc transport and GPU registries, across processes: exact
 * bytes after many versions (same GPU and GPU to GPU), strided views into
 * fused tensors through the batched kernel and through the copy engines,
 * the failure ordering (a mapping that fails records the error, never the
 * version; the consumer keeps v-1; the next version works), offload and
 * reload cycles with consumers rebinding (and views rebound), an offload
 * refused while a lease is held, a consumer killed in the middle of its
 * copies, many consumers. Exits 77 (skipped) where no GPU is present;
 * the GPU-to-GPU cases run where there are two.
 *
 * Every process that uses CUDA is forked before it touches CUDA: the test
 * process itself never does (Check forks each test from the runner).
 */
#include "config.h"

#include "lib/gpu_skip.h"
#include "registry/layout.h"

#include "lib/child.h"
#include "lib/harness.h"
#include "perf/lib/payload.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <weft/weft.h>

#define EXPERTS      4
#define W_ROWS       300 /* not a multiple of 128, nor of 16 */
#define W_COLS       200
#define SCALE_ROWS   3   /* ⌈300/128⌉ */
#define SCALE_COLS   2   /* ⌈200/128⌉ */
#define ROLES        3
#define TENSORS      (EXPERTS * ROLES)
#define W_BYTES      ((uint64_t)W_ROWS * W_COLS)
#define SCALE_BYTES  ((uint64_t)SCALE_ROWS * SCALE_COLS * 4)
#define PAD_COLS     56  /* padding of the strided views' rows */
#define POISON       0xA5
#define LONG_WAIT_US 60000000u

static int gpu_count;

/* ------------------------------------------------------------ the data */

static void tensor_name(char *buf, size_t size, int expert, int role)
{
    static const char *suffix[] = {"weight", "weight_t", "weight_scale_inv"};

    snprintf(buf, size, "model.layers.0.mlp.experts.%d.gate_up_proj.%s", expert, suffix[role]);
}

static uint64_t tensor_bytes(int role)
{
    return role == 2 ? SCALE_BYTES : W_BYTES;
}

static void unique_name(char *buf, size_t size, const char *what)
{
    static int n;

    snprintf(buf, size, "t-ipc-%s-%d-%d", what, (int)getpid(), n++);
}

/* ----------------------------------------------------------- processes */

/* ------------------------------------------------------------ producer */

typedef struct producer {
    weft_registry_h reg;
    uint32_t        index[TENSORS];
} producer_t;

static void producer_create(producer_t *p, const char *name, int device, uint32_t slots)
{
    /* With checksums: plans check their unstrided views every version. */
    weft_registry_params_t params = {
        .field_mask = WEFT_REGISTRY_FIELD_MEMORY | WEFT_REGISTRY_FIELD_SLOTS | WEFT_REGISTRY_FIELD_CHECKSUMS,
        .slot_count = slots,
        .memory     = WEFT_MEMORY_CUDA,
        .device     = device,
        .checksums  = 1,
    };

    CHILD_CHECK(weft_registry_create(name, &params, &p->reg) == WEFT_OK);
    for (int e = 0; e < EXPERTS; e++) {
        for (int r = 0; r < ROLES; r++) {
            char               tname[WEFT_TENSOR_NAME_MAX];
            weft_tensor_desc_t d = {
                .name   = tname,
                .layer  = 0,
                .expert = e,
                .role   = r == 0 ? WEFT_ROLE_W : r == 1 ? WEFT_ROLE_WT : WEFT_ROLE_SCALE,
                .dtype  = r == 2 ? WEFT_DTYPE_FP32 : WEFT_DTYPE_FP8_E4M3,
                .ndim   = 2,
            };

            tensor_name(tname, sizeof(tname), e, r);
            d.shape[0] = r == 0 ? W_ROWS : r == 1 ? W_COLS : SCALE_ROWS;
            d.shape[1] = r == 0 ? W_COLS : r == 1 ? W_ROWS : SCALE_COLS;
            CHILD_CHECK(weft_registry_declare(p->reg, &d, &p->index[e * ROLES + r]) == WEFT_OK);
        }
    }
    CHILD_CHECK(weft_registry_seal(p->reg) == WEFT_OK);
}

/* Writes version v's bytes into a fresh slot and publishes it. */
static void producer_publish(producer_t *p, uint64_t v)
{
    static uint8_t host[W_BYTES];

    CHILD_CHECK(weft_registry_write_begin(p->reg, LONG_WAIT_US, NULL) == WEFT_OK);
    for (uint32_t t = 0; t < TENSORS; t++) {
        uint64_t bytes = tensor_bytes((int)(t % ROLES));
        void    *dst;

        payload_fill(host, bytes, v, t);
        CHILD_CHECK(weft_registry_write_tensor(p->reg, p->index[t], &dst) == WEFT_OK);
        CHILD_CHECK(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    }
    /* A copy from pageable memory may return before its DMA landed, and
     * publish synchronizes nothing (registry.h): without this, consumers
     * read the tail of the last copies stale (24 wrong bytes of version
     * 10, every consumer, under make -j8 check on the H200). */
    CHILD_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHILD_CHECK(weft_registry_publish(p->reg, v, NULL) == WEFT_OK);
}

/* Waits until `n` consumers registered. */
static void producer_wait_consumers_registered(producer_t *p, uint32_t n)
{
    weft_registry_stats_t stats;

    for (int tries = 0; tries < 60000; tries++) {
        CHILD_CHECK(weft_registry_get_stats(p->reg, &stats) == WEFT_OK);
        if (stats.consumers >= n) {
            return;
        }
        usleep(1000);
    }
    CHILD_FAIL("producer: %u of %u consumers registered after 60 s", stats.consumers, n);
}

/* ------------------------------------------------------------ consumer */

typedef struct consumer {
    weft_registry_h reg;
    weft_plan_h     plan;
    uint32_t        id;
    int             device;
    int             strided;
    uint8_t        *fused[ROLES]; /* [EXPERTS, rows, cols (+pad)] per role */
    uint64_t        fused_bytes[ROLES];
} consumer_t;

static uint64_t row_pitch(const consumer_t *c, int role)
{
    uint64_t cols = role == 0 ? W_COLS : role == 1 ? W_ROWS : SCALE_COLS * 4;

    /* Scales stay contiguous (one 24-byte range each): the batched kernel
     * gets them; W and WT rows get padding when strided. */
    return cols + (c->strided && role < 2 ? PAD_COLS : 0);
}

static uint64_t role_rows(int role)
{
    return role == 0 ? W_ROWS : role == 1 ? W_COLS : SCALE_ROWS;
}

static void consumer_alloc(consumer_t *c)
{
    for (int r = 0; r < ROLES; r++) {
        c->fused_bytes[r] = EXPERTS * role_rows(r) * row_pitch(c, r);
        CHILD_CHECK(cudaMalloc((void **)&c->fused[r], c->fused_bytes[r]) == cudaSuccess);
        CHILD_CHECK(cudaMemset(c->fused[r], POISON, c->fused_bytes[r]) == cudaSuccess);
    }
    /* The memset runs on the legacy stream, which the plan's non-blocking
     * streams do not wait for: done before the views go to the plan
     * (weft_recv_view_t.memory), or it may land on a copied version. */
    CHILD_CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

static void consumer_views(const consumer_t *c, weft_recv_view_t *views, char names[][WEFT_TENSOR_NAME_MAX])
{
    for (int e = 0; e < EXPERTS; e++) {
        for (int r = 0; r < ROLES; r++) {
            weft_recv_view_t *v = &views[e * ROLES + r];
            uint64_t          pitch = row_pitch(c, r), esize = r == 2 ? 4 : 1;

            tensor_name(names[e * ROLES + r], WEFT_TENSOR_NAME_MAX, e, r);
            *v = (weft_recv_view_t){
                .field_mask = WEFT_RECV_VIEW_FIELD_MEMORY | WEFT_RECV_VIEW_FIELD_STRIDES,
                .name       = names[e * ROLES + r],
                .role       = r == 0 ? WEFT_ROLE_W : r == 1 ? WEFT_ROLE_WT : WEFT_ROLE_SCALE,
                .dtype      = r == 2 ? WEFT_DTYPE_FP32 : WEFT_DTYPE_FP8_E4M3,
                .ndim       = 2,
                .data       = c->fused[r] + (uint64_t)e * role_rows(r) * pitch,
                .memory     = WEFT_MEMORY_CUDA,
            };
            v->shape[0]   = role_rows(r);
            v->shape[1]   = r == 0 ? W_COLS : r == 1 ? W_ROWS : SCALE_COLS;
            v->strides[0] = pitch / esize;
            v->strides[1] = 1;
        }
    }
}

static void consumer_open(consumer_t *c, const char *name, int device, int strided)
{
    weft_recv_view_t views[TENSORS];
    char             names[TENSORS][WEFT_TENSOR_NAME_MAX];
    weft_status_t    status = WEFT_ERR_NOT_FOUND;

    memset(c, 0, sizeof(*c));
    c->device  = device;
    c->strided = strided;
    CHILD_CHECK(cudaSetDevice(device) == cudaSuccess);
    for (int tries = 0; tries < 30000 && status != WEFT_OK; tries++) {
        status = weft_registry_open(name, WEFT_REGISTRY_OPEN_READ, &c->reg);
        if (status != WEFT_OK) {
            usleep(1000);
        }
    }
    CHILD_CHECK(status == WEFT_OK);
    CHILD_CHECK(weft_registry_consumer_register(c->reg, "test", &c->id) == WEFT_OK);
    consumer_alloc(c);
    consumer_views(c, views, names);
    CHILD_CHECK(weft_plan_create(c->reg, WEFT_TRANSPORT_CUDA_IPC, views, TENSORS, &c->plan) ==
                    WEFT_OK);
}

/* Bytes of the fused tensors that differ from version v (padding must
 * still hold the poison). */
static uint64_t consumer_wrong_bytes(const consumer_t *c, uint64_t v)
{
    uint64_t wrong = 0;

    for (int r = 0; r < ROLES; r++) {
        uint8_t *host = malloc(c->fused_bytes[r]);
        uint64_t pitch = row_pitch(c, r), row_bytes = tensor_bytes(r) / role_rows(r);

        CHILD_CHECK(host != NULL);
        CHILD_CHECK(cudaMemcpy(host, c->fused[r], c->fused_bytes[r], cudaMemcpyDeviceToHost) ==
                        cudaSuccess);
        for (int e = 0; e < EXPERTS; e++) {
            const uint8_t *base = host + (uint64_t)e * role_rows(r) * pitch;

            for (uint64_t row = 0; row < role_rows(r); row++) {
                for (uint64_t col = 0; col < pitch; col++) {
                    uint8_t want = col < row_bytes ? payload_byte(v, (uint32_t)(e * ROLES + r),
                                                                  row * row_bytes + col)
                                                   : POISON;
                    wrong += base[row * pitch + col] != want;
                }
            }
        }
        free(host);
    }
    return wrong;
}

/* Receives versions until `last`, checking every one's bytes. */
static void consumer_receive_until(consumer_t *c, uint64_t last)
{
    uint64_t v = 0;

    while (v < last) {
        uint64_t got;

        CHILD_CHECK(weft_plan_receive(c->plan, c->id, v, LONG_WAIT_US, &got) == WEFT_OK);
        CHILD_CHECK(got > v);
        if (consumer_wrong_bytes(c, got) != 0) {
            CHILD_FAIL("version %llu: %llu wrong bytes", (unsigned long long)got,
                       (unsigned long long)consumer_wrong_bytes(c, got));
        }
        v = got;
    }
}

static void consumer_close(consumer_t *c)
{
    CHILD_CHECK(weft_plan_destroy(c->plan) == WEFT_OK);
    for (int r = 0; r < ROLES; r++) {
        CHILD_CHECK(cudaFree(c->fused[r]) == cudaSuccess);
    }
    CHILD_CHECK(weft_registry_close(c->reg) == WEFT_OK);
}

/* ------------------------------------------- versions, GPU by GPU */

typedef struct transfer_case {
    int      src, dst, strided, consumers;
    uint64_t versions;
    const char *kernel_max; /* WEFT_CUDA_IPC_KERNEL_MAX, NULL: default */
    const char *streams;    /* WEFT_CUDA_IPC_STREAMS, NULL: default */
} transfer_case_t;

static void run_transfer(const transfer_case_t *tc)
{
    char  name[64];
    pid_t producer, consumers[8];

    ck_assert_int_le(tc->consumers, 8);
    unique_name(name, sizeof(name), "xfer");
    if (tc->kernel_max != NULL) {
        ck_assert_int_eq(setenv("WEFT_CUDA_IPC_KERNEL_MAX", tc->kernel_max, 1), 0);
    }
    if (tc->streams != NULL) {
        ck_assert_int_eq(setenv("WEFT_CUDA_IPC_STREAMS", tc->streams, 1), 0);
    }
    producer = fork();
    ck_assert_int_ge(producer, 0);
    if (producer == 0) {
        producer_t p;

        producer_create(&p, name, tc->src, 3);
        producer_wait_consumers_registered(&p, (uint32_t)tc->consumers);
        for (uint64_t v = 1; v <= tc->versions; v++) {
            producer_publish(&p, v);
            CHILD_CHECK(weft_registry_wait_consumers(p.reg, v, LONG_WAIT_US, NULL) == WEFT_OK);
        }
        CHILD_CHECK(weft_registry_close(p.reg) == WEFT_OK);
        weft_registry_unlink(name);
        CHILD_EXIT();
    }
    for (int i = 0; i < tc->consumers; i++) {
        consumers[i] = fork();
        ck_assert_int_ge(consumers[i], 0);
        if (consumers[i] == 0) {
            consumer_t c;
            /* With several consumers and two GPUs, every other one is on
             * the other GPU. */
            int device = tc->consumers > 1 && gpu_count > 1 && (i % 2) ? 1 - tc->dst : tc->dst;

            consumer_open(&c, name, device, tc->strided);
            consumer_receive_until(&c, tc->versions);
            consumer_close(&c);
            CHILD_EXIT();
        }
    }
    for (int i = 0; i < tc->consumers; i++) {
        ck_assert_int_eq(wait_child(consumers[i]), 0);
    }
    ck_assert_int_eq(wait_child(producer), 0);
}

START_TEST(ipc_same_gpu_versions_exact)
{
    /* _i: 0 default (every range through the kernel on one GPU), 1 copy
     * engines only, 2 kernel for ranges up to 64 KiB, copy engines beyond,
     * 3 the split over four copy-engine streams. */
    static const char *kernel_max[] = {NULL, "0", "64K", "64K"};
    static const char *streams[]    = {NULL, NULL, NULL, "4"};
    transfer_case_t    tc = {.src = 0, .dst = 0, .strided = 0, .consumers = 1, .versions = 25,
                             .kernel_max = kernel_max[_i], .streams = streams[_i]};

    run_transfer(&tc);
}
END_TEST

START_TEST(ipc_same_gpu_strided_views)
{
    static const char *kernel_max[] = {NULL, "0"};
    transfer_case_t    tc = {.src = 0, .dst = 0, .strided = 1, .consumers = 1, .versions = 10,
                             .kernel_max = kernel_max[_i]};

    run_transfer(&tc);
}
END_TEST

START_TEST(ipc_cross_gpu_versions_exact)
{
    /* _i: 0 default split, 1 copy engines only (strided views), 2 every
     * range through the kernel over NVLink, 3 four copy-engine streams
     * (strided views). */
    static const char *kernel_max[] = {NULL, "0", "1T", NULL};
    static const char *streams[]    = {NULL, NULL, NULL, "4"};
    transfer_case_t    tc = {.src = 0, .dst = 1, .strided = _i & 1, .consumers = 1, .versions = 25,
                             .kernel_max = kernel_max[_i], .streams = streams[_i]};

    run_transfer(&tc);
}
END_TEST

START_TEST(ipc_many_consumers)
{
    transfer_case_t tc = {.src = 0, .dst = 0, .strided = 1, .consumers = 6, .versions = 12};

    run_transfer(&tc);
}
END_TEST

/* ------------------------------------------------- failure ordering */

/* The consumer breaks the IPC handle of the slot holding version 2 (in
 * the segment, as a hostile or buggy process could), so that mapping it
 * fails for real. Version 2 must be recorded as failed, never received;
 * the views keep version 1; version 3, in another slot, arrives whole. */
static void break_arena_handle(const char *name, uint32_t slot)
{
    char          shm[80];
    struct stat   st;
    int           fd;
    uint8_t      *base;
    reg_header_t *hdr;
    reg_arena_t  *arenas;

    snprintf(shm, sizeof(shm), "/weft.%s", name);
    fd = shm_open(shm, O_RDWR, 0);
    CHILD_CHECK(fd >= 0 && fstat(fd, &st) == 0);
    base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHILD_CHECK(base != MAP_FAILED);
    hdr    = (reg_header_t *)base;
    arenas = (reg_arena_t *)(base + hdr->arena_table_offset);
    CHILD_CHECK(hdr->arena_count > slot);
    memset(arenas[slot].ipc_handle, 0xEE, sizeof(arenas[slot].ipc_handle));
    munmap(base, (size_t)st.st_size);
    close(fd);
}

START_TEST(ipc_failed_mapping_records_error_keeps_previous)
{
    char  name[64];
    pid_t producer, consumer;

    unique_name(name, sizeof(name), "fail");
    producer = fork();
    ck_assert_int_ge(producer, 0);
    if (producer == 0) {
        producer_t           p;
        weft_consumer_info_t info = {0};

        producer_create(&p, name, 0, 3);
        producer_wait_consumers_registered(&p, 1);
        producer_publish(&p, 1);
        CHILD_CHECK(weft_registry_wait_consumers(p.reg, 1, LONG_WAIT_US, NULL) == WEFT_OK);
        producer_publish(&p, 2);
        /* Version 2 can never be received: wait for its failure. */
        for (int tries = 0; tries < 60000 && info.failed_version != 2; tries++) {
            CHILD_CHECK(weft_registry_consumer_info(p.reg, 0, &info) == WEFT_OK);
            usleep(1000);
        }
        CHILD_CHECK(info.failed_version == 2 && info.received_version == 1);
        CHILD_CHECK(info.last_error != WEFT_OK);
        CHILD_CHECK(weft_registry_wait_consumers(p.reg, 2, 100000, NULL) == WEFT_ERR_TIMEOUT);
        producer_publish(&p, 3);
        CHILD_CHECK(weft_registry_wait_consumers(p.reg, 3, LONG_WAIT_US, NULL) == WEFT_OK);
        CHILD_CHECK(weft_registry_close(p.reg) == WEFT_OK);
        weft_registry_unlink(name);
        CHILD_EXIT();
    }
    consumer = fork();
    ck_assert_int_ge(consumer, 0);
    if (consumer == 0) {
        consumer_t           c;
        weft_lease_t         lease;
        weft_consumer_info_t info;
        uint64_t             got = 0;
        weft_plan_stats_t    stats;

        consumer_open(&c, name, 0, 0);
        CHILD_CHECK(c.id == 0);
        consumer_receive_until(&c, 1);

        /* Find version 2's slot, break its handle, then receive. */
        CHILD_CHECK(weft_registry_wait(c.reg, 1, LONG_WAIT_US, &lease) == WEFT_OK);
        CHILD_CHECK(lease.version == 2);
        CHILD_CHECK(weft_registry_release(c.reg, &lease) == WEFT_OK);
        break_arena_handle(name, lease.slot);
        CHILD_CHECK(weft_plan_receive(c.plan, c.id, 1, LONG_WAIT_US, &got) != WEFT_OK);
        CHILD_CHECK(weft_registry_consumer_info(c.reg, c.id, &info) == WEFT_OK);
        CHILD_CHECK(info.received_version == 1 && info.failed_version == 2);
        /* Nothing of version 2 reached the views. */
        CHILD_CHECK(consumer_wrong_bytes(&c, 1) == 0);

        CHILD_CHECK(weft_plan_receive(c.plan, c.id, 2, LONG_WAIT_US, &got) == WEFT_OK);
        CHILD_CHECK(got == 3 && consumer_wrong_bytes(&c, 3) == 0);
        CHILD_CHECK(weft_plan_get_stats(c.plan, &stats) == WEFT_OK);
        CHILD_CHECK(stats.copy_failures == 1 && stats.versions_copied == 2);
        consumer_close(&c);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(consumer), 0);
    ck_assert_int_eq(wait_child(producer), 0);
}
END_TEST

/* --------------------------------------------------- offload/reload */

#define CYCLES             5
#define VERSIONS_PER_CYCLE 3

START_TEST(ipc_offload_reload_cycles)
{
    char  name[64];
    pid_t producer, consumer;
    int   dst = _i && gpu_count > 1 ? 1 : 0;

    unique_name(name, sizeof(name), "offload");
    producer = fork();
    ck_assert_int_ge(producer, 0);
    if (producer == 0) {
        producer_t        p;
        weft_arena_info_t arena;
        weft_registry_h   reader;
        weft_lease_t      lease;
        uint64_t          v = 0, generation = 0;

        producer_create(&p, name, 0, 3);
        producer_wait_consumers_registered(&p, 1);
        CHILD_CHECK(weft_registry_open(name, WEFT_REGISTRY_OPEN_READ, &reader) == WEFT_OK);
        for (int cycle = 0; cycle < CYCLES; cycle++) {
            CHILD_CHECK(weft_registry_arena_info(p.reg, &arena) == WEFT_OK);
            CHILD_CHECK(arena.memory == WEFT_MEMORY_CUDA && !arena.offloaded);
            CHILD_CHECK(arena.generation > generation);
            generation = arena.generation;
            for (int k = 0; k < VERSIONS_PER_CYCLE; k++) {
                producer_publish(&p, ++v);
                CHILD_CHECK(weft_registry_wait_consumers(p.reg, v, LONG_WAIT_US, NULL) == WEFT_OK);
            }
            /* The consumer sleeps in weft_plan_receive: it unmaps when
             * woken, and offload goes through. */
            CHILD_CHECK(weft_registry_offload(p.reg, LONG_WAIT_US) == WEFT_OK);
            CHILD_CHECK(weft_registry_arena_info(p.reg, &arena) == WEFT_OK && arena.offloaded);
            /* Nothing readable, nothing writable, versions kept. */
            CHILD_CHECK(weft_registry_acquire(reader, &lease) == WEFT_ERR_NOT_FOUND);
            CHILD_CHECK(weft_registry_write_begin(p.reg, 0, NULL) == WEFT_ERR_STATE);
            CHILD_CHECK(weft_registry_offload(p.reg, 0) == WEFT_ERR_STATE);
            CHILD_CHECK(weft_registry_reload(p.reg) == WEFT_OK);
            CHILD_CHECK(weft_registry_reload(p.reg) == WEFT_ERR_STATE);
            CHILD_CHECK(weft_registry_acquire(reader, &lease) == WEFT_ERR_NOT_FOUND);
            CHILD_CHECK(weft_registry_publish(p.reg, 0, NULL) == WEFT_ERR_STATE);
        }
        producer_publish(&p, ++v);
        CHILD_CHECK(weft_registry_wait_consumers(p.reg, v, LONG_WAIT_US, NULL) == WEFT_OK);
        CHILD_CHECK(weft_registry_close(reader) == WEFT_OK);
        CHILD_CHECK(weft_registry_close(p.reg) == WEFT_OK);
        weft_registry_unlink(name);
        CHILD_EXIT();
    }
    consumer = fork();
    ck_assert_int_ge(consumer, 0);
    if (consumer == 0) {
        consumer_t        c;
        weft_arena_info_t arena;
        uint64_t          v = 0, last = CYCLES * VERSIONS_PER_CYCLE + 1, first_generation;

        consumer_open(&c, name, dst, 1);
        CHILD_CHECK(weft_registry_arena_info(c.reg, &arena) == WEFT_OK);
        first_generation = arena.generation;
        while (v < last) {
            uint64_t got;

            CHILD_CHECK(weft_plan_receive(c.plan, c.id, v, LONG_WAIT_US, &got) == WEFT_OK);
            CHILD_CHECK(consumer_wrong_bytes(&c, got) == 0);
            v = got;
            if (v % VERSIONS_PER_CYCLE == 0) {
                /* The engine re-allocates its weights (its own offload)
                 * and rebinds the plan to them. */
                weft_recv_view_t views[TENSORS];
                char             names[TENSORS][WEFT_TENSOR_NAME_MAX];

                for (int r = 0; r < ROLES; r++) {
                    CHILD_CHECK(cudaFree(c.fused[r]) == cudaSuccess);
                }
                consumer_alloc(&c);
                consumer_views(&c, views, names);
                CHILD_CHECK(weft_plan_rebind(c.plan, views, TENSORS) == WEFT_OK);
            }
        }
        CHILD_CHECK(weft_registry_arena_info(c.reg, &arena) == WEFT_OK);
        CHILD_CHECK(arena.generation == first_generation + CYCLES);
        consumer_close(&c);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(consumer), 0);
    ck_assert_int_eq(wait_child(producer), 0);
}
END_TEST

/* A reader that holds a lease keeps the arenas: offload gives up after its
 * timeout and leaves everything readable as before. */
START_TEST(ipc_offload_busy_while_leased)
{
    char  name[64];
    int   ready[2], done[2];
    pid_t producer, consumer;
    char  byte = 0;

    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(done), 0);
    unique_name(name, sizeof(name), "busy");
    producer = fork();
    ck_assert_int_ge(producer, 0);
    if (producer == 0) {
        producer_t p;

        producer_create(&p, name, 0, 3);
        producer_wait_consumers_registered(&p, 1);
        producer_publish(&p, 1);
        CHILD_CHECK(read(ready[0], &byte, 1) == 1); /* the consumer holds a lease */
        CHILD_CHECK(weft_registry_offload(p.reg, 200000) == WEFT_ERR_BUSY);
        CHILD_CHECK(write(done[1], &byte, 1) == 1);
        CHILD_CHECK(weft_registry_wait_consumers(p.reg, 1, LONG_WAIT_US, NULL) == WEFT_OK);
        /* Released now: offload goes through, reload, publish works. */
        CHILD_CHECK(weft_registry_offload(p.reg, LONG_WAIT_US) == WEFT_OK);
        CHILD_CHECK(weft_registry_reload(p.reg) == WEFT_OK);
        producer_publish(&p, 2);
        CHILD_CHECK(weft_registry_wait_consumers(p.reg, 2, LONG_WAIT_US, NULL) == WEFT_OK);
        CHILD_CHECK(weft_registry_close(p.reg) == WEFT_OK);
        weft_registry_unlink(name);
        CHILD_EXIT();
    }
    consumer = fork();
    ck_assert_int_ge(consumer, 0);
    if (consumer == 0) {
        consumer_t   c;
        weft_lease_t lease;
        uint64_t     got;

        consumer_open(&c, name, 0, 0);
        CHILD_CHECK(weft_registry_wait(c.reg, 0, LONG_WAIT_US, &lease) == WEFT_OK);
        CHILD_CHECK(write(ready[1], &byte, 1) == 1);
        CHILD_CHECK(read(done[0], &byte, 1) == 1);
        /* The failed offload left the version as it was. */
        CHILD_CHECK(weft_plan_copy(c.plan, &lease) == WEFT_OK);
        CHILD_CHECK(consumer_wrong_bytes(&c, 1) == 0);
        CHILD_CHECK(weft_registry_release(c.reg, &lease) == WEFT_OK);
        CHILD_CHECK(weft_registry_consumer_received(c.reg, c.id, 1) == WEFT_OK);
        CHILD_CHECK(weft_plan_receive(c.plan, c.id, 1, LONG_WAIT_US, &got) == WEFT_OK);
        CHILD_CHECK(got == 2 && consumer_wrong_bytes(&c, 2) == 0);
        consumer_close(&c);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(consumer), 0);
    ck_assert_int_eq(wait_child(producer), 0);
}
END_TEST

/* ------------------------------------------- a consumer killed mid-copy */

START_TEST(ipc_consumer_killed_mid_transfer)
{
    char  name[64];
    pid_t producer, victim, survivor;
    int   copying[2];

    unique_name(name, sizeof(name), "kill");
    ck_assert_int_eq(pipe(copying), 0);
    producer = fork();
    ck_assert_int_ge(producer, 0);
    if (producer == 0) {
        producer_t p;
        uint32_t   lagging = 99;

        producer_create(&p, name, 0, 3);
        producer_wait_consumers_registered(&p, 2);
        for (uint64_t v = 1; v <= 40; v++) {
            producer_publish(&p, v);
            /* Waits for the survivor; the victim's record goes with it. */
            CHILD_CHECK(weft_registry_wait_consumers(p.reg, v, LONG_WAIT_US, &lagging) == WEFT_OK);
        }
        /* Its leases and mappings are reclaimed: offload goes through. */
        CHILD_CHECK(weft_registry_offload(p.reg, LONG_WAIT_US) == WEFT_OK);
        CHILD_CHECK(weft_registry_close(p.reg) == WEFT_OK);
        weft_registry_unlink(name);
        CHILD_EXIT();
    }
    victim = fork();
    ck_assert_int_ge(victim, 0);
    if (victim == 0) {
        consumer_t c;

        /* Copies the latest version over and over, holding a lease and a
         * mapping nearly all the time, until it is killed. */
        consumer_open(&c, name, gpu_count > 1 ? 1 : 0, 1);
        for (int told = 0;;) {
            weft_lease_t lease;

            if (weft_registry_wait(c.reg, 0, LONG_WAIT_US, &lease) == WEFT_OK) {
                /* Leased and mapped, about to copy: the parent may kill. */
                CHILD_CHECK(told || write(copying[1], "c", 1) == 1);
                told = 1;
                (void)weft_plan_copy(c.plan, &lease);
                (void)weft_registry_release(c.reg, &lease);
            }
        }
    }
    survivor = fork();
    ck_assert_int_ge(survivor, 0);
    if (survivor == 0) {
        consumer_t c;

        consumer_open(&c, name, 0, 0);
        consumer_receive_until(&c, 40);
        consumer_close(&c);
        CHILD_EXIT();
    }
    /* Killed once it holds a lease and a mapping and starts its first
     * copy. Guaranteed: the lease was taken and the arena mapped (the
     * producer must reclaim both); not guaranteed: that the kill lands
     * inside a copy rather than between two (the victim holds a lease
     * nearly all the time, so it mostly does). */
    ck_assert_int_eq(read_byte(copying[0], CHILD_SIGNAL_WAIT_S), 'c');
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    ck_assert_int_eq(wait_child(victim), 128 + SIGKILL);
    ck_assert_int_eq(wait_child(survivor), 0);
    ck_assert_int_eq(wait_child(producer), 0);
}
END_TEST

/* ------------------------------------------ producer and consumer in one */

START_TEST(ipc_same_process)
{
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char       name[64];
        producer_t p;
        consumer_t c;
        uint64_t   got;

        unique_name(name, sizeof(name), "self");
        producer_create(&p, name, 0, 2);
        consumer_open(&c, name, 0, 1);
        for (uint64_t v = 1; v <= 6; v++) {
            producer_publish(&p, v);
            CHILD_CHECK(weft_plan_receive(c.plan, c.id, v - 1, LONG_WAIT_US, &got) == WEFT_OK);
            CHILD_CHECK(got == v && consumer_wrong_bytes(&c, v) == 0);
            if (v == 3) {
                CHILD_CHECK(weft_registry_offload(p.reg, LONG_WAIT_US) == WEFT_OK);
                CHILD_CHECK(weft_registry_reload(p.reg) == WEFT_OK);
            }
        }
        consumer_close(&c);
        CHILD_CHECK(weft_registry_close(p.reg) == WEFT_OK);
        weft_registry_unlink(name);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(pid), 0);
}
END_TEST

/* Verified versions: a version whose byte changed in the GPU arena after
 * its publish is not received by a plan whose device views hold their
 * tensors verbatim (WEFT_ERR_CORRUPT, its failure recorded); the version
 * before it was. */
START_TEST(ipc_plan_refuses_a_version_that_fails_its_checksum)
{
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char                 name[64];
        producer_t           p;
        consumer_t           c;
        weft_lease_t         lease;
        weft_consumer_info_t info;
        const void          *t0;
        uint64_t             got;

        unique_name(name, sizeof(name), "sums");
        producer_create(&p, name, 0, 2);
        consumer_open(&c, name, 0, 0);
        producer_publish(&p, 1);
        CHILD_CHECK(weft_plan_receive(c.plan, c.id, 0, LONG_WAIT_US, &got) == WEFT_OK && got == 1);
        producer_publish(&p, 2);
        CHILD_CHECK(weft_registry_acquire(p.reg, &lease) == WEFT_OK && lease.version == 2);
        CHILD_CHECK(weft_registry_lease_tensor(p.reg, &lease, p.index[0], &t0) == WEFT_OK);
        CHILD_CHECK(cudaMemset((uint8_t *)(uintptr_t)t0 + 17, payload_byte(2, 0, 17) ^ 0xff, 1) ==
                    cudaSuccess);
        CHILD_CHECK(cudaDeviceSynchronize() == cudaSuccess);
        CHILD_CHECK(weft_registry_release(p.reg, &lease) == WEFT_OK);
        CHILD_CHECK(weft_plan_receive(c.plan, c.id, 1, LONG_WAIT_US, &got) == WEFT_ERR_CORRUPT);
        CHILD_CHECK(weft_registry_consumer_info(c.reg, c.id, &info) == WEFT_OK);
        CHILD_CHECK(info.received_version == 1 && info.failed_version == 2);
        consumer_close(&c);
        CHILD_CHECK(weft_registry_close(p.reg) == WEFT_OK);
        weft_registry_unlink(name);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(pid), 0);
}
END_TEST

/* ---------------------------------------------------- refused plans */

START_TEST(ipc_plan_refuses_host_views_and_host_registries)
{
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char             name[64], hname[64];
        producer_t       p;
        consumer_t       c;
        weft_registry_h  host_reg;
        weft_plan_h      plan;
        weft_recv_view_t views[TENSORS];
        char             names[TENSORS][WEFT_TENSOR_NAME_MAX];
        static uint8_t   host_buf[W_BYTES];
        weft_tensor_desc_t d = {.name = "x", .layer = -1, .expert = -1, .role = WEFT_ROLE_W,
                                .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 1, .shape = {W_BYTES}};

        unique_name(name, sizeof(name), "refuse");
        producer_create(&p, name, 0, 2);
        consumer_open(&c, name, 0, 0);
        consumer_views(&c, views, names);
        /* A view in host memory: cuda_ipc writes into GPU memory only. */
        views[0].data = host_buf;
        CHILD_CHECK(weft_plan_create(c.reg, WEFT_TRANSPORT_CUDA_IPC, views, TENSORS, &plan) ==
                        WEFT_ERR_INVALID_PARAM);
        /* A bad rebind leaves the plan as it was. */
        CHILD_CHECK(weft_plan_rebind(c.plan, views, TENSORS) == WEFT_ERR_INVALID_PARAM);
        producer_publish(&p, 1);
        {
            uint64_t got;
            CHILD_CHECK(weft_plan_receive(c.plan, c.id, 0, LONG_WAIT_US, &got) == WEFT_OK);
            CHILD_CHECK(consumer_wrong_bytes(&c, 1) == 0);
        }
        /* The host transport cannot read a GPU registry. */
        consumer_views(&c, views, names);
        CHILD_CHECK(weft_plan_create(c.reg, WEFT_TRANSPORT_HOST, views, TENSORS, &plan) ==
                        WEFT_ERR_UNSUPPORTED);
        /* cuda_ipc cannot read a host registry; offload needs GPU arenas. */
        unique_name(hname, sizeof(hname), "host");
        CHILD_CHECK(weft_registry_create(hname, NULL, &host_reg) == WEFT_OK);
        CHILD_CHECK(weft_registry_declare(host_reg, &d, NULL) == WEFT_OK);
        CHILD_CHECK(weft_registry_seal(host_reg) == WEFT_OK);
        CHILD_CHECK(weft_registry_offload(host_reg, 0) == WEFT_ERR_UNSUPPORTED);
        {
            weft_recv_view_t hv = {.field_mask = WEFT_RECV_VIEW_FIELD_MEMORY, .name = "x",
                                   .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 1,
                                   .shape = {W_BYTES}, .data = c.fused[0],
                                   .memory = WEFT_MEMORY_CUDA};
            CHILD_CHECK(weft_plan_create(host_reg, WEFT_TRANSPORT_CUDA_IPC, &hv, 1, &plan) ==
                            WEFT_ERR_UNSUPPORTED);
        }
        CHILD_CHECK(weft_registry_close(host_reg) == WEFT_OK);
        weft_registry_unlink(hname);
        consumer_close(&c);
        CHILD_CHECK(weft_registry_close(p.reg) == WEFT_OK);
        weft_registry_unlink(name);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(pid), 0);
}
END_TEST

static Suite *transport_cuda_ipc_suite(void)
{
    Suite *s;
    TCase *tc;

    gpu_count = weft_test_gpu_count();
    if (gpu_count == 0) {
        return NULL;
    }
    printf("test_transport_cuda_ipc: %d GPU%s: %s\n", gpu_count, gpu_count == 1 ? "" : "s",
           gpu_count > 1 ? "same-GPU and GPU-to-GPU cases" : "same-GPU cases only");
    s  = suite_create("transport_cuda_ipc");
    tc = tcase_create("cuda_ipc");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, ipc_same_gpu_versions_exact, 0, 4);
    tcase_add_loop_test(tc, ipc_same_gpu_strided_views, 0, 2);
    if (gpu_count > 1) {
        tcase_add_loop_test(tc, ipc_cross_gpu_versions_exact, 0, 4);
    }
    tcase_add_test(tc, ipc_many_consumers);
    tcase_add_test(tc, ipc_failed_mapping_records_error_keeps_previous);
    tcase_add_loop_test(tc, ipc_offload_reload_cycles, 0, gpu_count > 1 ? 2 : 1);
    tcase_add_test(tc, ipc_offload_busy_while_leased);
    tcase_add_test(tc, ipc_consumer_killed_mid_transfer);
    tcase_add_test(tc, ipc_same_process);
    tcase_add_test(tc, ipc_plan_refuses_a_version_that_fails_its_checksum);
    tcase_add_test(tc, ipc_plan_refuses_host_views_and_host_registries);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(transport_cuda_ipc_suite)
