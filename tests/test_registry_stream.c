/* registry/ streaming: a version read while it is written
 * (weft_registry_write_ready, wait_ready, lease_ready): readers get only
 * the tensors announced final, the slot is never reused under their
 * lease, an abandoned write or a dead producer cancels them, and a plan
 * refuses to copy past what is final. */
#include "config.h"

#include "lib/registry_fixture.h"
#include "lib/harness.h"
#include "perf/lib/payload.h"

#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#define TENSORS 4
#define BYTES   4096u

/* The segment's first `bytes`, mapped read-write by the layout
 * registry/PROTOCOL.md gives other implementations (the header's words
 * at their offsets there); NULL on failure. Left mapped: tests exit. */
static uint8_t *map_segment(size_t bytes)
{
    char  path[128];
    int   fd;
    void *p;

    snprintf(path, sizeof(path), "/weft.%s", reg_name);
    fd = shm_open(path, O_RDWR, 0);
    if (fd < 0) {
        return NULL;
    }
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

/* The header's publish_seq (offset 328): the futex word readers sleep on. */
static uint32_t publish_seq(const uint8_t *segment)
{
    return __atomic_load_n((const uint32_t *)(segment + 328), __ATOMIC_SEQ_CST);
}

/* Writes tensors [first, end) of the version being written. */
static void write_tensors(weft_registry_h reg, uint64_t version, uint32_t first, uint32_t end)
{
    for (uint32_t t = first; t < end; t++) {
        uint8_t *data;

        ck_assert_int_eq(weft_registry_write_tensor(reg, t, (void **)&data), WEFT_OK);
        payload_fill(data, BYTES, version, t);
    }
}

static void publish_whole(weft_registry_h reg, uint64_t version)
{
    ck_assert_int_eq(weft_registry_write_begin(reg, SIGNAL_TIMEOUT_US, NULL), WEFT_OK);
    write_tensors(reg, version, 0, TENSORS);
    ck_assert_int_eq(weft_registry_publish(reg, version, NULL), WEFT_OK);
}

/* Bytes of tensors [first, end) of the leased version that are not its
 * payload; -1 when one cannot be read. */
static int64_t wrong_bytes(weft_registry_h reg, const weft_lease_t *lease, uint32_t first, uint32_t end)
{
    int64_t wrong = 0;

    for (uint32_t t = first; t < end; t++) {
        const uint8_t *data;

        if (weft_registry_lease_tensor(reg, lease, t, (const void **)&data) != WEFT_OK) {
            return -1;
        }
        wrong += (int64_t)payload_count_wrong(data, BYTES, lease->version, t);
    }
    return wrong;
}

/* Views over tensors [0, count) of host buffers, for a plan. */
static void host_views(weft_recv_view_t *views, char (*names)[64], uint8_t (*buffers)[BYTES], uint32_t count)
{
    for (uint32_t t = 0; t < count; t++) {
        snprintf(names[t], sizeof(names[t]), "model.layers.0.mlp.experts.%u.down_proj.weight", t);
        views[t] = (weft_recv_view_t){.name = names[t], .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_UINT8, .ndim = 1,
                                      .shape = {BYTES}, .data = buffers[t], .memory = WEFT_MEMORY_HOST};
    }
}

START_TEST(announced_tensors_are_read_before_the_publish)
{
    weft_registry_h  reg = make_registry(3, TENSORS, BYTES), reader;
    weft_lease_t     lease;
    uint32_t         ready = 99;
    int              published = 9;
    uint64_t         version = 0;
    const void      *data;
    weft_recv_view_t views[TENSORS];
    char             names[TENSORS][64];
    static uint8_t   buffers[TENSORS][BYTES];
    weft_plan_h      first_two, all;

    publish_whole(reg, 1);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    host_views(views, names, buffers, TENSORS);
    ck_assert_int_eq(weft_plan_create(reader, WEFT_TRANSPORT_HOST, views, 2, &first_two), WEFT_OK);
    ck_assert_int_eq(weft_plan_create(reader, WEFT_TRANSPORT_HOST, views, TENSORS, &all), WEFT_OK);

    ck_assert_int_eq(weft_registry_write_begin(reg, SIGNAL_TIMEOUT_US, NULL), WEFT_OK);
    write_tensors(reg, 2, 0, 2);
    /* Nothing announced yet: nothing newer than 1 to lease. */
    ck_assert_int_eq(weft_registry_wait_ready(reader, 1, 0, &lease), WEFT_ERR_TIMEOUT);
    ck_assert_int_eq(weft_registry_write_ready(reg, 2, 2), WEFT_OK);
    /* A plain wait still sees only published versions. */
    ck_assert_int_eq(weft_registry_wait(reader, 1, 0, &lease), WEFT_ERR_TIMEOUT);
    ck_assert_int_eq(weft_registry_wait_ready(reader, 1, SIGNAL_TIMEOUT_US, &lease), WEFT_OK);
    ck_assert_uint_eq(lease.version, 2);
    ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, 2, 0, &ready, &published), WEFT_OK);
    ck_assert_uint_eq(ready, 2);
    ck_assert_int_eq(published, 0);
    ck_assert_int_eq(wrong_bytes(reader, &lease, 0, 2), 0);
    /* Past what is final: refused, by the registry and by a plan. */
    ck_assert_int_eq(weft_registry_lease_tensor(reader, &lease, 2, &data), WEFT_ERR_STATE);
    ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, 3, 0, &ready, &published), WEFT_ERR_TIMEOUT);
    ck_assert_uint_eq(ready, 2);
    ck_assert_int_eq(weft_plan_copy(all, &lease), WEFT_ERR_STATE);
    ck_assert_int_eq(weft_plan_copy(first_two, &lease), WEFT_OK);
    ck_assert_uint_eq(payload_check(buffers[1], BYTES, 2, 1), BYTES);

    write_tensors(reg, 2, 2, TENSORS);
    ck_assert_int_eq(weft_registry_write_ready(reg, 2, TENSORS), WEFT_OK);
    ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, TENSORS, 0, &ready, &published), WEFT_OK);
    ck_assert_uint_eq(ready, TENSORS);
    ck_assert_int_eq(published, 0); /* all final is not published */
    ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, WEFT_REGISTRY_PUBLISHED, 0, &ready, &published),
                     WEFT_ERR_TIMEOUT);
    /* Publish takes the announced version. */
    ck_assert_int_eq(weft_registry_publish(reg, 0, &version), WEFT_OK);
    ck_assert_uint_eq(version, 2);
    ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, WEFT_REGISTRY_PUBLISHED, 0, &ready, &published),
                     WEFT_OK);
    ck_assert_int_eq(published, 1);
    ck_assert_uint_eq(ready, TENSORS);
    ck_assert_int_eq(wrong_bytes(reader, &lease, 0, TENSORS), 0);
    ck_assert_int_eq(weft_plan_copy(all, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);

    /* A published version comes first: it is whole. */
    ck_assert_int_eq(weft_registry_write_begin(reg, SIGNAL_TIMEOUT_US, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_ready(reg, 3, 0), WEFT_OK);
    ck_assert_int_eq(weft_registry_wait_ready(reader, 1, 0, &lease), WEFT_OK);
    ck_assert_uint_eq(lease.version, 2);
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_wait_ready(reader, 2, 0, &lease), WEFT_OK);
    ck_assert_uint_eq(lease.version, 3);
    ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, 0, 0, &ready, &published), WEFT_OK);
    ck_assert_uint_eq(ready, 0);
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_abort(reg), WEFT_OK);

    weft_plan_destroy(first_two);
    weft_plan_destroy(all);
    weft_registry_close(reader);
    weft_registry_close(reg);
}
END_TEST

