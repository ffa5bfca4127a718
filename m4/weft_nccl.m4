# WEFT_CHECK_NCCL
# Finds nccl.h and libnccl. NCCL's header needs the CUDA runtime, so NCCL is
# only looked for when CUDA was found. Without a DIR, the system paths and
# then the CUDA toolkit root (where NCCL is often installed) are tried.
#
# Output: HAVE_NCCL (define and conditional), NCCL_CPPFLAGS, NCCL_LDFLAGS,
# NCCL_LIBS, weft_nccl_summary.
AC_DEFUN([WEFT_CHECK_NCCL], [
  AC_REQUIRE([WEFT_CHECK_CUDA])
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl@<:@=no|yes|guess|DIR@:>@], [NCCL (default: guess; needs CUDA)])],
    [], [with_nccl=guess])
  have_nccl=no
  weft_nccl_summary="no (disabled)"
  _WEFT_DEP_DIR_EXISTS([$with_nccl], [--with-nccl])
  NCCL_LIBS="-lnccl"
  AS_IF([test "x$with_nccl" != xno], [
    AS_IF([test "x$have_cuda" != xyes], [
      _WEFT_DEP_FAIL([$with_nccl], [NCCL needs CUDA, which was not found], [weft_nccl_summary])
    ], [
      AS_CASE([$with_nccl],
        [yes|guess], [weft_nccl_roots="system $weft_cuda_root"],
        [weft_nccl_roots="$with_nccl"])
      for weft_root in $weft_nccl_roots; do
        AS_IF([test "x$weft_root" = xsystem],
              [NCCL_CPPFLAGS=""; NCCL_LDFLAGS=""],
              [_WEFT_DEP_PATHS([$weft_root], [NCCL])])
        NCCL_CPPFLAGS="$NCCL_CPPFLAGS $CUDA_CPPFLAGS"
        NCCL_LDFLAGS="$NCCL_LDFLAGS $CUDA_LDFLAGS"
        AC_MSG_CHECKING([for NCCL in $weft_root])
        AS_IF([test "x$weft_root" = xsystem], [weft_dep_in_dir=yes],
              [_WEFT_DEP_IN_DIR([$weft_root], [nccl.h])])
        AS_IF([test "x$weft_dep_in_dir" = xyes], [
          _WEFT_DEP_TRY([NCCL], [[#include <nccl.h>]],
                        [[int v; (void)ncclGetVersion(&v);]], [$NCCL_LIBS $CUDA_LIBS])],
          [weft_dep_ok=no])
        AC_MSG_RESULT([$weft_dep_ok])
        AS_IF([test "x$weft_dep_ok" = xyes], [break])
      done
      AS_IF([test "x$weft_dep_ok" = xyes], [
        have_nccl=yes
        weft_nccl_summary="yes ($weft_root)"
      ], [
        _WEFT_DEP_FAIL([$with_nccl], [nccl.h and libnccl not found], [weft_nccl_summary])
      ])
    ])
  ])
  AS_IF([test "x$have_nccl" = xyes], [
    AC_DEFINE([HAVE_NCCL], [1], [Define to 1 to build the NCCL transport.])
    weft_backends_built="$weft_backends_built nccl"
  ], [NCCL_CPPFLAGS=""; NCCL_LDFLAGS=""; NCCL_LIBS=""])
  AM_CONDITIONAL([HAVE_NCCL], [test "x$have_nccl" = xyes])
  AC_SUBST([NCCL_CPPFLAGS])
  AC_SUBST([NCCL_LDFLAGS])
  AC_SUBST([NCCL_LIBS])
])
