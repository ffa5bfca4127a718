/* kernels/ on the host: the checksum reference; the delta encoder given the
 * checksum it would otherwise sum. */
#include "config.h"

#include "kernels/checksum.h"
#include "kernels/delta_internal.h"
#ifdef HAVE_CUDA
#include "kernels/blas_api.h"
#endif
#include "lib/delta_inputs.h"
#include "lib/harness.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/*
 * The checksum's definition written out a second time, byte by byte, as
 * the header states it: a mistake in the optimised reference shows up as
 * a disagreement.
 */
static uint64_t spec_mix(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t spec_checksum(const unsigned char *p, size_t bytes)
{
    uint64_t sum = 0;

    for (size_t i = 0; i * 8 < bytes; i++) {
        uint64_t word = 0;
        for (size_t b = 0; b < 8 && i * 8 + b < bytes; b++) {
            word |= (uint64_t)p[i * 8 + b] << (8 * b);
        }
        sum += spec_mix(word + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ULL);
    }
    return spec_mix(sum ^ (uint64_t)bytes);
}

static void fill_random(unsigned char *p, size_t n, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < n; i++) {
        p[i] = (unsigned char)(rand() & 0xff);
    }
}

START_TEST(checksum_matches_its_definition)
{
    unsigned char buf[1024 + 8];

    fill_random(buf, sizeof(buf), 1);
    for (size_t offset = 0; offset < 8; offset++) {
        for (size_t len = 0; len <= 300; len++) {
            ck_assert_uint_eq(weft_checksum_host(buf + offset, len), spec_checksum(buf + offset, len));
        }
        ck_assert_uint_eq(weft_checksum_host(buf + offset, 1024), spec_checksum(buf + offset, 1024));
    }
}
END_TEST

START_TEST(checksum_known_answers)
{
    unsigned char pattern[1000];

    /* Pinned: producers and consumers of different builds must agree. */
    for (size_t i = 0; i < sizeof(pattern); i++) {
        pattern[i] = (unsigned char)(i * 7 + 3);
    }
    ck_assert_uint_eq(weft_checksum_host("", 0), 0);
    ck_assert_uint_eq(weft_checksum_host("abc", 3), 0xa92d7fae4059ee0aULL);
    ck_assert_uint_eq(weft_checksum_host(pattern, sizeof(pattern)), 0x4e6dd9deb6b993c9ULL);
}
END_TEST

