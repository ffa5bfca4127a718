/* kernels/ on the GPU: the checksum kernel against the host reference, the
 * byte comparison against a count on the host.
 * Exits 77 (skipped) where no GPU is present. */
#include "config.h"

#include "lib/gpu_skip.h"
#include "kernels/checksum.h"
#include "lib/harness.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

static void fill_random(unsigned char *p, size_t n, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < n; i++) {
        p[i] = (unsigned char)(rand() & 0xff);
    }
}

/* Compares device and host checksums of one buffer at several offsets. */
static void check_size(size_t bytes, cudaStream_t stream)
{
    const size_t   pad = 16;
    unsigned char *host = malloc(bytes + pad);
    void          *dev = NULL;

    ck_assert_ptr_nonnull(host);
    fill_random(host, bytes + pad, (unsigned)bytes);
    ck_assert_int_eq(cudaMalloc(&dev, bytes + pad), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(dev, host, bytes + pad, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess); /* the DMA done before other streams read */
    for (size_t offset = 0; offset < pad; offset += 3) {
        uint64_t gpu = 0;

        ck_assert_int_eq(weft_checksum_cuda((unsigned char *)dev + offset, bytes, stream, &gpu), WEFT_OK);
        ck_assert_uint_eq(gpu, weft_checksum_host(host + offset, bytes));
    }
    ck_assert_int_eq(cudaFree(dev), cudaSuccess);
    free(host);
}

START_TEST(gpu_checksum_matches_host_reference)
{
    static const size_t sizes[] = {0, 1, 7, 8, 9, 255, 4099, 1 << 20, (64u << 20) + 5};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        check_size(sizes[i], NULL);
    }
}
END_TEST

START_TEST(gpu_checksum_on_a_stream)
{
    cudaStream_t stream;

    ck_assert_int_eq(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    check_size(3u << 20, stream);
    ck_assert_int_eq(cudaStreamDestroy(stream), cudaSuccess);
}
END_TEST

START_TEST(gpu_checksum_rejects_null_output)
{
    ck_assert_int_eq(weft_checksum_cuda(NULL, 16, NULL, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_checksum_cuda_async(NULL, 16, NULL, NULL), WEFT_ERR_INVALID_PARAM);
}
END_TEST

/* Many sums enqueued back to back into one device array with nothing
 * waiting in between, then read with one copy: each equals the host's. */
START_TEST(gpu_checksum_async_into_device_memory)
{
    enum { N = 5 };
    static const size_t sizes[N] = {0, 9, 4099, 1 << 20, (3u << 20) + 1};
    unsigned char      *host[N];
    void               *dev[N];
    uint64_t           *sums, got[N];
    cudaStream_t        stream;

    ck_assert_int_eq(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&sums, sizeof(got)), cudaSuccess);
    for (int i = 0; i < N; i++) {
        host[i] = malloc(sizes[i] + 1);
        fill_random(host[i], sizes[i] + 1, 77u + (unsigned)i);
        ck_assert_int_eq(cudaMalloc(&dev[i], sizes[i] + 1), cudaSuccess);
        ck_assert_int_eq(cudaMemcpy(dev[i], host[i], sizes[i] + 1, cudaMemcpyHostToDevice), cudaSuccess);
        ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess); /* the DMA done before other streams read */
    }
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(weft_checksum_cuda_async(dev[i], sizes[i], &sums[i], stream), WEFT_OK);
    }
    ck_assert_int_eq(cudaMemcpyAsync(got, sums, sizeof(got), cudaMemcpyDeviceToHost, stream), cudaSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
    for (int i = 0; i < N; i++) {
        ck_assert_uint_eq(got[i], weft_checksum_host(host[i], sizes[i]));
        cudaFree(dev[i]);
        free(host[i]);
    }
    cudaFree(sums);
    cudaStreamDestroy(stream);
}
END_TEST

/* Chunks laid out with gaps between them (and an odd stride, so most
 * chunks start unaligned): each chunk's sum is the host's of that chunk,
 * the gaps play no part. */
