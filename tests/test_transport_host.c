/*
 * transport/: the host transport and the transfer plan. A producer and a
 * consumer handle of one registry live in the test's own process (CK_FORK);
 * every published byte is a function of (version, tensor, byte offset), so
 * a byte copied from the wrong version, tensor or place is caught.
 */
#include "config.h"

#include "transport/plan/plan.h"
#include "lib/harness.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <weft/weft.h>

#define SENTINEL 0xEE /* receive buffers start with it; padding must keep it */
#define WAIT_US  2000000u

typedef struct spec {
    const char        *name;
    weft_tensor_role_t role;
    weft_dtype_t       dtype;
    uint32_t           ndim;
    uint64_t           shape[WEFT_TENSOR_MAX_DIMS];
    uint64_t           strides[WEFT_TENSOR_MAX_DIMS]; /* all 0: contiguous */
} spec_t;

static char            reg_name[WEFT_REGISTRY_NAME_MAX];
static weft_registry_h producer;
static weft_registry_h consumer;
static char            log_path[256];

/* Not perf/lib/payload.h's payload, on purpose: plans here copy version
 * v over v - 1 in the same views, and a byte a plan missed must show.
 * Bytes of two payload versions agree one time in 256; these never do
 * for consecutive versions. */
static uint8_t pattern(uint64_t version, uint32_t tensor, uint64_t offset)
{
    /* 131 is odd: consecutive versions differ in every byte. */
    return (uint8_t)(version * 131u + tensor * 29u + offset * 7u + (offset >> 8) * 3u + 1u);
}

/* The registries made by registry_setup keep checksums (verified versions). */
static uint32_t with_checksums;

/* Creates, declares, seals, and opens a reading handle. */
static void registry_setup(const spec_t *specs, size_t count)
{
    static int             serial;
    weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_FIELD_CHECKSUMS, .checksums = with_checksums};

    snprintf(reg_name, sizeof(reg_name), "weft-tp-%d-%d", (int)getpid(), serial++);
    weft_registry_unlink(reg_name);
    ck_assert_int_eq(weft_registry_create(reg_name, &params, &producer), WEFT_OK);
    for (size_t i = 0; i < count; i++) {
        weft_tensor_desc_t desc;
        uint32_t           index = UINT32_MAX;

        memset(&desc, 0, sizeof(desc));
        desc.name   = specs[i].name;
        desc.layer  = 0;
        desc.expert = (int32_t)i;
        desc.role   = specs[i].role;
        desc.dtype  = specs[i].dtype;
        desc.ndim   = specs[i].ndim;
        memcpy(desc.shape, specs[i].shape, sizeof(desc.shape));
        if (specs[i].strides[0] != 0) {
            desc.field_mask |= WEFT_TENSOR_FIELD_STRIDES;
            memcpy(desc.strides, specs[i].strides, sizeof(desc.strides));
        }
        ck_assert_int_eq(weft_registry_declare(producer, &desc, &index), WEFT_OK);
        ck_assert_uint_eq(index, i);
    }
    ck_assert_int_eq(weft_registry_seal(producer), WEFT_OK);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &consumer), WEFT_OK);
}

/* Checked teardown: runs in the test's process, which owns the segment. */
static void registry_teardown(void)
{
    weft_registry_close(consumer);
    weft_registry_close(producer);
    consumer = NULL;
    producer = NULL;
    if (reg_name[0] != '\0') {
        weft_registry_unlink(reg_name);
        reg_name[0] = '\0';
    }
    if (log_path[0] != '\0') {
        unlink(log_path);
        log_path[0] = '\0';
    }
}

/* Writes every byte of every tensor's span from pattern() and publishes. */
static void publish(uint64_t version)
{
    uint32_t count = 0;
    uint64_t published = 0;

    ck_assert_int_eq(weft_registry_tensor_count(producer, &count), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_begin(producer, WAIT_US, NULL), WEFT_OK);
    for (uint32_t t = 0; t < count; t++) {
        weft_tensor_info_t info;
        void              *data = NULL;

        ck_assert_int_eq(weft_registry_tensor_info(producer, t, &info), WEFT_OK);
        ck_assert_int_eq(weft_registry_write_tensor(producer, t, &data), WEFT_OK);
        for (uint64_t b = 0; b < info.bytes; b++) {
            ((uint8_t *)data)[b] = pattern(version, t, b);
        }
    }
    ck_assert_int_eq(weft_registry_publish(producer, version, &published), WEFT_OK);
    ck_assert_uint_eq(published, version);
}

/* A view of registry tensor `spec`, contiguous at data. */
static weft_recv_view_t view_of(const spec_t *spec, void *data)
{
    weft_recv_view_t view;

    memset(&view, 0, sizeof(view));
    view.name  = spec->name;
    view.role  = spec->role;
    view.dtype = spec->dtype;
    view.ndim  = spec->ndim;
    memcpy(view.shape, spec->shape, sizeof(view.shape));
    view.data = data;
    return view;
}

