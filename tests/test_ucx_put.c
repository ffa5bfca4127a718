/*
 * weft_ucx_put (transport/ucx/ucx_common.h) from one worker of this
 * process into a consumer's memory from weft_ucx_memory_alloc, seen
 * through a second worker on that memory's context.
 *
 * Over shared memory UCX maps that memory here, and with copy_mapped the
 * put is a memcpy into that mapping (weft_ucx_copy_at says where): done
 * when the call returns, before any progress or flush. Without copy_mapped, or over TCP where nothing is mapped, UCX's
 * put carries the bytes. Either way every byte lands where it was sent
 * (at the region's start, at an odd offset, up to its last byte) and none
 * beside it, and a put that leaves the region is refused. And
 * WEFT_UCX_MAPPED_COPY: on by default, off turns it off, anything else is
 * refused.
 */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#if HAVE_UCX
#include "transport/ucx/ucx_common.h"
#include "transport/ucx/ucx_gpu.h"
#include "transport/ucx/ucx_memory.h"

#define MEMORY_BYTES (UINT64_C(1) << 20)
#define REGION_AT    4096 /* the region starts this far into the memory */
#define REGION_BYTES (MEMORY_BYTES - 2 * REGION_AT)
#define GUARD        0xee /* the memory's bytes that no put may touch */

typedef struct pair {
    weft_ucx_t        sender;   /* the server's side: its own context */
    weft_ucx_memory_h memory;   /* the consumer's memory */
    uint8_t          *base;     /* its first byte */
    weft_ucx_t        receiver; /* a worker on the memory's context */
    ucp_ep_h          ep;       /* sender -> receiver */
    ucp_rkey_h        rkey;
    weft_wire_span_t  region;
    uint8_t          *src;
    ucp_mem_h         src_memh;
} pair_t;

static void progress_both(pair_t *p)
{
    (void)ucp_worker_progress(p->sender.worker);
    (void)ucp_worker_progress(p->receiver.worker);
}

/* Waits for a request of the sender's (NULL: done already), progressing
 * both workers: over TCP the receiver's side must answer. */
static ucs_status_t wait_request(pair_t *p, ucs_status_ptr_t req)
{
    ucs_status_t status;

    if (UCS_PTR_IS_ERR(req) || req == NULL) {
        return UCS_PTR_STATUS(req);
    }
    do {
        progress_both(p);
        status = ucp_request_check_status(req);
    } while (status == UCS_INPROGRESS);
    ucp_request_free(req);
    return status;
}

static void put_done(void *request, ucs_status_t status, void *arg)
{
    (void)request;
    (void)status;
    (void)arg;
}

static void pair_open(pair_t *p, const char *tls)
{
    ucp_address_t *address;
    size_t         address_length, packed_length;
    void          *packed, *base;
    int            reports;

    memset(p, 0, sizeof(*p));
    ck_assert_int_eq(setenv("UCX_TLS", tls, 1), 0);
    ck_assert_int_eq(weft_ucx_open(&p->sender, "test sender", 0), WEFT_OK);
    ck_assert_int_eq(weft_ucx_memory_alloc(MEMORY_BYTES, &p->memory, &base), WEFT_OK);
    p->base = base;
    memset(p->base, GUARD, MEMORY_BYTES);
    ck_assert_int_eq(weft_ucx_open_worker(&p->receiver, &p->memory->ucx), WEFT_OK);
    ck_assert_int_eq(ucp_worker_get_address(p->receiver.worker, &address, &address_length), UCS_OK);
    ck_assert_int_eq(weft_ucx_connect(&p->sender, address, NULL, NULL, "test sender", &p->ep, &reports),
                     WEFT_OK);
    ucp_worker_release_address(p->receiver.worker, address);
    ck_assert_int_eq(ucp_rkey_pack(p->memory->ucx.context, p->memory->memh, &packed, &packed_length),
                     UCS_OK);
    ck_assert_int_eq(ucp_ep_rkey_unpack(p->ep, packed, &p->rkey), UCS_OK);
    ucp_rkey_buffer_release(packed);
    p->region = (weft_wire_span_t){.base = (uint64_t)(uintptr_t)p->base + REGION_AT,
                                   .bytes = REGION_BYTES};
    p->src = malloc(REGION_BYTES);
    ck_assert_ptr_nonnull(p->src);
    for (uint64_t i = 0; i < REGION_BYTES; i++) {
        p->src[i] = (uint8_t)(i * 7 + 1);
    }
    ck_assert_int_eq(weft_ucx_mem_map(p->sender.context, p->src, REGION_BYTES, WEFT_MEMORY_HOST,
                                      &p->src_memh, "the test's source"),
                     WEFT_OK);
}

