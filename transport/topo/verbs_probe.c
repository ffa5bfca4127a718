/* The libibverbs probe: RDMA devices, their transport and PCI device. */
#include "config.h"

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

static void verbs_probe(weft_backend_info_t *info)
{
    struct ibv_device **list;
    int                 count = 0;

    list = ibv_get_device_list(&count);
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
                         ibv_get_device_name(list[i]), ibv_node_type_str(list[i]->node_type),
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
    ibv_free_device_list(list);
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
