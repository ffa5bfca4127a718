"""What every handle of the binding shares: close() calls the C API's
destructor once, `with` closes on exit, and collection closes what the
program forgot (quietly: a collector has nobody to tell)."""

from ._errors import check
from ._lib import load


class Handle:
    """A C handle in ._handle (None once closed), destroyed by the C
    function named by the class's _destroy."""

    _destroy = None
    _handle = None

    def close(self):
        if self._handle is not None:
            handle, self._handle = self._handle, None
            check(getattr(load()[1], self._destroy)(handle), self._destroy)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