static void pair_close(pair_t *p)
{
    ucp_request_param_t param = {0};

    ucp_rkey_destroy(p->rkey);
    ck_assert_int_eq(wait_request(p, ucp_ep_close_nbx(p->ep, &param)), UCS_OK);
    (void)ucp_mem_unmap(p->sender.context, p->src_memh);
    free(p->src);
    weft_ucx_close_worker(&p->receiver);
    ck_assert_int_eq(weft_ucx_memory_free(p->memory), WEFT_OK);
    weft_ucx_close(&p->sender);
}

static weft_ucx_target_t target_of(pair_t *p, int copy_mapped)
{
    return (weft_ucx_target_t){.ep = p->ep, .regions = &p->region, .rkeys = &p->rkey,
                               .region_count = 1, .copy_mapped = copy_mapped};
}

/* Puts src[offset, offset + n) to the region's offset. */
static ucs_status_ptr_t put(pair_t *p, int copy_mapped, uint64_t offset, uint64_t n)
{
    const weft_ucx_target_t target = target_of(p, copy_mapped);

    return weft_ucx_put(&target, p->src + offset, n, p->region.base + offset, p->src_memh, put_done,
                        NULL);
}

/* Where a put of n bytes at the region's offset would be copied to. */
static uint8_t *copy_at(pair_t *p, int copy_mapped, uint64_t offset, uint64_t n)
{
    const weft_ucx_target_t target = target_of(p, copy_mapped);

    return weft_ucx_copy_at(&target, p->region.base + offset, n);
}

/* The puts of every case: each stretch is its bytes once the flush is
 * done (where `at_once`, already when the put returns), and the memory's
 * bytes beside the stretches still GUARD. */
static void puts_land_exactly(pair_t *p, int copy_mapped, int at_once)
{
    /* The start, an odd stretch in the middle, the region's last bytes. */
    static const uint64_t stretch[][2] = {{0, 4096}, {12345, 77777}, {REGION_BYTES - 1000, 1000}};
    const uint8_t        *region = p->base + REGION_AT;
    ucp_request_param_t   param = {0};

    for (size_t s = 0; s < sizeof(stretch) / sizeof(stretch[0]); s++) {
        ucs_status_ptr_t req = put(p, copy_mapped, stretch[s][0], stretch[s][1]);

        ck_assert_msg(!UCS_PTR_IS_ERR(req), "put %zu failed: %s", s,
                      ucs_status_string(UCS_PTR_STATUS(req)));
        if (at_once) {
            ck_assert_msg(req == NULL, "put %zu into mapped memory was not done at once", s);
            ck_assert_msg(memcmp(region + stretch[s][0], p->src + stretch[s][0], stretch[s][1]) == 0,
                          "put %zu: the bytes are not there when the call returned", s);
        }
        ck_assert_int_eq(wait_request(p, req), UCS_OK);
    }
    ck_assert_int_eq(wait_request(p, ucp_ep_flush_nbx(p->ep, &param)), UCS_OK);
    for (uint64_t i = 0; i < MEMORY_BYTES; i++) {
        uint64_t at = i - REGION_AT; /* wraps below the region: no stretch */
        int      inside = 0;

        for (size_t s = 0; s < sizeof(stretch) / sizeof(stretch[0]) && i >= REGION_AT; s++) {
            inside |= at >= stretch[s][0] && at - stretch[s][0] < stretch[s][1];
        }
        if (inside) {
            ck_assert_msg(p->base[i] == p->src[at], "byte %llu of the region is wrong",
                          (unsigned long long)at);
        } else {
            ck_assert_msg(p->base[i] == GUARD, "byte %llu of the memory was written, outside every put",
                          (unsigned long long)i);
        }
    }
    /* Past the region's end by one byte, and wholly after it. */
    ck_assert_int_eq(UCS_PTR_STATUS(put(p, copy_mapped, REGION_BYTES - 10, 11)), UCS_ERR_INVALID_ADDR);
    ck_assert_int_eq(UCS_PTR_STATUS(put(p, copy_mapped, REGION_BYTES, 1)), UCS_ERR_INVALID_ADDR);
    ck_assert_uint_eq(p->base[MEMORY_BYTES - REGION_AT], GUARD);
}