START_TEST(checksum_sees_every_bit)
{
    unsigned char buf[64];
    uint64_t      base;

    fill_random(buf, sizeof(buf), 2);
    base = weft_checksum_host(buf, sizeof(buf));
    for (size_t bit = 0; bit < 8 * sizeof(buf); bit++) {
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        ck_assert_uint_ne(weft_checksum_host(buf, sizeof(buf)), base);
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    ck_assert_uint_eq(weft_checksum_host(buf, sizeof(buf)), base);
}
END_TEST

START_TEST(checksum_sees_order_and_length)
{
    unsigned char buf[32], swapped[32], longer[33];

    fill_random(buf, sizeof(buf), 3);
    memcpy(swapped, buf + 8, 8);
    memcpy(swapped + 8, buf, 8);
    memcpy(swapped + 16, buf + 16, 16);
    ck_assert_uint_ne(weft_checksum_host(buf, 32), weft_checksum_host(swapped, 32));

    /* A trailing zero byte is data too. */
    memcpy(longer, buf, 32);
    longer[32] = 0;
    ck_assert_uint_ne(weft_checksum_host(buf, 32), weft_checksum_host(longer, 33));

    /* All-zero buffers of different lengths differ. */
    memset(longer, 0, sizeof(longer));
    ck_assert_uint_ne(weft_checksum_host(longer, 16), weft_checksum_host(longer, 24));
}
END_TEST

#ifndef HAVE_CUDA
START_TEST(checksum_cuda_without_gpu_support)
{
    uint64_t sum = 5;
    ck_assert_int_eq(weft_checksum_cuda(NULL, 0, NULL, &sum), WEFT_ERR_UNSUPPORTED);
    ck_assert_int_eq(weft_checksum_cuda_async(NULL, 0, &sum, NULL), WEFT_ERR_UNSUPPORTED);
    ck_assert_int_eq(weft_checksum_cuda_strided_async(NULL, 0, 0, 1, &sum, NULL), WEFT_ERR_UNSUPPORTED);
    ck_assert_int_eq(weft_compare_cuda_async(&sum, &sum, sizeof(sum), &sum, NULL), WEFT_ERR_UNSUPPORTED);
    ck_assert_uint_eq(sum, 5);
}
END_TEST
#else
/* cuBLAS is loaded, not linked: the toolkit libweft was built with has
 * both libraries under the names it asks for, every symbol Muon calls
 * included (no GPU needed to load them). */
START_TEST(cublas_loads_whole)
{
    const char *why = NULL;

    ck_assert_msg(weft_blas_api_load(&why) == WEFT_OK, "%s", why);
    /* blas_api.h's macros name the tables' pointers. */
    ck_assert(cublasCreate_v2 != NULL);
    ck_assert(cublasGemmStridedBatchedEx != NULL);
    ck_assert(cublasLtMatmul != NULL);
    ck_assert(cublasLtMatrixLayoutSetAttribute != NULL);
    ck_assert_int_eq(weft_blas_api_load(NULL), WEFT_OK); /* once: the first result */
}
END_TEST
#endif

/* Given the new bytes' true checksum, the encoder writes the very delta it
 * writes when it sums them itself; given another, it carries that one (a
 * consumer's check then refuses what it applied), and nothing else moves. */
START_TEST(delta_encode_with_a_known_checksum)
{
    const uint64_t n = 5 * 4096 + 77;
    uint8_t       *a = malloc(n), *b = malloc(n), *d1 = malloc(weft_delta_bytes(n, n)), *d2 = malloc(weft_delta_bytes(n, n));
    uint64_t       s1 = 0, s2 = 0;

    ck_assert(a != NULL && b != NULL && d1 != NULL && d2 != NULL);
    make_pair(a, b, n, 0.02, 77);
    ck_assert_int_eq(weft_delta_encode_host(a, b, n, d1, weft_delta_bytes(n, n), &s1), WEFT_OK);
    ck_assert_int_eq(weft_delta_encode_host_summed(a, b, n, d2, weft_delta_bytes(n, n), &s2, weft_checksum_host(b, n)),
                     WEFT_OK);
    ck_assert_uint_eq(s1, s2);
    ck_assert_int_eq(memcmp(d1, d2, s1), 0);
    ck_assert_int_eq(weft_delta_encode_host_summed(a, b, n, d2, weft_delta_bytes(n, n), &s2, 0x1234), WEFT_OK);
    ck_assert_int_eq(memcmp(d1, d2, 24), 0);
    ck_assert_int_eq(memcmp(d1 + 32, d2 + 32, s1 - 32), 0);
    ck_assert(d2[24] == 0x34 && d2[25] == 0x12 && d2[26] == 0);
    /* and no room: as the summing encoder */
    ck_assert_int_eq(weft_delta_encode_host_summed(a, b, n, d2, 100, &s2, 0), WEFT_ERR_NO_SPACE);
    free(a);
    free(b);
    free(d1);
    free(d2);
}
END_TEST

/* The apply that sums the result as it goes: the same bytes as
 * weft_delta_apply_host, and the sum weft_checksum_host_rows gives of
 * them, dense and strided, ragged sizes included; a refused delta sets
 * nothing. */
START_TEST(delta_apply_summed_sums_what_it_wrote)
{
    static const uint64_t sizes[] = {4096, 3 * 4096 + 1000, 8 * 4096 + 13, 64 * 4096};

    for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++) {
        const uint64_t n = sizes[c], cap = weft_delta_bytes(n, n);
        uint8_t       *a = malloc(n), *b = malloc(n), *got = malloc(n), *d = malloc(cap);
        uint64_t       size = 0, carried = 0, actual = 0;

        ck_assert(a != NULL && b != NULL && got != NULL && d != NULL);
        make_pair(a, b, n, 0.03, 91 + (unsigned)c);
        ck_assert_int_eq(weft_delta_encode_host(a, b, n, d, cap, &size), WEFT_OK);
        memcpy(got, a, n);
        weft_delta_target_t t = {.data = got, .tensor_bytes = n, .row_bytes = n, .row_stride = n};
        ck_assert_int_eq(weft_delta_apply_host_summed(d, size, &t, &carried, &actual), WEFT_OK);
        ck_assert_int_eq(memcmp(got, b, n), 0);
        ck_assert_uint_eq(actual, weft_checksum_host(b, n));
        ck_assert_uint_eq(carried, actual);

        /* the same patch into rows of n / rows bytes, 24 bytes apart */
        const uint64_t rows = n % 8 == 0 ? 8 : 1, row = n / rows, stride = row + 24;
        uint8_t       *strided = calloc(rows, stride);
        ck_assert(strided != NULL);
        for (uint64_t r = 0; r < rows; r++) {
            memcpy(strided + r * stride, a + r * row, row);
        }
        t = (weft_delta_target_t){.data = strided, .tensor_bytes = n, .row_bytes = row, .row_stride = stride};
        actual = 0;
        ck_assert_int_eq(weft_delta_apply_host_summed(d, size, &t, NULL, &actual), WEFT_OK);
        for (uint64_t r = 0; r < rows; r++) {
            ck_assert_int_eq(memcmp(strided + r * stride, b + r * row, row), 0);
        }
        ck_assert_uint_eq(actual, weft_checksum_host(b, n));

        /* a byte the delta leaves alone, changed behind its back: the sum says so */
        uint64_t spoiled = n / 2;
        while (a[spoiled] != b[spoiled]) {
            spoiled++;
        }
        memcpy(got, a, n);
        got[spoiled] ^= 0x40;
        t = (weft_delta_target_t){.data = got, .tensor_bytes = n, .row_bytes = n, .row_stride = n};
        ck_assert_int_eq(weft_delta_apply_host_summed(d, size, &t, &carried, &actual), WEFT_OK);
        ck_assert_uint_ne(actual, carried);

        /* refused: nothing set, nothing written */
        memcpy(got, a, n);
        carried = actual = 7;
        d[0] ^= 1;
        ck_assert_int_eq(weft_delta_apply_host_summed(d, size, &t, &carried, &actual), WEFT_ERR_CORRUPT);
        ck_assert_uint_eq(carried, 7);
        ck_assert_uint_eq(actual, 7);
        ck_assert_int_eq(memcmp(got, a, n), 0);
        free(strided);
        free(a);
        free(b);
        free(got);
        free(d);
    }
}
END_TEST

