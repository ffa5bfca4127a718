"""libweft's status codes as one exception class."""

from ._lib import load


class WeftError(Exception):
    """A libweft call failed: .status is the weft_status_t, .name its
    enumerator (WEFT_ERR_TIMEOUT, ...), .call the C function."""

    def __init__(self, status, call, detail=None):
        ffi, lib = load()
        self.status = int(status)
        self.call = call
        self.reason = ffi.string(lib.weft_status_string(status)).decode()
        self.name = next((k for k in dir(lib) if k.startswith(("WEFT_OK", "WEFT_ERR_", "WEFT_INPROGRESS"))
                          and getattr(lib, k) == self.status), str(self.status))
        message = "%s: %s (%s)" % (call, self.reason, self.name)
        if detail:
            message += ": " + detail
        super().__init__(message)


def check(status, call, detail=None):
    """Raises WeftError unless status is WEFT_OK; returns None."""
    if status != 0:
        raise WeftError(status, call, detail)