static void view_strides(weft_recv_view_t *view, uint64_t s0, uint64_t s1, uint64_t s2)
{
    view->field_mask |= WEFT_RECV_VIEW_FIELD_STRIDES;
    view->strides[0] = s0;
    view->strides[1] = s1;
    view->strides[2] = s2;
}

static void contiguous(uint32_t ndim, const uint64_t *shape, uint64_t *strides)
{
    uint64_t s = 1;

    for (uint32_t d = ndim; d-- > 0;) {
        strides[d] = s;
        s *= shape[d];
    }
}

/*
 * Every element of the view holds the bytes the producer wrote for
 * `version` at the element's place in the registry tensor.
 */
static void check_view(const weft_recv_view_t *view, uint64_t version)
{
    weft_tensor_info_t info;
    uint64_t           dst_strides[WEFT_TENSOR_MAX_DIMS], idx[WEFT_TENSOR_MAX_DIMS] = {0};
    uint64_t           elements = 1;
    uint32_t           index;
    size_t             esize = weft_dtype_size(view->dtype);

    ck_assert_int_eq(weft_registry_lookup(consumer, view->name, &index), WEFT_OK);
    ck_assert_int_eq(weft_registry_tensor_info(consumer, index, &info), WEFT_OK);
    if (view->field_mask & WEFT_RECV_VIEW_FIELD_STRIDES) {
        memcpy(dst_strides, view->strides, sizeof(dst_strides));
    } else {
        contiguous(view->ndim, view->shape, dst_strides);
    }
    for (uint32_t d = 0; d < view->ndim; d++) {
        elements *= view->shape[d];
    }
    for (uint64_t n = 0; n < elements; n++) {
        uint64_t src = 0, dst = 0;

        for (uint32_t d = 0; d < view->ndim; d++) {
            src += idx[d] * info.strides[d];
            dst += idx[d] * dst_strides[d];
        }
        for (size_t b = 0; b < esize; b++) {
            uint8_t got  = ((const uint8_t *)view->data)[dst * esize + b];
            uint8_t want = pattern(version, index, src * esize + b);

            ck_assert_msg(got == want, "%s, element %llu byte %zu: 0x%02x, expected 0x%02x",
                          view->name, (unsigned long long)n, b, got, want);
        }
        for (uint32_t d = view->ndim; d-- > 0;) {
            if (++idx[d] < view->shape[d]) {
                break;
            }
            idx[d] = 0;
        }
    }
}

