/* Consumer records: who receives the versions, and what each holds. */
#include "config.h"

#include "common/log.h"
#include "futex.h"
#include "process.h"
#include "registry_impl.h"

#include <string.h>
#include <unistd.h>

/* wait_consumers looks at least this often, to notice consumers that died. */
#define CONSUMER_POLL_NS 10000000u

/* A dead process's consumer record goes back to free. */
static void consumer_reclaim(struct weft_registry *reg, reg_consumer_t *c)
{
    uint64_t owner = REG_LOAD(&c->owner);

    if (owner != REG_OWNER_NONE && owner != REG_OWNER_BUSY && owner != reg->self &&
        !weft_process_alive(owner) && REG_CAS(&c->owner, &owner, REG_OWNER_NONE)) {
        weft_log_info("registry \"%s\": dropped consumer \"%.63s\" of dead pid %d", reg->name, c->name,
                      weft_process_pid(owner));
    }
}

/* The record of a consumer registered by this process, or NULL. */
static reg_consumer_t *consumer_own(struct weft_registry *reg, uint32_t consumer)
{
    if (!reg->sealed || consumer >= reg->geo.consumer_capacity ||
        REG_LOAD(&reg->consumers[consumer].owner) != reg->self) {
        return NULL;
    }
    return &reg->consumers[consumer];
}

WEFT_API weft_status_t weft_registry_consumer_register(weft_registry_h reg, const char *name, uint32_t *consumer)
{
    size_t len;

    if (reg == NULL || name == NULL || consumer == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    len = strnlen(name, WEFT_CONSUMER_NAME_MAX);
    if (len == 0 || len >= WEFT_CONSUMER_NAME_MAX) {
        weft_log_error("registry \"%s\": consumer name must be 1 to %d bytes", reg->name,
                       WEFT_CONSUMER_NAME_MAX - 1);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->sealed) {
        return WEFT_ERR_STATE;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < reg->geo.consumer_capacity; i++) {
            reg_consumer_t *c = &reg->consumers[i];
            uint64_t        none = REG_OWNER_NONE;

            if (pass == 1) {
                consumer_reclaim(reg, c);
            }
            /* BUSY while the fields are set: waiters skip the record. */
            if (REG_LOAD(&c->owner) != REG_OWNER_NONE || !REG_CAS(&c->owner, &none, REG_OWNER_BUSY)) {
                continue;
            }
            memset(c->name, 0, sizeof(c->name));
            memcpy(c->name, name, len);
            c->pid = (int32_t)getpid();
            c->holder = reg->tag;
            REG_STORE(&c->received, 0);
            REG_STORE(&c->failed_version, 0);
            __atomic_store_n(&c->last_error, WEFT_OK, __ATOMIC_SEQ_CST);
            REG_STORE(&c->owner, reg->self);
            *consumer = i;
            return WEFT_OK;
        }
    }
    weft_log_error("registry \"%s\": all %u consumer records are taken", reg->name, reg->geo.consumer_capacity);
    return WEFT_ERR_NO_SPACE;
}