/* A streaming lease holds its slot like any lease: after the publish,
 * with the other slot the latest, there is nowhere to write. */
START_TEST(a_streamed_slot_is_not_taken_while_leased)
{
    weft_registry_h reg = make_registry(2, TENSORS, BYTES), reader;
    weft_lease_t    lease;
    uint32_t        slot_streamed, slot;

    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_begin(reg, SIGNAL_TIMEOUT_US, &slot_streamed), WEFT_OK);
    write_tensors(reg, 1, 0, 1);
    ck_assert_int_eq(weft_registry_write_ready(reg, 1, 1), WEFT_OK);
    ck_assert_int_eq(weft_registry_wait_ready(reader, 0, SIGNAL_TIMEOUT_US, &lease), WEFT_OK);
    ck_assert_uint_eq(lease.slot, slot_streamed);
    write_tensors(reg, 1, 1, TENSORS);
    ck_assert_int_eq(weft_registry_publish(reg, 1, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_begin(reg, SIGNAL_TIMEOUT_US, &slot), WEFT_OK);
    write_tensors(reg, 2, 0, TENSORS);
    ck_assert_int_eq(weft_registry_publish(reg, 2, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_begin(reg, 0, NULL), WEFT_ERR_BUSY);
    ck_assert_int_eq(wrong_bytes(reader, &lease, 0, TENSORS), 0); /* still version 1 */
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_begin(reg, 0, &slot), WEFT_OK);
    ck_assert_uint_eq(slot, slot_streamed);
    ck_assert_int_eq(weft_registry_write_abort(reg), WEFT_OK);
    weft_registry_close(reader);
    weft_registry_close(reg);
}
END_TEST

