/* One process publishes a 256 × 512 expert matrix as blockwise FP8 (W, Wᵀ,
 * block scales) and receives it as a consumer would; the README shows it.
 *   cc minimal.c $(pkg-config --cflags --libs weft) && ./a.out [NAME] */
#include <stdio.h>
#include <string.h>
#include <weft/weft.h>
#include <weft/quant.h>
#include <weft/transport.h>

#define ROWS 256
#define COLS 512
#define CHECK(call) do { weft_status_t s_ = (call); if (s_ != WEFT_OK) { \
    fprintf(stderr, "%s: %s\n", #call, weft_status_string(s_)); return 1; } } while (0)

/* Tensor i of the matrix: W [ROWS, COLS], WT [COLS, ROWS] (e4m3), scales [2, 4]. */
static weft_tensor_desc_t tensor(int i)
{
    static const char *const names[3] = {"L0.experts.0.w1.weight", "L0.experts.0.w1.weight_t",
                                         "L0.experts.0.w1.weight_scale_inv"};
    static const weft_tensor_role_t roles[3] = {WEFT_ROLE_W, WEFT_ROLE_WT, WEFT_ROLE_SCALE};
    weft_tensor_desc_t d = {.name = names[i], .layer = 0, .expert = 0, .role = roles[i],
                            .dtype = i == 2 ? WEFT_DTYPE_FP32 : WEFT_DTYPE_FP8_E4M3, .ndim = 2};
    d.shape[0] = i == 0 ? ROWS : i == 1 ? COLS : ROWS / 128;
    d.shape[1] = i == 0 ? COLS : i == 1 ? ROWS : COLS / 128;
    return d;
}

int main(int argc, char **argv)
{
    static float   master[ROWS * COLS], got_scale[8], sent_scale[8];
    static uint8_t got_w[ROWS * COLS], got_wt[ROWS * COLS], sent_w[ROWS * COLS];
    const char    *name = argc > 1 ? argv[1] : "minimal";
    weft_registry_h producer, consumer;
    void          *out[3], *into[3] = {got_w, got_wt, got_scale};
    weft_recv_view_t views[3];
    weft_plan_h    plan;
    uint32_t       me;
    uint64_t       version;

    for (int i = 0; i < ROWS * COLS; i++) /* stands in for an optimizer step */
        master[i] = (float)((i * 7919) % 1000 - 500) * 1e-4f;
    weft_registry_unlink(name); /* left by a run killed before its unlink */

    /* Producer (the trainer): declare, seal, write version 1, publish it. */
    CHECK(weft_registry_create(name, NULL, &producer));
    for (int i = 0; i < 3; i++) {
        weft_tensor_desc_t d = tensor(i);
        CHECK(weft_registry_declare(producer, &d, NULL));
    }
    CHECK(weft_registry_seal(producer));
    CHECK(weft_registry_write_begin(producer, 0, NULL));
    for (uint32_t i = 0; i < 3; i++)
        CHECK(weft_registry_write_tensor(producer, i, &out[i]));
    weft_quant_matrix_t m = {.x = master, .w = out[0], .wt = out[1], .scale_inv = out[2]};
    CHECK(weft_quant_host(NULL, WEFT_DTYPE_FP32, ROWS, COLS, &m, 1));
    memcpy(sent_w, out[0], sizeof(sent_w)); /* to compare with what arrives */
    memcpy(sent_scale, out[2], sizeof(sent_scale));
    CHECK(weft_registry_publish(producer, 1, NULL));

    /* Consumer (a rollout engine, usually another process): a view per tensor. */
    CHECK(weft_registry_open(name, WEFT_REGISTRY_OPEN_READ, &consumer));
    CHECK(weft_registry_consumer_register(consumer, "engine-0", &me));
    for (int i = 0; i < 3; i++) {
        weft_tensor_desc_t d = tensor(i);
        views[i] = (weft_recv_view_t){.name = d.name, .role = d.role, .dtype = d.dtype, .ndim = 2,
                                      .shape = {d.shape[0], d.shape[1]}, .data = into[i]};
    }
    CHECK(weft_plan_create(consumer, WEFT_TRANSPORT_HOST, views, 3, &plan));
    CHECK(weft_plan_receive(plan, me, 0, 1000000, &version)); /* copy, then record "received 1" */
    CHECK(weft_registry_wait_consumers(producer, version, 1000000, NULL));
    const int same = !memcmp(sent_w, got_w, sizeof(got_w)) && !memcmp(sent_scale, got_scale, sizeof(got_scale));
    printf("engine-0 received version %llu: %s\n", (unsigned long long)version, same ? "bytes match" : "DIFFER");

    weft_plan_destroy(plan);
    weft_registry_consumer_unregister(consumer, me);
    weft_registry_close(consumer);
    weft_registry_close(producer);
    CHECK(weft_registry_unlink(name));
    return same ? 0 : 1;
}
