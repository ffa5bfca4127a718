/* registry/: the API contract, the invariants across processes, and the
 * validation of hostile segments. */
#include "config.h"

#include "registry/layout.h"
#include "registry/validate.h"
#include "lib/registry_fixture.h"
#include "lib/harness.h"
#include "perf/lib/payload.h"

#include <check.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <weft/weft.h>

/* Version `version` of every tensor, published. */
static void write_version(weft_registry_h reg, uint64_t version)
{
    uint32_t count;

    ck_assert_int_eq(weft_registry_tensor_count(reg, &count), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_begin(reg, 1000000, NULL), WEFT_OK);
    for (uint32_t t = 0; t < count; t++) {
        weft_tensor_info_t info;
        void              *data;

        ck_assert_int_eq(weft_registry_tensor_info(reg, t, &info), WEFT_OK);
        ck_assert_int_eq(weft_registry_write_tensor(reg, t, &data), WEFT_OK);
        payload_fill(data, info.bytes, version, t);
    }
    ck_assert_int_eq(weft_registry_publish(reg, version, NULL), WEFT_OK);
}

/* Number of bytes of the leased version that differ from its payload (1
 * when one cannot be read). */
static uint64_t verify_lease(weft_registry_h reg, const weft_lease_t *lease)
{
    uint32_t count;
    uint64_t wrong = 0;

    if (weft_registry_tensor_count(reg, &count) != WEFT_OK) {
        return 1;
    }
    for (uint32_t t = 0; t < count; t++) {
        weft_tensor_info_t info;
        const void        *data;

        if (weft_registry_tensor_info(reg, t, &info) != WEFT_OK ||
            weft_registry_lease_tensor(reg, lease, t, &data) != WEFT_OK) {
            return 1;
        }
        wrong += payload_count_wrong(data, info.bytes, lease->version, t);
    }
    return wrong;
}

static int wait_child(pid_t pid)
{
    int status;

    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The header of reg_name's segment, mapped read-only, to watch the words
 * the library sleeps on; NULL on failure. Left mapped: callers exit. */
static const reg_header_t *map_header(void)
{
    char  path[128];
    int   fd;
    void *hdr;

    snprintf(path, sizeof(path), "/weft.%s", reg_name);
    fd = shm_open(path, O_RDONLY, 0);
    if (fd < 0) {
        return NULL;
    }
    hdr = mmap(NULL, sizeof(reg_header_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    return hdr == MAP_FAILED ? NULL : hdr;
}

/* ------------------------------------------------------------------ API */

START_TEST(create_declare_seal_open)
{
    weft_registry_h       reg = make_registry(3, 4, 1000), reader;
    weft_tensor_info_t    info;
    weft_registry_stats_t stats;
    uint32_t              index, count;
    struct stat           st;
    char                  path[128];

    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_tensor_count(reader, &count), WEFT_OK);
    ck_assert_uint_eq(count, 4);
    ck_assert_int_eq(weft_registry_lookup(reader, "model.layers.0.mlp.experts.2.down_proj.weight", &index),
                     WEFT_OK);
    ck_assert_uint_eq(index, 2);
    ck_assert_int_eq(weft_registry_lookup(reader, "model.layers.0.mlp.experts.9.down_proj.weight", &index),
                     WEFT_ERR_NOT_FOUND);
    ck_assert_int_eq(weft_registry_tensor_info(reader, 2, &info), WEFT_OK);
    ck_assert_str_eq(info.name, "model.layers.0.mlp.experts.2.down_proj.weight");
    ck_assert_int_eq(info.expert, 2);
    ck_assert_int_eq(info.role, WEFT_ROLE_W);
    ck_assert_int_eq(info.dtype, WEFT_DTYPE_UINT8);
    ck_assert_uint_eq(info.bytes, 1000);
    ck_assert_uint_eq(info.offset % 256, 0);
    ck_assert_uint_eq(info.offset, 2 * 1024); /* 1000 rounded up to 256, twice */
    ck_assert_uint_eq(info.block[0], 128);
    ck_assert_int_eq(weft_registry_tensor_info(reader, 4, &info), WEFT_ERR_INVALID_PARAM);

    ck_assert_int_eq(weft_registry_get_stats(reader, &stats), WEFT_OK);
    ck_assert_uint_eq(stats.slot_count, 3);
    ck_assert_uint_eq(stats.slot_bytes, 3 * 1024 + 1000);
    ck_assert_uint_eq(stats.latest_version, 0);

    /* Created 0600 whatever the umask. */
    snprintf(path, sizeof(path), "/dev/shm/weft.%s", reg_name);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0600);

    ck_assert_int_eq(weft_registry_close(reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_close(reg), WEFT_OK);
}
END_TEST

START_TEST(create_with_group_mode)
{
    weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_FIELD_MODE | WEFT_REGISTRY_FIELD_GROUP,
                                     .mode = 0660, .group = (uint32_t)getgid()};
    weft_registry_h        reg;
    struct stat            st;
    char                   path[128];

    umask(077);
    ck_assert_int_eq(weft_registry_create(test_name(), &params, &reg), WEFT_OK);
    snprintf(path, sizeof(path), "/dev/shm/weft.%s", reg_name);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0660);
    ck_assert_uint_eq(st.st_gid, getgid());
    weft_registry_close(reg);
}
END_TEST

START_TEST(create_rejects_bad_input)
{
    weft_registry_params_t params = {0};
    weft_registry_h        reg = NULL, other;

    ck_assert_int_eq(weft_registry_create("", NULL, &reg), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_create("has/slash", NULL, &reg), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_create(NULL, NULL, &reg), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_create(
                         "a-name-that-is-much-longer-than-sixty-three-characters-in-all-of-it", NULL, &reg),
                     WEFT_ERR_INVALID_PARAM);
    params.field_mask = WEFT_REGISTRY_FIELD_SLOTS;
    params.slot_count = 1;
    ck_assert_int_eq(weft_registry_create(test_name(), &params, &reg), WEFT_ERR_INVALID_PARAM);
    params.slot_count = 17;
    ck_assert_int_eq(weft_registry_create(test_name(), &params, &reg), WEFT_ERR_INVALID_PARAM);
    params.field_mask = 1u << 20;
    ck_assert_int_eq(weft_registry_create(test_name(), &params, &reg), WEFT_ERR_INVALID_PARAM);
    params.field_mask = WEFT_REGISTRY_FIELD_MODE;
    params.mode = 0044; /* the owner must be able to read and write */
    ck_assert_int_eq(weft_registry_create(test_name(), &params, &reg), WEFT_ERR_INVALID_PARAM);
    ck_assert_ptr_null(reg);

    ck_assert_int_eq(weft_registry_create(test_name(), NULL, &reg), WEFT_OK);
    ck_assert_int_eq(weft_registry_create(reg_name, NULL, &other), WEFT_ERR_EXISTS);
    /* Not sealed: readers are told to wait, not that it is corrupt. */
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &other), WEFT_ERR_STATE);
    weft_registry_close(reg);
    ck_assert_int_eq(weft_registry_open("no-such-registry-here", WEFT_REGISTRY_OPEN_READ, &other),
                     WEFT_ERR_NOT_FOUND);
}
END_TEST