START_TEST(an_aborted_write_cancels_its_streaming_readers)
{
    weft_registry_h reg = make_registry(3, TENSORS, BYTES), reader;
    weft_lease_t    lease;
    uint32_t        ready, seq;
    int             published;
    const void     *data;
    const uint8_t  *segment = map_segment(1024);

    ck_assert_ptr_nonnull(segment);
    publish_whole(reg, 1);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_begin(reg, SIGNAL_TIMEOUT_US, NULL), WEFT_OK);
    write_tensors(reg, 2, 0, 2);
    ck_assert_int_eq(weft_registry_write_ready(reg, 2, 2), WEFT_OK);
    ck_assert_int_eq(weft_registry_wait_ready(reader, 1, SIGNAL_TIMEOUT_US, &lease), WEFT_OK);
    seq = publish_seq(segment);
    ck_assert_int_eq(weft_registry_write_abort(reg), WEFT_OK);
    ck_assert_uint_ne(publish_seq(segment), seq); /* sleepers are woken */
    /* The announcement went with the write. */
    {
        weft_lease_t again;
        ck_assert_int_eq(weft_registry_wait_ready(reader, 1, 0, &again), WEFT_ERR_TIMEOUT);
    }
    ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, WEFT_REGISTRY_PUBLISHED, SIGNAL_TIMEOUT_US, &ready,
                                               &published),
                     WEFT_ERR_CANCELED);
    ck_assert_int_eq(weft_registry_lease_tensor(reader, &lease, 0, &data), WEFT_ERR_STATE);
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    /* Version 2 can still be written and published in full. */
    publish_whole(reg, 2);
    ck_assert_int_eq(weft_registry_wait_ready(reader, 1, 0, &lease), WEFT_OK);
    ck_assert_uint_eq(lease.version, 2);
    ck_assert_int_eq(wrong_bytes(reader, &lease, 0, TENSORS), 0);
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    weft_registry_close(reader);
    weft_registry_close(reg);
}
END_TEST

START_TEST(write_ready_checks_its_arguments)
{
    weft_registry_h reg = make_registry(3, TENSORS, BYTES), reader;
    weft_lease_t    lease;
    uint32_t        ready, seq;
    int             published;
    const uint8_t  *segment = map_segment(1024);

    ck_assert_ptr_nonnull(segment);
    ck_assert_int_eq(weft_registry_write_ready(NULL, 1, 1), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_write_ready(reg, 1, 1), WEFT_ERR_STATE); /* no write */
    publish_whole(reg, 5);
    ck_assert_int_eq(weft_registry_write_begin(reg, SIGNAL_TIMEOUT_US, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_ready(reg, 5, 1), WEFT_ERR_INVALID_PARAM);           /* not newer */
    ck_assert_int_eq(weft_registry_write_ready(reg, 6, TENSORS + 1), WEFT_ERR_INVALID_PARAM); /* too many */
    seq = publish_seq(segment);
    ck_assert_int_eq(weft_registry_write_ready(reg, 6, 2), WEFT_OK);
    ck_assert_uint_ne(publish_seq(segment), seq); /* sleepers are woken */
    ck_assert_int_eq(weft_registry_write_ready(reg, 7, 3), WEFT_ERR_INVALID_PARAM); /* another version */
    ck_assert_int_eq(weft_registry_write_ready(reg, 6, 1), WEFT_ERR_INVALID_PARAM); /* fewer */
    ck_assert_int_eq(weft_registry_write_ready(reg, 6, 2), WEFT_OK);                /* the same again */
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_wait_ready(reader, 5, 0, &lease), WEFT_OK);
    ck_assert_uint_eq(lease.version, 6);
    ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, TENSORS + 1, 0, &ready, &published),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, 1, 0, NULL, &published), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, 1, 0, &ready, &published), WEFT_ERR_STATE);
    /* Publish keeps the announced version; the write stays open after a refusal. */
    ck_assert_int_eq(weft_registry_publish(reg, 7, NULL), WEFT_ERR_INVALID_PARAM);
    write_tensors(reg, 6, 0, TENSORS);
    ck_assert_int_eq(weft_registry_publish(reg, 6, NULL), WEFT_OK);
    weft_registry_close(reader);
    weft_registry_close(reg);
}
END_TEST