/* Bytes of buf that no view covers still hold SENTINEL. */
static void check_padding(const uint8_t *buf, size_t size, const weft_recv_view_t *views,
                          size_t count)
{
    uint8_t *covered = calloc(size, 1);

    ck_assert_ptr_nonnull(covered);
    for (size_t v = 0; v < count; v++) {
        uint64_t strides[WEFT_TENSOR_MAX_DIMS], idx[WEFT_TENSOR_MAX_DIMS] = {0}, elements = 1;
        size_t   esize = weft_dtype_size(views[v].dtype);

        if (views[v].field_mask & WEFT_RECV_VIEW_FIELD_STRIDES) {
            memcpy(strides, views[v].strides, sizeof(strides));
        } else {
            contiguous(views[v].ndim, views[v].shape, strides);
        }
        for (uint32_t d = 0; d < views[v].ndim; d++) {
            elements *= views[v].shape[d];
        }
        for (uint64_t n = 0; n < elements; n++) {
            uint64_t at = 0;

            for (uint32_t d = 0; d < views[v].ndim; d++) {
                at += idx[d] * strides[d];
            }
            memset(covered + ((const uint8_t *)views[v].data - buf) + at * esize, 1, esize);
            for (uint32_t d = views[v].ndim; d-- > 0;) {
                if (++idx[d] < views[v].shape[d]) {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
    for (size_t i = 0; i < size; i++) {
        if (!covered[i]) {
            ck_assert_msg(buf[i] == SENTINEL, "padding byte %zu was written (0x%02x)", i, buf[i]);
        }
    }
    free(covered);
}

/* Leases `version` (the latest), copies it through the plan, releases. */
static void copy_latest(weft_plan_h plan, uint64_t version)
{
    weft_lease_t lease;

    ck_assert_int_eq(weft_registry_acquire(consumer, &lease), WEFT_OK);
    ck_assert_uint_eq(lease.version, version);
    ck_assert_int_eq(weft_plan_copy(plan, &lease), WEFT_OK);
    ck_assert_int_eq(weft_registry_release(consumer, &lease), WEFT_OK);
}

static void *alloc_sentinel(size_t size)
{
    void *buf = malloc(size);

    ck_assert_ptr_nonnull(buf);
    memset(buf, SENTINEL, size);
    return buf;
}

/* Points WEFT_LOG_FILE at a fresh file; the log is read once per process. */
static void use_log_file(void)
{
    snprintf(log_path, sizeof(log_path), "/tmp/weft-test-transport-host-%d.log", (int)getpid());
    unlink(log_path);
    setenv("WEFT_LOG_FILE", log_path, 1);
    setenv("WEFT_LOG_LEVEL", "error", 1);
}

static int log_contains(const char *text)
{
    static char buf[65536];
    FILE       *f = fopen(log_path, "r");
    size_t      n = 0;

    if (f != NULL) {
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    return strstr(buf, text) != NULL;
}

/* ------------------------------------------------------------ plan errors */

static const spec_t small[] = {
    {"model.layers.0.mlp.experts.0.gate_up_proj.weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 2,
     {16, 32}, {0}},
    {"model.layers.0.mlp.experts.0.gate_up_proj.weight_scale_inv", WEFT_ROLE_SCALE,
     WEFT_DTYPE_FP32, 2, {1, 1}, {0}},
};

START_TEST(create_rejects_null_and_bad_arguments)
{
    uint8_t          buf[512];
    weft_recv_view_t view = view_of(&small[0], buf);
    weft_plan_h      plan = (weft_plan_h)&buf; /* a sentinel: must stay untouched */
    weft_plan_h      before = plan;

    registry_setup(small, 2);
    ck_assert_int_eq(weft_plan_create(NULL, WEFT_TRANSPORT_HOST, &view, 1, &plan),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, NULL, 1, &plan),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 0, &plan),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 1, NULL),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_plan_create(consumer, (weft_transport_t)0, &view, 1, &plan),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_plan_create(consumer, (weft_transport_t)99, &view, 1, &plan),
                     WEFT_ERR_UNSUPPORTED);

    view.name = NULL;
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 1, &plan),
                     WEFT_ERR_INVALID_PARAM);
    view = view_of(&small[0], NULL);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 1, &plan),
                     WEFT_ERR_INVALID_PARAM);
    view            = view_of(&small[0], buf);
    view.field_mask = 1u << 7;
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 1, &plan),
                     WEFT_ERR_INVALID_PARAM);
    view = view_of(&small[0], buf);
    view.field_mask |= WEFT_RECV_VIEW_FIELD_MEMORY;
    view.memory = (weft_memory_kind_t)5;
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 1, &plan),
                     WEFT_ERR_UNSUPPORTED);
    /* Strides that reach past the address space. */
    view = view_of(&small[0], buf);
    view_strides(&view, UINT64_MAX / 2, 1, 0);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 1, &plan),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_ptr_eq(plan, before);

    /* The same view with memory given explicitly as host is fine. */
    view = view_of(&small[0], buf);
    view.field_mask |= WEFT_RECV_VIEW_FIELD_MEMORY;
    view.memory = WEFT_MEMORY_HOST;
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 1, &plan), WEFT_OK);
    ck_assert_ptr_ne(plan, before);
    ck_assert_int_eq(weft_plan_destroy(plan), WEFT_OK);
}
END_TEST

START_TEST(create_rejects_missing_tensor_and_names_it)
{
    uint8_t          buf[512];
    weft_recv_view_t views[2];
    weft_plan_h      plan = NULL;

    use_log_file();
    registry_setup(small, 2);
    views[0]      = view_of(&small[0], buf);
    views[1]      = view_of(&small[1], buf + 256);
    views[1].name = "model.layers.0.mlp.experts.9.gate_up_proj.weight_scale_inv";
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, 2, &plan),
                     WEFT_ERR_NOT_FOUND);
    ck_assert_ptr_null(plan);
    ck_assert(log_contains("model.layers.0.mlp.experts.9.gate_up_proj.weight_scale_inv"));
}
END_TEST

START_TEST(create_rejects_mismatched_role_dtype_and_shape)
{
    uint8_t          buf[512];
    weft_recv_view_t view;
    weft_plan_h      plan = NULL;

    use_log_file();
    registry_setup(small, 2);

    view       = view_of(&small[0], buf);
    view.dtype = WEFT_DTYPE_BF16;
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 1, &plan),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert(log_contains("dtype bf16, the registry's is fp8_e4m3"));

    view          = view_of(&small[0], buf);
    view.shape[1] = 33;
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 1, &plan),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert(log_contains("shape [16, 33], the registry's is [16, 32]"));

    /* Same element count, other rank: still a mismatch. */
    view          = view_of(&small[0], buf);
    view.ndim     = 3;
    view.shape[0] = 16;
    view.shape[1] = 2;
    view.shape[2] = 16;
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 1, &plan),
                     WEFT_ERR_INVALID_PARAM);

    view      = view_of(&small[0], buf);
    view.role = WEFT_ROLE_WT;
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 1, &plan),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert(log_contains("role wt, the registry's is w"));
    ck_assert(log_contains("model.layers.0.mlp.experts.0.gate_up_proj.weight\""));
    ck_assert_ptr_null(plan);
}
END_TEST