START_TEST(declare_rejects_bad_tensors)
{
    weft_registry_h    reg;
    weft_tensor_desc_t good = {.name = "w", .layer = -1, .expert = -1, .role = WEFT_ROLE_W,
                               .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2, .shape = {256, 128}};
    weft_tensor_desc_t d;
    char               long_name[200];

    ck_assert_int_eq(weft_registry_create(test_name(), NULL, &reg), WEFT_OK);
    ck_assert_int_eq(weft_registry_seal(reg), WEFT_ERR_STATE); /* no tensor yet */

    d = good, d.dtype = WEFT_DTYPE_INVALID;
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d = good, d.dtype = (weft_dtype_t)77;
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d = good, d.role = (weft_tensor_role_t)9;
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d = good, d.ndim = 0;
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d = good, d.ndim = 5;
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d = good, d.shape[1] = 0;
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d = good, d.shape[0] = UINT64_MAX / 2;
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d = good, d.field_mask = WEFT_TENSOR_FIELD_STRIDES, d.strides[0] = 64, d.strides[1] = 1; /* rows overlap */
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d = good, d.field_mask = WEFT_TENSOR_FIELD_BLOCK, d.block[0] = 100, d.block[1] = 128;
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d = good, d.field_mask = 1u << 9;
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d = good, d.name = "has space";
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d = good, d.name = "";
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_INVALID_PARAM);
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    d = good, d.name = long_name;
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_INVALID_PARAM);

    /* Padded rows are fine. */
    d = good, d.field_mask = WEFT_TENSOR_FIELD_STRIDES, d.strides[0] = 192, d.strides[1] = 1;
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_OK);
    d = good, d.name = "w2";
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_EXISTS);
    ck_assert_int_eq(weft_registry_seal(reg), WEFT_OK);
    ck_assert_int_eq(weft_registry_seal(reg), WEFT_ERR_STATE);
    d = good, d.name = "w3";
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_STATE);
    weft_registry_close(reg);
}
END_TEST

START_TEST(calls_in_the_wrong_state)
{
    weft_registry_h reg = make_registry(3, 1, 64), reader;
    weft_lease_t    lease, copy;
    void           *data;
    uint64_t        version;

    ck_assert_int_eq(weft_registry_publish(reg, 0, NULL), WEFT_ERR_STATE);
    ck_assert_int_eq(weft_registry_write_tensor(reg, 0, &data), WEFT_ERR_STATE);
    ck_assert_int_eq(weft_registry_write_abort(reg), WEFT_ERR_STATE);
    ck_assert_int_eq(weft_registry_acquire(reg, &lease), WEFT_ERR_NOT_FOUND);

    ck_assert_int_eq(weft_registry_write_begin(reg, 0, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_begin(reg, 0, NULL), WEFT_ERR_STATE);
    ck_assert_int_eq(weft_registry_write_tensor(reg, 1, &data), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_publish(reg, 5, &version), WEFT_OK);
    ck_assert_uint_eq(version, 5);
    ck_assert_int_eq(weft_registry_publish(reg, 6, NULL), WEFT_ERR_STATE); /* published already */

    /* A version number never goes backwards; the write stays open. */
    ck_assert_int_eq(weft_registry_write_begin(reg, 0, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_publish(reg, 5, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_publish(reg, 3, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_publish(reg, 0, &version), WEFT_OK);
    ck_assert_uint_eq(version, 6);

    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_begin(reader, 0, NULL), WEFT_ERR_STATE);
    ck_assert_int_eq(weft_registry_acquire(reader, &lease), WEFT_OK);
    ck_assert_uint_eq(lease.version, 6);
    copy = lease;
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_ERR_STATE);
    ck_assert_int_eq(weft_registry_release(reader, &copy), WEFT_ERR_STATE);
    ck_assert_int_eq(weft_registry_lease_tensor(reader, &copy, 0, (const void **)&data), WEFT_ERR_STATE);
    weft_registry_close(reader);
    weft_registry_close(reg);
}
END_TEST

START_TEST(readers_see_published_bytes)
{
    weft_registry_h reg = make_registry(3, 3, 4096), reader;
    weft_lease_t    lease;

    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    for (uint64_t v = 1; v <= 10; v++) {
        write_version(reg, v);
        ck_assert_int_eq(weft_registry_acquire(reader, &lease), WEFT_OK);
        ck_assert_uint_eq(lease.version, v);
        ck_assert_uint_eq(verify_lease(reader, &lease), 0);
        ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    }
    /* A wait for a version that does not come times out. */
    ck_assert_int_eq(weft_registry_wait(reader, 10, 20000, &lease), WEFT_ERR_TIMEOUT);
    ck_assert_int_eq(weft_registry_wait(reader, 9, 0, &lease), WEFT_OK);
    ck_assert_uint_eq(lease.version, 10);
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    weft_registry_close(reader);
    weft_registry_close(reg);
}
END_TEST

START_TEST(many_tensors_declare_and_look_up)
{
    enum { COUNT = 100000 };
    weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_FIELD_MAX_TENSORS, .max_tensors = COUNT};
    weft_registry_h        reg, reader;
    uint32_t               index;
    char                   name[64];

    ck_assert_int_eq(weft_registry_create(test_name(), &params, &reg), WEFT_OK);
    for (uint32_t t = 0; t < COUNT; t++) {
        weft_tensor_desc_t d = {.name = name, .layer = (int32_t)(t / 256), .expert = (int32_t)(t % 256),
                                .role = WEFT_ROLE_SCALE, .dtype = WEFT_DTYPE_FP32, .ndim = 1, .shape = {1}};
        snprintf(name, sizeof(name), "model.layers.%u.mlp.experts.%u.w", t / 256, t % 256);
        ck_assert_int_eq(weft_registry_declare(reg, &d, &index), WEFT_OK);
        ck_assert_uint_eq(index, t);
    }
    {
        weft_tensor_desc_t d = {.name = "model.layers.7.mlp.experts.9.w", .role = WEFT_ROLE_SCALE,
                                .dtype = WEFT_DTYPE_FP32, .ndim = 1, .shape = {1}};
        ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_EXISTS);
        d.name = "one-too-many";
        ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_ERR_NO_SPACE);
    }
    ck_assert_int_eq(weft_registry_seal(reg), WEFT_OK);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    for (uint32_t t = 0; t < COUNT; t += 997) {
        snprintf(name, sizeof(name), "model.layers.%u.mlp.experts.%u.w", t / 256, t % 256);
        ck_assert_int_eq(weft_registry_lookup(reader, name, &index), WEFT_OK);
        ck_assert_uint_eq(index, t);
    }
    weft_registry_close(reader);
    weft_registry_close(reg);
}
END_TEST

