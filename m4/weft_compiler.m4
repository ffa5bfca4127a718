# WEFT_COMPILER_FLAGS
# --enable-werror and --enable-sanitizers, and the warning flags every
# libweft source is compiled with. Library sources also get
# -fvisibility=hidden (WEFT_LIB_CFLAGS): only WEFT_API symbols are exported.
AC_DEFUN([WEFT_COMPILER_FLAGS], [
  AC_ARG_ENABLE([werror],
    [AS_HELP_STRING([--enable-werror], [treat compiler warnings as errors (C and CUDA)])],
    [], [enable_werror=no])
  AC_ARG_ENABLE([sanitizers],
    [AS_HELP_STRING([--enable-sanitizers@<:@=thread@:>@],
      [build with AddressSanitizer and UndefinedBehaviorSanitizer (yes), or with ThreadSanitizer (thread)])],
    [], [enable_sanitizers=no])
  AS_CASE([$enable_sanitizers], [yes|no|thread], [],
    [AC_MSG_ERROR([--enable-sanitizers=$enable_sanitizers: yes (ASan and UBSan) or thread (TSan)])])

  WEFT_CFLAGS="-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith -Wno-unused-parameter"
  AS_IF([test "x$enable_werror" = xyes], [WEFT_CFLAGS="$WEFT_CFLAGS -Werror"])
  AS_CASE([$enable_sanitizers],
    [yes], [weft_san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"],
    [thread], [weft_san="-fsanitize=thread -fno-omit-frame-pointer"],
    [weft_san=""])
  AS_IF([test -n "$weft_san"], [
    WEFT_CFLAGS="$WEFT_CFLAGS $weft_san"
    WEFT_LDFLAGS="$weft_san"
  ])
  dnl C++ (tests): the warnings of WEFT_CFLAGS that C++ knows.
  WEFT_CXXFLAGS="-Wall -Wextra -Wshadow -Wpointer-arith -Wno-unused-parameter"
  AS_IF([test "x$enable_werror" = xyes], [WEFT_CXXFLAGS="$WEFT_CXXFLAGS -Werror"])
  AS_IF([test -n "$weft_san"], [WEFT_CXXFLAGS="$WEFT_CXXFLAGS $weft_san"])
  WEFT_LIB_CFLAGS="-fvisibility=hidden"
  AC_SUBST([WEFT_CFLAGS])
  AC_SUBST([WEFT_CXXFLAGS])
  AC_SUBST([WEFT_LDFLAGS])
  AC_SUBST([WEFT_LIB_CFLAGS])

  dnl The linker must understand version scripts to keep the export list exact.
  AC_MSG_CHECKING([whether the linker accepts --version-script])
  weft_save_LDFLAGS=$LDFLAGS
  printf 'WEFT_TEST { global: main; local: *; };\n' > conftest.map
  LDFLAGS="$LDFLAGS -Wl,--version-script=conftest.map"
  AC_LINK_IFELSE([AC_LANG_PROGRAM([], [])], [weft_have_vscript=yes], [weft_have_vscript=no])
  LDFLAGS=$weft_save_LDFLAGS
  rm -f conftest.map
  AC_MSG_RESULT([$weft_have_vscript])
  AM_CONDITIONAL([HAVE_VERSION_SCRIPT], [test "x$weft_have_vscript" = xyes])
])
