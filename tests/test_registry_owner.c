/* registry/ against a neighbour on the same machine: a segment that every
 * user may write, or that another user made under our registry's name
 * (squatting), is refused by open and by takeover, with the permission
 * error; a group-shared segment of another user is accepted; names that
 * are not names ("." and "..", control characters) are refused. The
 * squatting tests switch a child to another user and run only as root. */
#include "config.h"

#include "lib/registry_fixture.h"
#include "lib/harness.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#define SQUATTER_UID 65534 /* "nobody" */
#define SQUATTER_GID 65534

/* Makes and seals a one-tensor registry under reg_name; closes it (the
 * segment stays until unlinked). 0 when done. */
static int make_sealed(uint32_t mode)
{
    weft_registry_params_t p = {.field_mask = WEFT_REGISTRY_FIELD_MODE, .mode = mode};
    weft_tensor_desc_t     d = {.name = "w", .layer = -1, .expert = -1, .role = WEFT_ROLE_W,
                                .dtype = WEFT_DTYPE_UINT8, .ndim = 1, .shape = {64}};
    weft_registry_h        reg;
    uint32_t               index;
    int                    ok;

    if (weft_registry_create(reg_name, &p, &reg) != WEFT_OK) {
        return -1;
    }
    ok = weft_registry_declare(reg, &d, &index) == WEFT_OK && weft_registry_seal(reg) == WEFT_OK;
    weft_registry_close(reg);
    return ok ? 0 : -1;
}

static void segment_path(char *buf, size_t size)
{
    snprintf(buf, size, "/dev/shm/weft.%s", reg_name);
}

static void assert_open_refused(weft_status_t want)
{
    weft_registry_h reg = NULL;

    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reg), want);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_PRODUCER, &reg), want);
    ck_assert_ptr_null(reg);
}

START_TEST(world_writable_is_refused)
{
    weft_registry_params_t p = {.field_mask = WEFT_REGISTRY_FIELD_MODE, .mode = 0666};
    weft_registry_h        reg = NULL;
    char                   path[128];

    test_name();
    /* Not made so ... */
    ck_assert_int_eq(weft_registry_create(reg_name, &p, &reg), WEFT_ERR_INVALID_PARAM);
    ck_assert_ptr_null(reg);
    /* ... nor opened once somebody made it so. */
    ck_assert_int_eq(make_sealed(0600), 0);
    segment_path(path, sizeof(path));
    ck_assert_int_eq(chmod(path, 0666), 0);
    assert_open_refused(WEFT_ERR_PERMISSION);
    ck_assert_int_eq(chmod(path, 0600), 0);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reg), WEFT_OK);
    weft_registry_close(reg);
}
END_TEST

START_TEST(names_that_are_not_names_are_refused)
{
    static const char *const bad[] = {".", "..", "a\nforged log line", "esc\033[2J", "tab\tname", "a/b"};
    weft_registry_h          reg = NULL;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(weft_registry_create(bad[i], NULL, &reg), WEFT_ERR_INVALID_PARAM);
        ck_assert_int_eq(weft_registry_open(bad[i], WEFT_REGISTRY_OPEN_READ, &reg), WEFT_ERR_INVALID_PARAM);
        ck_assert_int_eq(weft_registry_unlink(bad[i]), WEFT_ERR_INVALID_PARAM);
    }
    ck_assert_ptr_null(reg);
    /* Dots inside a name are fine. */
    ck_assert_int_eq(weft_registry_create("...a", NULL, &reg), WEFT_OK);
    weft_registry_close(reg);
    ck_assert_int_eq(weft_registry_unlink("...a"), WEFT_OK);
}
END_TEST

/* A child that becomes the squatter and makes the segment under our
 * name, with `mode` and (gid >= 0) that group; 0 when it did. */
static int squat(uint32_t mode, int gid)
{
    pid_t pid = fork();
    int   code = -1;

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (setgid(SQUATTER_GID) != 0 || setuid(SQUATTER_UID) != 0) {
            _exit(3);
        }
        umask(0);
        if (make_sealed(mode & 0770) != 0) {
            _exit(4);
        }
        if (gid >= 0 || (mode & 07)) {
            char path[128];
            segment_path(path, sizeof(path));
            /* what a squatter does with the raw file, past the library */
            if (chmod(path, mode) != 0) {
                _exit(5);
            }
        }
        _exit(0);
    }
    ck_assert_int_eq(waitpid(pid, &code, 0), pid);
    return WIFEXITED(code) ? WEXITSTATUS(code) : -1;
}

START_TEST(another_users_segment_is_refused)
{
    weft_registry_h reg = NULL;

    test_name();
    ck_assert_int_eq(squat(0666, -1), 0);
    /* The name is taken: the creator learns it ... */
    ck_assert_int_eq(weft_registry_create(reg_name, NULL, &reg), WEFT_ERR_EXISTS);
    /* ... and the documented remedy, taking over, does not take the
     * squatter's segment, nor does a reader read it. */
    assert_open_refused(WEFT_ERR_PERMISSION);
    ck_assert_int_eq(weft_registry_unlink(reg_name), WEFT_OK);
    /* Not world-writable, but still another user's and not shared with
     * us: refused too. */
    ck_assert_int_eq(squat(0600, -1), 0);
    assert_open_refused(WEFT_ERR_PERMISSION);
}
END_TEST

START_TEST(another_users_segment_shared_with_our_group_is_read)
{
    weft_registry_h reg = NULL;
    char            path[128];

    test_name();
    ck_assert_int_eq(squat(0660, -1), 0);
    /* The group the owner shares it with must be one of ours. */
    segment_path(path, sizeof(path));
    ck_assert_int_eq(chown(path, SQUATTER_UID, getegid()), 0);
    ck_assert_int_eq(chmod(path, 0660), 0);
    ck_assert_int_eq(weft_registry_open(reg_name, WEFT_REGISTRY_OPEN_READ, &reg), WEFT_OK);
    weft_registry_close(reg);
    ck_assert_int_eq(chown(path, SQUATTER_UID, SQUATTER_GID == getegid() ? SQUATTER_GID + 1 : SQUATTER_GID), 0);
    assert_open_refused(WEFT_ERR_PERMISSION);
}
END_TEST

static Suite *registry_owner_suite(void)
{
    Suite *s = suite_create("registry_owner");
    TCase *tc = tcase_create("owner");

    tcase_add_checked_fixture(tc, NULL, unlink_registry);
    tcase_add_test(tc, world_writable_is_refused);
    tcase_add_test(tc, names_that_are_not_names_are_refused);
    if (geteuid() == 0) {
        tcase_add_test(tc, another_users_segment_is_refused);
        tcase_add_test(tc, another_users_segment_shared_with_our_group_is_read);
    } else {
        printf("test_registry_owner: not root: the tests with another user's segment are not run\n");
    }
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(registry_owner_suite)
