/*
 * Verified versions (weft_registry_verify, ABI 1.3): a registry created
 * with checksums stores one per tensor with each version; a reader finds
 * every byte changed after publish (each byte of a tensor in turn, 100 %),
 * tensor by tensor and a whole version at once,
 * from the producer's handle and from a reader's; WEFT_VERIFY=all makes
 * lease_tensor refuse a changed tensor; a registry without checksums, a
 * version not published yet and a lease not held are told apart; an older
 * slot's sums never vouch for a newer version.
 */
#include "config.h"

#include "lib/registry_fixture.h"
#include "lib/harness.h"
#include "perf/lib/payload.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft/checksum.h>
#include <weft/weft.h>

#if HAVE_CUDA
#include "lib/gpu_skip.h"

#include <cuda_runtime_api.h>
#endif

#define TENSORS 3
#define BYTES   1000 /* not a multiple of 8: the sum's last word is padded */

/* A sealed registry like make_registry's, with checksums. */
static weft_registry_h make_checked_registry(void)
{
    weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_FIELD_SLOTS | WEFT_REGISTRY_FIELD_CHECKSUMS,
                                     .slot_count = 2, .checksums = 1};
    weft_registry_h        reg;

    ck_assert_int_eq(weft_registry_create(test_name(), &params, &reg), WEFT_OK);
    for (uint32_t t = 0; t < TENSORS; t++) {
        char               name[64];
        weft_tensor_desc_t desc = {.name = name, .expert = (int32_t)t, .role = WEFT_ROLE_W,
                                   .dtype = WEFT_DTYPE_UINT8, .ndim = 1, .shape = {BYTES}};
        uint32_t           index;

        snprintf(name, sizeof(name), "model.layers.0.mlp.experts.%u.down_proj.weight", t);
        ck_assert_int_eq(weft_registry_declare(reg, &desc, &index), WEFT_OK);
    }
    ck_assert_int_eq(weft_registry_seal(reg), WEFT_OK);
    return reg;
}

/* Writes version v's payload and publishes it; *bytes gets tensor 0's
 * address in its slot. */
static void publish_version(weft_registry_h reg, uint64_t v, uint8_t **bytes)
{
    ck_assert_int_eq(weft_registry_write_begin(reg, 1000000, NULL), WEFT_OK);
    for (uint32_t t = 0; t < TENSORS; t++) {
        void *data;

        ck_assert_int_eq(weft_registry_write_tensor(reg, t, &data), WEFT_OK);
        payload_fill(data, BYTES, v, t);
        if (t == 0 && bytes != NULL) {
            *bytes = data;
        }
    }
    ck_assert_int_eq(weft_registry_publish(reg, v, NULL), WEFT_OK);
}

