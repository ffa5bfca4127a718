/*
 * Writes valid registry segments to DIR, as the fuzzer's starting corpus:
 * small registries (few records) so that mutations reach every field.
 *   make_seed DIR
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <weft/weft.h>

static int write_seed(const char *dir, int n, uint32_t slots, uint32_t tensors, uint32_t checksums)
{
    weft_registry_params_t params = {
        .field_mask = WEFT_REGISTRY_FIELD_SLOTS | WEFT_REGISTRY_FIELD_MAX_TENSORS |
                      WEFT_REGISTRY_FIELD_MAX_LEASES | WEFT_REGISTRY_FIELD_MAX_CONSUMERS |
                      WEFT_REGISTRY_FIELD_CHECKSUMS,
        .slot_count = slots, .max_tensors = tensors, .max_leases = 2, .max_consumers = 1,
        .checksums = checksums};
    char            name[64], src[128], dst[4096], buf[65536];
    weft_registry_h reg;
    FILE           *in, *out;
    size_t          got;

    snprintf(name, sizeof(name), "fuzz-seed-%d-%d", (int)getpid(), n);
    if (weft_registry_create(name, &params, &reg) != WEFT_OK) {
        return 1;
    }
    for (uint32_t t = 0; t < tensors; t++) {
        char               tname[64];
        weft_tensor_desc_t d = {.name = tname, .layer = 0, .expert = (int32_t)t,
                                .role = (weft_tensor_role_t)(1 + t % 3), .dtype = WEFT_DTYPE_FP8_E4M3,
                                .ndim = 2, .shape = {1 + t, 16}};
        snprintf(tname, sizeof(tname), "model.layers.0.mlp.experts.%u.w", t);
        if (weft_registry_declare(reg, &d, NULL) != WEFT_OK) {
            return 1;
        }
    }
    if (weft_registry_seal(reg) != WEFT_OK || weft_registry_write_begin(reg, 0, NULL) != WEFT_OK ||
        weft_registry_publish(reg, 0, NULL) != WEFT_OK) {
        return 1;
    }
    snprintf(src, sizeof(src), "/dev/shm/weft.%s", name);
    snprintf(dst, sizeof(dst), "%s/seed-%d", dir, n);
    in = fopen(src, "rb");
    out = fopen(dst, "wb");
    if (in == NULL || out == NULL) {
        return 1;
    }
    while ((got = fread(buf, 1, sizeof(buf), in)) > 0) {
        fwrite(buf, 1, got, out);
    }
    fclose(in);
    fclose(out);
    weft_registry_close(reg);
    weft_registry_unlink(name);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seed DIR\n");
        return 2;
    }
    /* The last with a checksum table (ABI 1.3). */
    return write_seed(argv[1], 0, 2, 1, 0) || write_seed(argv[1], 1, 3, 3, 0) || write_seed(argv[1], 2, 4, 5, 0) ||
           write_seed(argv[1], 3, 2, 2, 1);
}
