/*
 * The registry's shared-memory segment, byte for byte (ABI 1.3). This is
 * the format other implementations must follow; registry/PROTOCOL.md
 * describes it in prose with the protocol that goes with it. Internal.
 *
 *   offset 0           header (reg_header_t, 1 KiB)
 *   tensor_table       tensor_capacity × reg_tensor_t (256 B each)
 *   slot_table         slot_count × reg_slot_t (64 B each)
 *   lease_table        lease_capacity × reg_lease_t (64 B each)
 *   consumer_table     consumer_capacity × reg_consumer_t (128 B each)
 *   arena_table        arena_count × reg_arena_t (1 KiB each; GPU
 *                      registries only: one record per slot)
 *   checksum_table     slot_count × tensor_capacity × reg_checksum_t
 *                      (16 B each; 1.3, registries created with
 *                      checksums only: slot s's tensor i at
 *                      s · tensor_capacity + i)
 *   data_offset        host registries: slot 0's arena, then slot 1's at
 *                      data_offset + slot_stride, … (page aligned); every
 *                      tensor sits at the same offset in every arena.
 *                      GPU registries: nothing (slot_stride 0); each slot's
 *                      arena is one device allocation named by its record.
 *
 * All integers are little-endian (x86-64 and AArch64 only). Words that
 * change after seal are accessed atomically; everything else is written
 * before the header's state becomes SEALED and never changes afterwards.
 */
#ifndef WEFT_REGISTRY_LAYOUT_H
#define WEFT_REGISTRY_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define REG_MAGIC         "WEFTREG1"
#define REG_MAGIC_LEN     8
#define REG_ABI_MAJOR     1
#define REG_ABI_MINOR     3 /* 1.1 added GPU arenas, 1.2 streaming, 1.3 checksums; 1.0 segments still open */

#define REG_TENSOR_ALIGN  256u  /* every tensor's offset in a slot arena */
#define REG_PAGE          4096u /* arenas and the segment size */
#define REG_TABLE_ALIGN   64u

#define REG_MIN_SLOTS     2u
#define REG_MAX_SLOTS     16u
#define REG_MAX_TENSORS   (1u << 20)
#define REG_MAX_LEASES    65536u
#define REG_MAX_CONSUMERS 4096u
#define REG_MAX_VERSION   ((UINT64_C(1) << 56) - 1) /* fits the latest word */

/* header.state */
enum { REG_STATE_DECLARING = 1, REG_STATE_SEALED = 2 };

/* Slot word: version << 2 | state. */
enum { REG_SLOT_FREE = 0, REG_SLOT_WRITING = 1, REG_SLOT_PUBLISHED = 2 };
#define REG_SLOT_STATE(word)   ((uint32_t)((word) & 3u))
#define REG_SLOT_VERSION(word) ((word) >> 2)
#define REG_SLOT_WORD(version, state) (((uint64_t)(version) << 2) | (uint64_t)(state))

/* Latest word and lease words: version << 8 | slot; 0 means none. In the
 * latest word, slot REG_SLOT_NONE means the latest version's bytes are
 * gone (its GPU arena was offloaded): versions stay where they were, but
 * there is nothing to lease until the next publish. */
#define REG_SLOT_NONE 0xffu
#define REG_VS_WORD(version, slot) (((uint64_t)(version) << 8) | (uint64_t)(slot))
#define REG_VS_VERSION(word)       ((word) >> 8)
#define REG_VS_SLOT(word)          ((uint32_t)((word) & 0xffu))

/* Owner words name a process: pid << 32 | low 32 bits of its start time
 * (/proc/<pid>/stat field 22). A record being claimed or reclaimed holds
 * REG_OWNER_BUSY for a moment. */
#define REG_OWNER_NONE 0
#define REG_OWNER_BUSY UINT64_MAX

/* header.memory and reg_tensor.memory: weft_memory_kind_t (0 in 1.0
 * segments means host). */
#define REG_MEMORY_HOST 1u
#define REG_MEMORY_CUDA 2u

/* header.arena_word: epoch << 2 | state. The epoch grows on every change,
 * so a consumer compares one word to know whether to look at its
 * mappings. */
enum { REG_ARENAS_PRESENT = 0, REG_ARENAS_OFFLOADING = 1, REG_ARENAS_OFFLOADED = 2 };
#define REG_ARENAS_STATE(word)        ((uint32_t)((word) & 3u))
#define REG_ARENAS_EPOCH(word)        ((word) >> 2)
#define REG_ARENAS_WORD(epoch, state) (((uint64_t)(epoch) << 2) | (uint64_t)(state))