/* Across processes: a reader in wait_ready and lease_ready gets the
 * announced tensors and then the publish (that each wakes sleepers is
 * checked on publish_seq above); the parent goes on only when the child
 * says where it is (a byte on a pipe). */
START_TEST(streaming_reader_in_another_process_follows_the_writer)
{
    weft_registry_h reg = make_registry(3, TENSORS, BYTES);
    int             to_parent[2];
    pid_t           pid;

    publish_whole(reg, 1);
    ck_assert_int_eq(pipe(to_parent), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        weft_registry_h reader;
        weft_lease_t    lease;
        uint32_t        ready;
        int             published, ok;

        close(to_parent[0]);
        ok = weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader) == WEFT_OK &&
             weft_registry_wait_ready(reader, 1, SIGNAL_TIMEOUT_US, &lease) == WEFT_OK && lease.version == 2 &&
             weft_registry_lease_ready(reader, &lease, 2, SIGNAL_TIMEOUT_US, &ready, &published) == WEFT_OK &&
             ready >= 2 && wrong_bytes(reader, &lease, 0, 2) == 0;
        ok = ok && write(to_parent[1], "a", 1) == 1;
        ok = ok && weft_registry_lease_ready(reader, &lease, WEFT_REGISTRY_PUBLISHED, SIGNAL_TIMEOUT_US, &ready,
                                             &published) == WEFT_OK &&
             published == 1 && wrong_bytes(reader, &lease, 0, TENSORS) == 0 &&
             weft_registry_release(reader, &lease) == WEFT_OK;
        _exit(ok ? 0 : 1);
    }
    close(to_parent[1]);
    ck_assert_int_eq(weft_registry_write_begin(reg, SIGNAL_TIMEOUT_US, NULL), WEFT_OK);
    write_tensors(reg, 2, 0, 1);
    ck_assert_int_eq(weft_registry_write_ready(reg, 2, 1), WEFT_OK);
    write_tensors(reg, 2, 1, 2);
    ck_assert_int_eq(weft_registry_write_ready(reg, 2, 2), WEFT_OK);
    ck_assert_int_eq(await_byte(to_parent[0]), 0);
    write_tensors(reg, 2, 2, TENSORS);
    ck_assert_int_eq(weft_registry_publish(reg, 2, NULL), WEFT_OK);
    {
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    close(to_parent[0]);
    weft_registry_close(reg);
}
END_TEST

/* A producer killed with a version half announced: its streaming reader
 * is told the version will not come, and the slot can be taken over. */
