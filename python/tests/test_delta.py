"""Delta versions from Python: FP8 bytes of two versions, the delta
applied in place to a held copy (contiguous, and expert views of a fused
tensor), W's delta applied to WT (transposed), None where the tensor
whole is no larger, damage refused."""

import numpy as np
import pytest

import weft


def versions(rows=512, cols=768, rate=0.01, seed=5):
    rng = np.random.default_rng(seed)
    old = rng.integers(0, 256, (rows, cols), dtype=np.uint8)
    new = old.copy()
    changed = rng.random((rows, cols)) < rate
    new[changed] = (old[changed].astype(np.int32) + rng.integers(1, 256, changed.sum())) % 256
    return old, new


def test_a_delta_turns_the_held_copy_into_the_new_version():
    old, new = versions()
    delta = weft.delta_encode(old, new)
    assert delta is not None and delta.nbytes < new.nbytes / 20
    held = old.copy()
    weft.delta_apply(delta, held)
    assert np.array_equal(held, new)


def test_expert_views_of_a_fused_tensor():
    old, new = versions(rows=256, cols=300)
    fused = np.full((2, 256, 400), 0xA5, np.uint8)
    view = fused[1, :, 50:350]  # rows 400 bytes apart
    view[:] = old
    weft.delta_apply(weft.delta_encode(old, new), view)
    assert np.array_equal(view, new)
    assert (fused[0] == 0xA5).all() and (fused[1, :, :50] == 0xA5).all() and (fused[1, :, 350:] == 0xA5).all()


def test_whole_when_no_smaller():
    old, new = versions(rate=0.6)
    assert weft.delta_encode(old, new) is None


def test_a_damaged_delta_or_the_wrong_older_bytes_are_refused():
    old, new = versions()
    delta = weft.delta_encode(old, new)
    held = old.copy()
    with pytest.raises(weft.WeftError) as err:
        weft.delta_apply(delta[:-1], held)
    assert err.value.name == "WEFT_ERR_CORRUPT" and np.array_equal(held, old)
    other = old.copy()
    other[0, 0] ^= 1  # not the version the delta was made from
    with pytest.raises(weft.WeftError) as err:
        weft.delta_apply(delta, other)
    assert err.value.name == "WEFT_ERR_CORRUPT"


def test_w_delta_patches_wt_transposed():
    old, new = versions(rows=96, cols=700)
    delta = weft.delta_encode(old, new)
    held_t = np.ascontiguousarray(old.T)
    want = weft.checksum(np.ascontiguousarray(new.T))
    weft.delta_apply(delta, held_t, transposed=(96, 700), checksum=want)
    assert np.array_equal(held_t, new.T)
    stale = np.ascontiguousarray(old.T)
    stale[3, 5] ^= 1  # WT's bytes not the older version's: WT's checksum tells
    with pytest.raises(weft.WeftError) as err:
        weft.delta_apply(delta, stale, transposed=(96, 700), checksum=want)
    assert err.value.name == "WEFT_ERR_CORRUPT"
    with pytest.raises(ValueError):
        weft.delta_apply(delta, np.ascontiguousarray(old.T), transposed=(96, 700))
    with pytest.raises(weft.WeftError) as err:  # matrices that do not tile WT
        weft.delta_apply(delta, np.ascontiguousarray(old.T), transposed=(97, 700), verify=False)
    assert err.value.name == "WEFT_ERR_INVALID_PARAM"
