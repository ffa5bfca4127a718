"""The tests' fixtures: registry names unique to the test, and a check that
nothing of them is left in /dev/shm afterwards."""

import glob
import os

import pytest


@pytest.fixture
def reg_name(request):
    base = "pytest-%d-%s" % (os.getpid(), request.node.name.replace("[", "-").replace("]", "")[:30])
    yield base
    import weft

    for path in glob.glob("/dev/shm/weft." + base + "*"):
        weft.Registry.unlink(os.path.basename(path)[len("weft."):])
        pytest.fail("the test left %s in /dev/shm" % path)


def gpu_count():
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0