START_TEST(every_changed_byte_is_found)
{
    weft_registry_h reg = make_checked_registry(), reader;
    weft_lease_t    lease, reader_lease;
    uint8_t        *bytes;

    publish_version(reg, 1, &bytes);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_acquire(reg, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_acquire(reader, &reader_lease), WEFT_OK);
    for (uint32_t t = 0; t < TENSORS; t++) {
        ck_assert_int_eq(weft_registry_verify(reg, &lease, t), WEFT_OK);
        ck_assert_int_eq(weft_registry_verify(reader, &reader_lease, t), WEFT_OK);
    }
    /* The producer's pointer still reaches the published bytes: each one
     * changed in turn (one bit), each change found, the byte put back. */
    for (uint32_t i = 0; i < BYTES; i++) {
        bytes[i] ^= (uint8_t)(1u << (i % 8));
        ck_assert_msg(weft_registry_verify(reader, &reader_lease, 0) == WEFT_ERR_CORRUPT, "byte %u changed: not found",
                      i);
        bytes[i] ^= (uint8_t)(1u << (i % 8));
    }
    ck_assert_int_eq(weft_registry_verify(reader, &reader_lease, 0), WEFT_OK);
    {
        uint32_t bad = UINT32_MAX;

        ck_assert_int_eq(weft_registry_verify_version(reader, &reader_lease, &bad), WEFT_OK);
        ck_assert_uint_eq(bad, UINT32_MAX);
        bytes[500] ^= 1;
        ck_assert_int_eq(weft_registry_verify_version(reader, &reader_lease, &bad), WEFT_ERR_CORRUPT);
        ck_assert_uint_eq(bad, 0);
        bytes[500] ^= 1;
    }
    /* Two words swapped: same bytes, other places (a payload's words
     * differ from each other). */
    {
        uint8_t word[8];

        memcpy(word, bytes, 8);
        memcpy(bytes, bytes + 8, 8);
        memcpy(bytes + 8, word, 8);
        ck_assert_int_eq(weft_registry_verify(reg, &lease, 0), WEFT_ERR_CORRUPT);
        memcpy(bytes + 8, bytes, 8);
        memcpy(bytes, word, 8);
        ck_assert_int_eq(weft_registry_verify(reg, &lease, 0), WEFT_OK);
    }
    ck_assert_int_eq(weft_registry_release(reader, &reader_lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_verify(reader, &reader_lease, 0), WEFT_ERR_STATE); /* not held */
    ck_assert_int_eq(weft_registry_release(reg, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_close(reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_close(reg), WEFT_OK);
}
END_TEST

START_TEST(each_version_is_verified_against_its_own_sums)
{
    weft_registry_h reg = make_checked_registry();
    weft_lease_t    lease;

    /* Two slots: versions 1, 2 and 3 take turns; each lease checks out
     * against its own version's sums, not the slot's earlier ones. */
    for (uint64_t v = 1; v <= 3; v++) {
        publish_version(reg, v, NULL);
        ck_assert_int_eq(weft_registry_acquire(reg, &lease), WEFT_OK);
        ck_assert_uint_eq(lease.version, v);
        for (uint32_t t = 0; t < TENSORS; t++) {
            ck_assert_int_eq(weft_registry_verify(reg, &lease, t), WEFT_OK);
        }
        ck_assert_int_eq(weft_registry_release(reg, &lease), WEFT_OK);
    }
    ck_assert_int_eq(weft_registry_close(reg), WEFT_OK);
}
END_TEST

START_TEST(lease_tensor_verifies_with_weft_verify_reads)
{
    weft_registry_h reg, reader;
    weft_lease_t    lease;
    const void     *data;
    uint8_t        *bytes;

    /* Read once per process: this test's own (CK_FORK). */
    ck_assert_int_eq(setenv("WEFT_VERIFY", "all", 1), 0);
    reg = make_checked_registry();
    publish_version(reg, 1, &bytes);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_acquire(reader, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_lease_tensor(reader, &lease, 0, &data), WEFT_OK);
    ck_assert_ptr_nonnull(data);
    bytes[BYTES - 1] ^= 0x80; /* the last byte, in the padded word */
    ck_assert_int_eq(weft_registry_lease_tensor(reader, &lease, 0, &data), WEFT_ERR_CORRUPT);
    ck_assert_ptr_null(data);
    ck_assert_int_eq(weft_registry_lease_tensor(reader, &lease, 1, &data), WEFT_OK); /* the others are fine */
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_close(reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_close(reg), WEFT_OK);
}
END_TEST

START_TEST(without_checksums_or_before_publish_nothing_is_claimed)
{
    weft_registry_h reg = make_registry(2, 1, 64), checked;
    weft_lease_t    lease;
    void           *data;
    uint32_t        ready = 0;
    int             published = 1;

    ck_assert_int_eq(weft_registry_write_begin(reg, 1000000, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_publish(reg, 1, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_acquire(reg, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_verify(reg, &lease, 0), WEFT_ERR_UNSUPPORTED);
    ck_assert_int_eq(weft_registry_release(reg, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_close(reg), WEFT_OK);
    weft_registry_unlink(test_name());

    /* Streaming: a version announced, not published: nothing to verify
     * against yet. */
    checked = make_checked_registry();
    ck_assert_int_eq(weft_registry_write_begin(checked, 1000000, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_tensor(checked, 0, &data), WEFT_OK);
    memset(data, 7, BYTES);
    ck_assert_int_eq(weft_registry_write_ready(checked, 1, 1), WEFT_OK);
    ck_assert_int_eq(weft_registry_wait_ready(checked, 0, 1000000, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_lease_ready(checked, &lease, 1, 0, &ready, &published), WEFT_OK);
    ck_assert_int_eq(published, 0);
    ck_assert_int_eq(weft_registry_verify(checked, &lease, 0), WEFT_ERR_STATE);
    ck_assert_int_eq(weft_registry_verify(checked, &lease, TENSORS), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_registry_release(checked, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_abort(checked), WEFT_OK);
    ck_assert_int_eq(weft_registry_close(checked), WEFT_OK);
}
END_TEST

START_TEST(checksums_must_be_zero_or_one)
{
    weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_FIELD_CHECKSUMS, .checksums = 2};
    weft_registry_h        reg = NULL;

    ck_assert_int_eq(weft_registry_create(test_name(), &params, &reg), WEFT_ERR_INVALID_PARAM);
    ck_assert_ptr_null(reg);
}
END_TEST

#if HAVE_CUDA
/* A GPU registry: the sums are made by the checksum kernel at publish and
 * checked on the GPU; a byte changed in device memory is found. */
START_TEST(gpu_registry_versions_are_verified_on_the_gpu)
{
    weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_FIELD_SLOTS | WEFT_REGISTRY_FIELD_CHECKSUMS |
                                                   WEFT_REGISTRY_FIELD_MEMORY,
                                     .slot_count = 2, .checksums = 1, .memory = WEFT_MEMORY_CUDA, .device = 0};
    weft_tensor_desc_t     desc = {.role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_UINT8, .ndim = 2, .shape = {1024, 1000}};
    weft_registry_h        reg, reader;
    weft_lease_t           lease;
    uint8_t               *host = malloc(1024 * 1000);
    void                  *data;
    char                   name[64];

    ck_assert_ptr_nonnull(host);
    ck_assert_int_eq(weft_registry_create(test_name(), &params, &reg), WEFT_OK);
    for (uint32_t t = 0; t < 4; t++) {
        snprintf(name, sizeof(name), "model.layers.0.mlp.experts.%u.down_proj.weight", t);
        desc.name = name;
        desc.expert = (int32_t)t;
        ck_assert_int_eq(weft_registry_declare(reg, &desc, NULL), WEFT_OK);
    }
    ck_assert_int_eq(weft_registry_seal(reg), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_begin(reg, 1000000, NULL), WEFT_OK);
    for (uint32_t t = 0; t < 4; t++) {
        payload_fill(host, 1024 * 1000, 1, t);
        ck_assert_int_eq(weft_registry_write_tensor(reg, t, &data), WEFT_OK);
        ck_assert_int_eq(cudaMemcpy(data, host, 1024 * 1000, cudaMemcpyHostToDevice), cudaSuccess);
    }
    ck_assert_int_eq(weft_registry_publish(reg, 1, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_acquire(reader, &lease), WEFT_OK);
    for (uint32_t t = 0; t < 4; t++) {
        ck_assert_int_eq(weft_registry_verify(reader, &lease, t), WEFT_OK);
    }
    /* One byte changed in device memory, through the reader's mapping. */
    ck_assert_int_eq(weft_registry_lease_tensor(reader, &lease, 2, (const void **)&data), WEFT_OK);
    {
        uint32_t bad = UINT32_MAX;

        ck_assert_int_eq(weft_registry_verify_version(reader, &lease, &bad), WEFT_OK);
        ck_assert_int_eq(cudaMemset((uint8_t *)data + 777, payload_byte(1, 2, 777) ^ 0xff, 1),
                         cudaSuccess);
        ck_assert_int_eq(weft_registry_verify(reader, &lease, 2), WEFT_ERR_CORRUPT);
        ck_assert_int_eq(weft_registry_verify(reader, &lease, 1), WEFT_OK);
        ck_assert_int_eq(weft_registry_verify_version(reader, &lease, &bad), WEFT_ERR_CORRUPT);
        ck_assert_uint_eq(bad, 2);
    }
    ck_assert_int_eq(weft_registry_release(reader, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_close(reader), WEFT_OK);
    ck_assert_int_eq(weft_registry_close(reg), WEFT_OK);
    free(host);
}
END_TEST
#endif

static Suite *registry_verify_suite(void)
{
    Suite *s = suite_create("registry_verify");
    TCase *tc = tcase_create("verify");

    tcase_add_checked_fixture(tc, NULL, unlink_registry);
    tcase_add_test(tc, every_changed_byte_is_found);
    tcase_add_test(tc, each_version_is_verified_against_its_own_sums);
    tcase_add_test(tc, lease_tensor_verifies_with_weft_verify_reads);
    tcase_add_test(tc, without_checksums_or_before_publish_nothing_is_claimed);
    tcase_add_test(tc, checksums_must_be_zero_or_one);
#if HAVE_CUDA
    if (weft_test_gpu_count() > 0) {
        tcase_add_test(tc, gpu_registry_versions_are_verified_on_the_gpu);
    } else {
        printf("test_registry_verify: no GPU: the GPU registry's case is left out\n");
    }
#endif
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(registry_verify_suite)
