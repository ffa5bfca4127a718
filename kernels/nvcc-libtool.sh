#!/bin/sh
# Lets libtool drive nvcc: libtool's compile mode adds host-compiler flags
# (-fPIC) that nvcc does not accept itself; hand those to the host compiler.
# Flags for the host compiler must be spelled --compiler-options=...:
# libtool eats a separate -Xcompiler argument.
# Usage (from a Makefile rule): libtool --tag=CC --mode=compile sh nvcc-libtool.sh NVCC ARGS...
nvcc=$1
shift
for arg do
    shift
    case $arg in
    -fPIC | -fpic | -fno-common) set -- "$@" "--compiler-options=$arg" ;;
    *) set -- "$@" "$arg" ;;
    esac
done
exec "$nvcc" "$@"
