/* The registry's life: create, declare, seal, open, close, unlink; tensor
 * lookup and statistics. Versions are in write.c and read.c, consumers in
 * consumer.c. */
#include "config.h"

#include "common/env_config.h"
#include "common/log.h"
#include "common/status.h"
#include "device_memory.h"
#include "futex.h"
#include "process.h"
#include "registry_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_SLOTS         3u
#define DEFAULT_MAX_TENSORS   8192u
#define DEFAULT_MAX_LEASES    1024u
#define DEFAULT_MAX_CONSUMERS 256u
#define DEFAULT_MODE          0600u

#define PARAMS_KNOWN                                                                             \
    (WEFT_REGISTRY_FIELD_SLOTS | WEFT_REGISTRY_FIELD_MAX_TENSORS | WEFT_REGISTRY_FIELD_MAX_LEASES | \
     WEFT_REGISTRY_FIELD_MAX_CONSUMERS | WEFT_REGISTRY_FIELD_MODE | WEFT_REGISTRY_FIELD_GROUP |   \
     WEFT_REGISTRY_FIELD_MEMORY | WEFT_REGISTRY_FIELD_CHECKSUMS)

/* name as it may be logged: printable ASCII, anything else as \xNN (a
 * refused name comes from whoever called, and must not write to the log's
 * terminal or forge its lines). */
static const char *registry_name_printable(const char *name, char *buf, size_t size)
{
    size_t at = 0;

    if (name == NULL) {
        return "(null)";
    }
    for (size_t i = 0; name[i] != '\0' && i < WEFT_REGISTRY_NAME_MAX && at + 5 < size; i++) {
        const unsigned char c = (unsigned char)name[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
            buf[at++] = (char)c;
        } else {
            at += (size_t)snprintf(buf + at, size - at, "\\x%02x", c);
        }
    }
    buf[at] = '\0';
    return buf;
}

/* weft_registry_name_valid, saying so in the log when it is not. */
static int registry_name_checked(const char *name)
{
    char printable[5 * WEFT_REGISTRY_NAME_MAX + 1];

    if (weft_registry_name_valid(name)) {
        return 1;
    }
    weft_log_error("registry name \"%s\" is not 1 to %d characters of [A-Za-z0-9._-] (nor \".\" or \"..\")",
                   registry_name_printable(name, printable, sizeof(printable)), WEFT_REGISTRY_NAME_MAX - 1);
    return 0;
}

/*
 * Whose segment this is. Refused: one anybody may write (whoever wrote it
 * can change it under its readers), and one another user owns unless it
 * is shared through a group of this process (WEFT_REGISTRY_FIELD_GROUP at
 * create, mode 0660): another user's segment under our registry's name is
 * a squatter's.
 */
static weft_status_t registry_owner_check(const struct weft_registry *reg, const struct stat *st)
{
    gid_t groups[256];
    int   n;

    if (st->st_mode & S_IWOTH) {
        weft_log_error("registry \"%s\": refused: the segment is writable by every user (mode 0%o)", reg->name,
                       (unsigned)(st->st_mode & 0777));
        return WEFT_ERR_PERMISSION;
    }
    if (st->st_uid == geteuid()) {
        return WEFT_OK;
    }
    if ((st->st_mode & (S_IRGRP | S_IWGRP)) == (S_IRGRP | S_IWGRP)) {
        if (st->st_gid == getegid()) {
            return WEFT_OK;
        }
        n = getgroups((int)(sizeof(groups) / sizeof(groups[0])), groups);
        for (int i = 0; i < n; i++) {
            if (groups[i] == st->st_gid) {
                return WEFT_OK;
            }
        }
    }
    weft_log_error("registry \"%s\": refused: the segment belongs to uid %u, not to this process's uid %u, and "
                   "is not shared with a group of this process (mode 0%o, gid %u)",
                   reg->name, (unsigned)st->st_uid, (unsigned)geteuid(), (unsigned)(st->st_mode & 0777),
                   (unsigned)st->st_gid);
    return WEFT_ERR_PERMISSION;
}