START_TEST(gpu_checksum_strided_matches_host)
{
    static const size_t sizes[][3] = {{4099, 4099, 7}, {1 << 16, (1 << 16) + 13, 129}, {5, 9, 300}};
    cudaStream_t        stream;

    ck_assert_int_eq(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++) {
        const size_t   bytes = sizes[c][0], stride = sizes[c][1], count = sizes[c][2], total = stride * count;
        unsigned char *host = malloc(total);
        uint64_t      *got = malloc(count * sizeof(uint64_t)), *sums;
        void          *dev;

        fill_random(host, total, 1000u + (unsigned)c);
        ck_assert_int_eq(cudaMalloc(&dev, total), cudaSuccess);
        ck_assert_int_eq(cudaMalloc((void **)&sums, count * sizeof(uint64_t)), cudaSuccess);
        ck_assert_int_eq(cudaMemcpy(dev, host, total, cudaMemcpyHostToDevice), cudaSuccess);
        ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess); /* the DMA done before other streams read */
        ck_assert_int_eq(weft_checksum_cuda_strided_async(dev, bytes, stride, (uint32_t)count, sums, stream), WEFT_OK);
        ck_assert_int_eq(cudaMemcpyAsync(got, sums, count * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream),
                         cudaSuccess);
        ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
        for (size_t i = 0; i < count; i++) {
            ck_assert_msg(got[i] == weft_checksum_host(host + i * stride, bytes), "chunk %zu of %zu (%zu bytes)", i,
                          count, bytes);
        }
        cudaFree(dev);
        cudaFree(sums);
        free(host);
        free(got);
    }
    /* Overlapping chunks, too many, no output: refused. */
    ck_assert_int_eq(weft_checksum_cuda_strided_async((void *)16, 8, 4, 2, (uint64_t *)16, stream),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_checksum_cuda_strided_async((void *)16, 8, 8, 65536, (uint64_t *)16, stream),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_checksum_cuda_strided_async((void *)16, 8, 8, 1, NULL, stream), WEFT_ERR_INVALID_PARAM);
    cudaStreamDestroy(stream);
}
END_TEST

/* Bytes differing at known places, at offsets that align the two
 * buffers alike and not, with b in device memory and in registered host
 * memory; two calls add to one counter. (A cudaMemcpy from pageable
 * memory may return before its DMA lands; the kernels run on a
 * non-blocking stream: each copy is waited for. Without that wait this
 * test counted 10821 differing bytes for 10812 once on the H200.) */