/* ----------------------------------------------------------- invariants */

START_TEST(wait_wakes_on_publish_from_another_process)
{
    weft_registry_h reg = make_registry(3, 1, 64);
    pid_t           pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        weft_registry_h reader;
        weft_lease_t    lease;
        int             ok = weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader) == WEFT_OK &&
                 /* UINT64_MAX: wait for ever (must not wrap into the past) */
                 weft_registry_wait(reader, 0, UINT64_MAX, &lease) == WEFT_OK && lease.version == 1 &&
                 verify_lease(reader, &lease) == 0;
        _exit(ok ? 0 : 1);
    }
    usleep(100000); /* the child is asleep on the futex by now */
    write_version(reg, 1);
    ck_assert_int_eq(wait_child(pid), 0);
    weft_registry_close(reg);
}
END_TEST

START_TEST(leased_slot_is_never_written_and_busy_changes_nothing)
{
    weft_registry_h       reg = make_registry(2, 2, 1024), reader;
    weft_registry_stats_t before, after;
    weft_lease_t          lease;

    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    write_version(reg, 1);
    ck_assert_int_eq(weft_registry_acquire(reader, &lease), WEFT_OK);
    write_version(reg, 2); /* the other slot */

    /* Slot of v1 is leased, slot of v2 is the latest: nothing is free. */
    ck_assert_int_eq(weft_registry_get_stats(reg, &before), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_begin(reg, 0, NULL), WEFT_ERR_BUSY);
    ck_assert_int_eq(weft_registry_write_begin(reg, 30000, NULL), WEFT_ERR_BUSY);
    ck_assert_int_eq(weft_registry_get_stats(reg, &after), WEFT_OK);
    ck_assert_uint_eq(after.busy, before.busy + 2);
    ck_assert_uint_eq(after.latest_version, 2);
    ck_assert_uint_eq(after.versions_published, before.versions_published);
    ck_assert_uint_eq(after.leases_held, 1);
    ck_assert_uint_eq(verify_lease(reader, &lease), 0); /* v1 intact */
    ck_assert_int_eq(weft_registry_publish(reg, 0, NULL), WEFT_ERR_STATE);

    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    write_version(reg, 3); /* now it goes */
    ck_assert_int_eq(weft_registry_acquire(reader, &lease), WEFT_OK);
    ck_assert_uint_eq(lease.version, 3);
    ck_assert_uint_eq(verify_lease(reader, &lease), 0);
    weft_registry_release(reader, &lease);
    weft_registry_close(reader);
    weft_registry_close(reg);
}
END_TEST

/* What the two sides of write_begin_waits_for_a_release tell each other. */
typedef struct release_order {
    _Atomic int released; /* the child: about to release its lease */
    _Atomic int returned; /* the parent: write_begin returned */
} release_order_t;

START_TEST(write_begin_waits_for_a_release)
{
    weft_registry_h  reg = make_registry(2, 1, 1024);
    release_order_t *order = mmap(NULL, sizeof(*order), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                                  -1, 0);
    int              ready[2], released_first, status;
    uint32_t         slot;
    void            *data;
    pid_t            pid;

    ck_assert_ptr_ne(order, MAP_FAILED);
    write_version(reg, 1);
    ck_assert_int_eq(pipe(ready), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        const reg_header_t *hdr = map_header();
        weft_registry_h     reader;
        weft_lease_t        lease;
        uint64_t            deadline = now_ns() + SIGNAL_TIMEOUT_US * 1000;

        if (hdr == NULL || weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader) != WEFT_OK ||
            weft_registry_acquire(reader, &lease) != WEFT_OK || write(ready[1], "x", 1) != 1) {
            _exit(1);
        }
        /* Hold the lease until the producer sleeps waiting for a release
         * (write_begin waits, as it must) or says that write_begin
         * returned (it did not wait); the deadline only ends a hang. */
        while (__atomic_load_n(&hdr->release_waiters, __ATOMIC_SEQ_CST) == 0 && !order->returned &&
               now_ns() < deadline) {
            usleep(1000);
        }
        if (verify_lease(reader, &lease) != 0) {
            _exit(2); /* the leased slot of v1 was written */
        }
        order->released = 1;
        _exit(weft_registry_release(reader, &lease) == WEFT_OK ? 0 : 1);
    }
    close(ready[1]);
    ck_assert_msg(await_byte(ready[0]) == 0, "the child took no lease");
    close(ready[0]);
    write_version(reg, 2); /* the free slot */
    /* The only slot that is not the latest is the child's lease of v1. */
    ck_assert_int_eq(weft_registry_write_begin(reg, SIGNAL_TIMEOUT_US, &slot), WEFT_OK);
    released_first = order->released;
    /* Fill what write_begin gave: were it the leased slot, the child's
     * check of v1 sees these bytes. */
    ck_assert_int_eq(weft_registry_write_tensor(reg, 0, &data), WEFT_OK);
    payload_fill(data, 1024, 3, 0);
    order->returned = 1;
    ck_assert_msg(released_first, "write_begin returned slot %u while the child still leased v1", slot);
    status = wait_child(pid);
    ck_assert_msg(status == 0, "the child exited %d (2: its leased v1 was overwritten)", status);
    ck_assert_int_eq(weft_registry_publish(reg, 3, NULL), WEFT_OK);
    munmap(order, sizeof(*order));
    weft_registry_close(reg);
}
END_TEST