START_TEST(create_rejects_duplicate_and_overlapping_views)
{
    uint8_t          buf[1024];
    weft_recv_view_t views[2];
    weft_plan_h      plan = NULL;

    registry_setup(small, 2);

    views[0] = view_of(&small[0], buf);
    views[1] = view_of(&small[0], buf + 512);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, 2, &plan),
                     WEFT_ERR_INVALID_PARAM);

    /* The scale's 4 bytes start on the weight's last byte. */
    views[0] = view_of(&small[0], buf);
    views[1] = view_of(&small[1], buf + 16 * 32 - 1);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, 2, &plan),
                     WEFT_ERR_INVALID_PARAM);

    /* Elements of one view that overlap each other (a zero stride). */
    views[0] = view_of(&small[0], buf);
    view_strides(&views[0], 0, 1, 0);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, 1, &plan),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_ptr_null(plan);

    /* Touching but not sharing a byte is fine. */
    views[0] = view_of(&small[0], buf);
    views[1] = view_of(&small[1], buf + 16 * 32);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, 2, &plan), WEFT_OK);
    ck_assert_int_eq(weft_plan_destroy(plan), WEFT_OK);
}
END_TEST

/* Views whose bounding boxes interleave but whose elements do not. */
START_TEST(interleaved_views_are_not_an_overlap)
{
    static const spec_t two[] = {
        {"a.weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 2, {8, 32}, {0}},
        {"b.weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 2, {8, 32}, {0}},
    };
    uint8_t         *buf = alloc_sentinel(16 * 32);
    weft_recv_view_t views[2];
    weft_plan_h      plan = NULL;
    weft_plan_stats_t st;

    registry_setup(two, 2);
    views[0] = view_of(&two[0], buf);      /* even rows */
    views[1] = view_of(&two[1], buf + 32); /* odd rows */
    view_strides(&views[0], 64, 1, 0);
    view_strides(&views[1], 64, 1, 0);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, 2, &plan), WEFT_OK);
    ck_assert_int_eq(weft_plan_get_stats(plan, &st), WEFT_OK);
    /* Row r of b follows row r of a in the destination, but not in the
     * arena (b starts 256 bytes after a): nothing merges. */
    ck_assert_uint_eq(st.range_count, 16);
    publish(1);
    copy_latest(plan, 1);
    check_view(&views[0], 1);
    check_view(&views[1], 1);
    ck_assert_int_eq(weft_plan_destroy(plan), WEFT_OK);
    free(buf);
}
END_TEST

/* ------------------------------------------------------------ coalescing */

#define MANY 16

static char   many_names[MANY][WEFT_TENSOR_NAME_MAX];
static spec_t many[MANY];

/* MANY FP8 tensors of 16 × cols, declared in order. */
static void many_specs(uint64_t cols)
{
    for (int i = 0; i < MANY; i++) {
        snprintf(many_names[i], sizeof(many_names[i]),
                 "model.layers.3.mlp.experts.%d.down_proj.weight", i);
        many[i] = (spec_t){many_names[i], WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 2, {16, cols}, {0}};
    }
}

START_TEST(adjacent_tensors_into_one_buffer_make_one_range)
{
    const size_t      per = 16 * 16; /* 256 bytes: the arena packs them back to back */
    uint8_t          *buf = alloc_sentinel(MANY * per);
    weft_recv_view_t  views[MANY];
    weft_plan_h       plan = NULL;
    weft_plan_stats_t st;

    many_specs(16);
    registry_setup(many, MANY);
    /* Listed in reverse: merging must not depend on the order of views. */
    for (int i = 0; i < MANY; i++) {
        views[MANY - 1 - i] = view_of(&many[i], buf + (size_t)i * per);
    }
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, MANY, &plan), WEFT_OK);
    ck_assert_int_eq(weft_plan_get_stats(plan, &st), WEFT_OK);
    ck_assert_int_eq(st.transport, WEFT_TRANSPORT_HOST);
    ck_assert_uint_eq(st.tensor_count, MANY);
    ck_assert_uint_eq(st.bytes, MANY * per);
    ck_assert_uint_eq(st.ranges_uncoalesced, MANY);
    ck_assert_uint_eq(st.range_count, 1);
    ck_assert_uint_eq(st.versions_copied, 0);
    ck_assert_uint_eq(st.last_version, 0);

    for (uint64_t v = 1; v <= 3; v++) {
        publish(v);
        copy_latest(plan, v);
        for (int i = 0; i < MANY; i++) {
            check_view(&views[i], v);
        }
    }
    ck_assert_int_eq(weft_plan_get_stats(plan, &st), WEFT_OK);
    ck_assert_uint_eq(st.versions_copied, 3);
    ck_assert_uint_eq(st.copy_failures, 0);
    ck_assert_uint_eq(st.last_version, 3);
    ck_assert_int_eq(weft_plan_destroy(plan), WEFT_OK);
    free(buf);
}
END_TEST

/* 160-byte tensors sit 256 bytes apart in the arena: no merging, and the
 * 96 bytes between them in the arena never reach the destination. */