START_TEST(a_dead_producer_cancels_its_streaming_readers)
{
    int           to_parent[2];
    pid_t         pid;

    ck_assert_int_eq(pipe(to_parent), 0);
    (void)test_name();
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        weft_registry_h reg = make_registry(3, TENSORS, BYTES);

        close(to_parent[0]);
        publish_whole(reg, 1);
        if (weft_registry_write_begin(reg, SIGNAL_TIMEOUT_US, NULL) != WEFT_OK) {
            _exit(1);
        }
        write_tensors(reg, 2, 0, 2);
        if (weft_registry_write_ready(reg, 2, 2) != WEFT_OK || write(to_parent[1], "a", 1) != 1) {
            _exit(1);
        }
        for (;;) {
            pause(); /* killed here */
        }
    }
    close(to_parent[1]);
    ck_assert_int_eq(await_byte(to_parent[0]), 0);
    {
        weft_registry_h reader;
        weft_lease_t    lease;
        uint32_t        ready;
        int             published, status;

        ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
        ck_assert_int_eq(weft_registry_wait_ready(reader, 1, SIGNAL_TIMEOUT_US, &lease), WEFT_OK);
        ck_assert_uint_eq(lease.version, 2);
        ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, 2, 0, &ready, &published), WEFT_OK);
        ck_assert_int_eq(wrong_bytes(reader, &lease, 0, 2), 0);
        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, WEFT_REGISTRY_PUBLISHED, SIGNAL_TIMEOUT_US,
                                                   &ready, &published),
                         WEFT_ERR_CANCELED);
        ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
        /* A dead producer's announcement is not leased again. */
        ck_assert_int_eq(weft_registry_wait_ready(reader, 1, 0, &lease), WEFT_ERR_TIMEOUT);
        weft_registry_close(reader);
    }
    {
        /* A new producer takes over; version 1 is still there whole. */
        weft_registry_h reg;
        weft_lease_t    lease;

        ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_PRODUCER, &reg), WEFT_OK);
        ck_assert_int_eq(weft_registry_acquire(reg, &lease), WEFT_OK);
        ck_assert_uint_eq(lease.version, 1);
        ck_assert_int_eq(wrong_bytes(reg, &lease, 0, TENSORS), 0);
        ck_assert_int_eq(weft_registry_release(reg, &lease), WEFT_OK);
        publish_whole(reg, 2);
        weft_registry_close(reg);
    }
    close(to_parent[0]);
}
END_TEST

/* An announcement counts only while its announcer is the producer: one
 * left in a slot by another (here written into the segment as an older
 * library's takeover would leave it: the slot writing, the announcement
 * not cleared) is not leased. */
START_TEST(an_announcement_of_another_producer_does_not_count)
{
    weft_registry_h reg = make_registry(3, TENSORS, BYTES), reader;
    weft_lease_t    lease;
    uint8_t        *segment;
    uint64_t        slot_table;
    uint8_t        *slot;
    uint32_t        taken;

    publish_whole(reg, 1);
    ck_assert_int_eq(weft_registry_write_begin(reg, SIGNAL_TIMEOUT_US, &taken), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_abort(reg), WEFT_OK);
    segment = map_segment(1024);
    ck_assert_ptr_nonnull(segment);
    slot_table = *(const uint64_t *)(segment + 56);
    segment = map_segment(slot_table + 64 * 16);
    ck_assert_ptr_nonnull(segment);
    slot = segment + slot_table + 64 * taken;
    /* Slot word writing, ready_version 2, ready_count 4, ready_owner a
     * producer that is not the header's. */
    __atomic_store_n((uint64_t *)(slot + 32), UINT64_C(0x12345) << 32, __ATOMIC_SEQ_CST);
    __atomic_store_n((uint64_t *)(slot + 16), UINT64_C(2), __ATOMIC_SEQ_CST);
    __atomic_store_n((uint32_t *)(slot + 24), TENSORS, __ATOMIC_SEQ_CST);
    __atomic_store_n((uint64_t *)slot, UINT64_C(1), __ATOMIC_SEQ_CST);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_wait_ready(reader, 1, 0, &lease), WEFT_ERR_TIMEOUT);
    weft_registry_close(reader);
    weft_registry_close(reg);
}
END_TEST

/* A producer that dies inside publish, after the slot word and before
 * `latest` (written here into the segment as PROTOCOL.md lays it out),
 * published nothing: its streaming reader is canceled, not given a
 * version, and the next producer's version of that number is its own.
 * The dead producer's bytes are another version's payload (99), every
 * word of which differs from version 2's, so a reader handed them would
 * see it. */
