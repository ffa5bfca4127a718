# Shared pieces of the optional-dependency checks (CUDA, NCCL, UCX, verbs).
#
# Every dependency takes --with-X=no|yes|guess|DIR. "guess" (the default)
# uses X when it is found and builds without it otherwise; "yes" or a DIR
# makes a missing X an error.

# _WEFT_DEP_FAIL(with-value, message, summary-variable)
# A dependency was not usable: an error when it was asked for, otherwise a
# warning and a summary line saying why it is left out.
AC_DEFUN([_WEFT_DEP_FAIL], [
  AS_IF([test "x$1" != xguess],
        [AC_MSG_ERROR([$2])],
        [AC_MSG_WARN([$2; building without it])
         $3="no ($2)"])
])

# _WEFT_DEP_DIR_EXISTS(with-value, option)
# --with-X=DIR names a directory that must exist: an error naming it
# otherwise (rather than "X not found" from a test that never looked).
AC_DEFUN([_WEFT_DEP_DIR_EXISTS], [
  AS_CASE([$1], [yes|guess|no], [],
          [AS_IF([test ! -d "$1"], [AC_MSG_ERROR([$2=$1: no such directory])])])
])

# _WEFT_DEP_PATHS(DIR, prefix)
# Sets <prefix>_CPPFLAGS and <prefix>_LDFLAGS for an install tree DIR, using
# lib64 or lib, whichever exists.
AC_DEFUN([_WEFT_DEP_PATHS], [
  dnl -isystem: warnings in dependencies' headers are not ours to fix.
  $2_CPPFLAGS="-isystem $1/include"
  $2_LDFLAGS=""
  for weft_libdir in "$1/lib64" "$1/lib" "$1/lib/x86_64-linux-gnu" "$1/targets/x86_64-linux/lib"; do
    AS_IF([test -d "$weft_libdir"], [$2_LDFLAGS="-L$weft_libdir"; break])
  done
])

# _WEFT_DEP_IN_DIR(with-value, header)
# With --with-X=DIR, X must come from DIR and not from the system paths the
# compiler searches anyway: sets weft_dep_in_dir=no when DIR lacks header.
AC_DEFUN([_WEFT_DEP_IN_DIR], [
  weft_dep_in_dir=yes
  AS_CASE([$1], [yes|guess|no], [],
          [AS_IF([test ! -f "$1/include/$2"], [weft_dep_in_dir=no])])
])

# _WEFT_DEP_TRY(prefix, includes, body, libs)
# Compiles and links a test program with <prefix>_CPPFLAGS/_LDFLAGS and
# the given libraries; sets weft_dep_ok to yes or no.
AC_DEFUN([_WEFT_DEP_TRY], [
  weft_save_CPPFLAGS=$CPPFLAGS
  weft_save_LDFLAGS=$LDFLAGS
  weft_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $$1_CPPFLAGS"
  LDFLAGS="$LDFLAGS $$1_LDFLAGS"
  LIBS="$4 $LIBS"
  AC_LINK_IFELSE([AC_LANG_PROGRAM([$2], [$3])], [weft_dep_ok=yes], [weft_dep_ok=no])
  CPPFLAGS=$weft_save_CPPFLAGS
  LDFLAGS=$weft_save_LDFLAGS
  LIBS=$weft_save_LIBS
])
