"""The C declarations of libweft, read from its installed public headers.

cffi's ABI mode takes declarations, not headers: this module turns
<weft/*.h> into them (comments, include guards, the C++ guards and
function-like macros dropped; integer constants kept and substituted where
they size arrays; WEFT_API removed). The binding therefore follows the
headers of the library it loads; it restates none of their structs.
"""

import os
import re

# In include order: each header after those it uses.
HEADERS = ("types.h", "registry.h", "transport.h", "ucx.h", "quant.h", "checksum.h", "delta.h", "optim.h", "weft.h")

# What the C headers take from <stdint.h> that cffi does not know itself.
_LIMITS = {"UINT32_MAX": "4294967295", "UINT64_MAX": "18446744073709551615", "INT32_MAX": "2147483647"}

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DEFINE_INT = re.compile(r"^#define\s+(WEFT_[A-Z0-9_]+)\s+(\w+)\s*$")


def _strip(text):
    """One header's declarations, and its integer constants."""
    text = _COMMENT.sub(" ", text).replace("\\\n", " ")
    out, constants, skip = [], {}, []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            directive = stripped[1:].strip()
            if directive.startswith(("if", "ifdef", "ifndef")):
                # Only the C++ guard's contents go; the rest are include
                # guards and WEFT_API's choice, whose lines go alone.
                skip.append("__cplusplus" in directive)
            elif directive.startswith("else"):
                pass
            elif directive.startswith("endif"):
                skip.pop()
            else:
                match = _DEFINE_INT.match(stripped)
                if match and not any(skip):
                    value = _LIMITS.get(match.group(2), match.group(2))
                    if re.fullmatch(r"\d+|0x[0-9a-fA-F]+", value):
                        constants[match.group(1)] = value
            continue
        if not any(skip):
            out.append(line)
    return "\n".join(out), constants


def declarations(include_dir):
    """The cdef of every public header under include_dir/weft."""
    parts, constants = [], {}
    for name in HEADERS:
        path = os.path.join(include_dir, "weft", name)
        with open(path, encoding="utf-8") as f:
            body, found = _strip(f.read())
        constants.update(found)
        parts.append(body)
    text = "\n".join(parts).replace("WEFT_API", "")
    for key in sorted(constants, key=len, reverse=True):
        text = re.sub(r"\b%s\b" % key, constants[key], text)
    for key, value in _LIMITS.items():
        text = re.sub(r"\b%s\b" % key, value, text)
    defines = "\n".join("#define %s %s" % (k, v) for k, v in sorted(constants.items()))
    return defines + "\n" + text
