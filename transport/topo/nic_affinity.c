/*
 * GPU ↔ NIC affinity: both devices' sysfs paths are resolved to their PCI
 * paths (/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/...), and the
 * distance between them is the number of hops through their deepest
 * common ancestor, as NCCL's and UCX's topology code reason about PCIe
 * switches.
 */
#include "config.h"

#include "nic_affinity.h"

#include "common/log.h"

#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "00000000:3B:00.0" → "0000:3b:00.0". */
static int normalize_bus_id(const char *in, char *out, size_t size)
{
    size_t len = strlen(in), skip = 0;

    if (len == 16 && in[8] == ':') {
        skip = 4; /* an 8-digit domain: keep its last 4 digits */
    }
    if (len - skip != 12 || size < 13) {
        return -1;
    }
    for (size_t i = 0; i < 12; i++) {
        out[i] = (char)tolower((unsigned char)in[skip + i]);
    }
    out[12] = '\0';
    return 0;
}

/* Components of a resolved path, up to the device itself. */
static unsigned split(char *path, char **parts, unsigned max)
{
    unsigned n = 0;

    for (char *save = NULL, *p = strtok_r(path, "/", &save); p != NULL && n < max;
         p = strtok_r(NULL, "/", &save)) {
        parts[n++] = p;
    }
    return n;
}

/* Hops between two resolved PCI paths, and how many components they share. */
static int distance(const char *a_path, const char *b_path, unsigned *common_out)
{
    char     a[PATH_MAX], b[PATH_MAX], *pa[64], *pb[64];
    unsigned na, nb, common = 0, pci_common = 0;

    snprintf(a, sizeof(a), "%s", a_path);
    snprintf(b, sizeof(b), "%s", b_path);
    na = split(a, pa, 64);
    nb = split(b, pb, 64);
    while (common < na && common < nb && strcmp(pa[common], pb[common]) == 0) {
        /* Only PCI components count as shared topology ("pci0000:00" and
         * below), not the "sys/devices" prefix. */
        if (strncmp(pa[common], "pci", 3) == 0 || strchr(pa[common], ':') != NULL) {
            pci_common++;
        }
        common++;
    }
    *common_out = pci_common;
    if (pci_common == 0) {
        return -1;
    }
    return (int)(na - common) + (int)(nb - common);
}

static int compare_nics(const void *x, const void *y)
{
    const weft_nic_t *a = x, *b = y;

    /* Nearest first; another root complex (-1) last; then by name. */
    if (a->hops != b->hops) {
        if (a->hops < 0) {
            return 1;
        }
        if (b->hops < 0) {
            return -1;
        }
        return a->hops - b->hops;
    }
    return strcmp(a->name, b->name);
}

weft_status_t weft_topo_nearest_nics(const char *sysfs_root, const char *gpu_bus_id, weft_nic_t *nics,
                                     size_t max, size_t *count)
{
    char           bus_id[16], path[PATH_MAX], gpu[PATH_MAX], dev[PATH_MAX];
    weft_nic_t    *found = NULL;
    size_t         n = 0, capacity = 0;
    DIR           *dir;
    struct dirent *e;

    if (sysfs_root == NULL || gpu_bus_id == NULL || count == NULL || (max > 0 && nics == NULL) ||
        normalize_bus_id(gpu_bus_id, bus_id, sizeof(bus_id)) != 0) {
        return WEFT_ERR_INVALID_PARAM;
    }
    snprintf(path, sizeof(path), "%s/bus/pci/devices/%s", sysfs_root, bus_id);
    if (realpath(path, gpu) == NULL) {
        weft_log_debug("topo: GPU %s is not in %s", bus_id, sysfs_root);
        return WEFT_ERR_NOT_FOUND;
    }
    snprintf(path, sizeof(path), "%s/class/infiniband", sysfs_root);
    dir = opendir(path);
    while (dir != NULL && (e = readdir(dir)) != NULL) {
        weft_nic_t nic = {0};

        if (e->d_name[0] == '.') {
            continue;
        }
        snprintf(path, sizeof(path), "%s/class/infiniband/%s/device", sysfs_root, e->d_name);
        if (realpath(path, dev) == NULL) {
            continue; /* a software device (rxe over a netdev) has no PCI path */
        }
        snprintf(nic.name, sizeof(nic.name), "%.*s", WEFT_NIC_NAME_MAX - 1, e->d_name);
        nic.hops = distance(gpu, dev, &nic.common);
        if (n == capacity) {
            size_t      grown = capacity ? capacity * 2 : 8;
            weft_nic_t *more = realloc(found, grown * sizeof(*found));

            if (more == NULL) {
                free(found);
                closedir(dir);
                return WEFT_ERR_NO_MEMORY;
            }
            found = more;
            capacity = grown;
        }
        found[n++] = nic;
    }
    if (dir != NULL) {
        closedir(dir);
    }
    if (n > 0) {
        qsort(found, n, sizeof(*found), compare_nics);
    }
    for (size_t i = 0; i < n && i < max; i++) {
        nics[i] = found[i];
    }
    *count = n;
    free(found);
    return WEFT_OK;
}