/* The threaded sums: each tensor's weft_checksum_host, tensors of one
 * piece and of several (cut at 4 MB), ragged and empty ones. */
START_TEST(checksum_batch_matches_one_by_one)
{
    static const uint64_t sizes[] = {0, 1, 7, 4096, (UINT64_C(4) << 20) + 13, 3 * (UINT64_C(4) << 20), 12345, 9 << 20};
    enum { COUNT = sizeof(sizes) / sizeof(sizes[0]) };
    const void *data[COUNT];
    uint64_t    bytes[COUNT], sums[COUNT];

    for (int i = 0; i < COUNT; i++) {
        uint8_t *p = malloc(sizes[i] ? sizes[i] : 1);
        ck_assert(p != NULL);
        for (uint64_t b = 0; b < sizes[i]; b++) {
            p[b] = (uint8_t)(b * 131 + (uint64_t)i * 7 + (b >> 13));
        }
        data[i] = p;
        bytes[i] = sizes[i];
    }
    ck_assert_int_eq(weft_checksum_host_batch(data, bytes, COUNT, sums), 0);
    for (int i = 0; i < COUNT; i++) {
        ck_assert_uint_eq(sums[i], weft_checksum_host(data[i], bytes[i]));
    }
    ck_assert_int_eq(weft_checksum_host_batch(data, bytes, 0, sums), 0);
    for (int i = 0; i < COUNT; i++) {
        free((void *)data[i]);
    }
}
END_TEST

static Suite *kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("checksum");

    tcase_add_test(tc, checksum_matches_its_definition);
    tcase_add_test(tc, checksum_known_answers);
    tcase_add_test(tc, checksum_sees_every_bit);
    tcase_add_test(tc, checksum_sees_order_and_length);
    tcase_add_test(tc, delta_encode_with_a_known_checksum);
    tcase_add_test(tc, delta_apply_summed_sums_what_it_wrote);
    tcase_add_test(tc, checksum_batch_matches_one_by_one);
#ifndef HAVE_CUDA
    tcase_add_test(tc, checksum_cuda_without_gpu_support);
#else
    tcase_add_test(tc, cublas_loads_whole);
#endif
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(kernels_suite)
