/*
 * GPU ↔ NIC affinity from the PCI topology in sysfs: which RDMA devices
 * sit nearest a GPU (under the same PCIe switch first, then the same root
 * complex, then anywhere), so that each GPU's traffic goes through its own
 * NICs. The sysfs root is a parameter so that tests run against a fake
 * tree. Internal.
 */
#ifndef WEFT_TRANSPORT_TOPO_NIC_AFFINITY_H
#define WEFT_TRANSPORT_TOPO_NIC_AFFINITY_H

#include <stddef.h>
#include <weft/weft.h>

#define WEFT_NIC_NAME_MAX 64

typedef struct weft_nic {
    char     name[WEFT_NIC_NAME_MAX]; /* the RDMA device, "mlx5_0" */
    /* PCI hops from the GPU up to the common ancestor and down to the
     * NIC: 2 under one switch; larger is farther; -1 for a NIC whose PCI
     * path has nothing in common with the GPU's (another root complex). */
    int      hops;
    unsigned common; /* path components shared with the GPU's */
} weft_nic_t;

/*
 * Lists the RDMA devices of sysfs_root ("/sys" on a real machine:
 * class/infiniband/<dev>/device) sorted nearest first for the GPU whose
 * PCI address is gpu_bus_id ("0000:3b:00.0", as cudaDeviceGetPCIBusId
 * gives it; case and a 8-digit domain are accepted). Fills at most max
 * entries and the total count in *count.
 * Errors: WEFT_ERR_NOT_FOUND (no such GPU in sysfs), WEFT_ERR_INVALID_PARAM.
 * No RDMA device is not an error: *count is 0.
 */
weft_status_t weft_topo_nearest_nics(const char *sysfs_root, const char *gpu_bus_id, weft_nic_t *nics,
                                     size_t max, size_t *count);

#endif
