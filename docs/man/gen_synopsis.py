#!/usr/bin/env python3
"""Prints the SYNOPSIS block (roff) of a public header: every WEFT_API
prototype, one to a line. docs/man/*.3 were written with its output; the
test tests/man_pages.sh checks that each page still names every call.

  docs/man/gen_synopsis.py include/weft/registry.h"""
import re
import sys


def prototypes(path):
    text = open(path, encoding="utf-8").read()
    for m in re.finditer(r"^WEFT_API\s+(.*?);", text, re.S | re.M):
        yield " ".join(m.group(1).split())


def main():
    header = sys.argv[1]
    print(".nf")
    print(".B #include <weft/%s>" % header.rsplit("/", 1)[-1])
    print(".PP")
    for p in prototypes(header):
        print(p.replace("\\", "\\\\").replace("-", "\\-") + ";")
    print(".fi")


if __name__ == "__main__":
    main()
