"""The binding on a GPU (skipped without one, or without PyTorch): the FP8
writer on torch tensors gives the host path's bytes, on the caller's
stream, and a GPU registry's slot is written in place from PyTorch."""

import numpy as np
import pytest

import weft

from conftest import gpu_count

pytestmark = pytest.mark.skipif(gpu_count() < 1, reason="needs a GPU and PyTorch")


@pytest.mark.parametrize("formula", ["exact", "reference"])
def test_quantize_on_torch_tensors_matches_the_host(formula):
    import torch

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 300, 200)) * 0.02).astype(np.float32)
    x[1, 7, 9] = np.nan
    w = np.zeros(x.shape, np.uint8)
    wt = np.zeros((3, 200, 300), np.uint8)
    s = np.zeros((3, 3, 2), np.float32)
    weft.quantize(x, w, wt, s, formula=formula)
    gx = torch.from_numpy(x).cuda()
    gw = torch.zeros(x.shape, dtype=torch.float8_e4m3fn, device="cuda")
    gwt = torch.zeros((3, 200, 300), dtype=torch.float8_e4m3fn, device="cuda")
    gs = torch.zeros((3, 3, 2), dtype=torch.float32, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        weft.quantize(gx, gw, gwt, gs, stream=stream, formula=formula)
    stream.synchronize()
    assert np.array_equal(gw.view(torch.uint8).cpu().numpy(), w)
    assert np.array_equal(gwt.view(torch.uint8).cpu().numpy(), wt)
    assert np.array_equal(gs.cpu().numpy().view(np.uint32), s.view(np.uint32))


def test_a_gpu_registry_is_written_in_place_from_torch(reg_name):
    import torch

    with weft.Registry.create(reg_name, memory="cuda") as reg:
        reg.declare("w", (256, 256), "fp8_e4m3")
        reg.declare("s", (2, 2), "fp32", role="scale")
        reg.seal()
        x = torch.randn((256, 256), device="cuda") * 0.02
        with reg.write() as v:
            w, s = v["w"], v["s"]
            assert isinstance(w, weft._tensors.DeviceArray)
            weft.quantize(x, w, None, s)
            torch.cuda.synchronize()
            assert w.as_torch().data_ptr() == w.ptr
            v.publish()
        with reg.read() as lease:
            got = lease["w"].as_torch().view(torch.uint8).cpu().numpy()
            want = np.zeros((256, 256), np.uint8)
            weft.quantize(x.cpu().numpy(), want, None, np.zeros((2, 2), np.float32))
            assert np.array_equal(got, want)
    weft.Registry.unlink(reg_name)
