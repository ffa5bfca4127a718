/* Rounds of a version through a consumer's bounded staging ring. */
#include "config.h"

#include "transport/plan/rounds.h"

#include <stdlib.h>
#include <string.h>

void weft_rounds_free(weft_rounds_t *rounds)
{
    for (uint32_t k = 0; rounds->round != NULL && k < rounds->count; k++) {
        free(rounds->round[k].puts.ranges);
        free(rounds->round[k].pieces);
    }
    free(rounds->round);
    memset(rounds, 0, sizeof(*rounds));
}

/*
 * The ranges in order as one stream of bytes cut every `half` bytes: each
 * stretch that stays inside one range and one round is counted (fill 0)
 * or written into its round (fill 1: arrays sized by the counting pass).
 */
static void walk(const weft_range_list_t *ranges, uint64_t ring_base, weft_rounds_t *rounds,
                 int fill)
{
    uint64_t stream = 0;

    for (uint64_t i = 0; i < ranges->count; i++) {
        const weft_copy_range_t *r = &ranges->ranges[i];

        for (uint64_t done = 0; done < r->bytes;) {
            const uint64_t    at = stream % rounds->half;
            const uint64_t    n = r->bytes - done < rounds->half - at ? r->bytes - done
                                                                      : rounds->half - at;
            const uint32_t    k = (uint32_t)(stream / rounds->half);
            weft_round_t *round = &rounds->round[k];

            if (fill) {
                const uint64_t ring_offset = (k % 2) * rounds->half + at;

                round->pieces[round->piece_count] = (weft_ucx_piece_t){
                    .dst = (uint64_t)(uintptr_t)r->dst + done, .ring_offset = ring_offset,
                    .bytes = n};
                round->puts.ranges[round->puts.count++] = (weft_copy_range_t){
                    .src = r->src + done,
                    .dst = (uint8_t *)(uintptr_t)(ring_base + ring_offset),
                    .bytes = n,
                    .view = r->view};
            }
            round->piece_count++;
            done += n;
            stream += n;
        }
    }
}

weft_status_t weft_rounds_build(const weft_range_list_t *ranges, uint64_t ring_base,
                                    uint64_t half, weft_rounds_t *rounds)
{
    uint64_t total = 0, count;

    memset(rounds, 0, sizeof(*rounds));
    if (half == 0) {
        return WEFT_ERR_INVALID_PARAM;
    }
    for (uint64_t i = 0; i < ranges->count; i++) {
        total += ranges->ranges[i].bytes;
    }
    count = total / half + (total % half != 0);
    if (count > WEFT_ROUNDS_MAX) {
        return WEFT_ERR_INVALID_PARAM;
    }
    rounds->half = half;
    if (count == 0) {
        return WEFT_OK;
    }
    rounds->round = calloc(count, sizeof(*rounds->round));
    if (rounds->round == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    rounds->count = (uint32_t)count;
    walk(ranges, ring_base, rounds, 0);
    for (uint32_t k = 0; k < rounds->count; k++) {
        weft_round_t *round = &rounds->round[k];

        round->pieces = calloc(round->piece_count, sizeof(*round->pieces));
        round->puts.ranges = calloc(round->piece_count, sizeof(*round->puts.ranges));
        if (round->pieces == NULL || round->puts.ranges == NULL) {
            weft_rounds_free(rounds);
            return WEFT_ERR_NO_MEMORY;
        }
        round->puts.capacity = round->piece_count;
        round->piece_count = 0;
    }
    walk(ranges, ring_base, rounds, 1);
    return WEFT_OK;
}

void weft_ucx_put_round(weft_ctl_buf_t *buf, uint64_t version, const weft_rounds_t *rounds,
                        uint32_t k)
{
    const weft_round_t *round = &rounds->round[k];

    weft_ctl_put_u64(buf, version);
    weft_ctl_put_u32(buf, k);
    weft_ctl_put_u32(buf, rounds->count);
    weft_ctl_put_u64(buf, round->piece_count);
    for (uint64_t i = 0; i < round->piece_count; i++) {
        weft_ctl_put_u64(buf, round->pieces[i].dst);
        weft_ctl_put_u64(buf, round->pieces[i].ring_offset);
        weft_ctl_put_u64(buf, round->pieces[i].bytes);
    }
}

weft_status_t weft_ucx_get_round(const weft_ctl_msg_t *msg, uint64_t half,
                                 const weft_wire_span_t *spans, uint32_t span_count,
                                 uint64_t *version, uint32_t *round, uint32_t *rounds,
                                 weft_ucx_piece_t **pieces, uint64_t *count)
{
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};
    weft_ucx_piece_t  *got;
    uint64_t           n, lo, hi;

    *pieces = NULL;
    *version = weft_ctl_get_u64(&cur);
    *round = weft_ctl_get_u32(&cur);
    *rounds = weft_ctl_get_u32(&cur);
    n = weft_ctl_get_u64(&cur);
    /* 24 bytes a piece: a count the payload cannot hold is malformed. */
    if (cur.failed || *round >= *rounds || n > (cur.length - cur.at) / 24) {
        return WEFT_ERR_CORRUPT;
    }
    got = calloc(n + 1, sizeof(*got));
    if (got == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    lo = (*round % 2) * half;
    hi = lo + half;
    for (uint64_t i = 0; i < n; i++) {
        got[i].dst = weft_ctl_get_u64(&cur);
        got[i].ring_offset = weft_ctl_get_u64(&cur);
        got[i].bytes = weft_ctl_get_u64(&cur);
        if (cur.failed || got[i].ring_offset < lo || got[i].ring_offset > hi ||
            got[i].bytes > hi - got[i].ring_offset ||
            weft_wire_span_find(spans, span_count, got[i].dst, got[i].bytes) == NULL) {
            free(got);
            return WEFT_ERR_CORRUPT;
        }
    }
    *pieces = got;
    *count = n;
    return WEFT_OK;
}
