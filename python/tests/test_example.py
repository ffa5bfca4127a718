"""python/examples/train_and_serve.py runs: an engine receives every
version in place, offloads and reloads, and its experts' output matches the
trainer's FP32 masters within FP8's tolerance."""

import os
import subprocess
import sys

import pytest

from conftest import gpu_count

HERE = os.path.dirname(os.path.abspath(__file__))


def run_example(reg_name, *extra):
    example = os.path.join(HERE, "..", "examples", "train_and_serve.py")
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, example, "--versions", "3", "--name", reg_name, *extra], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("relative error") == 3 and out.stdout.rstrip().endswith("PASS")


def test_train_and_serve(reg_name):
    run_example(reg_name)


@pytest.mark.skipif(gpu_count() < 1, reason="needs a GPU and PyTorch")
def test_train_and_serve_on_a_gpu(reg_name):
    # PyTorch tensors on both sides, the cuda_ipc transport, the experts
    # computed on the GPU from the received FP8 weights.
    run_example(reg_name, "--device", "cuda")