/* A handle with its name set and nothing mapped. */
static weft_status_t registry_alloc(const char *name, struct weft_registry **out)
{
    struct weft_registry *reg;
    long                  spin_us = 0;
    weft_status_t         status;

    if (!registry_name_checked(name)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    status = weft_config_long(WEFT_CONFIG_REGISTRY_SPIN_US, 0, 10000000, &spin_us);
    if (status != WEFT_OK) {
        return status;
    }
    reg = calloc(1, sizeof(*reg));
    if (reg == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    snprintf(reg->name, sizeof(reg->name), "%s", name);
    snprintf(reg->shm_name, sizeof(reg->shm_name), "/weft.%s", name);
    reg->fd = -1;
    reg->spin_us = spin_us;
    reg->self = weft_process_self();
    reg->device = -1;
    /* Unique among the handles of this process and of every process. */
    reg->tag = (reg->self ^ (uint64_t)(uintptr_t)reg ^ weft_time_ns()) | 1;
    pthread_mutex_init(&reg->lock, NULL);
    pthread_mutex_init(&reg->map_lock, NULL);
    pthread_mutex_init(&reg->sum_lock, NULL);
    if (reg->self == 0) {
        weft_log_error("registry \"%s\": cannot read this process's start time from /proc", name);
        free(reg);
        return WEFT_ERR_IO;
    }
    *out = reg;
    return WEFT_OK;
}

static void registry_free(struct weft_registry *reg)
{
    if (reg->base != NULL) {
        munmap(reg->base, reg->mapped);
    }
    if (reg->fd >= 0) {
        close(reg->fd);
    }
    pthread_mutex_destroy(&reg->lock);
    pthread_mutex_destroy(&reg->map_lock);
    weft_checksum_scratch_free(&reg->sum_scratch);
    pthread_mutex_destroy(&reg->sum_lock);
    free(reg->maps);
    free(reg->arena_ptr);
    free(reg->tensors);
    free(reg->name_index);
    free(reg);
}

void weft_registry_bind_tables(struct weft_registry *reg)
{
    reg->hdr = (reg_header_t *)reg->base;
    reg->slots = (reg_slot_t *)(reg->base + reg->geo.slot_table_offset);
    reg->leases = (reg_lease_t *)(reg->base + reg->geo.lease_table_offset);
    reg->consumers = (reg_consumer_t *)(reg->base + reg->geo.consumer_table_offset);
}

static uint64_t hash_name(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (; *name != '\0'; name++) {
        h = (h ^ (unsigned char)*name) * 0x100000001b3ULL;
    }
    return h;
}

weft_status_t weft_registry_index_names(struct weft_registry *reg)
{
    uint32_t buckets = 16;

    /* 4 × the count: room to declare as many again before a rebuild. */
    while (buckets < 4 * reg->geo.tensor_count) {
        buckets *= 2;
    }
    free(reg->name_index);
    reg->name_index = calloc(buckets, sizeof(*reg->name_index));
    if (reg->name_index == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    reg->name_buckets = buckets;
    for (uint32_t i = 0; i < reg->geo.tensor_count; i++) {
        uint32_t b = (uint32_t)hash_name(reg->tensors[i].name) & (buckets - 1);

        while (reg->name_index[b] != 0) {
            b = (b + 1) & (buckets - 1);
        }
        reg->name_index[b] = i + 1;
    }
    return WEFT_OK;
}

/* Index of name among the declared tensors, or -1. */
static int64_t registry_find(const struct weft_registry *reg, const char *name)
{
    if (reg->name_index == NULL) {
        return -1; /* nothing declared yet */
    }
    for (uint32_t b = (uint32_t)hash_name(name) & (reg->name_buckets - 1); reg->name_index[b] != 0;
         b = (b + 1) & (reg->name_buckets - 1)) {
        if (strcmp(reg->tensors[reg->name_index[b] - 1].name, name) == 0) {
            return reg->name_index[b] - 1;
        }
    }
    return -1;
}

static weft_status_t registry_open_error(const struct weft_registry *reg, int err, const char *what)
{
    weft_status_t status = weft_status_from_errno(err);

    weft_log_error("registry \"%s\": %s failed: %s", reg->name, what, strerror(err));
    return status;
}

WEFT_API weft_status_t weft_registry_create(const char *name, const weft_registry_params_t *params,
                                            weft_registry_h *out)
{
    weft_registry_params_t p = {0};
    struct weft_registry  *reg;
    struct timespec        now;
    weft_status_t          status;
    uint64_t               tables_end;

    if (out == NULL || !registry_name_checked(name)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (params != NULL) {
        p = *params;
        if (p.field_mask & ~(uint64_t)PARAMS_KNOWN) {
            weft_log_error("registry \"%s\": unknown params field_mask bits 0x%llx", name,
                           (unsigned long long)(p.field_mask & ~(uint64_t)PARAMS_KNOWN));
            return WEFT_ERR_INVALID_PARAM;
        }
    }
    if (!(p.field_mask & WEFT_REGISTRY_FIELD_SLOTS)) p.slot_count = DEFAULT_SLOTS;
    if (!(p.field_mask & WEFT_REGISTRY_FIELD_MAX_TENSORS)) p.max_tensors = DEFAULT_MAX_TENSORS;
    if (!(p.field_mask & WEFT_REGISTRY_FIELD_MAX_LEASES)) p.max_leases = DEFAULT_MAX_LEASES;
    if (!(p.field_mask & WEFT_REGISTRY_FIELD_MAX_CONSUMERS)) p.max_consumers = DEFAULT_MAX_CONSUMERS;
    if (!(p.field_mask & WEFT_REGISTRY_FIELD_MODE)) p.mode = DEFAULT_MODE;
    if (!(p.field_mask & WEFT_REGISTRY_FIELD_MEMORY)) p.memory = WEFT_MEMORY_HOST;
    if (!(p.field_mask & WEFT_REGISTRY_FIELD_CHECKSUMS)) p.checksums = 0;
    if (p.checksums > 1) {
        weft_log_error("registry \"%s\": checksums %u: 0 (none) or 1 (a checksum per tensor and version)", name,
                       p.checksums);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (p.memory != WEFT_MEMORY_HOST && p.memory != WEFT_MEMORY_CUDA) {
        weft_log_error("registry \"%s\": unknown memory kind %d", name, (int)p.memory);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (p.slot_count < REG_MIN_SLOTS || p.slot_count > REG_MAX_SLOTS || p.max_tensors < 1 ||
        p.max_tensors > REG_MAX_TENSORS || p.max_leases < 1 || p.max_leases > REG_MAX_LEASES ||
        p.max_consumers < 1 || p.max_consumers > REG_MAX_CONSUMERS || (p.mode & ~0777u) ||
        (p.mode & 0600u) != 0600u || (p.mode & 0002u)) {
        weft_log_error("registry \"%s\": params out of range (slots %u in %u..%u, max_tensors %u, "
                       "max_leases %u, max_consumers %u, mode 0%o needs owner rw and no write for others)",
                       name, p.slot_count, REG_MIN_SLOTS, REG_MAX_SLOTS, p.max_tensors,
                       p.max_leases, p.max_consumers, p.mode);
        return WEFT_ERR_INVALID_PARAM;
    }
    status = registry_alloc(name, &reg);
    if (status != WEFT_OK) {
        return status;
    }
    reg->geo.memory = p.memory == WEFT_MEMORY_CUDA ? REG_MEMORY_CUDA : REG_MEMORY_HOST;
    if (reg->geo.memory == REG_MEMORY_CUDA) {
        /* The GPU is named by UUID in the segment: ordinals differ between
         * processes (CUDA_VISIBLE_DEVICES). */
        status = weft_devmem_uuid(p.device, reg->geo.device_uuid);
        if (status != WEFT_OK) {
            weft_log_error("registry \"%s\": GPU %d is not usable: %s", name, p.device,
                           weft_status_string(status));
            registry_free(reg);
            return status == WEFT_ERR_CUDA ? WEFT_ERR_NO_DEVICE : status;
        }
        reg->device = p.device;
    }

    reg->geo.slot_count = p.slot_count;
    reg->geo.tensor_capacity = p.max_tensors;
    reg->geo.lease_capacity = p.max_leases;
    reg->geo.consumer_capacity = p.max_consumers;
    reg->geo.tensor_table_offset = sizeof(reg_header_t);
    reg->geo.slot_table_offset = reg->geo.tensor_table_offset + (uint64_t)p.max_tensors * sizeof(reg_tensor_t);
    reg->geo.lease_table_offset = reg->geo.slot_table_offset + (uint64_t)p.slot_count * sizeof(reg_slot_t);
    reg->geo.consumer_table_offset = reg->geo.lease_table_offset + (uint64_t)p.max_leases * sizeof(reg_lease_t);
    tables_end = reg->geo.consumer_table_offset + (uint64_t)p.max_consumers * sizeof(reg_consumer_t);
    if (reg->geo.memory == REG_MEMORY_CUDA) {
        reg->geo.arena_count = p.slot_count;
        reg->geo.arena_table_offset = WEFT_ALIGN_UP(tables_end, (uint64_t)REG_TABLE_ALIGN);
        tables_end = reg->geo.arena_table_offset + (uint64_t)p.slot_count * sizeof(reg_arena_t);
    }
    if (p.checksums) {
        reg->geo.checksums = REG_CHECKSUMS_AT_PUBLISH;
        reg->geo.checksum_table_offset = WEFT_ALIGN_UP(tables_end, (uint64_t)REG_TABLE_ALIGN);
        tables_end = reg->geo.checksum_table_offset +
                     (uint64_t)p.slot_count * p.max_tensors * sizeof(reg_checksum_t);
    }
    reg->geo.data_offset = WEFT_ALIGN_UP(tables_end, (uint64_t)REG_PAGE);
    reg->mapped = reg->geo.data_offset;

    reg->fd = shm_open(reg->shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, p.mode);
    if (reg->fd < 0 && errno == EEXIST) {
        weft_log_error("registry \"%s\" exists (/dev/shm%s): a producer has it, or one that died left it; "
                       "open it with WEFT_REGISTRY_OPEN_PRODUCER to take it over, or remove it "
                       "(weft_registry_unlink; `weft-perf registries` says whether any running process "
                       "uses it, and --remove-stale removes those none does) first",
                       reg->name, reg->shm_name);
        status = WEFT_ERR_EXISTS;
        goto err_free;
    }
    if (reg->fd < 0) {
        status = registry_open_error(reg, errno, "shm_open");
        goto err_free;
    }
    /* shm_open applies the umask; the caller's mode is what counts. */
    if (fchmod(reg->fd, p.mode) != 0) {
        status = registry_open_error(reg, errno, "fchmod");
        goto err_unlink;
    }
    if ((p.field_mask & WEFT_REGISTRY_FIELD_GROUP) && fchown(reg->fd, (uid_t)-1, (gid_t)p.group) != 0) {
        status = registry_open_error(reg, errno, "fchown to the requested group");
        goto err_unlink;
    }
    if (ftruncate(reg->fd, (off_t)reg->mapped) != 0) {
        status = registry_open_error(reg, errno, "ftruncate");
        goto err_unlink;
    }
    reg->base = mmap(NULL, reg->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, reg->fd, 0);
    if (reg->base == MAP_FAILED) {
        reg->base = NULL;
        status = registry_open_error(reg, errno, "mmap");
        goto err_unlink;
    }
    reg->tensors = calloc(p.max_tensors < 64 ? p.max_tensors : 64, sizeof(*reg->tensors));
    if (reg->tensors == NULL) {
        status = WEFT_ERR_NO_MEMORY;
        goto err_unlink;
    }
    weft_registry_bind_tables(reg);

    /* The header says DECLARING until seal: readers wait for SEALED. */
    clock_gettime(CLOCK_REALTIME, &now);
    memcpy(reg->hdr->magic, REG_MAGIC, REG_MAGIC_LEN);
    reg->hdr->abi_major = REG_ABI_MAJOR;
    reg->hdr->abi_minor = REG_ABI_MINOR;
    reg->hdr->header_size = sizeof(reg_header_t);
    reg->hdr->slot_count = p.slot_count;
    reg->hdr->tensor_capacity = p.max_tensors;
    reg->hdr->lease_capacity = p.max_leases;
    reg->hdr->consumer_capacity = p.max_consumers;
    reg->hdr->tensor_table_offset = reg->geo.tensor_table_offset;
    reg->hdr->slot_table_offset = reg->geo.slot_table_offset;
    reg->hdr->lease_table_offset = reg->geo.lease_table_offset;
    reg->hdr->consumer_table_offset = reg->geo.consumer_table_offset;
    reg->hdr->memory = reg->geo.memory;
    reg->hdr->arena_count = reg->geo.arena_count;
    reg->hdr->arena_table_offset = reg->geo.arena_table_offset;
    reg->hdr->checksums = reg->geo.checksums;
    reg->hdr->checksum_table_offset = reg->geo.checksum_table_offset;
    memcpy(reg->hdr->device_uuid, reg->geo.device_uuid, sizeof(reg->hdr->device_uuid));
    reg->hdr->device = reg->device;
    if (reg->geo.memory == REG_MEMORY_CUDA) {
        reg_arena_t *arenas = (reg_arena_t *)(reg->base + reg->geo.arena_table_offset);
        for (uint32_t s = 0; s < p.slot_count; s++) {
            arenas[s].slot = s;
            arenas[s].device = reg->device;
        }
    }
    reg->hdr->create_time_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    reg->hdr->producer = reg->self;
    __atomic_store_n(&reg->hdr->state, REG_STATE_DECLARING, __ATOMIC_RELEASE);
    reg->producer = 1;
    status = weft_registry_arenas_init(reg);
    if (status != WEFT_OK) {
        goto err_unlink;
    }
    weft_log_info("registry \"%s\": created (%u slots, mode 0%o, %s)", name, p.slot_count, p.mode,
                  reg->geo.memory == REG_MEMORY_CUDA ? "GPU arenas" : "host arenas");
    *out = reg;
    return WEFT_OK;

err_unlink:
    shm_unlink(reg->shm_name);
err_free:
    registry_free(reg);
    return status;
}

WEFT_API weft_status_t weft_registry_declare(weft_registry_h reg, const weft_tensor_desc_t *desc,
                                             uint32_t *index)
{
    reg_tensor_t t = {0};
    size_t       name_len;
    char         why[160];

    if (reg == NULL || desc == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->producer || reg->sealed) {
        weft_log_error("registry \"%s\": declare %s", reg->name,
                       reg->sealed ? "after seal" : "by a handle that is not the producer");
        return WEFT_ERR_STATE;
    }
    if (desc->field_mask & ~(uint64_t)(WEFT_TENSOR_FIELD_STRIDES | WEFT_TENSOR_FIELD_BLOCK)) {
        weft_log_error("registry \"%s\": unknown tensor field_mask bits", reg->name);
        return WEFT_ERR_INVALID_PARAM;
    }
    name_len = desc->name ? strnlen(desc->name, sizeof(t.name)) : 0;
    if (desc->name == NULL || name_len >= sizeof(t.name)) {
        weft_log_error("registry \"%s\": tensor name missing or longer than %zu bytes", reg->name,
                       sizeof(t.name) - 1);
        return WEFT_ERR_INVALID_PARAM;
    }
    memcpy(t.name, desc->name, name_len);
    t.layer = desc->layer;
    t.expert = desc->expert;
    t.role = (uint8_t)desc->role;
    t.dtype = (uint8_t)desc->dtype;
    t.memory = (uint8_t)reg->geo.memory;
    t.block[0] = (desc->field_mask & WEFT_TENSOR_FIELD_BLOCK) ? desc->block[0] : 128;
    t.block[1] = (desc->field_mask & WEFT_TENSOR_FIELD_BLOCK) ? desc->block[1] : 128;
    if ((unsigned)desc->role > 255 || (unsigned)desc->dtype > 255 || desc->ndim < 1 ||
        desc->ndim > WEFT_TENSOR_MAX_DIMS) {
        weft_log_error("registry \"%s\": tensor %s: role, dtype or ndim %u out of range", reg->name, t.name,
                       desc->ndim);
        return WEFT_ERR_INVALID_PARAM;
    }
    t.ndim = (uint8_t)desc->ndim;
    for (uint32_t d = 0; d < desc->ndim; d++) {
        t.shape[d] = desc->shape[d];
    }
    if (desc->field_mask & WEFT_TENSOR_FIELD_STRIDES) {
        for (uint32_t d = 0; d < desc->ndim; d++) {
            t.strides[d] = desc->strides[d];
        }
    } else {
        uint64_t stride = 1;
        for (uint32_t d = desc->ndim; d-- > 0;) {
            t.strides[d] = stride;
            if (__builtin_mul_overflow(stride, desc->shape[d] ? desc->shape[d] : 1, &stride)) {
                stride = UINT64_MAX;
            }
        }
    }
    t.bytes = weft_tensor_span_bytes(t.ndim, t.shape, t.strides, weft_dtype_size(desc->dtype));
    if (weft_registry_check_tensor(&t, why, sizeof(why)) != WEFT_OK) {
        weft_log_error("registry \"%s\": tensor \"%s\": %s", reg->name, t.name, why);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (registry_find(reg, t.name) >= 0) {
        weft_log_error("registry \"%s\": tensor \"%s\" is declared already", reg->name, t.name);
        return WEFT_ERR_EXISTS;
    }
    if (reg->geo.tensor_count == reg->geo.tensor_capacity) {
        weft_log_error("registry \"%s\": max_tensors (%u) reached", reg->name, reg->geo.tensor_capacity);
        return WEFT_ERR_NO_SPACE;
    }
    /* Grow the local copy by doubling. */
    uint32_t n = reg->geo.tensor_count;
    if ((n & (n - 1)) == 0 && n >= 64) {
        reg_tensor_t *grown = realloc(reg->tensors, 2 * (size_t)n * sizeof(*grown));
        if (grown == NULL) {
            return WEFT_ERR_NO_MEMORY;
        }
        reg->tensors = grown;
    }
    reg->tensors[n] = t;
    reg->geo.tensor_count = n + 1;
    /* Keep the name index at most half full, so that duplicate checks stay
     * constant-time however many tensors are declared. */
    if (reg->name_index != NULL && 2 * reg->geo.tensor_count <= reg->name_buckets) {
        uint32_t b = (uint32_t)hash_name(t.name) & (reg->name_buckets - 1);

        while (reg->name_index[b] != 0) {
            b = (b + 1) & (reg->name_buckets - 1);
        }
        reg->name_index[b] = n + 1;
    } else if (weft_registry_index_names(reg) != WEFT_OK) {
        reg->geo.tensor_count = n;
        return WEFT_ERR_NO_MEMORY;
    }
    if (index != NULL) {
        *index = n;
    }
    return WEFT_OK;
}

/*
 * The segment's pages taken now. tmpfs lets a file grow past the space
 * /dev/shm has (ftruncate makes it sparse), and a write to a page it then
 * cannot supply is SIGBUS, deep inside whoever writes the version (a
 * container's default /dev/shm is 64 MB). Reserving them here turns that
 * into an error at seal, saying how much is needed and how much is free.
 */
static weft_status_t registry_reserve(const struct weft_registry *reg, uint64_t size)
{
    const int      err = posix_fallocate(reg->fd, 0, (off_t)size);
    struct statvfs fs;

    if (err == 0) {
        return WEFT_OK;
    }
    if (err == ENOSPC && statvfs("/dev/shm", &fs) == 0) {
        weft_log_error("registry \"%s\": the segment needs %llu MB of shared memory and /dev/shm has %llu MB "
                       "free: make /dev/shm larger (a container's: --shm-size), or use fewer slots",
                       reg->name, (unsigned long long)(size >> 20),
                       (unsigned long long)((uint64_t)fs.f_bavail * fs.f_frsize >> 20));
        return WEFT_ERR_NO_SPACE;
    }
    return registry_open_error(reg, err, "reserving the segment's memory");
}

WEFT_API weft_status_t weft_registry_seal(weft_registry_h reg)
{
    uint64_t      offset = 0, stride, size;
    uint8_t      *base;
    weft_status_t status;

    if (reg == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->producer || reg->sealed || reg->geo.tensor_count == 0) {
        weft_log_error("registry \"%s\": seal %s", reg->name,
                       reg->sealed ? "twice" : reg->producer ? "without a tensor" : "by a reader");
        return WEFT_ERR_STATE;
    }
    /* In declaration order, each tensor 256-byte aligned. */
    for (uint32_t i = 0; i < reg->geo.tensor_count; i++) {
        offset = WEFT_ALIGN_UP(offset, (uint64_t)REG_TENSOR_ALIGN);
        reg->tensors[i].offset = offset;
        if (__builtin_add_overflow(offset, reg->tensors[i].bytes, &offset)) {
            return WEFT_ERR_INVALID_PARAM;
        }
    }
    /* GPU registries keep no slot in the segment: each is a device allocation. */
    stride = reg->geo.memory == REG_MEMORY_CUDA ? 0 : WEFT_ALIGN_UP(offset, (uint64_t)REG_PAGE);
    if (__builtin_mul_overflow(stride, (uint64_t)reg->geo.slot_count, &size) ||
        __builtin_add_overflow(size, reg->geo.data_offset, &size) || size > (uint64_t)INT64_MAX) {
        weft_log_error("registry \"%s\": %llu bytes per version do not fit a segment", reg->name,
                       (unsigned long long)offset);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (ftruncate(reg->fd, (off_t)size) != 0) {
        return registry_open_error(reg, errno, "growing the segment");
    }
    status = registry_reserve(reg, size);
    if (status != WEFT_OK) {
        /* leave no large sparse file behind */
        if (ftruncate(reg->fd, (off_t)reg->mapped) != 0) {
            weft_log_debug("registry \"%s\": shrinking the segment back failed: %s", reg->name, strerror(errno));
        }
        return status;
    }
    base = mremap(reg->base, reg->mapped, size, MREMAP_MAYMOVE);
    if (base == MAP_FAILED) {
        return registry_open_error(reg, errno, "mremap");
    }
    reg->base = base;
    reg->mapped = size;
    reg->geo.slot_stride = stride;
    reg->geo.slot_bytes = offset;
    reg->geo.segment_size = size;
    weft_registry_bind_tables(reg);
    if (reg->geo.memory == REG_MEMORY_CUDA) {
        reg->arenas = (reg_arena_t *)(reg->base + reg->geo.arena_table_offset);
    }
    status = weft_registry_index_names(reg);
    if (status != WEFT_OK) {
        return status;
    }
    if (reg->geo.memory == REG_MEMORY_CUDA) {
        status = weft_registry_arenas_allocate(reg);
        if (status != WEFT_OK) {
            return status;
        }
    }

    memcpy((uint8_t *)reg->base + reg->geo.tensor_table_offset, reg->tensors,
           reg->geo.tensor_count * sizeof(reg_tensor_t));
    reg->hdr->tensor_count = reg->geo.tensor_count;
    reg->hdr->data_offset = reg->geo.data_offset;
    reg->hdr->slot_stride = stride;
    reg->hdr->slot_bytes = offset;
    reg->hdr->segment_size = size;
    /* Everything above becomes visible to readers with the state. */
    __atomic_store_n(&reg->hdr->state, REG_STATE_SEALED, __ATOMIC_RELEASE);
    reg->sealed = 1;
    weft_log_info("registry \"%s\": sealed %u tensors, %llu bytes per version, %llu bytes in all", reg->name,
                  reg->geo.tensor_count, (unsigned long long)offset, (unsigned long long)size);
    return WEFT_OK;
}

/*
 * At takeover: a latest word that names a slot not holding its version
 * was not written by a producer (publish stores the slot word first, and
 * the latest's slot is never rewritten while it is the latest). It is
 * damage, and kept it would refuse every later version as not newer. It
 * is recomputed from the slots: the newest published one, or none. (A
 * latest without a slot, after an offload, has nothing to check against.)
 */
static void registry_latest_repair(struct weft_registry *reg)
{
    const uint64_t latest = REG_LOAD(&reg->hdr->latest);
    const uint32_t slot = REG_VS_SLOT(latest);
    uint64_t       best = 0;

    if (latest == 0 || slot == REG_SLOT_NONE ||
        (slot < reg->geo.slot_count &&
         REG_LOAD(&reg->slots[slot].word) == REG_SLOT_WORD(REG_VS_VERSION(latest), REG_SLOT_PUBLISHED))) {
        return;
    }
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        const uint64_t word = REG_LOAD(&reg->slots[s].word);
        if (REG_SLOT_STATE(word) == REG_SLOT_PUBLISHED && REG_SLOT_VERSION(word) > REG_VS_VERSION(best)) {
            best = REG_VS_WORD(REG_SLOT_VERSION(word), s);
        }
    }
    REG_STORE(&reg->hdr->latest, best);
    weft_log_warn("registry \"%s\": the latest word named version %llu in slot %u, which does not hold it: "
                  "damaged; the latest is now version %llu, the newest of the slots",
                  reg->name, (unsigned long long)REG_VS_VERSION(latest), slot,
                  (unsigned long long)REG_VS_VERSION(best));
}

/* Takes the producer role over from a producer that exited. */
static weft_status_t registry_take_over(struct weft_registry *reg)
{
    uint64_t owner = REG_LOAD(&reg->hdr->producer);

    for (;;) {
        if (owner != REG_OWNER_NONE && weft_process_alive(owner)) {
            weft_log_error("registry \"%s\": producer pid %d is alive", reg->name, weft_process_pid(owner));
            return WEFT_ERR_BUSY;
        }
        if (REG_CAS(&reg->hdr->producer, &owner, reg->self)) {
            break;
        }
    }
    registry_latest_repair(reg);
    /* A slot the dead producer was writing holds a torn version. Its
     * announcements go (one left by a death inside publish included), so
     * that no streaming reader takes them for the new producer's. */
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        uint64_t word = REG_LOAD(&reg->slots[s].word);
        uint64_t latest = REG_VS_VERSION(REG_LOAD(&reg->hdr->latest));

        weft_registry_slot_unannounce(reg, s);
        if (REG_SLOT_STATE(word) == REG_SLOT_WRITING) {
            REG_STORE(&reg->slots[s].word, REG_SLOT_WORD(0, REG_SLOT_FREE));
            weft_log_warn("registry \"%s\": discarded slot %u, left half-written by pid %d", reg->name, s,
                          weft_process_pid(owner));
        } else if (REG_SLOT_STATE(word) == REG_SLOT_PUBLISHED && REG_SLOT_VERSION(word) > latest) {
            /* Died inside publish, before `latest`: never published. */
            REG_STORE(&reg->slots[s].word, REG_SLOT_WORD(0, REG_SLOT_FREE));
            weft_log_warn("registry \"%s\": discarded slot %u, version %llu never became the latest", reg->name,
                          s, (unsigned long long)REG_SLOT_VERSION(word));
        }
    }
    reg->producer = 1;
    if (reg->geo.memory == REG_MEMORY_CUDA) {
        weft_status_t status;

        /* The dead producer's device memory died with it. */
        weft_registry_arenas_orphan(reg);
        status = weft_registry_arenas_init(reg);
        if (status == WEFT_OK) {
            status = weft_registry_reload(reg);
        }
        if (status != WEFT_OK) {
            uint64_t self = reg->self;
            reg->producer = 0;
            (void)REG_CAS(&reg->hdr->producer, &self, REG_OWNER_NONE);
            return status;
        }
    }
    weft_log_info("registry \"%s\": took over as producer", reg->name);
    return WEFT_OK;
}

/*
 * Maps the segment of `size` bytes and validates it. A producer changes
 * what a reader sees in two steps that are not atomic for the reader: at
 * creation the segment is empty, then holds a header being written (the
 * header's state, stored last, is 0 until then: WEFT_ERR_STATE, like a
 * registry not sealed yet); at seal it grows, then says SEALED. A reader
 * that took the size before the growth and read the header after the seal
 * sees a segment shorter than its header says: the size is taken again
 * and the segment mapped anew (a segment grows once, at seal).
 */
static weft_status_t registry_map_sealed(struct weft_registry *reg, size_t size)
{
    char          reason[256];
    weft_status_t status = WEFT_ERR_CORRUPT;

    for (int attempt = 0; attempt < 3; attempt++) {
        struct stat st;

        if (size == 0) {
            weft_log_info("registry \"%s\": its segment is empty: being created", reg->name);
            return WEFT_ERR_STATE;
        }
        if (size < sizeof(reg_header_t)) {
            weft_log_error("registry \"%s\": segment of %zu bytes is truncated", reg->name, size);
            return WEFT_ERR_CORRUPT;
        }
        reg->mapped = size;
        reg->base = mmap(NULL, reg->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, reg->fd, 0);
        if (reg->base == MAP_FAILED) {
            reg->base = NULL;
            return registry_open_error(reg, errno, "mmap");
        }
        status = weft_registry_validate(reg->base, reg->mapped, &reg->geo, reason, sizeof(reason));
        if (status == WEFT_OK) {
            return WEFT_OK;
        }
        if (status == WEFT_ERR_STATE) {
            weft_log_info("registry \"%s\": %s", reg->name, reason);
            return status;
        }
        if (fstat(reg->fd, &st) != 0) {
            return registry_open_error(reg, errno, "fstat");
        }
        if ((size_t)st.st_size == size) {
            break; /* not a growth seen half-way: the segment is what it is */
        }
        munmap(reg->base, reg->mapped);
        reg->base = NULL;
        reg->mapped = 0;
        size = (size_t)st.st_size;
    }
    weft_log_error("registry \"%s\": refused: %s", reg->name, reason);
    return status;
}

WEFT_API weft_status_t weft_registry_open(const char *name, weft_registry_open_mode_t mode,
                                          weft_registry_h *out)
{
    struct weft_registry *reg;
    struct stat           st;
    weft_status_t         status;
    char                  reason[256];

    if (out == NULL || (mode != WEFT_REGISTRY_OPEN_READ && mode != WEFT_REGISTRY_OPEN_PRODUCER)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    status = registry_alloc(name, &reg);
    if (status != WEFT_OK) {
        return status;
    }
    reg->fd = shm_open(reg->shm_name, O_RDWR | O_CLOEXEC, 0);
    if (reg->fd < 0) {
        int err = errno;
        status = weft_status_from_errno(err);
        if (err != ENOENT) {
            weft_log_error("registry \"%s\": shm_open failed: %s", name, strerror(err));
        }
        goto err_free;
    }
    if (fstat(reg->fd, &st) != 0) {
        status = registry_open_error(reg, errno, "fstat");
        goto err_free;
    }
    status = registry_owner_check(reg, &st);
    if (status != WEFT_OK) {
        goto err_free;
    }
    status = registry_map_sealed(reg, (size_t)st.st_size);
    if (status != WEFT_OK) {
        goto err_free;
    }
    /* Keep a private copy of the tensor table and check the copy: the
     * segment may change after validation, the copy cannot. */
    reg->tensors = malloc(reg->geo.tensor_count * sizeof(*reg->tensors));
    if (reg->tensors == NULL) {
        status = WEFT_ERR_NO_MEMORY;
        goto err_free;
    }
    memcpy(reg->tensors, reg->base + reg->geo.tensor_table_offset,
           reg->geo.tensor_count * sizeof(*reg->tensors));
    for (uint32_t i = 0; i < reg->geo.tensor_count; i++) {
        if (weft_registry_check_tensor(&reg->tensors[i], reason, sizeof(reason)) != WEFT_OK ||
            reg->tensors[i].offset > reg->geo.slot_bytes ||
            reg->tensors[i].bytes > reg->geo.slot_bytes - reg->tensors[i].offset) {
            weft_log_error("registry \"%s\": tensor %u changed during validation", name, i);
            status = WEFT_ERR_CORRUPT;
            goto err_free;
        }
    }
    status = weft_registry_index_names(reg);
    if (status != WEFT_OK) {
        goto err_free;
    }
    weft_registry_bind_tables(reg);
    reg->sealed = 1;
    if (mode == WEFT_REGISTRY_OPEN_PRODUCER) {
        status = registry_take_over(reg);
        if (status != WEFT_OK) {
            goto err_free;
        }
    } else {
        status = weft_registry_arenas_init(reg);
        if (status != WEFT_OK) {
            goto err_free;
        }
        reg->arena_word_seen = REG_LOAD(&reg->hdr->arena_word);
    }
    *out = reg;
    return WEFT_OK;

err_free:
    registry_free(reg);
    return status;
}

WEFT_API weft_status_t weft_registry_close(weft_registry_h reg)
{
    if (reg == NULL) {
        return WEFT_OK;
    }
    if (reg->writing) {
        (void)weft_registry_write_abort(reg);
    }
    if (reg->sealed) {
        weft_registry_drop_leases(reg);
        weft_registry_drop_consumers(reg);
    }
    weft_registry_arenas_close(reg);
    if (reg->producer) {
        uint64_t self = reg->self;
        (void)REG_CAS(&reg->hdr->producer, &self, REG_OWNER_NONE);
    }
    registry_free(reg);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_unlink(const char *name)
{
    char shm_name[WEFT_REGISTRY_NAME_MAX + 8];

    if (!weft_registry_name_valid(name)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    snprintf(shm_name, sizeof(shm_name), "/weft.%s", name);
    if (shm_unlink(shm_name) != 0) {
        return weft_status_from_errno(errno);
    }
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_tensor_count(weft_registry_h reg, uint32_t *count)
{
    if (reg == NULL || count == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    *count = reg->geo.tensor_count;
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_tensor_info(weft_registry_h reg, uint32_t index, weft_tensor_info_t *info)
{
    const reg_tensor_t *t;

    if (reg == NULL || info == NULL || index >= reg->geo.tensor_count) {
        return WEFT_ERR_INVALID_PARAM;
    }
    t = &reg->tensors[index];
    memset(info, 0, sizeof(*info));
    memcpy(info->name, t->name, sizeof(info->name));
    info->layer = t->layer;
    info->expert = t->expert;
    info->role = (weft_tensor_role_t)t->role;
    info->dtype = (weft_dtype_t)t->dtype;
    info->ndim = t->ndim;
    memcpy(info->shape, t->shape, sizeof(info->shape));
    memcpy(info->strides, t->strides, sizeof(info->strides));
    info->block[0] = t->block[0];
    info->block[1] = t->block[1];
    info->bytes = t->bytes;
    info->offset = reg->sealed ? t->offset : 0;
    info->memory = (weft_memory_kind_t)t->memory;
    info->device = t->memory == REG_MEMORY_CUDA ? reg->device : -1;
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_slot_memory(weft_registry_h reg, uint32_t slot, void **base,
                                                 uint64_t *bytes)
{
    if (reg == NULL || base == NULL || bytes == NULL || slot >= reg->geo.slot_count) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->sealed) {
        return WEFT_ERR_STATE;
    }
    if (reg->geo.memory != REG_MEMORY_HOST) {
        return WEFT_ERR_UNSUPPORTED;
    }
    *base = reg->base + reg->geo.data_offset + (uint64_t)slot * reg->geo.slot_stride;
    *bytes = reg->geo.slot_stride;
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_lookup(weft_registry_h reg, const char *name, uint32_t *index)
{
    int64_t found;

    if (reg == NULL || name == NULL || index == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    found = registry_find(reg, name);
    if (found < 0) {
        return WEFT_ERR_NOT_FOUND;
    }
    *index = (uint32_t)found;
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_get_stats(weft_registry_h reg, weft_registry_stats_t *stats)
{
    weft_registry_stats_t s = {0};

    if (reg == NULL || stats == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    s.slot_count = reg->geo.slot_count;
    s.tensor_count = reg->geo.tensor_count;
    s.slot_bytes = reg->geo.slot_bytes;
    if (reg->sealed) {
        s.latest_version = REG_VS_VERSION(REG_LOAD(&reg->hdr->latest));
        s.versions_published = REG_LOAD(&reg->hdr->versions_published);
        s.busy = REG_LOAD(&reg->hdr->busy);
        s.leases_reclaimed = REG_LOAD(&reg->hdr->leases_reclaimed);
        /* A dead process's record is not counted: it is only waiting to
         * be reclaimed. */
        for (uint32_t i = 0; i < reg->geo.lease_capacity; i++) {
            uint64_t owner = REG_LOAD(&reg->leases[i].owner);
            if (owner != REG_OWNER_NONE && owner != REG_OWNER_BUSY && REG_LOAD(&reg->leases[i].slot_version) &&
                weft_process_alive(owner)) {
                s.leases_held++;
            }
        }
        for (uint32_t i = 0; i < reg->geo.consumer_capacity; i++) {
            uint64_t owner = REG_LOAD(&reg->consumers[i].owner);
            if (owner != REG_OWNER_NONE && owner != REG_OWNER_BUSY && weft_process_alive(owner)) {
                s.consumers++;
            }
        }
    }
    *stats = s;
    return WEFT_OK;
}