WEFT_API weft_status_t weft_registry_consumer_unregister(weft_registry_h reg, uint32_t consumer)
{
    reg_consumer_t *c;

    if (reg == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    c = consumer_own(reg, consumer);
    if (c == NULL) {
        return WEFT_ERR_NOT_FOUND;
    }
    REG_STORE(&c->owner, REG_OWNER_NONE);
    /* One fewer consumer may be what a waiter waits for. */
    weft_registry_wake(&reg->hdr->ack_seq, &reg->hdr->ack_waiters);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_consumer_received(weft_registry_h reg, uint32_t consumer, uint64_t version)
{
    reg_consumer_t *c;
    uint64_t        previous;

    if (reg == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    c = consumer_own(reg, consumer);
    if (c == NULL) {
        weft_log_error("registry \"%s\": consumer %u is not registered by this process", reg->name, consumer);
        return WEFT_ERR_NOT_FOUND;
    }
    previous = REG_LOAD(&c->received);
    if (version <= previous) {
        weft_log_error("registry \"%s\": consumer \"%s\" received version %llu after %llu", reg->name, c->name,
                       (unsigned long long)version, (unsigned long long)previous);
        return WEFT_ERR_INVALID_PARAM;
    }
    REG_STORE(&c->received, version);
    weft_registry_wake(&reg->hdr->ack_seq, &reg->hdr->ack_waiters);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_consumer_failed(weft_registry_h reg, uint32_t consumer, uint64_t version,
                                                     weft_status_t error)
{
    reg_consumer_t *c;

    if (reg == NULL || error >= WEFT_OK) {
        return WEFT_ERR_INVALID_PARAM;
    }
    c = consumer_own(reg, consumer);
    if (c == NULL) {
        return WEFT_ERR_NOT_FOUND;
    }
    REG_STORE(&c->failed_version, version);
    __atomic_store_n(&c->last_error, (int32_t)error, __ATOMIC_SEQ_CST);
    weft_log_warn("registry \"%s\": consumer \"%s\" failed to receive version %llu: %s", reg->name, c->name,
                  (unsigned long long)version, weft_status_string(error));
    weft_registry_wake(&reg->hdr->ack_seq, &reg->hdr->ack_waiters);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_consumer_info(weft_registry_h reg, uint32_t consumer,
                                                   weft_consumer_info_t *info)
{
    reg_consumer_t *c;
    uint64_t        owner;

    if (reg == NULL || info == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->sealed || consumer >= reg->geo.consumer_capacity) {
        return WEFT_ERR_NOT_FOUND;
    }
    c = &reg->consumers[consumer];
    owner = REG_LOAD(&c->owner);
    if (owner == REG_OWNER_NONE || owner == REG_OWNER_BUSY) {
        return WEFT_ERR_NOT_FOUND;
    }
    memset(info, 0, sizeof(*info));
    memcpy(info->name, c->name, sizeof(info->name) - 1);
    info->pid = weft_process_pid(owner);
    info->received_version = REG_LOAD(&c->received);
    info->failed_version = REG_LOAD(&c->failed_version);
    info->last_error = (weft_status_t)__atomic_load_n(&c->last_error, __ATOMIC_SEQ_CST);
    return WEFT_OK;
}

/* Living consumers that hold less than version. */
static uint32_t consumers_lagging(struct weft_registry *reg, uint64_t version)
{
    uint32_t lagging = 0;

    for (uint32_t i = 0; i < reg->geo.consumer_capacity; i++) {
        reg_consumer_t *c = &reg->consumers[i];
        uint64_t        owner = REG_LOAD(&c->owner);

        if (owner == REG_OWNER_NONE || owner == REG_OWNER_BUSY || REG_LOAD(&c->received) >= version) {
            continue;
        }
        consumer_reclaim(reg, c);
        if (REG_LOAD(&c->owner) != REG_OWNER_NONE) {
            lagging++;
        }
    }
    return lagging;
}

WEFT_API weft_status_t weft_registry_wait_consumers(weft_registry_h reg, uint64_t version, uint64_t timeout_us,
                                                    uint32_t *lagging)
{
    uint64_t deadline;
    uint32_t behind;

    if (reg == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->sealed) {
        return WEFT_ERR_STATE;
    }
    deadline = weft_deadline_ns(weft_time_ns(), timeout_us);
    for (;;) {
        uint32_t seq = REG_LOAD(&reg->hdr->ack_seq);
        uint64_t now;

        behind = consumers_lagging(reg, version);
        if (behind == 0) {
            break;
        }
        now = weft_time_ns();
        if (now >= deadline) {
            if (lagging != NULL) {
                *lagging = behind;
            }
            return WEFT_ERR_TIMEOUT;
        }
        weft_registry_sleep(&reg->hdr->ack_seq, &reg->hdr->ack_waiters, seq,
                            deadline - now < CONSUMER_POLL_NS ? deadline - now : CONSUMER_POLL_NS);
    }
    if (lagging != NULL) {
        *lagging = 0;
    }
    return WEFT_OK;
}

void weft_registry_drop_consumers(struct weft_registry *reg)
{
    for (uint32_t i = 0; i < reg->geo.consumer_capacity; i++) {
        reg_consumer_t *c = &reg->consumers[i];

        if (REG_LOAD(&c->owner) == reg->self && c->holder == reg->tag) {
            REG_STORE(&c->owner, REG_OWNER_NONE);
        }
    }
    weft_registry_wake(&reg->hdr->ack_seq, &reg->hdr->ack_waiters);
}