START_TEST(gaps_in_the_arena_keep_ranges_apart)
{
    const size_t      per = 16 * 10;
    uint8_t          *buf = alloc_sentinel(MANY * per);
    weft_recv_view_t  views[MANY];
    weft_plan_h       plan = NULL;
    weft_plan_stats_t st;

    many_specs(10);
    registry_setup(many, MANY);
    for (int i = 0; i < MANY; i++) {
        views[i] = view_of(&many[i], buf + (size_t)i * per);
    }
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, MANY, &plan), WEFT_OK);
    ck_assert_int_eq(weft_plan_get_stats(plan, &st), WEFT_OK);
    ck_assert_uint_eq(st.range_count, MANY);
    ck_assert_uint_eq(st.bytes, MANY * per);
    publish(7);
    copy_latest(plan, 7);
    for (int i = 0; i < MANY; i++) {
        check_view(&views[i], 7);
    }
    ck_assert_int_eq(weft_plan_destroy(plan), WEFT_OK);
    free(buf);
}
END_TEST

START_TEST(strided_destinations_give_expected_ranges)
{
    static const spec_t three[] = {
        {"padded_rows.weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 2, {8, 32}, {0}},
        {"cube.weight", WEFT_ROLE_WT, WEFT_DTYPE_BF16, 3, {4, 8, 16}, {0}},
        {"every_other.weight_scale_inv", WEFT_ROLE_SCALE, WEFT_DTYPE_FP32, 2, {4, 6}, {0}},
        {"padded_outer.weight", WEFT_ROLE_WT, WEFT_DTYPE_BF16, 3, {4, 8, 16}, {0}},
    };
    /* Room for each layout below, one after the other. */
    const size_t      a_off = 0, a_size = 8 * 48;                /* rows of 48 bytes */
    const size_t      b_off = 512, b_size = 4 * 8 * 20 * 2;      /* inner rows of 20 */
    const size_t      c_off = 2048, c_size = 4 * 12 * 4;         /* every other float */
    const size_t      d_off = 2304, d_size = 4 * 200 * 2;        /* planes of 200 */
    const size_t      total = d_off + d_size;
    uint8_t          *buf = alloc_sentinel(total);
    weft_recv_view_t  views[4];
    weft_plan_h       plan = NULL;
    weft_plan_stats_t st;

    ck_assert_uint_le(a_off + a_size, b_off);
    ck_assert_uint_le(b_off + b_size, c_off);
    ck_assert_uint_le(c_off + c_size, d_off);
    registry_setup(three, 4);
    views[0] = view_of(&three[0], buf + a_off);
    view_strides(&views[0], 48, 1, 0);
    views[1] = view_of(&three[1], buf + b_off);
    view_strides(&views[1], 8 * 20, 20, 1);
    views[2] = view_of(&three[2], buf + c_off);
    view_strides(&views[2], 12, 2, 0);
    views[3] = view_of(&three[3], buf + d_off);
    view_strides(&views[3], 200, 16, 1);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, 4, &plan), WEFT_OK);
    ck_assert_int_eq(weft_plan_get_stats(plan, &st), WEFT_OK);
    /* 8 rows + 32 inner rows + 24 single floats + 4 planes. */
    ck_assert_uint_eq(st.ranges_uncoalesced, 8 + 32 + 24 + 4);
    ck_assert_uint_eq(st.range_count, 8 + 32 + 24 + 4);
    ck_assert_uint_eq(st.bytes, 8 * 32 + 4 * 8 * 16 * 2 + 4 * 6 * 4 + 4 * 8 * 16 * 2);

    for (uint64_t v = 1; v <= 2; v++) {
        publish(v);
        copy_latest(plan, v);
        for (int i = 0; i < 4; i++) {
            check_view(&views[i], v);
        }
        check_padding(buf, total, views, 4);
    }
    ck_assert_int_eq(weft_plan_destroy(plan), WEFT_OK);
    free(buf);
}
END_TEST

/* A registry tensor with padded rows reaches a contiguous destination
 * row by row, without the padding. */
START_TEST(strided_registry_tensor_is_copied_by_rows)
{
    static const spec_t padded[] = {
        {"padded_src.weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 2, {6, 20}, {24, 1}},
    };
    uint8_t          *buf = alloc_sentinel(6 * 20);
    weft_recv_view_t  view;
    weft_plan_h       plan = NULL;
    weft_plan_stats_t st;

    registry_setup(padded, 1);
    view = view_of(&padded[0], buf);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 1, &plan), WEFT_OK);
    ck_assert_int_eq(weft_plan_get_stats(plan, &st), WEFT_OK);
    ck_assert_uint_eq(st.range_count, 6);
    ck_assert_uint_eq(st.bytes, 6 * 20);
    publish(5);
    copy_latest(plan, 5);
    check_view(&view, 5);
    ck_assert_int_eq(weft_plan_destroy(plan), WEFT_OK);
    free(buf);
}
END_TEST

/* ------------------------------------------------------------ fused views */

#define FUSED_E 4
#define FUSED_I 8  /* intermediate: w13 holds 2I rows */
#define FUSED_H 32
#define FUSED_HP 40 /* padded hidden dimension of the fused buffer */

