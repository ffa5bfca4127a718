/* The libibverbs probe: RDMA devices, their transport and PCI device. */
#include "common/text.h"
#include "transport/probe.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void weft_verbs_probe(weft_backend_info_t *info)
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
    ibv_free_device_list(list);
    info->available = count > 0;
}
