/* The libibverbs probe: RDMA devices, their transport and PCI device. */
#include "config.h"

#include "common/dl.h"
#include "common/gpu.h"
#include "common/text.h"
#include "nic_affinity.h"
#include "transport/core/desc.h"


#include <errno.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libibverbs is loaded at run time (common/dl.h), so that libweft loads on
 * hosts without rdma-core: the four calls the probe makes. */
static struct {
    __typeof__(ibv_get_device_list) *get_device_list;
    __typeof__(ibv_free_device_list) *free_device_list;
    __typeof__(ibv_get_device_name) *get_device_name;
    __typeof__(ibv_node_type_str) *node_type_str;
} verbs;

static const char *const verbs_names[] = {"libibverbs.so.1", "libibverbs.so", NULL};
static const char *const verbs_symbols[] = {"ibv_get_device_list", "ibv_free_device_list", "ibv_get_device_name",
                                            "ibv_node_type_str", NULL};

static weft_dl_library_t verbs_library = WEFT_DL_LIBRARY_INIT;

static void verbs_probe(weft_backend_info_t *info)
{
    struct ibv_device **list;
    int                 count = 0;
    const char         *why;

    if (weft_dl_load_once(&verbs_library, verbs_names, WEFT_VERBS_LIBDIRS, verbs_symbols, &verbs, sizeof(verbs),
                          &why) != WEFT_OK) {
        weft_text_append(info->detail, sizeof(info->detail), "libibverbs could not be loaded: %s\n", why);
        return;
    }
    list = verbs.get_device_list(&count);
    if (list == NULL) {
        weft_text_append(info->detail, sizeof(info->detail), "ibv_get_device_list failed: %s\n",
                         strerror(errno));
        return;
    }
    for (int i = 0; i < count; i++) {
        char sysfs[PATH_MAX], pci[PATH_MAX];
        const char *slash;

        snprintf(sysfs, sizeof(sysfs), "%s/device", list[i]->ibdev_path);
        slash = realpath(sysfs, pci) ? strrchr(pci, '/') : NULL;
        weft_text_append(info->detail, sizeof(info->detail), "%s: %s, pci %s\n",
                         verbs.get_device_name(list[i]), verbs.node_type_str(list[i]->node_type),
                         slash ? slash + 1 : "?");
    }
    if (count == 0) {
        weft_text_append(info->detail, sizeof(info->detail), "no RDMA device\n");
    }
    /* Which NICs each GPU should use: nearest on the PCI tree first. */
    for (int g = 0, gpus = count > 0 ? weft_gpu_count() : 0; g < gpus; g++) {
        char       bus[32];
        weft_nic_t nics[4];
        size_t     n = 0;

        if (weft_gpu_pci_bus_id(g, bus, sizeof(bus)) != WEFT_OK ||
            weft_topo_nearest_nics("/sys", bus, nics, 4, &n) != WEFT_OK) {
            continue;
        }
        weft_text_append(info->detail, sizeof(info->detail), "GPU %d (%s) nearest:", g, bus);
        for (size_t k = 0; k < n && k < 4; k++) {
            weft_text_append(info->detail, sizeof(info->detail), " %s(%d hops)", nics[k].name,
                             nics[k].hops);
        }
        weft_text_append(info->detail, sizeof(info->detail), "\n");
    }
    verbs.free_device_list(list);
    info->available = count > 0;
}

/* libibverbs finds RDMA devices (and their GPUs' nearness); it moves no
 * bytes of its own: no plan, server or consumer. */
const weft_transport_desc_t weft_verbs_desc = {
    .backend    = WEFT_BACKEND_VERBS,
    .name       = "verbs",
    .dependency = "libibverbs",
    .compiled   = 1,
    .probe      = verbs_probe,
};