/*
 * SGLang's w13_weight[E, 2I, H] (here with rows padded to HP) and
 * w2_weight[E, H, I], filled from per-expert registry tensors: expert e is
 * the fused buffer's data pointer + e·stride[0].
 */
START_TEST(strided_views_into_fused_buffers)
{
    static char   names[2 * FUSED_E][WEFT_TENSOR_NAME_MAX];
    spec_t        specs[2 * FUSED_E];
    weft_recv_view_t views[2 * FUSED_E];
    const size_t  w13_size = (size_t)FUSED_E * 2 * FUSED_I * FUSED_HP;
    const size_t  w2_size  = (size_t)FUSED_E * FUSED_H * FUSED_I;
    uint8_t      *buf      = alloc_sentinel(w13_size + w2_size);
    uint8_t      *w13 = buf, *w2 = buf + w13_size;
    weft_plan_h   plan = NULL;
    weft_plan_stats_t st;

    for (int e = 0; e < FUSED_E; e++) {
        snprintf(names[2 * e], sizeof(names[0]), "model.layers.1.mlp.experts.%d.gate_up_proj.weight",
                 e);
        snprintf(names[2 * e + 1], sizeof(names[0]), "model.layers.1.mlp.experts.%d.down_proj.weight",
                 e);
        specs[2 * e] = (spec_t){names[2 * e], WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 2,
                                {2 * FUSED_I, FUSED_H}, {0}};
        specs[2 * e + 1] = (spec_t){names[2 * e + 1], WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 2,
                                    {FUSED_H, FUSED_I}, {0}};
    }
    registry_setup(specs, 2 * FUSED_E);
    for (int e = 0; e < FUSED_E; e++) {
        views[2 * e] = view_of(&specs[2 * e], w13 + (size_t)e * 2 * FUSED_I * FUSED_HP);
        view_strides(&views[2 * e], FUSED_HP, 1, 0);
        views[2 * e + 1] = view_of(&specs[2 * e + 1], w2 + (size_t)e * FUSED_H * FUSED_I);
    }
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, 2 * FUSED_E, &plan),
                     WEFT_OK);
    ck_assert_int_eq(weft_plan_get_stats(plan, &st), WEFT_OK);
    /* w13 goes row by row (padded rows); each w2 expert is one run, and
     * 256-byte experts interleaved with w13 in the arena do not merge. */
    ck_assert_uint_eq(st.range_count, FUSED_E * 2 * FUSED_I + FUSED_E);
    ck_assert_uint_eq(st.bytes, FUSED_E * (2 * FUSED_I * FUSED_H + FUSED_H * FUSED_I));

    for (uint64_t v = 10; v <= 12; v++) {
        publish(v);
        copy_latest(plan, v);
        for (int e = 0; e < FUSED_E; e++) {
            uint32_t t = 2 * (uint32_t)e;

            /* Spot-check the fused indexing by hand: w13[e, r, c]. */
            for (uint64_t r = 0; r < 2 * FUSED_I; r++) {
                for (uint64_t c = 0; c < FUSED_H; c++) {
                    ck_assert_uint_eq(w13[((size_t)e * 2 * FUSED_I + r) * FUSED_HP + c],
                                      pattern(v, t, r * FUSED_H + c));
                }
            }
            check_view(&views[2 * e], v);
            check_view(&views[2 * e + 1], v);
        }
        check_padding(buf, w13_size + w2_size, views, 2 * FUSED_E);
    }
    ck_assert_int_eq(weft_plan_destroy(plan), WEFT_OK);
    free(buf);
}
END_TEST

/* --------------------------------------------------------------- receive */

