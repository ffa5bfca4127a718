"""The optimizers from Python on the host: AdamW against a NumPy AdamW in
PyTorch's order of operations, the ready-made FP8 writer into a registry
version (its bytes those of weft.quantize of the updated masters), a
Python writer, checkpoints."""

import numpy as np
import pytest

import weft

E, ROWS, COLS = 3, 128, 256
NAME = "model.layers.0.mlp.experts.{E}.w13"


def adamw_reference(p, m, v, g, step, lr, b1, b2, eps, wd):
    """torch._fused_adamw_'s arithmetic, in FP32 with FP64 scalars."""
    p = p * np.float32(1 - lr * wd)
    m = m + (g - m) * np.float32(1 - b1)
    v = v * np.float32(b2) + np.float32(1 - b2) * g * g
    step_size = lr / (1 - b1 ** step)
    denom = np.sqrt(v) / np.float32(np.sqrt(1 - b2 ** step)) + np.float32(eps)
    return p - np.float32(step_size) * (m / denom), m, v


def make_group(opt, algo="adamw", **kw):
    group = opt.add_group(NAME, (E, ROWS, COLS), algo, **kw)
    rng = np.random.default_rng(5)
    group.state("master")[:] = (rng.standard_normal((E, ROWS, COLS)) * 0.02).astype(np.float32)
    return group


def test_adamw_follows_pytorchs_arithmetic():
    with weft.Optimizer(threads=2) as opt:
        group = make_group(opt, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        p = group.state("master").copy()
        m = np.zeros_like(p)
        v = np.zeros_like(p)
        rng = np.random.default_rng(9)
        for step in (1, 2, 3):
            g = (rng.standard_normal(p.shape) * 1e-2).astype(np.float32)
            opt.step([g])
            p, m, v = adamw_reference(p, m, v, g, step, 1e-3, 0.9, 0.999, 1e-8, 0.01)
            # FP32 roundings apart (libweft fuses multiply-adds as the CUDA kernel
            # does); wrong hyperparameters would be off by 1e-4 and more.
            np.testing.assert_allclose(group.state("master"), p, rtol=1e-5, atol=1e-7)
            # (libweft fuses the multiply-adds as the CUDA kernel does: within rounding)
            np.testing.assert_allclose(group.state("exp_avg_sq"), v, rtol=1e-4, atol=1e-12)
        assert opt.info()["step"] == 3 and opt.info()["parameters"] == E * ROWS * COLS


@pytest.mark.parametrize("formula", ["exact", "reference"])
def test_the_fp8_writer_fills_the_version_being_written(reg_name, formula):
    with weft.Registry.create(reg_name, slots=2) as reg, weft.Optimizer(threads=2) as opt:
        for e in range(E):
            base = NAME.replace("{E}", str(e))
            reg.declare(base + ".weight", (ROWS, COLS), "fp8_e4m3", layer=0, expert=e)
            reg.declare(base + ".weight_t", (COLS, ROWS), "fp8_e4m3", role="wt", layer=0, expert=e)
            reg.declare(base + ".weight_scale_inv", (1, 2), "fp32", role="scale", layer=0, expert=e)
        reg.seal()
        group = make_group(opt)
        writer = opt.writer(reg, formula=formula)
        grad = (np.random.default_rng(1).standard_normal((E, ROWS, COLS)) * 1e-2).astype(np.float32)
        with reg.write() as v:
            opt.step([grad], writer=writer)
            v.publish()
        master = group.state("master")
        with reg.read() as lease:
            for e in range(E):
                base = NAME.replace("{E}", str(e))
                w = np.zeros((ROWS, COLS), np.uint8)
                wt = np.zeros((COLS, ROWS), np.uint8)
                s = np.zeros((1, 2), np.float32)
                weft.quantize(master[e], w, wt, s, formula=formula)
                assert np.array_equal(lease[base + ".weight"], w)
                assert np.array_equal(lease[base + ".weight_t"], wt)
                assert np.array_equal(lease[base + ".weight_scale_inv"], s)
        writer.close()
    weft.Registry.unlink(reg_name)


def test_a_python_writer_sees_each_updated_matrix():
    seen = []
    with weft.Optimizer(threads=2) as opt:
        group = make_group(opt)
        grad = np.full((E, ROWS, COLS), 1e-3, np.float32)

        def writer(unit, master):
            seen.append((unit["expert"], unit["step"], master.copy()))

        opt.step([grad], writer=writer)
        assert [s[0] for s in seen] == list(range(E)) and all(s[1] == 1 for s in seen)
        for e, _, master in seen:
            assert np.array_equal(master, group.state("master")[e])

        def failing(unit, master):
            raise RuntimeError("the writer's own error")

        with pytest.raises(RuntimeError, match="the writer's own error"):
            opt.step([grad], writer=failing)


def test_a_checkpoint_restores_and_a_corrupt_one_changes_nothing(tmp_path):
    path = tmp_path / "optim.ckpt"
    with weft.Optimizer(threads=2) as opt:
        group = make_group(opt, "muon")
        grad = (np.random.default_rng(2).standard_normal((E, ROWS, COLS)) * 1e-2).astype(np.float32)
        opt.step([grad])
        assert np.isfinite(group.state("master")).all()
        saved = group.state("master").copy()
        opt.save(path)
        opt.step([grad])
        assert not np.array_equal(group.state("master"), saved)
        opt.restore(path)
        assert np.array_equal(group.state("master"), saved) and opt.info()["step"] == 1
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        opt.step([grad])
        after = group.state("master").copy()
        with pytest.raises(weft.WeftError) as err:
            opt.restore(path)
        assert err.value.name == "WEFT_ERR_CORRUPT"
        assert np.array_equal(group.state("master"), after)


def test_bad_groups_and_gradients_are_refused():
    with weft.Optimizer(threads=1) as opt:
        with pytest.raises(ValueError):
            opt.add_group("x", (4,), "adamw")
        with pytest.raises(ValueError):
            opt.add_group("x", (4, 4), "sgd")
        make_group(opt)
        with pytest.raises(ValueError):
            opt.step([np.zeros((E, ROWS, COLS + 1), np.float32)])
        with pytest.raises(ValueError):
            opt.step([])