START_TEST(leases_of_a_killed_reader_are_reclaimed)
{
    weft_registry_h       reg = make_registry(3, 1, 1024);
    weft_registry_stats_t stats;
    int                   to_child[2], to_parent[2];
    char                  byte;
    pid_t                 pid;

    ck_assert_int_eq(pipe(to_child), 0);
    ck_assert_int_eq(pipe(to_parent), 0);
    write_version(reg, 1);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        weft_registry_h reader;
        weft_lease_t    a, b;
        if (weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader) != WEFT_OK ||
            weft_registry_acquire(reader, &a) != WEFT_OK || write(to_parent[1], "a", 1) != 1 ||
            read(to_child[0], &byte, 1) != 1 || weft_registry_acquire(reader, &b) != WEFT_OK ||
            b.version != 2 || write(to_parent[1], "b", 1) != 1) {
            _exit(1);
        }
        pause(); /* killed while holding both leases */
        _exit(1);
    }
    ck_assert_int_eq(read(to_parent[0], &byte, 1), 1);
    write_version(reg, 2);
    ck_assert_int_eq(write(to_child[1], "g", 1), 1);
    ck_assert_int_eq(read(to_parent[0], &byte, 1), 1);
    write_version(reg, 3); /* slots of v1 and v2 leased, v3 latest */
    ck_assert_int_eq(weft_registry_write_begin(reg, 0, NULL), WEFT_ERR_BUSY);
    ck_assert_int_eq(weft_registry_get_stats(reg, &stats), WEFT_OK);
    ck_assert_uint_eq(stats.leases_held, 2);

    kill(pid, SIGKILL);
    ck_assert_int_eq(wait_child(pid), 128 + SIGKILL);
    ck_assert_int_eq(weft_registry_write_begin(reg, 1000000, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_publish(reg, 4, NULL), WEFT_OK);
    write_version(reg, 5);
    ck_assert_int_eq(weft_registry_get_stats(reg, &stats), WEFT_OK);
    ck_assert_uint_eq(stats.leases_reclaimed, 2);
    ck_assert_uint_eq(stats.leases_held, 0);
    weft_registry_close(reg);
}
END_TEST

START_TEST(producer_killed_mid_write_leaves_last_version)
{
    weft_registry_h reg, other;
    weft_lease_t    lease;
    pid_t           pid;
    int             ready[2];
    char            byte;

    test_name();
    ck_assert_int_eq(pipe(ready), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        weft_registry_h producer = make_registry(3, 2, 4096);
        void           *data;
        write_version(producer, 1);
        weft_registry_write_begin(producer, 0, NULL);
        weft_registry_write_tensor(producer, 0, &data);
        memset(data, 0xee, 2048); /* half of one tensor of version 2 */
        if (write(ready[1], "w", 1) != 1) {
            _exit(1);
        }
        pause();
        _exit(1);
    }
    ck_assert_int_eq(read(ready[0], &byte, 1), 1);
    /* While the producer lives, nobody takes over. */
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_PRODUCER, &other), WEFT_ERR_BUSY);
    kill(pid, SIGKILL);
    ck_assert_int_eq(wait_child(pid), 128 + SIGKILL);

    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &other), WEFT_OK);
    ck_assert_int_eq(weft_registry_acquire(other, &lease), WEFT_OK);
    ck_assert_uint_eq(lease.version, 1);
    ck_assert_uint_eq(verify_lease(other, &lease), 0);
    weft_registry_release(other, &lease);

    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_PRODUCER, &reg), WEFT_OK);
    for (uint64_t v = 2; v <= 6; v++) {
        write_version(reg, v);
        ck_assert_int_eq(weft_registry_acquire(other, &lease), WEFT_OK);
        ck_assert_uint_eq(lease.version, v);
        ck_assert_uint_eq(verify_lease(other, &lease), 0);
        weft_registry_release(other, &lease);
    }
    weft_registry_close(other);
    weft_registry_close(reg);
}
END_TEST

/* Readers in other processes verify every word of every version they
 * lease while the producer publishes as fast as it can. */
START_TEST(no_torn_reads_under_load)
{
    enum { READERS = 2, TENSORS = 4, BYTES = 64 * 1024, VERSIONS = 400 };
    weft_registry_h reg = make_registry(3, TENSORS, BYTES);
    pid_t           pids[READERS];

    for (int r = 0; r < READERS; r++) {
        pids[r] = fork();
        ck_assert_int_ge(pids[r], 0);
        if (pids[r] == 0) {
            weft_registry_h reader;
            weft_lease_t    lease;
            uint64_t        last = 0, torn = 0, reads = 0;

            if (weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader) != WEFT_OK) {
                _exit(2);
            }
            while (last < VERSIONS) {
                weft_status_t s = (reads & 1) ? weft_registry_acquire(reader, &lease)
                                              : weft_registry_wait(reader, last, 5000000, &lease);
                if (s == WEFT_ERR_NOT_FOUND) {
                    continue;
                }
                if (s != WEFT_OK || lease.version < last) {
                    _exit(3); /* errors and versions going backwards */
                }
                torn += verify_lease(reader, &lease) != 0;
                last = lease.version;
                reads++;
                if (weft_registry_release(reader, &lease) != WEFT_OK) {
                    _exit(4);
                }
            }
            /* Under load a reader may see only a few of the versions; every
             * one it saw must be whole, and it must have seen the last. */
            _exit(torn == 0 && reads > 0 && last == VERSIONS ? 0 : 5);
        }
    }
    for (uint64_t v = 1; v <= VERSIONS; v++) {
        write_version(reg, v);
    }
    for (int r = 0; r < READERS; r++) {
        ck_assert_int_eq(wait_child(pids[r]), 0);
    }
    weft_registry_close(reg);
}
END_TEST

/* weft_registry_inspect, for `weft-perf registries`: a live producer's
 * registry is in use, one whose producer died is stale, a segment too
 * short for a header is damaged but young (not stale), and names that
 * are not registries are refused. */