START_TEST(receive_records_the_version)
{
    uint8_t             *buf = alloc_sentinel(1024);
    weft_recv_view_t     views[2];
    weft_plan_h          plan = NULL;
    weft_consumer_info_t info;
    uint32_t             id;
    uint64_t             version = 0;

    registry_setup(small, 2);
    ck_assert_int_eq(weft_registry_consumer_register(consumer, "engine-0", &id), WEFT_OK);
    views[0] = view_of(&small[0], buf);
    views[1] = view_of(&small[1], buf + 512);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, 2, &plan), WEFT_OK);

    /* Nothing published: a timeout, and nothing recorded. */
    ck_assert_int_eq(weft_plan_receive(plan, id, 0, 1000, &version), WEFT_ERR_TIMEOUT);
    ck_assert_uint_eq(version, 0);
    ck_assert_int_eq(weft_registry_consumer_info(consumer, id, &info), WEFT_OK);
    ck_assert_uint_eq(info.received_version, 0);
    ck_assert_int_eq(info.last_error, WEFT_OK);

    publish(1);
    ck_assert_int_eq(weft_plan_receive(plan, id, 0, WAIT_US, &version), WEFT_OK);
    ck_assert_uint_eq(version, 1);
    check_view(&views[0], 1);
    check_view(&views[1], 1);
    ck_assert_int_eq(weft_registry_consumer_info(consumer, id, &info), WEFT_OK);
    ck_assert_uint_eq(info.received_version, 1);
    ck_assert_int_eq(info.last_error, WEFT_OK);

    /* Two versions published meanwhile: the latest is received. */
    publish(2);
    publish(5);
    ck_assert_int_eq(weft_plan_receive(plan, id, version, WAIT_US, &version), WEFT_OK);
    ck_assert_uint_eq(version, 5);
    check_view(&views[0], 5);
    check_view(&views[1], 5);
    ck_assert_int_eq(weft_registry_consumer_info(consumer, id, &info), WEFT_OK);
    ck_assert_uint_eq(info.received_version, 5);

    /* The lease was released: the producer can cycle through every slot. */
    for (uint64_t v = 6; v <= 9; v++) {
        publish(v);
    }
    ck_assert_int_eq(weft_plan_receive(plan, id, version, 1000, &version), WEFT_OK);
    ck_assert_uint_eq(version, 9);
    ck_assert_int_eq(weft_plan_receive(plan, id, version, 1000, &version), WEFT_ERR_TIMEOUT);
    ck_assert_uint_eq(version, 9);
    ck_assert_int_eq(weft_plan_destroy(plan), WEFT_OK);
    free(buf);
}
END_TEST

START_TEST(failed_copy_records_the_error_and_no_version)
{
    uint8_t             *buf = alloc_sentinel(1024);
    weft_recv_view_t     views[2];
    weft_plan_h          plan = NULL;
    weft_consumer_info_t info;
    weft_plan_stats_t    st;
    weft_registry_stats_t rst;
    uint32_t             id;
    uint64_t             version = 0;

    registry_setup(small, 2);
    ck_assert_int_eq(weft_registry_consumer_register(consumer, "engine-1", &id), WEFT_OK);
    views[0] = view_of(&small[0], buf);
    views[1] = view_of(&small[1], buf + 512);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, 2, &plan), WEFT_OK);

    publish(1);
    ck_assert_int_eq(weft_plan_receive(plan, id, 0, WAIT_US, &version), WEFT_OK);
    ck_assert_uint_eq(version, 1);

    publish(2);
    weft_plan_fail_next_copy(plan, WEFT_ERR_IO);
    ck_assert_int_eq(weft_plan_receive(plan, id, 1, WAIT_US, &version), WEFT_ERR_IO);
    ck_assert_uint_eq(version, 1); /* untouched on failure */
    ck_assert_int_eq(weft_registry_consumer_info(consumer, id, &info), WEFT_OK);
    ck_assert_uint_eq(info.received_version, 1);
    ck_assert_uint_eq(info.failed_version, 2);
    ck_assert_int_eq(info.last_error, WEFT_ERR_IO);
    /* Every view still holds version 1: the fault hit before any byte. */
    for (int v = 0; v < 2; v++) {
        check_view(&views[v], 1);
    }
    ck_assert_int_eq(weft_plan_get_stats(plan, &st), WEFT_OK);
    ck_assert_uint_eq(st.versions_copied, 1);
    ck_assert_uint_eq(st.copy_failures, 1);
    ck_assert_uint_eq(st.last_version, 1);
    /* The failed receive released its lease too. */
    ck_assert_int_eq(weft_registry_get_stats(consumer, &rst), WEFT_OK);
    ck_assert_uint_eq(rst.leases_held, 0);

    /* The next attempt gets version 2 after all, then 3. */
    ck_assert_int_eq(weft_plan_receive(plan, id, 1, WAIT_US, &version), WEFT_OK);
    ck_assert_uint_eq(version, 2);
    check_view(&views[0], 2);
    check_view(&views[1], 2);
    publish(3);
    ck_assert_int_eq(weft_plan_receive(plan, id, version, WAIT_US, &version), WEFT_OK);
    ck_assert_uint_eq(version, 3);
    for (int v = 0; v < 2; v++) {
        check_view(&views[v], 3);
    }
    ck_assert_int_eq(weft_registry_consumer_info(consumer, id, &info), WEFT_OK);
    ck_assert_uint_eq(info.received_version, 3);
    ck_assert_int_eq(weft_plan_get_stats(plan, &st), WEFT_OK);
    ck_assert_uint_eq(st.versions_copied, 3);
    ck_assert_uint_eq(st.copy_failures, 1);
    ck_assert_uint_eq(st.last_version, 3);

    /* weft_plan_copy reports an injected failure the same way. */
    {
        weft_lease_t lease;

        weft_plan_fail_next_copy(plan, WEFT_ERR_CUDA);
        ck_assert_int_eq(weft_registry_acquire(consumer, &lease), WEFT_OK);
        ck_assert_int_eq(weft_plan_copy(plan, &lease), WEFT_ERR_CUDA);
        ck_assert_int_eq(weft_plan_copy(plan, &lease), WEFT_OK);
        ck_assert_int_eq(weft_registry_release(consumer, &lease), WEFT_OK);
    }
    ck_assert_int_eq(weft_plan_destroy(plan), WEFT_OK);
    free(buf);
}
END_TEST

