/*
 * GPU ↔ NIC affinity against a fake sysfs tree made here: two PCIe
 * switches under one root complex, each with a GPU and a NIC, and a NIC
 * under a second root complex; a software RDMA device without a PCI path.
 */
#include "config.h"

#include "transport/topo/nic_affinity.h"
#include "lib/harness.h"

#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[PATH_MAX];

static void mkdirs(const char *rel)
{
    char path[2 * PATH_MAX];

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            (void)mkdir(path, 0755);
            *p = '/';
        }
    }
    ck_assert_int_eq(mkdir(path, 0755) == 0 || access(path, F_OK) == 0, 1);
}

static void link_to(const char *target_rel, const char *link_rel)
{
    char target[2 * PATH_MAX], link[2 * PATH_MAX];

    snprintf(target, sizeof(target), "%s/%s", root, target_rel);
    snprintf(link, sizeof(link), "%s/%s", root, link_rel);
    ck_assert_int_eq(symlink(target, link), 0);
}

#define SW0 "devices/pci0000:00/0000:00:01.0/0000:01:00.0"
#define SW1 "devices/pci0000:00/0000:00:02.0/0000:05:00.0"
#define RC1 "devices/pci0000:80/0000:80:01.0"

static void make_tree(void)
{
    snprintf(root, sizeof(root), "/tmp/weft-topo-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
    mkdirs(SW0 "/0000:02:00.0/0000:03:00.0"); /* GPU 0 */
    mkdirs(SW0 "/0000:02:01.0/0000:04:00.0"); /* mlx5_0, beside GPU 0 */
    mkdirs(SW1 "/0000:06:00.0/0000:07:00.0"); /* GPU 1 */
    mkdirs(SW1 "/0000:06:01.0/0000:08:00.0"); /* mlx5_1, beside GPU 1 */
    mkdirs(RC1 "/0000:81:00.0");              /* mlx5_2, the other socket */
    mkdirs("bus/pci/devices");
    link_to(SW0 "/0000:02:00.0/0000:03:00.0", "bus/pci/devices/0000:03:00.0");
    link_to(SW1 "/0000:06:00.0/0000:07:00.0", "bus/pci/devices/0000:07:00.0");
    mkdirs("class/infiniband/mlx5_0");
    mkdirs("class/infiniband/mlx5_1");
    mkdirs("class/infiniband/mlx5_2");
    mkdirs("class/infiniband/rxe0"); /* no device link: skipped */
    link_to(SW0 "/0000:02:01.0/0000:04:00.0", "class/infiniband/mlx5_0/device");
    link_to(SW1 "/0000:06:01.0/0000:08:00.0", "class/infiniband/mlx5_1/device");
    link_to(RC1 "/0000:81:00.0", "class/infiniband/mlx5_2/device");
}

static void remove_tree(void)
{
    char cmd[PATH_MAX + 16];

    if (root[0] != '\0' && strncmp(root, "/tmp/weft-topo-", 15) == 0) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        ck_assert_int_eq(system(cmd), 0);
    }
}

START_TEST(each_gpu_gets_the_nic_under_its_switch_first)
{
    weft_nic_t nics[8];
    size_t     count;

    make_tree();
    ck_assert_int_eq(weft_topo_nearest_nics(root, "0000:03:00.0", nics, 8, &count), WEFT_OK);
    ck_assert_uint_eq(count, 3);
    ck_assert_str_eq(nics[0].name, "mlx5_0");
    ck_assert_int_eq(nics[0].hops, 4);
    ck_assert_str_eq(nics[1].name, "mlx5_1"); /* same root complex, other switch */
    ck_assert_int_gt(nics[1].hops, nics[0].hops);
    ck_assert_str_eq(nics[2].name, "mlx5_2"); /* other root complex: last */
    ck_assert_int_eq(nics[2].hops, -1);

    /* The CUDA form of a bus id: 8-digit domain, capitals. */
    ck_assert_int_eq(weft_topo_nearest_nics(root, "00000000:07:00.0", nics, 8, &count), WEFT_OK);
    ck_assert_uint_eq(count, 3);
    ck_assert_str_eq(nics[0].name, "mlx5_1");
    ck_assert_str_eq(nics[1].name, "mlx5_0");

    /* Room for one: the nearest, and the count of all. */
    ck_assert_int_eq(weft_topo_nearest_nics(root, "0000:03:00.0", nics, 1, &count), WEFT_OK);
    ck_assert_uint_eq(count, 3);
    ck_assert_str_eq(nics[0].name, "mlx5_0");
    remove_tree();
}
END_TEST

START_TEST(unknown_gpu_bad_ids_and_no_nics)
{
    weft_nic_t nics[2];
    size_t     count = 99;

    make_tree();
    ck_assert_int_eq(weft_topo_nearest_nics(root, "0000:99:00.0", nics, 2, &count), WEFT_ERR_NOT_FOUND);
    ck_assert_int_eq(weft_topo_nearest_nics(root, "0000:3", nics, 2, &count), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_topo_nearest_nics(root, "garbage-garbage", nics, 2, &count),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_topo_nearest_nics(NULL, "0000:03:00.0", nics, 2, &count),
                     WEFT_ERR_INVALID_PARAM);
    remove_tree();
    /* A machine without RDMA devices: no error, nothing found. */
    make_tree();
    {
        char cmd[PATH_MAX + 32];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s/class/infiniband'", root);
        ck_assert_int_eq(system(cmd), 0);
    }
    ck_assert_int_eq(weft_topo_nearest_nics(root, "0000:03:00.0", nics, 2, &count), WEFT_OK);
    ck_assert_uint_eq(count, 0);
    remove_tree();
}
END_TEST

static Suite *topo_suite(void)
{
    Suite *s  = suite_create("topo");
    TCase *tc = tcase_create("nic_affinity");

    tcase_add_test(tc, each_gpu_gets_the_nic_under_its_switch_first);
    tcase_add_test(tc, unknown_gpu_bad_ids_and_no_nics);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(topo_suite)