/* reg_arena.word: generation << 2 | state. A generation names one device
 * allocation; a consumer's mapping is good for one generation. */
enum { REG_ARENA_ABSENT = 0, REG_ARENA_PRESENT = 1, REG_ARENA_RETIRING = 2 };
#define REG_ARENA_STATE(word)      ((uint32_t)((word) & 3u))
#define REG_ARENA_GEN(word)        ((word) >> 2)
#define REG_ARENA_WORD(gen, state) (((uint64_t)(gen) << 2) | (uint64_t)(state))
#define REG_ARENA_MAPPERS          64u /* processes mapping one arena at once */
#define REG_IPC_HANDLE_BYTES       64u /* cudaIpcMemHandle_t */

typedef struct reg_header {
    /* Identity and geometry: written once (at create, then at seal). */
    char     magic[REG_MAGIC_LEN];
    uint16_t abi_major;
    uint16_t abi_minor;
    uint32_t header_size;
    uint64_t segment_size;
    uint32_t state; /* atomic: DECLARING, then SEALED (release) */
    uint32_t slot_count;
    uint32_t tensor_count;
    uint32_t tensor_capacity;
    uint32_t lease_capacity;
    uint32_t consumer_capacity;
    uint64_t tensor_table_offset;
    uint64_t slot_table_offset;
    uint64_t lease_table_offset;
    uint64_t consumer_table_offset;
    uint64_t data_offset;
    uint64_t slot_stride;
    uint64_t slot_bytes;
    uint64_t create_time_ns; /* CLOCK_REALTIME */
    /* 1.1: where the slots' arenas live. Host: arena_count 0. CUDA: one
     * device allocation per slot on the GPU named by device_uuid. */
    uint32_t memory;             /* REG_MEMORY_*; 0 in 1.0 segments: host */
    uint32_t arena_count;        /* 0, or slot_count */
    uint64_t arena_table_offset; /* 0 when arena_count is 0 */
    uint8_t  device_uuid[16];    /* cudaDeviceProp.uuid of the arenas' GPU */
    int32_t  device;             /* its ordinal in the producer, for messages */
    /* 1.3: REG_CHECKSUMS_* flags, and where the checksum table is (0:
     * none: the versions carry no checksums). */
    uint32_t checksums;
    uint64_t checksum_table_offset;
    uint8_t  reserved0[96];

    /* Control words, atomic, one cache line each. */
    _Alignas(64) uint64_t producer; /* owner word of the producer */
    _Alignas(64) uint64_t latest;   /* version << 8 | slot of the latest version */
    uint32_t publish_seq;           /* futex: +1 on every publish */
    uint32_t publish_waiters;
    _Alignas(64) uint32_t release_seq; /* futex: +1 on every lease release */
    uint32_t release_waiters;
    _Alignas(64) uint32_t ack_seq; /* futex: +1 on every consumer ack or error */
    uint32_t ack_waiters;
    _Alignas(64) uint64_t versions_published;
    uint64_t busy;
    uint64_t leases_reclaimed;
    _Alignas(64) uint64_t arena_word; /* 1.1, atomic: REG_ARENAS_WORD */
    uint32_t arena_seq;               /* futex: +1 when arena_word changes */
    uint32_t arena_waiters;
    uint8_t  reserved1[1024 - 576 - 16];
} reg_header_t;

typedef struct reg_tensor {
    char     name[128]; /* NUL-terminated, printable ASCII */
    int32_t  layer;
    int32_t  expert;
    uint8_t  role;   /* weft_tensor_role_t */
    uint8_t  dtype;  /* weft_dtype_t */
    uint8_t  ndim;
    uint8_t  memory; /* weft_memory_kind_t */
    uint32_t block[2];
    uint32_t reserved0;
    uint64_t shape[4];
    uint64_t strides[4]; /* elements */
    uint64_t bytes;      /* span of the elements */
    uint64_t offset;     /* in a slot arena, REG_TENSOR_ALIGN aligned */
    uint8_t  reserved1[24];
} reg_tensor_t;

typedef struct reg_slot {
    uint64_t word;            /* atomic: version << 2 | state */
    uint64_t publish_time_ns; /* CLOCK_MONOTONIC at publish */
    /* ABI 1.2, streaming (PROTOCOL.md): while the slot is WRITING, the
     * version it will be published as and how many of its first tensors
     * are final; both 0 when nothing is announced. The version is set
     * before the count grows and cleared after the count is. */
    uint64_t ready_version; /* atomic */
    uint32_t ready_count;   /* atomic */
    uint32_t reserved0;
    /* The owner word of the producer that announced: an announcement
     * counts only while it is the header's producer (one left by a dead
     * producer, which an older library's takeover would not clear, does
     * not). Set before the version, cleared after it. */
    uint64_t ready_owner; /* atomic */
    uint8_t  reserved[24];
} reg_slot_t;