START_TEST(copy_and_receive_reject_null_arguments)
{
    uint8_t           buf[1024];
    weft_recv_view_t  view;
    weft_plan_h       plan = NULL;
    weft_plan_stats_t st;
    weft_lease_t      lease;
    uint64_t          version = 42;

    registry_setup(small, 2);
    view = view_of(&small[0], buf);
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, &view, 1, &plan), WEFT_OK);
    ck_assert_int_eq(weft_plan_copy(NULL, &lease), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_plan_copy(plan, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_plan_receive(NULL, 0, 0, 0, &version), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_plan_receive(plan, 0, 0, 0, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_uint_eq(version, 42);
    ck_assert_int_eq(weft_plan_get_stats(NULL, &st), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_plan_get_stats(plan, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_plan_destroy(plan), WEFT_OK);
    ck_assert_int_eq(weft_plan_destroy(NULL), WEFT_OK);
}
END_TEST

/* Verified versions: a plan's host views that hold their tensors verbatim
 * are checked against the version's checksums; a version whose byte
 * changed in the registry after its publish is not received (its failure
 * is recorded for the consumer, never the version). */
START_TEST(plan_refuses_a_version_that_fails_its_checksum)
{
    uint8_t          bufs[2][4096] = {{0}};
    weft_recv_view_t views[2];
    weft_plan_h      plan;
    weft_consumer_info_t info;
    uint32_t         me;
    uint64_t         got = 0;
    void            *data;

    with_checksums = 1; /* this test's process only (CK_FORK) */
    registry_setup(small, 2);
    for (uint32_t i = 0; i < 2; i++) {
        views[i] = view_of(&small[i], bufs[i]);
    }
    ck_assert_int_eq(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, 2, &plan), WEFT_OK);
    ck_assert_int_eq(weft_registry_consumer_register(consumer, "checker", &me), WEFT_OK);
    publish(1);
    ck_assert_int_eq(weft_plan_receive(plan, me, 0, WAIT_US, &got), WEFT_OK);
    ck_assert_uint_eq(got, 1);
    publish(2);
    /* The producer's slot of version 2 (published: its pointer still
     * reaches it): one byte of tensor 0 changed. */
    {
        weft_lease_t lease;
        const void  *t1;

        ck_assert_int_eq(weft_registry_acquire(producer, &lease), WEFT_OK);
        ck_assert_uint_eq(lease.version, 2);
        ck_assert_int_eq(weft_registry_lease_tensor(producer, &lease, 0, &t1), WEFT_OK);
        data = (void *)(uintptr_t)t1;
        ((uint8_t *)data)[3] ^= 0x40;
        ck_assert_int_eq(weft_registry_release(producer, &lease), WEFT_OK);
    }
    ck_assert_int_eq(weft_plan_receive(plan, me, 1, WAIT_US, &got), WEFT_ERR_CORRUPT);
    ck_assert_int_eq(weft_registry_consumer_info(consumer, me, &info), WEFT_OK);
    ck_assert_uint_eq(info.received_version, 1);
    ck_assert_uint_eq(info.failed_version, 2);
    ck_assert_int_eq(weft_plan_destroy(plan), WEFT_OK);
}
END_TEST

static Suite *transport_host_suite(void)
{
    Suite *s = suite_create("transport_host");
    TCase *tc;

    tc = tcase_create("plan_errors");
    tcase_add_checked_fixture(tc, NULL, registry_teardown);
    tcase_add_test(tc, create_rejects_null_and_bad_arguments);
    tcase_add_test(tc, create_rejects_missing_tensor_and_names_it);
    tcase_add_test(tc, create_rejects_mismatched_role_dtype_and_shape);
    tcase_add_test(tc, create_rejects_duplicate_and_overlapping_views);
    tcase_add_test(tc, copy_and_receive_reject_null_arguments);
    suite_add_tcase(s, tc);

    tc = tcase_create("ranges");
    tcase_add_checked_fixture(tc, NULL, registry_teardown);
    tcase_add_test(tc, adjacent_tensors_into_one_buffer_make_one_range);
    tcase_add_test(tc, gaps_in_the_arena_keep_ranges_apart);
    tcase_add_test(tc, strided_destinations_give_expected_ranges);
    tcase_add_test(tc, strided_registry_tensor_is_copied_by_rows);
    tcase_add_test(tc, interleaved_views_are_not_an_overlap);
    tcase_add_test(tc, strided_views_into_fused_buffers);
    suite_add_tcase(s, tc);

    tc = tcase_create("receive");
    tcase_add_checked_fixture(tc, NULL, registry_teardown);
    tcase_add_test(tc, receive_records_the_version);
    tcase_add_test(tc, failed_copy_records_the_error_and_no_version);
    tcase_add_test(tc, plan_refuses_a_version_that_fails_its_checksum);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(transport_host_suite)