START_TEST(inspect_tells_live_from_stale)
{
    weft_registry_h         reg = make_registry(2, 3, 4096), reader;
    weft_registry_summary_t s;
    uint32_t                me;
    char                    damaged[64];
    pid_t                   child;
    int                     status, fd;

    ck_assert_int_eq(weft_registry_inspect(test_name_kept(), &s), WEFT_OK);
    ck_assert_int_eq(s.condition, WEFT_REGISTRY_SEALED);
    ck_assert_int_eq(s.memory, WEFT_MEMORY_HOST);
    ck_assert_int_eq(s.producer_pid, getpid());
    ck_assert_int_eq(s.producer_alive, 1);
    ck_assert_int_eq(s.stale, 0);
    ck_assert_uint_ge(s.segment_bytes, 2 * 3 * 4096);
    ck_assert_str_eq(s.problem, "");
    ck_assert_int_eq(weft_registry_open(test_name_kept(), WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_consumer_register(reader, "engine", &me), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_begin(reg, 0, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_publish(reg, 7, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_inspect(test_name_kept(), &s), WEFT_OK);
    ck_assert_uint_eq(s.consumers, 1);
    ck_assert_uint_eq(s.latest_version, 7);
    ck_assert_int_eq(weft_registry_close(reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_close(reg), WEFT_OK);
    /* Closed by its producer and read by nobody: stale. */
    ck_assert_int_eq(weft_registry_inspect(test_name_kept(), &s), WEFT_OK);
    ck_assert_int_eq(s.producer_pid, 0);
    ck_assert_int_eq(s.stale, 1);

    /* A producer that dies without closing: its pid, dead, stale. */
    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        weft_registry_h r;
        _exit(weft_registry_open(test_name_kept(), WEFT_REGISTRY_OPEN_PRODUCER, &r) == WEFT_OK ? 0 : 1);
    }
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_eq(weft_registry_inspect(test_name_kept(), &s), WEFT_OK);
    ck_assert_int_eq(s.producer_pid, child);
    ck_assert_int_eq(s.producer_alive, 0);
    ck_assert_int_eq(s.stale, 1);

    /* Ten bytes: damaged, and too young to call stale. */
    snprintf(damaged, sizeof(damaged), "test-registry-damaged-%d", (int)getpid());
    weft_registry_unlink(damaged);
    {
        char shm[80];
        snprintf(shm, sizeof(shm), "/weft.%s", damaged);
        fd = shm_open(shm, O_RDWR | O_CREAT | O_EXCL, 0600);
    }
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 10), 0);
    close(fd);
    ck_assert_int_eq(weft_registry_inspect(damaged, &s), WEFT_OK);
    ck_assert_int_eq(s.condition, WEFT_REGISTRY_DAMAGED);
    ck_assert_ptr_nonnull(strstr(s.problem, "shorter than a header"));
    ck_assert_int_eq(s.stale, 0);
    ck_assert_int_eq(weft_registry_unlink(damaged), WEFT_OK);

    ck_assert_int_eq(weft_registry_inspect(damaged, &s), WEFT_ERR_NOT_FOUND);
    ck_assert_int_eq(weft_registry_inspect("../etc", &s), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_inspect(test_name_kept(), NULL), WEFT_ERR_INVALID_PARAM);
}
END_TEST

START_TEST(consumers_ack_and_fail)
{
    weft_registry_h       reg = make_registry(3, 1, 64), reader;
    weft_consumer_info_t  info;
    weft_registry_stats_t stats;
    uint32_t              consumer, lagging = 99;
    int                   registered[2];
    pid_t                 pid;

    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_consumer_register(reader, "", &consumer), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_consumer_register(reader, "engine-0", &consumer), WEFT_OK);
    write_version(reg, 1);
    ck_assert_int_eq(weft_registry_wait_consumers(reg, 1, 10000, &lagging), WEFT_ERR_TIMEOUT);
    ck_assert_uint_eq(lagging, 1);

    ck_assert_int_eq(weft_registry_consumer_failed(reader, consumer, 1, WEFT_ERR_IO), WEFT_OK);
    ck_assert_int_eq(weft_registry_consumer_info(reg, consumer, &info), WEFT_OK);
    ck_assert_str_eq(info.name, "engine-0");
    ck_assert_int_eq(info.pid, getpid());
    ck_assert_uint_eq(info.received_version, 0);
    ck_assert_uint_eq(info.failed_version, 1);
    ck_assert_int_eq(info.last_error, WEFT_ERR_IO);

    ck_assert_int_eq(weft_registry_consumer_received(reader, consumer, 1), WEFT_OK);
    ck_assert_int_eq(weft_registry_consumer_received(reader, consumer, 1), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_wait_consumers(reg, 1, 0, &lagging), WEFT_OK);
    ck_assert_uint_eq(lagging, 0);

    /* A consumer in another process: the wait ends when it acks. It says
     * when it is registered, so that v2 and the waits below count it. */
    ck_assert_int_eq(pipe(registered), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        weft_registry_h r;
        uint32_t        c;
        weft_lease_t    lease;
        if (weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &r) != WEFT_OK ||
            weft_registry_consumer_register(r, "engine-1", &c) != WEFT_OK || write(registered[1], "r", 1) != 1 ||
            weft_registry_wait(r, 1, SIGNAL_TIMEOUT_US, &lease) != WEFT_OK ||
            weft_registry_release(r, &lease) != WEFT_OK ||
            weft_registry_consumer_received(r, c, lease.version) != WEFT_OK) {
            _exit(1);
        }
        pause(); /* stays registered until killed */
        _exit(1);
    }
    close(registered[1]); /* a child that dies before the byte gives EOF */
    ck_assert_msg(await_byte(registered[0]) == 0, "the child did not register as a consumer");
    close(registered[0]);
    write_version(reg, 2);
    ck_assert_int_eq(weft_registry_consumer_received(reader, consumer, 2), WEFT_OK);
    ck_assert_int_eq(weft_registry_wait_consumers(reg, 2, SIGNAL_TIMEOUT_US, &lagging), WEFT_OK);
    write_version(reg, 3);
    ck_assert_int_eq(weft_registry_consumer_received(reader, consumer, 3), WEFT_OK);
    ck_assert_int_eq(weft_registry_wait_consumers(reg, 3, 10000, &lagging), WEFT_ERR_TIMEOUT);
    ck_assert_uint_eq(lagging, 1);
    ck_assert_int_eq(weft_registry_get_stats(reg, &stats), WEFT_OK);
    ck_assert_uint_eq(stats.consumers, 2);
    /* A consumer that dies no longer counts, even before its record is
     * reclaimed, and no longer holds anyone back. */
    kill(pid, SIGKILL);
    ck_assert_int_eq(wait_child(pid), 128 + SIGKILL);
    ck_assert_int_eq(weft_registry_get_stats(reg, &stats), WEFT_OK);
    ck_assert_uint_eq(stats.consumers, 1);
    ck_assert_int_eq(weft_registry_wait_consumers(reg, 3, 1000000, &lagging), WEFT_OK);

    ck_assert_int_eq(weft_registry_consumer_unregister(reader, consumer), WEFT_OK);
    ck_assert_int_eq(weft_registry_consumer_info(reg, consumer, &info), WEFT_ERR_NOT_FOUND);
    weft_registry_close(reader);
    weft_registry_close(reg);
}
END_TEST

