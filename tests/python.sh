#!/bin/sh
# The Python binding's tests (python/tests, pytest) against this build's
# libweft and headers: the registry, the host transport and the FP8 writer
# against a NumPy oracle everywhere; PyTorch and cuda_ipc where a GPU is.
set -u
: "${top_srcdir:=..}" "${top_builddir:=..}" "${PYTHON:=python3}"
if [ "${WEFT_LINKS_OPTIONAL:-no}" = yes ]; then
    echo "a sanitizer build: Python cannot load it (the sanitizer's runtime must be loaded first): skipped"
    exit 77
fi
if [ "$PYTHON" = ":" ] || ! "$PYTHON" -c "import cffi, numpy, pytest" 2>/dev/null; then
    echo "no Python with cffi, NumPy and pytest (Debian: python3-cffi python3-numpy python3-pytest): skipped"
    exit 77
fi
lib="$top_builddir/.libs/libweft.so"
[ -f "$lib" ] || { echo "no shared library built ($lib): skipped"; exit 77; }
WEFT_LIBRARY="$lib" WEFT_INCLUDE="$top_srcdir/include" PYTHONPATH="$top_srcdir/python" \
    PYTHONDONTWRITEBYTECODE=1 exec "$PYTHON" -m pytest -q -p no:cacheprovider "$top_srcdir/python/tests"
