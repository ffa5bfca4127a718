# WEFT_CHECK_CUDA
# Finds nvcc, the CUDA runtime (libcudart) and the driver API header.
# The driver library itself (libcuda) is never linked: a machine without a
# GPU driver must still load libweft, so driver entry points are resolved
# at run time through cudaGetDriverEntryPoint.
#
# Output: HAVE_CUDA (define and conditional), NVCC, CUDA_CPPFLAGS,
# CUDA_LDFLAGS, CUDA_LIBS (what programs link), CUDA_LIB_LIBS (what
# libweft links: the static runtime where it can), CUDA_ARCH,
# weft_cuda_root, weft_cuda_summary.
#
# The kernels are built for every architecture in --with-cuda-arch (one
# fat binary: SASS for each, and PTX of compute_90 that newer GPUs compile
# at load time); Hopper's sm_90a is the one measured. Naming architectures
# asks for CUDA: one that nvcc cannot build for is an error, never a build
# without CUDA.
AC_DEFUN([WEFT_CHECK_CUDA], [
  AC_REQUIRE([WEFT_COMPILER_FLAGS])
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=no|yes|guess|DIR@:>@],
      [CUDA toolkit: nvcc, runtime and driver API (default: guess from nvcc on PATH, CUDA_HOME, /usr/local/cuda)])],
    [], [with_cuda=guess])
  AC_ARG_WITH([cuda-arch],
    [AS_HELP_STRING([--with-cuda-arch=LIST],
      [GPU architectures to build the kernels for, comma-separated (default: sm_80,sm_86,sm_89,sm_90a)])],
    [weft_cuda_arch_asked=yes], [with_cuda_arch=sm_80,sm_86,sm_89,sm_90a; weft_cuda_arch_asked=no])
  dnl On where the toolkit has libcudart_static.a: a process then holds two
  dnl CUDA runtimes (libweft's and its own, PyTorch's), which the whole GPU
  dnl suite and the Python tests with PyTorch held on an H200.
  AC_ARG_ENABLE([static-cudart],
    [AS_HELP_STRING([--enable-static-cudart],
      [link the toolkit's libcudart_static.a into libweft.so (hidden), so that it needs no libcudart.so (default: where it links; --disable-static-cudart: libcudart.so)])],
    [], [enable_static_cudart=auto])
  weft_cuda_runtime=shared
  AC_ARG_VAR([NVCC], [CUDA compiler])
  AC_ARG_VAR([NVCCFLAGS], [extra flags for the CUDA compiler])

  have_cuda=no
  weft_cuda_summary="no (disabled)"
  CUDA_ARCH=$with_cuda_arch
  AS_IF([test "x$weft_cuda_arch_asked" = xyes && test "x$with_cuda" = xguess], [with_cuda=yes])
  AS_IF([test "x$weft_cuda_arch_asked" = xyes && test "x$with_cuda" = xno],
        [AC_MSG_ERROR([--with-cuda-arch=$with_cuda_arch with --without-cuda: drop one of them])])
  AS_CASE([$with_cuda], [yes|guess|no], [], [
    AS_IF([test ! -d "$with_cuda"], [AC_MSG_ERROR([--with-cuda=$with_cuda: no such directory])])])

  AS_IF([test "x$with_cuda" != xno], [
    AS_CASE([$with_cuda],
      [yes|guess], [weft_nvcc_path="$PATH${CUDA_HOME:+$PATH_SEPARATOR$CUDA_HOME/bin}${PATH_SEPARATOR}/usr/local/cuda/bin"],
      [weft_nvcc_path="$with_cuda/bin"])
    AC_PATH_PROG([NVCC], [nvcc], [], [$weft_nvcc_path])
    AS_IF([test -z "$NVCC"], [
      _WEFT_DEP_FAIL([$with_cuda], [nvcc not found], [weft_cuda_summary])
    ], [
      dnl The toolkit root: nvcc names it itself (TOP in its dry run), which
      dnl also sees through wrapper scripts that exec the real nvcc; when it
      dnl does not hold the headers (distribution packages split them out),
      dnl fall back to the folder above where nvcc really lives.
      AS_CASE([$with_cuda],
        [yes|guess], [weft_cuda_root=`$NVCC --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^@%:@\$ TOP=//p' | head -n 1`
                      AS_IF([test -n "$weft_cuda_root" && test -f "$weft_cuda_root/include/cuda_runtime.h"],
                        [weft_cuda_root=`cd "$weft_cuda_root" && pwd -P`],
                        [weft_cuda_root=`readlink -f "$NVCC" 2>/dev/null || echo "$NVCC"`
                         weft_cuda_root=`dirname "$weft_cuda_root"`
                         weft_cuda_root=`cd "$weft_cuda_root/.." && pwd -P`])],
        [weft_cuda_root=$with_cuda])
      AS_IF([test "x$weft_cuda_root" = x/usr],
            [CUDA_CPPFLAGS=""; CUDA_LDFLAGS=""],
            [_WEFT_DEP_PATHS([$weft_cuda_root], [CUDA])])
      CUDA_LIBS="-lcudart"
      AC_MSG_CHECKING([for the CUDA runtime and driver API (12.0 or newer) in $weft_cuda_root])
      _WEFT_DEP_IN_DIR([$with_cuda], [cuda_runtime.h])
      AS_IF([test "x$weft_dep_in_dir" = xyes], [_WEFT_DEP_TRY([CUDA], [[#include <cuda.h>
#include <cuda_runtime.h>
#if CUDART_VERSION < 12000 || CUDA_VERSION < 12000
#error CUDA 12.0 or newer is required
#endif]],
        [[int n; CUresult (*get_error_string)(CUresult, const char **) = 0;
          (void)get_error_string;
          (void)cudaGetDeviceCount(&n);]],
        [$CUDA_LIBS])], [weft_dep_ok=no])
      AC_MSG_RESULT([$weft_dep_ok])
      AS_IF([test "x$weft_dep_ok" != xyes], [
        _WEFT_DEP_FAIL([$with_cuda], [CUDA runtime 12.0+ (cuda_runtime.h, cuda.h, libcudart) not usable in $weft_cuda_root], [weft_cuda_summary])
      ], [
        cat > conftest.cu <<_WEFT_EOF
__global__ void weft_conftest(int *p) { *p = 1; }
_WEFT_EOF
        weft_cuda_gencode=""
        weft_dep_ok=yes
        weft_cuda_bad_arch=""
        for weft_arch in `echo "$CUDA_ARCH" | tr ',' ' '`; do
          AC_MSG_CHECKING([whether $NVCC compiles for $weft_arch])
          weft_compute=`echo "$weft_arch" | sed 's/^sm_/compute_/'`
          AS_IF([echo "$weft_arch" | grep -q '^sm_[[0-9]][[0-9]]*a\{0,1\}$' &&
                 $NVCC -gencode arch=$weft_compute,code=$weft_arch -c conftest.cu -o conftest.$OBJEXT >&AS_MESSAGE_LOG_FD 2>&1],
                [AC_MSG_RESULT([yes])
                 weft_cuda_gencode="$weft_cuda_gencode -gencode arch=$weft_compute,code=$weft_arch"],
                [AC_MSG_RESULT([no])
                 weft_dep_ok=no
                 weft_cuda_bad_arch="$weft_cuda_bad_arch $weft_arch"])
        done
        dnl PTX of compute_90 for GPUs newer than the list (sm_90a's PTX runs only on sm_90).
        AS_IF([test "x$weft_dep_ok" = xyes &&
               $NVCC -gencode arch=compute_90,code=compute_90 -c conftest.cu -o conftest.$OBJEXT >&AS_MESSAGE_LOG_FD 2>&1],
              [weft_cuda_gencode="$weft_cuda_gencode -gencode arch=compute_90,code=compute_90"])
        rm -f conftest.cu conftest.$OBJEXT
        AS_IF([test "x$weft_dep_ok" != xyes], [
          _WEFT_DEP_FAIL([$with_cuda], [$NVCC cannot build for$weft_cuda_bad_arch (--with-cuda-arch=$CUDA_ARCH; an architecture is sm_NN or sm_NNa, see config.log)], [weft_cuda_summary])
        ], [
          have_cuda=yes
          dnl nvcc's host code needs the C++ runtime (static guards, unwinding).
          dnl Muon's batched GEMMs are cuBLASLt's and cuBLAS's, part of every CUDA
          dnl toolkit: not linked, loaded when Muon first runs on a GPU
          dnl (kernels/blas_api.h).
          CUDA_LIBS="$CUDA_LIBS -lstdc++"
          dnl libweft itself links the runtime statically where the toolkit has
          dnl it (as NCCL does): the library then needs no libcudart.so on the
          dnl host, and a host without a GPU driver still loads it (the static
          dnl runtime finds libcuda.so.1 at run time, and without it every CUDA
          dnl call reports no driver). Programs beside it (weft-perf, the tests,
          dnl a trainer with PyTorch) keep their own runtime: streams, events
          dnl and memory are the driver's and cross between the two.
          CUDA_LIB_LIBS="$CUDA_LIBS"
          AS_IF([test "x$enable_static_cudart" != xno], [
            AC_MSG_CHECKING([whether libweft can link the CUDA runtime statically])
            cat > conftest_cudart.c <<_WEFT_EOF
#include <cuda_runtime_api.h>
int weft_conftest(void);
int weft_conftest(void) { int n = 0; return (int)cudaGetDeviceCount(&n) + n; }
_WEFT_EOF
            AS_IF([$CC -shared -fPIC $CPPFLAGS $CUDA_CPPFLAGS conftest_cudart.c -o conftest_cudart.so $LDFLAGS $CUDA_LDFLAGS \
                     -lcudart_static -lrt -ldl -lpthread -lstdc++ >&AS_MESSAGE_LOG_FD 2>&1],
                  [AC_MSG_RESULT([yes])
                   CUDA_LIB_LIBS="-lcudart_static -lrt -ldl -lpthread -lstdc++"
                   weft_cuda_runtime="static"],
                  [AC_MSG_RESULT([no])
                   AS_IF([test "x$enable_static_cudart" = xyes],
                         [AC_MSG_ERROR([--enable-static-cudart: libcudart_static.a cannot be linked into a shared library here (see config.log)])])])
            rm -f conftest_cudart.c conftest_cudart.so
          ])
          weft_nvcc_version=`$NVCC --version | sed -n 's/.*release \([[0-9.]]*\).*/\1/p'`
          weft_cuda_summary="yes (nvcc $weft_nvcc_version at $NVCC, kernels for $CUDA_ARCH, runtime $weft_cuda_runtime)"
        ])
      ])
    ])
  ])

  AS_IF([test "x$have_cuda" = xyes], [
    AC_DEFINE([HAVE_CUDA], [1], [Define to 1 to build the CUDA kernels and backends.])
    AC_DEFINE_UNQUOTED([WEFT_CUDA_ARCH], ["$CUDA_ARCH"], [GPU architecture the kernels were built for.])
    weft_backends_built="$weft_backends_built cuda"
    dnl The host side gets the same warnings and visibility as C sources.
    WEFT_NVCCFLAGS="$weft_cuda_gencode -std=c++17 -O3 -lineinfo --compiler-options=-fvisibility=hidden,-Wall,-Wextra"
    AS_IF([test "x$enable_werror" = xyes],
          [WEFT_NVCCFLAGS="$WEFT_NVCCFLAGS --Werror=all-warnings --compiler-options=-Werror"])
  ], [
    CUDA_CPPFLAGS=""; CUDA_LDFLAGS=""; CUDA_LIBS=""; CUDA_LIB_LIBS=""
  ])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$have_cuda" = xyes])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_LDFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([CUDA_LIB_LIBS])
  AC_SUBST([CUDA_ARCH])
  AC_SUBST([WEFT_NVCCFLAGS])
])
