/* What the registry's test programs share: a registry name unique to the
 * test process (unlinked by the teardown), a sealed registry of uint8
 * tensors under it, and the wait for a byte that another process writes
 * once it got somewhere. Header-only, included
 * once per test program. */
#ifndef WEFT_TESTS_LIB_REGISTRY_FIXTURE_H
#define WEFT_TESTS_LIB_REGISTRY_FIXTURE_H

#include <check.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <weft/weft.h>

/* How long a test waits for another process's signal (a byte on a pipe, a
 * word in the segment): only there to turn a hang into a failure. */
#define SIGNAL_TIMEOUT_US UINT64_C(30000000)

static char reg_name[64];

/* A name unique to this test process; unlinked by the teardown. */
static inline const char *test_name(void)
{
    if (reg_name[0] == '\0') {
        snprintf(reg_name, sizeof(reg_name), "test-registry-%d", (int)getpid());
    }
    weft_registry_unlink(reg_name);
    return reg_name;
}

/* test_name() without unlinking what is there. */
static inline const char *test_name_kept(void)
{
    if (reg_name[0] == '\0') {
        snprintf(reg_name, sizeof(reg_name), "test-registry-%d", (int)getpid());
    }
    return reg_name;
}

/* A sealed registry under test_name() of `tensors` 1-D uint8 tensors of
 * `bytes` each, "model.layers.0.mlp.experts.<t>.down_proj.weight", with
 * `slots` slots. Check's asserts: a test program's fixture. */
static inline weft_registry_h make_registry(uint32_t slots, uint32_t tensors, uint64_t bytes)
{
    weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_FIELD_SLOTS, .slot_count = slots};
    weft_registry_h        reg;

    ck_assert_int_eq(weft_registry_create(test_name(), &params, &reg), WEFT_OK);
    for (uint32_t t = 0; t < tensors; t++) {
        char               name[64];
        weft_tensor_desc_t desc = {.name = name, .layer = 0, .expert = (int32_t)t, .role = WEFT_ROLE_W,
                                   .dtype = WEFT_DTYPE_UINT8, .ndim = 1, .shape = {bytes}};
        uint32_t           index;

        snprintf(name, sizeof(name), "model.layers.0.mlp.experts.%u.down_proj.weight", t);
        ck_assert_int_eq(weft_registry_declare(reg, &desc, &index), WEFT_OK);
        ck_assert_uint_eq(index, t);
    }
    ck_assert_int_eq(weft_registry_seal(reg), WEFT_OK);
    return reg;
}

static inline void unlink_registry(void)
{
    if (reg_name[0] != '\0') {
        weft_registry_unlink(reg_name);
    }
}

/* Reads the byte another process writes once it got somewhere. 0 when it
 * came, -1 when it did not within SIGNAL_TIMEOUT_US or the writer died. */
static inline int await_byte(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    char          byte;

    return poll(&pfd, 1, (int)(SIGNAL_TIMEOUT_US / 1000)) == 1 && read(fd, &byte, 1) == 1 ? 0 : -1;
}

#endif
