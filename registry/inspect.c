/* weft_registry_inspect: a registry described from a read-only mapping,
 * for operators: who produces into it, who reads it, whether anyone does. */
#include "config.h"

#include "common/status.h"
#include "process.h"
#include "registry_impl.h"
#include "validate.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* How long a segment that is not sealed may be producer-less before it
 * counts as stale. */
#define YOUNG_SECONDS 60

/* An owner word that names a running process (NONE and BUSY do not). */
static int owner_alive(uint64_t owner)
{
    return owner != REG_OWNER_NONE && owner != REG_OWNER_BUSY && weft_process_alive(owner);
}

/* Counts the live owners of `count` records of `stride` bytes at `table`,
 * whose first field is the owner word. */
static uint32_t live_owners(const uint8_t *table, uint32_t count, size_t stride)
{
    uint32_t live = 0;

    for (uint32_t i = 0; i < count; i++) {
        const uint64_t *owner = (const uint64_t *)(const void *)(table + (size_t)i * stride);
        live += (uint32_t)owner_alive(REG_LOAD(owner));
    }
    return live;
}

static void describe(const uint8_t *base, size_t size, weft_registry_summary_t *s)
{
    const reg_header_t *hdr = (const reg_header_t *)(const void *)base;
    reg_geometry_t      geo;
    weft_status_t       status;
    char                reason[sizeof(s->problem)];
    const uint64_t      producer = REG_LOAD(&hdr->producer);

    s->producer_pid   = producer == REG_OWNER_NONE || producer == REG_OWNER_BUSY ? 0 : weft_process_pid(producer);
    s->producer_alive = owner_alive(producer);
    status = weft_registry_validate(base, size, &geo, reason, sizeof(reason));
    if (status == WEFT_ERR_STATE) {
        s->condition = WEFT_REGISTRY_DECLARING;
        return;
    }
    if (status != WEFT_OK) {
        s->condition = WEFT_REGISTRY_DAMAGED;
        snprintf(s->problem, sizeof(s->problem), "%s", reason);
        return;
    }
    s->condition      = WEFT_REGISTRY_SEALED;
    s->memory         = geo.memory == REG_MEMORY_CUDA ? WEFT_MEMORY_CUDA : WEFT_MEMORY_HOST;
    s->latest_version = REG_VS_VERSION(REG_LOAD(&hdr->latest));
    s->consumers = live_owners(base + geo.consumer_table_offset, geo.consumer_capacity, sizeof(reg_consumer_t));
    s->leases    = live_owners(base + geo.lease_table_offset, geo.lease_capacity, sizeof(reg_lease_t));
}

WEFT_API weft_status_t weft_registry_inspect(const char *name, weft_registry_summary_t *summary)
{
    char                    shm_name[WEFT_REGISTRY_NAME_MAX + 8];
    struct stat             st;
    weft_registry_summary_t s;
    void                   *base;
    int                     fd;

    if (summary == NULL || !weft_registry_name_valid(name)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    snprintf(shm_name, sizeof(shm_name), "/weft.%s", name);
    fd = shm_open(shm_name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        return weft_status_from_errno(errno);
    }
    if (fstat(fd, &st) != 0) {
        const int err = errno;
        close(fd);
        return weft_status_from_errno(err);
    }
    memset(&s, 0, sizeof(s));
    s.segment_bytes = (uint64_t)st.st_size;
    s.memory_bytes  = (uint64_t)st.st_blocks * 512u;
    s.owner_uid     = (uint32_t)st.st_uid;
    if (st.st_size < (off_t)sizeof(reg_header_t)) {
        s.condition = WEFT_REGISTRY_DAMAGED;
        snprintf(s.problem, sizeof(s.problem), "%lld bytes: shorter than a header", (long long)st.st_size);
    } else {
        base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) {
            const int err = errno;
            close(fd);
            return weft_status_from_errno(err);
        }
        describe(base, (size_t)st.st_size, &s);
        munmap(base, (size_t)st.st_size);
    }
    close(fd);
    /* Nobody's: no running producer, consumer or reader. A segment that is
     * not sealed is nobody's only once it is a minute old: one being
     * created has no header (no producer word) for a moment. */
    s.stale = !s.producer_alive && s.consumers == 0 && s.leases == 0 &&
              (s.condition == WEFT_REGISTRY_SEALED || time(NULL) - st.st_ctime >= YOUNG_SECONDS);
    *summary = s;
    return WEFT_OK;
}