/* header.checksums */
#define REG_CHECKSUMS_AT_PUBLISH 1u /* every tensor summed at publish (weft/checksum.h) */

/*
 * A tensor's checksum in one slot (1.3): the sum of its bytes as version
 * `version` published them. Written by the producer before it publishes
 * the slot (so a reader that leased the version sees it), and only while
 * the slot is its own to write; a record whose version is not the
 * reader's lease's says nothing about it.
 */
typedef struct reg_checksum {
    uint64_t version;
    uint64_t sum;
} reg_checksum_t;

typedef struct reg_lease {
    uint64_t owner;        /* atomic: owner word, NONE or BUSY */
    uint64_t slot_version; /* atomic: version << 8 | slot held, 0 when none */
    uint64_t ticket;       /* atomic: changes on every acquire and release */
    uint64_t holder;       /* handle tag of the owner, for close() */
    uint8_t  reserved[32];
} reg_lease_t;

typedef struct reg_consumer {
    uint64_t owner;          /* atomic: owner word, NONE or BUSY */
    uint64_t received;       /* atomic: last version received whole */
    uint64_t failed_version; /* atomic */
    int32_t  last_error;     /* atomic: weft_status_t */
    int32_t  pid;
    uint64_t holder;
    char     name[64];
    uint8_t  reserved[24];
} reg_consumer_t;

/*
 * One slot's GPU arena. word, exporter and mappers change after seal;
 * the rest changes only while no process maps the arena (state ABSENT or
 * RETIRING with every mapper word NONE), and is read by a consumer only
 * between two loads of word that give the same PRESENT value.
 */
typedef struct reg_arena {
    uint64_t word;      /* atomic: REG_ARENA_WORD(generation, state) */
    uint64_t exporter;  /* atomic: owner word of the allocating process */
    uint64_t bytes;     /* of the allocation, ≥ slot_bytes */
    uint32_t slot;      /* = the record's index */
    int32_t  device;    /* producer's ordinal, for messages */
    uint8_t  reserved0[32];
    uint8_t  ipc_handle[REG_IPC_HANDLE_BYTES]; /* cudaIpcMemHandle_t of generation */
    /* Owner words of the processes that hold a mapping of this
     * generation; the producer frees the allocation only when all are
     * NONE (or dead). */
    uint64_t mappers[REG_ARENA_MAPPERS];
    uint8_t  reserved1[384];
} reg_arena_t;

_Static_assert(sizeof(reg_header_t) == 1024, "header layout");
_Static_assert(offsetof(reg_header_t, create_time_ns) == 104, "header layout");
_Static_assert(offsetof(reg_header_t, producer) == 256, "header layout");
_Static_assert(offsetof(reg_header_t, latest) == 320, "header layout");
_Static_assert(offsetof(reg_header_t, publish_seq) == 328, "header layout");
_Static_assert(offsetof(reg_header_t, release_seq) == 384, "header layout");
_Static_assert(offsetof(reg_header_t, ack_seq) == 448, "header layout");
_Static_assert(offsetof(reg_header_t, versions_published) == 512, "header layout");
_Static_assert(offsetof(reg_header_t, memory) == 112, "header layout");
_Static_assert(offsetof(reg_header_t, arena_word) == 576, "header layout");
_Static_assert(offsetof(reg_header_t, checksums) == 148 && offsetof(reg_header_t, checksum_table_offset) == 152,
               "header layout");
_Static_assert(sizeof(reg_checksum_t) == 16, "checksum record layout");
_Static_assert(sizeof(reg_tensor_t) == 256, "tensor record layout");
_Static_assert(sizeof(reg_slot_t) == 64, "slot record layout");
_Static_assert(offsetof(reg_slot_t, ready_version) == 16 && offsetof(reg_slot_t, ready_count) == 24 &&
                   offsetof(reg_slot_t, ready_owner) == 32,
               "slot record layout");
_Static_assert(sizeof(reg_lease_t) == 64, "lease record layout");
_Static_assert(sizeof(reg_consumer_t) == 128, "consumer record layout");
_Static_assert(sizeof(reg_arena_t) == 1024, "arena record layout");
_Static_assert(offsetof(reg_arena_t, ipc_handle) == 64, "arena record layout");
_Static_assert(offsetof(reg_arena_t, mappers) == 128, "arena record layout");

#endif