START_TEST(put_into_mapped_memory_is_a_copy)
{
    pair_t   p;
    uint8_t *at;

    pair_open(&p, "sm");
    ck_assert_int_eq(p.sender.mapped_copy, 1); /* the default */
    ck_assert_msg(weft_ucx_region_mapped(p.rkey, &p.region),
                  "UCX does not map its own shared memory here");
    /* A copy, into a mapping of the consumer's bytes: written through it,
     * they show in the consumer's memory. None for no bytes or outside. */
    at = copy_at(&p, 1, 100, 1);
    ck_assert_ptr_nonnull(at);
    *at = 0x5a;
    ck_assert_uint_eq(p.base[REGION_AT + 100], 0x5a);
    *at = GUARD;
    ck_assert_ptr_null(copy_at(&p, 1, 100, 0));
    ck_assert_ptr_null(copy_at(&p, 1, REGION_BYTES - 1, 2));
    puts_land_exactly(&p, 1, 1);
    pair_close(&p);
}
END_TEST

START_TEST(put_into_mapped_memory_without_copy_goes_through_ucx)
{
    pair_t p;

    pair_open(&p, "sm");
    ck_assert_ptr_null(copy_at(&p, 0, 0, 4096));
    puts_land_exactly(&p, 0, 0);
    pair_close(&p);
}
END_TEST

START_TEST(put_over_tcp_is_not_mapped_and_goes_through_ucx)
{
    pair_t p;

    pair_open(&p, "tcp");
    ck_assert_msg(!weft_ucx_region_mapped(p.rkey, &p.region), "mapped over TCP");
    ck_assert_ptr_null(copy_at(&p, 1, 0, 4096));
    puts_land_exactly(&p, 1, 0);
    pair_close(&p);
}
END_TEST

/* This program again, as `--open`: it opens a UCX context with
 * WEFT_UCX_MAPPED_COPY set to value (unset: NULL) and exits 10 (off), 11
 * (on) or 12 (refused). A fresh process: WEFT_* values are read once. */
static int open_with_mapped_copy(const char *value)
{
    pid_t child = fork();
    int   status;

    ck_assert_int_ge(child, 0);
    if (child == 0) {
        if (value == NULL) {
            unsetenv("WEFT_UCX_MAPPED_COPY");
        } else {
            setenv("WEFT_UCX_MAPPED_COPY", value, 1);
        }
        execl("/proc/self/exe", "test_ucx_put", "--open", (char *)NULL);
        _exit(127);
    }
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static int open_role(void)
{
    weft_ucx_t ucx;
    int        on;

    if (weft_ucx_open(&ucx, "test", 0) != WEFT_OK) {
        return 12;
    }
    on = ucx.mapped_copy;
    weft_ucx_close(&ucx);
    return on ? 11 : 10;
}

START_TEST(mapped_copy_is_read_from_the_environment)
{
    ck_assert_int_eq(open_with_mapped_copy(NULL), 11); /* on by default */
    ck_assert_int_eq(open_with_mapped_copy("off"), 10);
    ck_assert_int_eq(open_with_mapped_copy("ON"), 11);
    ck_assert_int_eq(open_with_mapped_copy("sometimes"), 12);
}
END_TEST

int main(int argc, char **argv)
{
    Suite              *s;
    TCase              *tc;
    SRunner            *sr;
    int                 failed;
    weft_backend_info_t info;

    if (argc == 2 && strcmp(argv[1], "--open") == 0) {
        return open_role();
    }
    /* Before anything reads it (values are read once): no peer failure
     * reports, which UCX 1.13's shared memory would refuse, then go
     * without, logging an error. */
    setenv("WEFT_UCX_ERR_MODE", "none", 1);
    if (weft_backend_query(WEFT_BACKEND_UCX, &info) != WEFT_OK || !info.available) {
        printf("test_ucx_put: UCX is not usable here\n");
        return 77;
    }
    s = suite_create("ucx_put");
    tc = tcase_create("ucx_put");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, put_into_mapped_memory_is_a_copy);
    tcase_add_test(tc, put_into_mapped_memory_without_copy_goes_through_ucx);
    tcase_add_test(tc, put_over_tcp_is_not_mapped_and_goes_through_ucx);
    tcase_add_test(tc, mapped_copy_is_read_from_the_environment);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
#else
int main(void)
{
    printf("test_ucx_put: libweft was built without UCX\n");
    return 77;
}
#endif
