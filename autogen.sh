#!/bin/sh
# Generate configure and the Makefile.in files from a git checkout.
# Release tarballs (make dist) already contain them.
set -e
cd "$(dirname "$0")"
mkdir -p build-aux
autoreconf --install --force --warnings=all