START_TEST(a_death_inside_publish_publishes_nothing)
{
    int           to_parent[2], to_child[2];
    pid_t         pid;
    char          byte;

    ck_assert_int_eq(pipe(to_parent), 0);
    ck_assert_int_eq(pipe(to_child), 0);
    (void)test_name();
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        weft_registry_h reg = make_registry(3, TENSORS, BYTES);
        uint32_t        slot;
        uint8_t        *segment;

        close(to_parent[0]);
        close(to_child[1]);
        publish_whole(reg, 1);
        segment = map_segment(1024);
        if (segment == NULL || weft_registry_write_begin(reg, SIGNAL_TIMEOUT_US, &slot) != WEFT_OK) {
            _exit(1);
        }
        write_tensors(reg, 99, 0, TENSORS);
        if (weft_registry_write_ready(reg, 2, TENSORS) != WEFT_OK || write(to_parent[1], "a", 1) != 1 ||
            read(to_child[0], &byte, 1) != 1) {
            _exit(1);
        }
        {
            /* publish's first store (the slot word: version 2, published),
             * then death before `latest`. */
            uint64_t  slot_table = *(const uint64_t *)(segment + 56);
            uint64_t *word;
            size_t    bytes = slot_table + 64 * (slot + 1);

            segment = map_segment(bytes);
            if (segment == NULL) {
                _exit(1);
            }
            word = (uint64_t *)(segment + slot_table + 64 * slot);
            __atomic_store_n(word, (UINT64_C(2) << 2) | 2, __ATOMIC_SEQ_CST);
        }
        if (write(to_parent[1], "b", 1) != 1) {
            _exit(1);
        }
        for (;;) {
            pause(); /* killed here */
        }
    }
    close(to_parent[1]);
    close(to_child[0]);
    ck_assert_int_eq(await_byte(to_parent[0]), 0);
    {
        weft_registry_h reader, reg;
        weft_lease_t    lease;
        uint32_t        ready;
        int             published, status;

        ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
        ck_assert_int_eq(weft_registry_wait_ready(reader, 1, SIGNAL_TIMEOUT_US, &lease), WEFT_OK);
        ck_assert_uint_eq(lease.version, 2);
        ck_assert_int_eq(write(to_child[1], "g", 1), 1);
        ck_assert_int_eq(await_byte(to_parent[0]), 0);
        /* The slot word says published, `latest` does not: not yet. */
        ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, WEFT_REGISTRY_PUBLISHED, 0, &ready, &published),
                         WEFT_ERR_TIMEOUT);
        ck_assert_int_eq(published, 0);
        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_int_eq(weft_registry_lease_ready(reader, &lease, WEFT_REGISTRY_PUBLISHED, SIGNAL_TIMEOUT_US,
                                                   &ready, &published),
                         WEFT_ERR_CANCELED);
        ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
        /* The next producer writes version 2 itself; that is what readers get. */
        ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_PRODUCER, &reg), WEFT_OK);
        ck_assert_int_eq(weft_registry_wait_ready(reader, 1, 0, &lease), WEFT_ERR_TIMEOUT);
        publish_whole(reg, 2);
        ck_assert_int_eq(weft_registry_wait_ready(reader, 1, SIGNAL_TIMEOUT_US, &lease), WEFT_OK);
        ck_assert_uint_eq(lease.version, 2);
        ck_assert_int_eq(wrong_bytes(reader, &lease, 0, TENSORS), 0);
        ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
        weft_registry_close(reader);
        weft_registry_close(reg);
    }
    close(to_parent[0]);
    close(to_child[1]);
}
END_TEST

static Suite *registry_stream_suite(void)
{
    Suite *s = suite_create("registry_stream");
    TCase *tc = tcase_create("stream");

    tcase_add_checked_fixture(tc, NULL, unlink_registry);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, announced_tensors_are_read_before_the_publish);
    tcase_add_test(tc, a_streamed_slot_is_not_taken_while_leased);
    tcase_add_test(tc, an_aborted_write_cancels_its_streaming_readers);
    tcase_add_test(tc, write_ready_checks_its_arguments);
    tcase_add_test(tc, streaming_reader_in_another_process_follows_the_writer);
    tcase_add_test(tc, a_dead_producer_cancels_its_streaming_readers);
    tcase_add_test(tc, a_death_inside_publish_publishes_nothing);
    tcase_add_test(tc, an_announcement_of_another_producer_does_not_count);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(registry_stream_suite)
