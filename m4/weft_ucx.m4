# WEFT_CHECK_UCX
# Finds UCX (ucp, uct, ucs) 1.13 or newer. Without a DIR, pkg-config's ucx
# module is tried first, then the system paths.
#
# Output: HAVE_UCX (define and conditional), UCX_CPPFLAGS, UCX_LDFLAGS,
# UCX_LIBS, weft_ucx_summary.
AC_DEFUN([WEFT_CHECK_UCX], [
  AC_ARG_WITH([ucx],
    [AS_HELP_STRING([--with-ucx@<:@=no|yes|guess|DIR@:>@], [UCX 1.13 or newer (default: guess)])],
    [], [with_ucx=guess])
  have_ucx=no
  weft_ucx_summary="no (disabled)"
  _WEFT_DEP_DIR_EXISTS([$with_ucx], [--with-ucx])
  AS_IF([test "x$with_ucx" != xno], [
    UCX_LIBS="-lucp -luct -lucs"
    AS_CASE([$with_ucx],
      [yes|guess], [
        UCX_CPPFLAGS=""; UCX_LDFLAGS=""
        AS_IF([test -n "$PKG_CONFIG" && $PKG_CONFIG --exists ucx 2>/dev/null], [
          UCX_CPPFLAGS=`$PKG_CONFIG --cflags-only-I ucx | sed "s/-I/-isystem /g"`
          UCX_LDFLAGS=`$PKG_CONFIG --libs-only-L ucx`
        ])],
      [_WEFT_DEP_PATHS([$with_ucx], [UCX])])
    AC_MSG_CHECKING([for UCX 1.13 or newer])
    _WEFT_DEP_IN_DIR([$with_ucx], [ucp/api/ucp.h])
    AS_IF([test "x$weft_dep_in_dir" = xyes], [_WEFT_DEP_TRY([UCX], [[#include <ucp/api/ucp.h>
#include <uct/api/uct.h>
#if UCP_API_VERSION < UCP_VERSION(1, 13)
#error UCX 1.13 or newer is required
#endif]],
      [[unsigned a, b, c; uct_component_h *comps; unsigned n;
        ucp_get_version(&a, &b, &c);
        (void)uct_query_components(&comps, &n);]], [$UCX_LIBS])], [weft_dep_ok=no])
    AC_MSG_RESULT([$weft_dep_ok])
    AS_IF([test "x$weft_dep_ok" = xyes], [
      have_ucx=yes
      dnl The summary names the UCX API version found (the release's minor).
      weft_save_CPPFLAGS=$CPPFLAGS
      CPPFLAGS="$CPPFLAGS $UCX_CPPFLAGS"
      AC_COMPUTE_INT([weft_ucx_major], [UCP_API_MAJOR], [[#include <ucp/api/ucp_version.h>]], [weft_ucx_major=""])
      AC_COMPUTE_INT([weft_ucx_minor], [UCP_API_MINOR], [[#include <ucp/api/ucp_version.h>]], [weft_ucx_minor=""])
      CPPFLAGS=$weft_save_CPPFLAGS
      AS_CASE([$with_ucx], [yes|guess], [weft_ucx_where=""], [weft_ucx_where=" in $with_ucx"])
      weft_ucx_summary="yes (UCX $weft_ucx_major.$weft_ucx_minor$weft_ucx_where)"
    ], [
      AS_CASE([$with_ucx], [yes|guess], [weft_ucx_where=""], [weft_ucx_where=" in $with_ucx"])
      _WEFT_DEP_FAIL([$with_ucx], [UCX 1.13+ (ucp/api/ucp.h, libucp, libuct, libucs) not found$weft_ucx_where], [weft_ucx_summary])
    ])
  ])
  AS_IF([test "x$have_ucx" = xyes], [
    AC_DEFINE([HAVE_UCX], [1], [Define to 1 to build the UCX transport.])
    weft_backends_built="$weft_backends_built ucx"
  ], [UCX_CPPFLAGS=""; UCX_LDFLAGS=""; UCX_LIBS=""])
  AM_CONDITIONAL([HAVE_UCX], [test "x$have_ucx" = xyes])
  AC_SUBST([UCX_CPPFLAGS])
  AC_SUBST([UCX_LDFLAGS])
  AC_SUBST([UCX_LIBS])
])
