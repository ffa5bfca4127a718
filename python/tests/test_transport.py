"""Pulled transfers from Python: a host plan copies each version into an
engine's own arrays, strided views into fused tensors included; a GPU plan
(cuda_ipc, PyTorch tensors) where a GPU is present."""

import numpy as np
import pytest

import weft

from conftest import gpu_count

EXPERTS, ROWS, COLS = 4, 128, 256


def make(name, memory="host"):
    reg = weft.Registry.create(name, slots=3, memory=memory)
    for e in range(EXPERTS):
        reg.declare("layers.0.experts.%d.w13" % e, (ROWS, COLS), "fp8_e4m3", layer=0, expert=e)
    reg.seal()
    return reg


def publish(reg, version):
    with reg.write() as v:
        for e in range(EXPERTS):
            v[e][:] = (e * 31 + version) % 251
        return v.publish()


def test_a_host_plan_fills_views_into_a_fused_tensor(reg_name):
    # SGLang's w13_weight[E, 2I, H]-like fused tensor, each expert a view,
    # and a column slice (strided rows) of a wider buffer.
    fused = np.zeros((EXPERTS, ROWS, COLS), np.uint8)
    wide = np.zeros((ROWS, 2 * COLS), np.uint8)
    views = {"layers.0.experts.%d.w13" % e: fused[e] for e in range(EXPERTS - 1)}
    views["layers.0.experts.%d.w13" % (EXPERTS - 1)] = wide[:, COLS // 2:COLS // 2 + COLS]
    with make(reg_name) as reg, weft.Registry.open(reg_name) as reader:
        with reader.consumer("engine") as consumer, weft.Plan(reader, views) as plan:
            version = publish(reg, 1)
            assert plan.receive(consumer, after=0, timeout=5) == version
            for e in range(EXPERTS - 1):
                assert (fused[e] == (e * 31 + 1) % 251).all()
            assert (wide[:, COLS // 2:COLS // 2 + COLS] == ((EXPERTS - 1) * 31 + 1) % 251).all()
            assert (wide[:, :COLS // 2] == 0).all() and (wide[:, COLS // 2 + COLS:] == 0).all()
            assert reg.wait_consumers(version, timeout=1) == 0
            # Offload and reload: new arrays, the same plan.
            fresh = np.zeros((EXPERTS, ROWS, COLS), np.uint8)
            plan.rebind({"layers.0.experts.%d.w13" % e: fresh[e] for e in range(EXPERTS)})
            version = publish(reg, 2)
            assert plan.receive(consumer, after=1, timeout=5) == version
            assert all((fresh[e] == (e * 31 + 2) % 251).all() for e in range(EXPERTS))
            assert plan.stats()["versions_copied"] == 2
    weft.Registry.unlink(reg_name)


def test_a_view_of_the_wrong_shape_or_width_is_refused(reg_name):
    with make(reg_name) as reg:
        with pytest.raises(ValueError):
            weft.Plan(reg, {"layers.0.experts.0.w13": np.zeros((ROWS, COLS + 1), np.uint8)})
        with pytest.raises(ValueError):
            weft.Plan(reg, {"layers.0.experts.0.w13": np.zeros((ROWS, COLS), np.uint16)})
        with pytest.raises(KeyError):
            weft.Plan(reg, {"nope": np.zeros((ROWS, COLS), np.uint8)})
        with pytest.raises(weft.WeftError) as err:
            weft.Plan(reg, {"layers.0.experts.0.w13": np.zeros((ROWS, COLS), np.uint8)}, transport="cuda_ipc")
        assert err.value.name in ("WEFT_ERR_INVALID_PARAM", "WEFT_ERR_UNSUPPORTED")
    weft.Registry.unlink(reg_name)


@pytest.mark.skipif(gpu_count() < 1, reason="needs a GPU and PyTorch")
def test_a_cuda_ipc_plan_fills_torch_tensors(reg_name):
    import torch

    fused = torch.zeros((EXPERTS, ROWS, COLS), dtype=torch.float8_e4m3fn, device="cuda")
    views = {"layers.0.experts.%d.w13" % e: fused[e] for e in range(EXPERTS)}
    with make(reg_name, memory="cuda") as reg, weft.Registry.open(reg_name) as reader:
        with reg.write() as v:
            for e in range(EXPERTS):
                v[e].as_torch().view(torch.uint8).fill_((e * 31 + 1) % 251)
            torch.cuda.synchronize()
            version = v.publish()
        with reader.consumer("engine") as consumer, weft.Plan(reader, views, transport="cuda_ipc") as plan:
            assert plan.receive(consumer, after=0, timeout=10) == version
            got = fused.view(torch.uint8).cpu().numpy()
            assert all((got[e] == (e * 31 + 1) % 251).all() for e in range(EXPERTS))
        with reader.read() as lease:
            leased = lease[0].as_torch()
            assert leased.dtype == torch.float8_e4m3fn and leased.device.type == "cuda"
            assert leased.data_ptr() == lease[0].ptr  # no copy
    weft.Registry.unlink(reg_name)


def ucx_usable():
    try:
        return weft.info()["backends"]["ucx"]["available"]
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.skipif(not ucx_usable(), reason="libweft without a loadable UCX")
def test_a_remote_consumer_receives_over_ucx(reg_name, monkeypatch):
    monkeypatch.setenv("UCX_TLS", "tcp,self")
    fused = np.zeros((EXPERTS, ROWS, COLS), np.uint8)
    views = {"layers.0.experts.%d.w13" % e: weft.View(fused[e], "fp8_e4m3") for e in range(EXPERTS)}
    with make(reg_name) as reg, weft.Server(reg, "127.0.0.1:0", "py-token", timeout=30) as server:
        assert server.port > 0
        with weft.Remote("127.0.0.1:%d" % server.port, "py-token", "py-engine", views, timeout=30) as remote:
            version = publish(reg, 1)
            assert remote.receive(after=0, timeout=30) == version
            assert all((fused[e] == (e * 31 + 1) % 251).all() for e in range(EXPERTS))
            assert reg.wait_consumers(version, timeout=10) == 0
        assert server.stats()["versions_sent"] == 1
        with pytest.raises(weft.WeftError) as err:
            weft.Remote("127.0.0.1:%d" % server.port, "wrong-token", "py-intruder", views, timeout=10)
        assert err.value.name == "WEFT_ERR_AUTH"
    weft.Registry.unlink(reg_name)


class DLPackOnly:
    """An array that speaks DLPack alone, as JAX's do."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_a_dlpack_view_is_written_in_place(reg_name):
    target = np.zeros((ROWS, COLS), np.uint8)
    if not hasattr(target, "__dlpack__"):
        pytest.skip("NumPy without DLPack")
    with make(reg_name) as reg:
        publish(reg, 1)
        with reg.read() as lease, weft.Plan(reg, {"layers.0.experts.2.w13": DLPackOnly(target)}) as plan:
            plan.copy(lease)
        assert (target == (2 * 31 + 1) % 251).all()
    weft.Registry.unlink(reg_name)