/* ----------------------------------------------------------- validation */

/* A copy of a sealed registry's segment, for mutation. */
static uint8_t *segment_copy(size_t *size)
{
    weft_registry_h reg = make_registry(3, 3, 512);
    char            path[128];
    FILE           *f;
    struct stat     st;
    uint8_t        *copy;

    write_version(reg, 1);
    snprintf(path, sizeof(path), "/dev/shm/weft.%s", reg_name);
    ck_assert_int_eq(stat(path, &st), 0);
    copy = malloc((size_t)st.st_size);
    f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fread(copy, 1, (size_t)st.st_size, f), (size_t)st.st_size);
    fclose(f);
    weft_registry_close(reg);
    *size = (size_t)st.st_size;
    return copy;
}

static weft_status_t validate(const uint8_t *segment, size_t size)
{
    reg_geometry_t geo;
    char           reason[256];

    return weft_registry_validate(segment, size, &geo, reason, sizeof(reason));
}

START_TEST(validator_accepts_a_real_segment)
{
    size_t         size;
    uint8_t       *seg = segment_copy(&size);
    reg_geometry_t geo;
    char           reason[256];

    ck_assert_int_eq(weft_registry_validate(seg, size, &geo, reason, sizeof(reason)), WEFT_OK);
    ck_assert_uint_eq(geo.slot_count, 3);
    ck_assert_uint_eq(geo.tensor_count, 3);
    free(seg);
}
END_TEST

START_TEST(validator_refuses_corrupt_segments)
{
    size_t        size;
    uint8_t      *seg = segment_copy(&size), *bad = malloc(size);
    reg_header_t *h = (reg_header_t *)bad;
    reg_tensor_t *t;

#define MUTATE(expected, ...)                              \
    do {                                                   \
        memcpy(bad, seg, size);                            \
        t = (reg_tensor_t *)(bad + h->tensor_table_offset); \
        __VA_ARGS__;                                       \
        ck_assert_int_eq(validate(bad, size), expected);   \
    } while (0)

    ck_assert_int_eq(validate(seg, 100), WEFT_ERR_CORRUPT);            /* shorter than a header */
    ck_assert_int_eq(validate(seg, size - 4096), WEFT_ERR_CORRUPT);    /* truncated */
    MUTATE(WEFT_ERR_CORRUPT, h->magic[0] = 'X');
    MUTATE(WEFT_ERR_VERSION, h->abi_major = 2);
    MUTATE(WEFT_OK, h->abi_minor = 7); /* newer minor: compatible */
    MUTATE(WEFT_ERR_CORRUPT, h->header_size = 64);
    MUTATE(WEFT_ERR_STATE, h->state = REG_STATE_DECLARING);
    MUTATE(WEFT_ERR_STATE, h->state = 0);               /* header being written */
    MUTATE(WEFT_ERR_STATE, memset(bad, 0, size));       /* created, nothing written */
    MUTATE(WEFT_ERR_CORRUPT, h->state = 99);
    MUTATE(WEFT_ERR_CORRUPT, h->segment_size += 4096);
    MUTATE(WEFT_ERR_CORRUPT, h->slot_count = 1);
    MUTATE(WEFT_ERR_CORRUPT, h->slot_count = 1000000);
    MUTATE(WEFT_ERR_CORRUPT, h->tensor_count = 0);
    MUTATE(WEFT_ERR_CORRUPT, h->tensor_count = h->tensor_capacity + 1);
    MUTATE(WEFT_ERR_CORRUPT, h->tensor_capacity = UINT32_MAX);
    MUTATE(WEFT_ERR_CORRUPT, h->lease_capacity = 0);
    MUTATE(WEFT_ERR_CORRUPT, h->consumer_capacity = UINT32_MAX);
    MUTATE(WEFT_ERR_CORRUPT, h->tensor_table_offset = size);
    MUTATE(WEFT_ERR_CORRUPT, h->tensor_table_offset = UINT64_MAX - 63);
    MUTATE(WEFT_ERR_CORRUPT, h->lease_table_offset = h->slot_table_offset); /* overlapping tables */
    MUTATE(WEFT_ERR_CORRUPT, h->slot_table_offset += 1);                   /* misaligned */
    MUTATE(WEFT_ERR_CORRUPT, h->data_offset = size);
    MUTATE(WEFT_ERR_CORRUPT, h->slot_stride = UINT64_MAX / 2);
    MUTATE(WEFT_ERR_CORRUPT, h->slot_bytes = h->slot_stride + 1);
    MUTATE(WEFT_ERR_CORRUPT, h->latest = REG_VS_WORD(1, 7));
    MUTATE(WEFT_ERR_CORRUPT, ((reg_slot_t *)(bad + h->slot_table_offset))[1].word = 3);
    MUTATE(WEFT_ERR_CORRUPT, t[1].offset = t[0].offset);          /* overlapping tensors */
    MUTATE(WEFT_ERR_CORRUPT, t[1].offset = t[0].offset + 256);    /* overlapping, aligned */
    MUTATE(WEFT_ERR_CORRUPT, t[2].offset = h->slot_bytes);        /* past the slot */
    MUTATE(WEFT_ERR_CORRUPT, t[2].offset = UINT64_MAX - 255);     /* overflow */
    MUTATE(WEFT_ERR_CORRUPT, t[0].offset += 8);                   /* misaligned */
    MUTATE(WEFT_ERR_CORRUPT, memcpy(t[1].name, t[0].name, sizeof(t[0].name))); /* duplicate */
    MUTATE(WEFT_ERR_CORRUPT, memset(t[0].name, 'a', sizeof(t[0].name)));       /* no NUL */
    MUTATE(WEFT_ERR_CORRUPT, t[0].name[0] = '\0');
    MUTATE(WEFT_ERR_CORRUPT, t[0].dtype = 0);
    MUTATE(WEFT_ERR_CORRUPT, t[0].dtype = 200);
    MUTATE(WEFT_ERR_CORRUPT, t[0].role = 0);
    MUTATE(WEFT_ERR_CORRUPT, t[0].ndim = 9);
    MUTATE(WEFT_ERR_CORRUPT, t[0].shape[0] = 0);
    MUTATE(WEFT_ERR_CORRUPT, t[0].bytes += 1);
    MUTATE(WEFT_ERR_CORRUPT, t[0].shape[0] = UINT64_MAX);
    MUTATE(WEFT_ERR_CORRUPT, t[0].memory = 9);
    /* ABI 1.1: where the arenas live. */
    MUTATE(WEFT_OK, h->memory = 0);                               /* a 1.0 segment: host */
    MUTATE(WEFT_OK, h->latest = REG_VS_WORD(1, REG_SLOT_NONE));   /* offloaded latest */
    MUTATE(WEFT_ERR_CORRUPT, h->memory = 9);
    MUTATE(WEFT_ERR_CORRUPT, h->memory = REG_MEMORY_CUDA);        /* no arena table */
    MUTATE(WEFT_ERR_CORRUPT, h->arena_count = 3);                 /* arenas in a host registry */
    MUTATE(WEFT_ERR_CORRUPT, h->arena_word = REG_ARENAS_WORD(1, 3));
    MUTATE(WEFT_ERR_CORRUPT, t[0].memory = REG_MEMORY_CUDA);      /* kind differs from the header's */
#undef MUTATE
    free(bad);
    free(seg);
}
END_TEST

