# WEFT_CHECK_VERBS
# Finds libibverbs, used to list RDMA devices and to pick each GPU's
# nearest NIC. UCX does the data path; libweft only reads the device list.
#
# Output: HAVE_VERBS (define and conditional), VERBS_CPPFLAGS, VERBS_LDFLAGS,
# VERBS_LIBS, weft_verbs_summary.
AC_DEFUN([WEFT_CHECK_VERBS], [
  AC_ARG_WITH([verbs],
    [AS_HELP_STRING([--with-verbs@<:@=no|yes|guess|DIR@:>@], [libibverbs (default: guess)])],
    [], [with_verbs=guess])
  have_verbs=no
  weft_verbs_summary="no (disabled)"
  _WEFT_DEP_DIR_EXISTS([$with_verbs], [--with-verbs])
  AS_IF([test "x$with_verbs" != xno], [
    VERBS_LIBS="-libverbs"
    AS_CASE([$with_verbs],
      [yes|guess], [VERBS_CPPFLAGS=""; VERBS_LDFLAGS=""],
      [_WEFT_DEP_PATHS([$with_verbs], [VERBS])])
    AC_MSG_CHECKING([for libibverbs])
    _WEFT_DEP_IN_DIR([$with_verbs], [infiniband/verbs.h])
    AS_IF([test "x$weft_dep_in_dir" = xyes], [
      _WEFT_DEP_TRY([VERBS], [[#include <infiniband/verbs.h>]],
        [[int n; struct ibv_device **l = ibv_get_device_list(&n); ibv_free_device_list(l);]],
        [$VERBS_LIBS])], [weft_dep_ok=no])
    AC_MSG_RESULT([$weft_dep_ok])
    AS_IF([test "x$weft_dep_ok" = xyes], [
      have_verbs=yes
      weft_verbs_summary="yes"
    ], [
      _WEFT_DEP_FAIL([$with_verbs], [libibverbs (infiniband/verbs.h, -libverbs) not found], [weft_verbs_summary])
    ])
  ])
  AS_IF([test "x$have_verbs" = xyes], [
    AC_DEFINE([HAVE_VERBS], [1], [Define to 1 to use libibverbs for RDMA device discovery.])
  ], [VERBS_CPPFLAGS=""; VERBS_LDFLAGS=""; VERBS_LIBS=""])
  AM_CONDITIONAL([HAVE_VERBS], [test "x$have_verbs" = xyes])
  AC_SUBST([VERBS_CPPFLAGS])
  AC_SUBST([VERBS_LDFLAGS])
  AC_SUBST([VERBS_LIBS])
])