START_TEST(gpu_compare_counts_differing_bytes)
{
    static const size_t sizes[] = {0, 1, 7, 8, 9, 63, 4099, (1 << 20) + 5};
    static const size_t offsets[][2] = {{0, 0}, {3, 3}, {0, 5}, {7, 1}};
    const size_t        room = (1 << 20) + 64;
    unsigned char      *host_a = malloc(room), *host_b = malloc(room);
    unsigned char      *dev_a, *dev_b;
    uint64_t           *dev_count, got;
    cudaStream_t        stream;

    ck_assert_ptr_nonnull(host_a);
    ck_assert_ptr_nonnull(host_b);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&dev_a, room), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&dev_b, room), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&dev_count, sizeof(uint64_t)), cudaSuccess);
    fill_random(host_a, room, 77u);
    ck_assert_int_eq(cudaMemcpy(dev_a, host_a, room, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess); /* the DMA done before other streams read */
    for (size_t o = 0; o < sizeof(offsets) / sizeof(offsets[0]); o++) {
        const size_t oa = offsets[o][0], ob = offsets[o][1];
        for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
            const size_t bytes = sizes[z];
            uint64_t     expect = 0;

            /* b: a's bytes moved to b's offset, then every 97th byte and
             * the first and last ones changed. */
            memcpy(host_b + ob, host_a + oa, bytes);
            for (size_t i = 0; i < bytes; i += 97) {
                host_b[ob + i] ^= (unsigned char)(1u << (i % 8));
            }
            if (bytes > 0) {
                host_b[ob + bytes - 1] ^= 0x80;
            }
            for (size_t i = 0; i < bytes; i++) {
                expect += host_a[oa + i] != host_b[ob + i];
            }
            ck_assert_int_eq(cudaMemcpy(dev_b, host_b, room, cudaMemcpyHostToDevice), cudaSuccess);
            ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess); /* the DMA done before other streams read */
            ck_assert_int_eq(cudaMemsetAsync(dev_count, 0, sizeof(uint64_t), stream), cudaSuccess);
            ck_assert_int_eq(weft_compare_cuda_async(dev_a + oa, dev_b + ob, bytes, dev_count, stream), WEFT_OK);
            ck_assert_int_eq(cudaMemcpyAsync(&got, dev_count, sizeof(got), cudaMemcpyDeviceToHost, stream),
                             cudaSuccess);
            ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
            ck_assert_msg(got == expect, "%zu bytes at offsets %zu, %zu: counted %llu, expected %llu", bytes, oa,
                          ob, (unsigned long long)got, (unsigned long long)expect);
            /* Identical bytes count nothing. */
            ck_assert_int_eq(cudaMemsetAsync(dev_count, 0, sizeof(uint64_t), stream), cudaSuccess);
            ck_assert_int_eq(weft_compare_cuda_async(dev_a + oa, dev_a + oa, bytes, dev_count, stream), WEFT_OK);
            ck_assert_int_eq(cudaMemcpyAsync(&got, dev_count, sizeof(got), cudaMemcpyDeviceToHost, stream),
                             cudaSuccess);
            ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
            ck_assert_uint_eq(got, 0);
        }
    }
    /* b in registered host memory, compared twice into one counter. */
    {
        const size_t bytes = (1 << 20) + 5;
        uint64_t     expect = 0;

        memcpy(host_b, host_a, bytes);
        for (size_t i = 0; i < bytes; i += 1001) {
            host_b[i] = (unsigned char)~host_b[i];
        }
        for (size_t i = 0; i < bytes; i++) {
            expect += host_a[i] != host_b[i];
        }
        ck_assert_int_eq(cudaHostRegister(host_b, room, cudaHostRegisterMapped), cudaSuccess);
        ck_assert_int_eq(cudaMemsetAsync(dev_count, 0, sizeof(uint64_t), stream), cudaSuccess);
        ck_assert_int_eq(weft_compare_cuda_async(dev_a, host_b, bytes, dev_count, stream), WEFT_OK);
        ck_assert_int_eq(weft_compare_cuda_async(dev_a, host_b, bytes, dev_count, stream), WEFT_OK);
        ck_assert_int_eq(cudaMemcpyAsync(&got, dev_count, sizeof(got), cudaMemcpyDeviceToHost, stream), cudaSuccess);
        ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
        ck_assert_int_eq(cudaHostUnregister(host_b), cudaSuccess);
        ck_assert_uint_gt(expect, 1000);
        ck_assert_uint_eq(got, 2 * expect);
    }
    ck_assert_int_eq(weft_compare_cuda_async(dev_a, dev_b, 8, NULL, stream), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_compare_cuda_async(NULL, dev_b, 8, dev_count, stream), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_compare_cuda_async(NULL, NULL, 0, dev_count, stream), WEFT_OK);
    cudaFree(dev_a);
    cudaFree(dev_b);
    cudaFree(dev_count);
    cudaStreamDestroy(stream);
    free(host_a);
    free(host_b);
}
END_TEST

static Suite *kernels_cuda_suite(void)
{
    Suite *s;
    TCase *tc;

    if (weft_test_gpu_count() == 0) {
        return NULL;
    }
    s = suite_create("kernels_cuda");
    tc = tcase_create("checksum");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, gpu_checksum_matches_host_reference);
    tcase_add_test(tc, gpu_checksum_on_a_stream);
    tcase_add_test(tc, gpu_checksum_rejects_null_output);
    tcase_add_test(tc, gpu_checksum_async_into_device_memory);
    tcase_add_test(tc, gpu_checksum_strided_matches_host);
    tcase_add_test(tc, gpu_compare_counts_differing_bytes);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(kernels_cuda_suite)