/* ------------------------------------------------- GPU arenas, no GPU */

START_TEST(gpu_registry_needs_its_device)
{
    weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_FIELD_MEMORY,
                                     .memory = WEFT_MEMORY_CUDA, .device = 9999};
    weft_registry_h        reg = NULL;
    weft_status_t          status;
    char                   path[128];
    struct stat            st;

    /* No GPU 9999 anywhere: NO_DEVICE, or UNSUPPORTED without CUDA. */
    status = weft_registry_create(test_name(), &params, &reg);
    ck_assert_msg(status == WEFT_ERR_NO_DEVICE || status == WEFT_ERR_UNSUPPORTED, "status %d",
                  status);
    ck_assert_ptr_null(reg);
    snprintf(path, sizeof(path), "/dev/shm/weft.%s", reg_name);
    ck_assert_int_ne(stat(path, &st), 0); /* nothing left behind */
    params.memory = (weft_memory_kind_t)7;
    ck_assert_int_eq(weft_registry_create(test_name(), &params, &reg), WEFT_ERR_INVALID_PARAM);
}
END_TEST

START_TEST(host_registry_has_no_arenas_to_offload)
{
    weft_registry_h   reg = make_registry(2, 1, 64);
    weft_arena_info_t info;

    ck_assert_int_eq(weft_registry_arena_info(reg, &info), WEFT_OK);
    ck_assert_int_eq(info.memory, WEFT_MEMORY_HOST);
    ck_assert_int_eq(info.device, -1);
    ck_assert_uint_eq(info.generation, 0);
    ck_assert_int_eq(info.offloaded, 0);
    ck_assert_int_eq(weft_registry_offload(reg, 0), WEFT_ERR_UNSUPPORTED);
    ck_assert_int_eq(weft_registry_reload(reg), WEFT_ERR_UNSUPPORTED);
    ck_assert_int_eq(weft_registry_unmap_arenas(reg), WEFT_OK);
    ck_assert_int_eq(weft_registry_arena_info(NULL, &info), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_offload(NULL, 0), WEFT_ERR_INVALID_PARAM);
    weft_registry_close(reg);
}
END_TEST

/* The test registry's header, mapped writable to damage it by hand
 * (munmap it after). */
static reg_header_t *map_header_writable(void)
{
    char          path[128];
    reg_header_t *hdr;
    int           fd;

    snprintf(path, sizeof(path), "/weft.%s", reg_name);
    fd = shm_open(path, O_RDWR, 0);
    ck_assert_int_ge(fd, 0);
    hdr = mmap(NULL, sizeof(*hdr), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ck_assert_ptr_ne(hdr, MAP_FAILED);
    return hdr;
}

/* What readers see after an offload dropped the latest version's bytes
 * (the latest word names no slot): nothing to lease, waits go on, and the
 * next version is readable again. Made by hand here: no GPU needed. */
START_TEST(latest_without_slot_is_not_readable)
{
    weft_registry_h reg = make_registry(3, 2, 64), reader;
    weft_lease_t    lease;
    reg_header_t   *hdr;

    write_version(reg, 1);
    hdr = map_header_writable();
    __atomic_store_n(&hdr->latest, REG_VS_WORD(1, REG_SLOT_NONE), __ATOMIC_SEQ_CST);

    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_acquire(reader, &lease), WEFT_ERR_NOT_FOUND);
    ck_assert_int_eq(weft_registry_wait(reader, 0, 50000, &lease), WEFT_ERR_TIMEOUT);
    write_version(reg, 2);
    ck_assert_int_eq(weft_registry_wait(reader, 0, 1000000, &lease), WEFT_OK);
    ck_assert_uint_eq(lease.version, 2);
    ck_assert_uint_eq(verify_lease(reader, &lease), 0);
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    munmap(hdr, sizeof(*hdr));
    weft_registry_close(reader);
    weft_registry_close(reg);
}
END_TEST

/* A damaged latest word (a version no slot holds) would refuse every
 * later version as not newer; a takeover recomputes it from the slots. */
