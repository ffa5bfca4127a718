"""The registry from Python: versions written and read in place, errors
raised, handles closed by the collector."""

import gc

import numpy as np
import pytest

import weft
from weft._lib import load


def make(name, slots=3, **kw):
    reg = weft.Registry.create(name, slots=slots, **kw)
    reg.declare("model.layers.0.mlp.experts.0.w", (256, 384), "fp8_e4m3", layer=0, expert=0)
    reg.declare("model.layers.0.mlp.experts.0.s", (2, 3), "fp32", role="scale", layer=0, expert=0)
    reg.declare("model.layers.0.norm", (384,), "bf16", layer=0)
    reg.seal()
    return reg


def test_a_version_written_in_place_is_read_in_place(reg_name):
    with make(reg_name) as reg:
        assert [t.name for t in reg.tensors][0] == "model.layers.0.mlp.experts.0.w"
        assert reg.tensors[2].dtype == "bf16" and reg.tensors[1].role == "scale"
        with reg.write() as v:
            w = v["model.layers.0.mlp.experts.0.w"]
            assert w.shape == (256, 384) and w.dtype == np.uint8 and w.flags.writeable
            w[:] = (np.arange(w.size) % 251).reshape(w.shape)
            v[1][:] = 0.5
            v["model.layers.0.norm"][:] = 0x3F80  # bf16 1.0
            assert v.publish() == 1
        with weft.Registry.open(reg_name) as reader, reader.read() as lease:
            assert lease.version == 1
            got = lease["model.layers.0.mlp.experts.0.w"]
            assert not got.flags.writeable
            assert (got == (np.arange(got.size) % 251).reshape(got.shape)).all()
            assert (lease[1] == 0.5).all() and (lease[2] == 0x3F80).all()
            # No copy: the array is the slot's memory that the C call names.
            ffi, lib = load()
            data = ffi.new("const void **")
            assert lib.weft_registry_lease_tensor(reader.handle, lease.c_lease, 0, data) == 0
            assert got.__array_interface__["data"][0] == int(ffi.cast("uintptr_t", data[0]))
            with pytest.raises(ValueError):
                got[0, 0] = 1
    weft.Registry.unlink(reg_name)


def test_versions_follow_and_a_wait_times_out(reg_name):
    with make(reg_name) as reg:
        for v in (1, 2):
            with reg.write() as w:
                w[0][:] = v
                w.publish()
        with reg.read(after=1, timeout=1) as lease:
            assert lease.version == 2 and lease[0][0, 0] == 2
        with pytest.raises(weft.WeftError) as err:
            reg.read(after=2, timeout=0.05)
        assert err.value.name == "WEFT_ERR_TIMEOUT" and err.value.status == load()[1].WEFT_ERR_TIMEOUT
    weft.Registry.unlink(reg_name)


def test_bad_input_raises(reg_name):
    with pytest.raises(weft.WeftError) as err:
        weft.Registry.open(reg_name)
    assert err.value.name == "WEFT_ERR_NOT_FOUND"
    with weft.Registry.create(reg_name) as reg:
        with pytest.raises(ValueError):
            reg.declare("x", (4,), "complex64")
        with pytest.raises(ValueError):
            reg.declare("x", (4,), "fp32", role="bias")
        with pytest.raises(ValueError):
            reg.declare("x", (1, 2, 3, 4, 5), "fp32")
        reg.declare("x", (4,), "fp32")
        with pytest.raises(weft.WeftError) as err:
            reg.declare("x", (4,), "fp32")
        assert err.value.name == "WEFT_ERR_EXISTS"
        with pytest.raises(weft.WeftError) as err:
            reg.write()
        assert err.value.name == "WEFT_ERR_STATE"
        reg.seal()
        with pytest.raises(KeyError):
            reg.index("nope")
        with pytest.raises(weft.WeftError):
            weft.Registry.create(reg_name)
    weft.Registry.unlink(reg_name)


def test_an_unpublished_writer_aborts_and_a_dropped_lease_is_released(reg_name):
    with make(reg_name, slots=2) as reg:
        with reg.write() as v:
            v[0][:] = 7  # not published: aborted on exit
        assert reg.stats()["latest_version"] == 0
        with reg.write() as v:
            v.publish()
        lease = reg.read()
        assert reg.stats()["leases_held"] == 1
        del lease
        gc.collect()
        assert reg.stats()["leases_held"] == 0
    weft.Registry.unlink(reg_name)


def test_a_registry_dropped_without_close_is_closed(reg_name):
    reg = make(reg_name)
    handle_closed = reg._handle
    assert handle_closed is not None
    del reg
    gc.collect()
    # A closed producer leaves its segment for a successor to take over.
    with weft.Registry.open(reg_name, producer=True) as again:
        assert again.producer
    weft.Registry.unlink(reg_name)


def test_consumers_are_counted_and_acknowledge(reg_name):
    with make(reg_name) as reg:
        with weft.Registry.open(reg_name) as reader, reader.consumer("engine-0") as consumer:
            assert reg.stats()["consumers"] == 1
            with reg.write() as v:
                version = v.publish()
            assert reg.wait_consumers(version, timeout=0.01) == 1
            consumer.received(version)
            assert reg.wait_consumers(version, timeout=1) == 0
        assert reg.stats()["consumers"] == 0
    weft.Registry.unlink(reg_name)


def test_info_says_what_is_built():
    info = weft.info()
    assert info["libweft"] == weft.version()
    assert info["backends"]["host"]["built"] and info["backends"]["host"]["available"]
    assert "WEFT_LOG_LEVEL" in info["settings"]