START_TEST(takeover_repairs_a_damaged_latest)
{
    weft_registry_h reg = make_registry(3, 2, 64), reader;
    weft_lease_t    lease;
    reg_header_t   *hdr;

    write_version(reg, 1);
    write_version(reg, 2);
    weft_registry_close(reg); /* the producer is gone; the segment stays */
    hdr = map_header_writable();
    __atomic_store_n(&hdr->latest, REG_VS_WORD(UINT64_C(39) << 50, REG_VS_SLOT(hdr->latest)), __ATOMIC_SEQ_CST);

    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_PRODUCER, &reg), WEFT_OK);
    ck_assert_uint_eq(REG_VS_VERSION(__atomic_load_n(&hdr->latest, __ATOMIC_SEQ_CST)), 2);
    write_version(reg, 3);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_acquire(reader, &lease), WEFT_OK);
    ck_assert_uint_eq(lease.version, 3);
    ck_assert_uint_eq(verify_lease(reader, &lease), 0);
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    weft_registry_close(reader);
    weft_registry_close(reg);
    munmap(hdr, sizeof(*hdr));
}
END_TEST

START_TEST(open_refuses_a_truncated_segment)
{
    weft_registry_h reg = make_registry(3, 2, 4096), reader;
    char            path[128];

    write_version(reg, 1);
    weft_registry_close(reg); /* the segment stays until unlinked */
    snprintf(path, sizeof(path), "/dev/shm/weft.%s", reg_name);
    ck_assert_int_eq(truncate(path, 8192), 0);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_ERR_CORRUPT);
    ck_assert_int_eq(truncate(path, 10), 0);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_ERR_CORRUPT);
}
END_TEST

/* A segment that exists but whose creator has not written its header yet
 * (empty, then zeroed) is a registry being created: not yet, not corrupt. */
START_TEST(open_of_a_registry_being_created_says_not_yet)
{
    weft_registry_h reader = NULL;
    char            shm[96];
    int             fd;

    snprintf(shm, sizeof(shm), "/weft.%s", test_name());
    fd = shm_open(shm, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_ERR_STATE);
    ck_assert_int_eq(ftruncate(fd, 65536), 0);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_ERR_STATE);
    ck_assert_ptr_null(reader);
    close(fd);
}
END_TEST

/* Readers that poll weft_registry_open while a producer creates, seals and
 * removes the registry again and again see it missing, not ready yet, or
 * whole: never corrupt (a reader that came between the segment's creation
 * and its header, or between its growth and its seal, used to). */
START_TEST(opens_racing_creation_see_only_missing_not_yet_or_whole)
{
    const int cycles = 400;
    uint64_t  opened = 0, not_yet = 0, missing = 0;
    pid_t     creator;
    int       status;

    (void)test_name();
    creator = fork();
    ck_assert_int_ge(creator, 0);
    if (creator == 0) {
        for (int c = 0; c < cycles; c++) {
            weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_FIELD_SLOTS, .slot_count = 2};
            weft_tensor_desc_t     desc = {.name = "w", .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_UINT8,
                                           .ndim = 1, .shape = {1 << 20}};
            weft_registry_h        reg;
            uint32_t               index;

            if (weft_registry_create(reg_name, &params, &reg) != WEFT_OK) {
                _exit(2);
            }
            if (weft_registry_declare(reg, &desc, &index) != WEFT_OK || weft_registry_seal(reg) != WEFT_OK) {
                _exit(3);
            }
            weft_registry_close(reg);
            weft_registry_unlink(reg_name);
        }
        _exit(0);
    }
    while (waitpid(creator, &status, WNOHANG) == 0) {
        weft_registry_h reader;
        weft_status_t   got = weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader);

        if (got == WEFT_OK) {
            opened++;
            ck_assert_int_eq(weft_registry_close(reader), WEFT_OK);
        } else if (got == WEFT_ERR_STATE) {
            not_yet++;
        } else {
            ck_assert_msg(got == WEFT_ERR_NOT_FOUND, "open during creation: %s", weft_status_string(got));
            missing++;
        }
    }
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the creator failed: status %d", status);
    ck_assert_uint_gt(opened + not_yet + missing, 0);
}
END_TEST

static Suite *registry_suite(void)
{
    Suite *s = suite_create("registry");
    TCase *api = tcase_create("api"), *inv = tcase_create("invariants"), *val = tcase_create("validation");

    tcase_add_checked_fixture(api, NULL, unlink_registry);
    tcase_add_checked_fixture(inv, NULL, unlink_registry);
    tcase_add_checked_fixture(val, NULL, unlink_registry);
    tcase_set_timeout(api, 30);
    tcase_set_timeout(inv, 60);
    tcase_add_test(api, create_declare_seal_open);
    tcase_add_test(api, create_with_group_mode);
    tcase_add_test(api, create_rejects_bad_input);
    tcase_add_test(api, declare_rejects_bad_tensors);
    tcase_add_test(api, calls_in_the_wrong_state);
    tcase_add_test(api, readers_see_published_bytes);
    tcase_add_test(api, many_tensors_declare_and_look_up);
    tcase_add_test(inv, wait_wakes_on_publish_from_another_process);
    tcase_add_test(inv, leased_slot_is_never_written_and_busy_changes_nothing);
    tcase_add_test(inv, write_begin_waits_for_a_release);
    tcase_add_test(inv, leases_of_a_killed_reader_are_reclaimed);
    tcase_add_test(inv, producer_killed_mid_write_leaves_last_version);
    tcase_add_test(inv, no_torn_reads_under_load);
    tcase_add_test(inv, consumers_ack_and_fail);
    tcase_add_test(api, inspect_tells_live_from_stale);
    tcase_add_test(val, validator_accepts_a_real_segment);
    tcase_add_test(val, validator_refuses_corrupt_segments);
    tcase_add_test(val, open_refuses_a_truncated_segment);
    tcase_add_test(val, open_of_a_registry_being_created_says_not_yet);
    tcase_add_test(val, opens_racing_creation_see_only_missing_not_yet_or_whole);
    tcase_add_test(api, gpu_registry_needs_its_device);
    tcase_add_test(api, host_registry_has_no_arenas_to_offload);
    tcase_add_test(inv, latest_without_slot_is_not_readable);
    tcase_add_test(inv, takeover_repairs_a_damaged_latest);
    suite_add_tcase(s, api);
    suite_add_tcase(s, inv);
    suite_add_tcase(s, val);
    return s;
}

WEFT_TEST_MAIN(registry_suite)
